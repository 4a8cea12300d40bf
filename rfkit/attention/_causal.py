r"""Causal linear attention as a blocked two-phase prefix scan (RFA, SNIS and LARA share it).

For features :math:`\phi` the causal estimate of row :math:`i` is

.. math:: \hat N_i = \phi(q_i)^\top \sum_{j\le i}\phi(k_j)[v_j, 1]^\top .

Rows are cut into blocks of ``c`` rows (never across a *chunk* boundary, see below);
consecutive equal blocks form a *segment*, the unit of work of the thread pool.

1. **Block pass** (parallel over segments). For every block: the key log-features
   :math:`\ell_j`, their per-column block maxima :math:`t_b` and the block sums
   :math:`S_b = \sum_{j\in b} e^{\ell_j - t_b}[v_j, 1]^\top`; the *in-block* part of every
   row, :math:`\sum_{j\le i,\,j\in b} \phi(q_i)^\top\phi(k_j)[v_j,1]` as one small masked
   matrix product with the per-row shift :math:`B_i = \max_{j\le i} b_j`
   (:math:`b_j` = the maximum of :math:`\ell_j` over its columns).
2. **Scan** (sequential, cheap: one :math:`D\times(d_v+1)` update per block). The sums of
   all *previous* blocks, :math:`\bar S_b = \sum_{b'<b} e^{t_{b'}-\bar t_b}S_{b'}` with the
   per-column running maximum :math:`\bar t_b = \max_{b'<b} t_{b'}`, combined exactly in
   block order.
3. **Carried pass** (parallel over segments). :math:`e^{\ell(q_i)+\bar t_b - m_i}\bar S_b`
   (the per-column shift folded into the query features, as bidirectional RFA does), and
   the two parts combined on a common log scale.

Every shift a row uses comes from keys it may see (previous blocks, or keys ``j <= i`` of
its own block), so row ``i``'s output depends on keys ``0..i`` only, also numerically
(bit for bit). The block layout depends on the sizes only and the scan runs in block
order, so results are bit-identical for any number of threads. Memory: the work of one
*round* of segments (about :data:`ROUND_ELEMS` elements) at a time, linear in ``n``
overall; never an ``n x n`` array.

*Chunks* (SNIS/LARA with causal chunk-mean proposals): the featurizer may add query
offsets (and restrict the key columns of the in-block part) per chunk of rows; blocks
never cross a chunk boundary, so the in-block shifts use only the columns the block's
queries may use.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Protocol

import numpy as np

from .._backend import Backend
from ._common import budget, run, with_ones

__all__ = ["CausalJob", "Featurizer", "run_causal", "ROUND_ELEMS", "SEGMENT_ELEMS"]

#: A segment (the unit of parallel work) holds at most about this many feature elements.
SEGMENT_ELEMS = 1 << 17
#: The segments of one round (whose query features wait for the scan) hold about this many
#: (8 MiB of float64: a constant, so memory stays linear in ``n``).
ROUND_ELEMS = 1 << 20
#: Each thread gets about this many segments of a round when the rows allow it: one large segment
#: per thread keeps the array operations big (few Python calls per element, so the GIL is rarely
#: the bottleneck); measured on 16 cores, docs page *Backends and scaling*.
SEGMENTS_PER_THREAD = 1


class Featurizer(Protocol):
    """What the scan needs from a feature source (see :mod:`rfkit.attention._rfa`, ``_snis``)."""

    fast: bool

    def logits(self, X: Any, side: str, chunk: int) -> tuple[Any, Any]:
        """Exponential family: (log-features minus a row constant, the row constant)."""

    def features(self, X: Any, side: str) -> tuple[Any, Any]:
        """Generic maps: (values, log_scale) with phi = exp(log_scale) * values."""

    def key_offset(self, chunk: int) -> Any | None:
        """0/-inf per column: the columns the queries of ``chunk`` may use (None: all)."""


@dataclasses.dataclass
class CausalJob:
    """One group of slices sharing a feature source: inputs (g, n, .), outputs ``lead + (n, .)``."""

    fz: Any
    Q: Any
    K: Any
    V: Any
    pad: Any  # (g, n) bool or None
    lead: tuple[int, ...]  # pre + (g,)
    D: int
    edges: tuple[int, ...]  # chunk boundaries 0 = e_0 < ... < e_C = n
    want_ess: bool = False
    log_scale: Any = None
    nd: Any = None
    ess: Any = None
    segments: list[tuple[int, int, int, int]] = dataclasses.field(default_factory=list)


def _segments(
    edges: tuple[int, ...], c: int, per_row: int, seg_elems: int, lanes: int = 1
) -> list[tuple[int, int, int, int]]:
    """(first row, blocks, block rows, chunk) of every segment, in row order.

    ``per_row``: work elements per row (feature columns plus the in-block ``c x c`` part).
    Blocks (``c`` rows) depend on the sizes only; a segment groups up to ``seg_elems`` worth
    of consecutive blocks into one batched step (fewer, larger array operations), and with
    ``lanes`` threads the groups are kept small enough that every thread gets about
    :data:`SEGMENTS_PER_THREAD` of them. The grouping changes nothing in the arithmetic of a
    block (a batched product is the products of its blocks), so results stay bit-identical for
    every thread count.
    """
    G = max(1, seg_elems // max(c * per_row, 1))
    if lanes > 1:
        blocks = sum(-(-(edges[i + 1] - edges[i]) // c) for i in range(len(edges) - 1))
        G = max(1, min(G, blocks // (SEGMENTS_PER_THREAD * lanes)))
    out = []
    for ci in range(len(edges) - 1):
        a, b = edges[ci], edges[ci + 1]
        full, rem = divmod(b - a, c)
        for s in range(0, full, G):
            out.append((a + s * c, min(G, full - s), c, ci))
        if rem:
            out.append((a + full * c, 1, rem, ci))
    return out


def _safe(xp: Any, a: Any) -> Any:
    """``a`` with non-finite entries (``-inf``: nothing seen yet) replaced by 0."""
    return xp.where(xp.isfinite(a), a, xp.zeros_like(a))


def _rescale(xp: Any, old: Any, new: Any) -> Any:
    """exp(old - new): 0 where nothing was accumulated (old = -inf)."""
    return xp.exp(old - _safe(xp, new))


def run_causal(jobs: list[CausalJob], bk: Backend, c: int, n_threads: int) -> None:
    """Fill ``log_scale``, ``nd`` (and ``ess``) of every job."""
    for job in jobs:
        L = job.lead
        n = int(job.Q.shape[-2])
        dv1 = int(job.V.shape[-1]) + 1
        job.log_scale = bk.empty(L + (n,), job.Q.dtype)
        job.nd = bk.empty(L + (n, dv1), job.Q.dtype)
        if job.want_ess:
            job.ess = bk.empty(L + (n,), job.Q.dtype)
        lanes = n_threads if bk.uses_thread_pool else 1
        job.segments = _segments(job.edges, c, (job.D + c) * math.prod(L), budget(bk, SEGMENT_ELEMS), lanes)
    tasks = [(ji, si) for ji, job in enumerate(jobs) for si in range(len(job.segments))]
    # a round holds at least one segment per thread (else threads idle while the scan waits)
    largest = max(
        (G * cb * job.D * math.prod(job.lead) for job in jobs for (_, G, cb, _) in job.segments), default=0
    )
    round_budget = max(budget(bk, ROUND_ELEMS), (n_threads if bk.uses_thread_pool else 1) * largest)
    # Rounds of consecutive segments: their query features wait in memory for the scan.
    rounds: list[list[tuple[int, int]]] = []
    size = 0
    for t in tasks:
        job = jobs[t[0]]
        _, G, cb, _ = job.segments[t[1]]
        elems = G * cb * job.D * math.prod(job.lead)
        if rounds and size + elems <= round_budget:
            rounds[-1].append(t)
            size += elems
        else:
            rounds.append([t])
            size = elems
    carry: list[tuple[Any, Any] | None] = [None] * len(jobs)
    for rnd in rounds:
        first = run(bk, lambda t: _block_pass(jobs[t[0]], jobs[t[0]].segments[t[1]], bk), rnd, n_threads)
        scanned = []
        for (ji, _), (t_b, S_b, _) in zip(rnd, first):
            tops, Scs, carry[ji] = _scan(bk, jobs[ji], carry[ji], t_b, S_b)
            scanned.append((tops, Scs))
        work = list(zip(rnd, first, scanned))
        run(
            bk,
            lambda w: _carried_pass(jobs[w[0][0]], jobs[w[0][0]].segments[w[0][1]], w[1][2], w[2], bk),
            work,
            n_threads,
        )


def _lower(bk: Backend, cb: int, dtype: Any) -> Any:
    """Lower-triangular 0/1 mask (j <= i) in the work dtype."""
    r = bk.arange(cb)
    return bk.xp.astype(r[:, None] >= r[None, :], dtype)


def spread_limit(bk: Backend, dtype: Any) -> float:
    r"""Largest spread :math:`\Lambda` of per-column shifts for which the factorised products are exact.

    With :math:`U = -\log(\text{smallest normal})` and :math:`\epsilon = -\log(\text{eps})`,
    :math:`\Lambda = U - \epsilon - 10`: float64 about 662, float32 about 61.
    """
    fi = bk.xp.finfo(dtype)
    return -math.log(float(fi.smallest_normal)) + math.log(float(fi.eps)) - 10.0


def _all(bk: Backend, cond: Any) -> bool:
    return bool(bk.xp.all(cond))


def _key_logits(job: CausalJob, rows: slice, ci: int, pad: Any, bk: Backend) -> Any:
    xp = bk.xp
    Lk, rk_ = job.fz.logits(job.K[:, rows, :], "key", ci)
    Lk = bk.update(Lk, "+", rk_[..., None])
    if pad is not None:
        Lk = xp.where(pad[..., None], bk.scalar(-math.inf, Lk.dtype), Lk)
    return Lk


def _block_pass(
    job: CausalJob, seg: tuple[int, int, int, int], bk: Backend
) -> tuple[Any, Any, dict[str, Any]]:
    r"""Block sums ``(t_b, S_b)`` of a segment and the in-block part of its rows.

    Exponential maps: the key features are formed once, with the per-key shift
    :math:`b_j` (``w = e^{\ell_j - b_j}``); the block sums need them with the per-column
    shift :math:`t_b`, :math:`e^{\ell_j - t_b} = e^{t^{\max}_b - t_b}\,w_j\,e^{b_j - t^{\max}_b}`,
    which is folded into a scaling of the rows of ``[V | 1]`` and of the result (no second
    exponential of the ``c x D`` block). The factorisation is exact (every product that
    matters stays a normal number) when the spread of the column maxima
    :math:`t^{\max}_b - \min_i t_{b,i}` is at most :func:`spread_limit`; otherwise the block
    sums are formed by a second exponential, as the definition says.
    """
    xp = bk.xp
    r0, G, cb, ci = seg
    R = G * cb
    rows = slice(r0, r0 + R)
    fz = job.fz
    L = job.lead
    g = int(job.Q.shape[0])
    dt = job.Q.dtype
    pad = None if job.pad is None else job.pad[:, rows]
    keep = None if pad is None else xp.astype(~pad, dt)
    V1 = xp.reshape(with_ones(bk, job.V[:, rows, :], keep), (g, G, cb, -1))
    lower = _lower(bk, cb, dt)
    st: dict[str, Any] = {}
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        if fz.fast:
            Lk = xp.reshape(_key_logits(job, rows, ci, pad, bk), L + (G, cb, job.D))
            t = xp.max(Lk, axis=-2)  # per-column block maxima (all columns: later rows use them)
            tmax = xp.max(t, axis=-1)
            koff = fz.key_offset(ci)
            # per block (the choice must not depend on other blocks): factorised where exact
            ok = tmax - xp.min(t, axis=-1) <= spread_limit(bk, dt)  # False for a fully padded block
            fact = koff is None and _all(bk, ok)
            mixed = koff is None and not fact and bk.any(ok)
            Sb_exact = None
            if not fact:  # block sums by their own exponential (definition)
                E2 = bk.exp_(Lk - _safe(xp, t)[..., None, :])
                Sb_exact = xp.matrix_transpose(E2) @ V1
                del E2
            if koff is not None:
                Lk = Lk + koff[..., None, None, :]  # the in-block part uses the usable columns only
            b = xp.max(Lk, axis=-1)  # key row maxima
            bs = _safe(xp, b)
            Lk = bk.update(Lk, "-", bs[..., None])
            w = bk.exp_(Lk)
            if fact or mixed:
                r = xp.exp(b - _safe(xp, tmax)[..., None])  # <= 1; 0 for padded keys
                Sb = xp.matrix_transpose(w) @ (r[..., None] * V1)
                Sb = bk.update(Sb, "*", xp.exp(_safe(xp, tmax)[..., None] - t)[..., :, None])
                if mixed:
                    Sb = xp.where(ok[..., None, None], Sb, Sb_exact)
            else:
                Sb = Sb_exact
            Pq, rq = fz.logits(job.Q[:, rows, :], "query", ci)
            Pq = xp.reshape(Pq, L + (G, cb, job.D))
            rq = xp.reshape(rq, tuple(rq.shape[:-1]) + (G, cb))
            qm = xp.max(Pq, axis=-1)
            Pq = bk.update(Pq, "-", qm[..., None])
            u = bk.exp_(Pq)
            lq = qm + rq
        else:
            u, lq = fz.features(job.Q[:, rows, :], "query")
            w, b = fz.features(job.K[:, rows, :], "key")
            if pad is not None:
                b = xp.where(pad, bk.scalar(-math.inf, b.dtype), b)
            Dn = int(u.shape[-1])
            u = xp.reshape(u, L + (G, cb, Dn))
            w = xp.reshape(w, L + (G, cb, Dn))
            lq = xp.reshape(lq, L + (G, cb))
            b = xp.reshape(b, L + (G, cb))
            t = xp.max(b, axis=-1)  # one shift per block (generic maps)
            bs = _safe(xp, b)
            Sb = xp.matrix_transpose(w * xp.exp(b - _safe(xp, t)[..., None])[..., None]) @ V1
            qm = rq = None
        # in-block part: row i sees keys j <= i of its block, shift B_i = max_{j<=i} b_j (padded: -inf)
        Bi = bk.cummax(b, axis=-1)
        expo = b[..., None, :] - _safe(xp, Bi)[..., :, None]  # <= 0 on and below the diagonal
        expo = xp.minimum(expo, xp.zeros_like(expo))  # above it (masked next): no overflow
        E = bk.exp_(expo)
        E = bk.update(E, "*", lower)
        A = u @ xp.matrix_transpose(w)
        A = bk.update(A, "*", E)
        st["intra"] = A @ V1
        st["L2"] = lq + Bi
        st["u"] = u
        if fz.fast:
            st["qm"], st["rq"] = qm, rq
            if job.want_ess:
                st["Hin"] = E @ w
        else:
            st["lq"] = lq
    return t, Sb, st


def _scan(
    bk: Backend, job: CausalJob, carry: tuple[Any, Any] | None, t: Any, Sb: Any
) -> tuple[Any, Any, Any]:
    """Prefix sums before every block of a segment, combined in block order (sequential)."""
    xp = bk.xp
    G = int(Sb.shape[-3])
    fast = job.fz.fast
    if carry is None:
        # fast maps: one shift per feature column, (.., D); generic maps: one per slice, (..)
        top_shape = tuple(t.shape[:-2]) + (int(t.shape[-1]),) if fast else tuple(t.shape[:-1])
        top = bk.full(top_shape, -math.inf, Sb.dtype)
        Sc = bk.zeros(tuple(Sb.shape[:-3]) + tuple(Sb.shape[-2:]), Sb.dtype)
    else:
        top, Sc = carry
    tops, Scs = [], []
    for gi in range(G):
        tops.append(top)
        Scs.append(Sc)
        tb = t[..., gi, :] if fast else t[..., gi]
        new = xp.maximum(top, tb)
        f_old, f_new = _rescale(xp, top, new), _rescale(xp, tb, new)
        if fast:
            Sc = Sc * f_old[..., :, None] + Sb[..., gi, :, :] * f_new[..., :, None]
        else:
            Sc = Sc * f_old[..., None, None] + Sb[..., gi, :, :] * f_new[..., None, None]
        top = new
    return xp.stack(tops, axis=-2 if fast else -1), xp.stack(Scs, axis=-3), (top, Sc)


def _carried_pass(
    job: CausalJob, seg: tuple[int, int, int, int], st: dict[str, Any], scanned: tuple[Any, Any], bk: Backend
) -> None:
    r"""The carried part :math:`\phi(q_i)^\top\bar S_b` of every row, combined with the in-block part.

    Exponential maps: the per-column shift :math:`\bar t_b` of the carried sums is folded into
    them, :math:`e^{\ell(q_i) + \bar t_b - \rho_i} = u_i\,e^{\bar t_b - \bar t^{\max}_b}` with
    :math:`\rho_i = m_i + \bar t^{\max}_b` (``u`` the query features of the in-block part,
    :math:`m_i` their row maximum), so the carried part is one product ``u @ (scale * S)``;
    exact while the spread of :math:`\bar t_b` is at most :func:`spread_limit`, else the
    carried query features are formed by their own exponential (always with chunked
    proposals, whose unusable columns must not enter any shift of these rows).
    """
    xp = bk.xp
    r0, G, cb, ci = seg
    R = G * cb
    rows = slice(r0, r0 + R)
    L = job.lead
    tops, Scs = scanned
    u = st["u"]
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        if job.fz.fast:
            tau = xp.max(tops, axis=-1)  # -inf for blocks with nothing carried yet
            spread = tau - xp.min(tops, axis=-1)
            ok = xp.where(
                xp.isfinite(tau), spread <= spread_limit(bk, u.dtype), xp.ones_like(tau, dtype=xp.bool)
            )
            # per block (the choice may depend on the block's own prefix only). Chunked proposals:
            # some columns are not usable by these rows (and depend on later data), so no shift may
            # mix columns: the exact, column-separable path
            chunked = job.fz.key_offset(ci) is not None
            fast = not chunked and _all(bk, ok)
            out_f = out_e = None
            if not chunked and (fast or bk.any(ok)):
                scale = xp.exp(tops - _safe(xp, tau)[..., None])  # <= 1, 0 where nothing was carried
                carried = u @ (scale[..., :, None] * Scs)
                cz = scale * Scs[..., -1]  # carried normaliser sums per sample
                out_f = _combine(
                    job,
                    st,
                    carried,
                    st["qm"] + tau[..., None] + st["rq"],
                    lambda a1, a2: u * (a1[..., None] * cz[..., None, :] + a2[..., None] * st["Hin"]),
                    bk,
                )
            if not fast:  # carried query features by their own exponential (definition)
                Pq, _ = job.fz.logits(job.Q[:, rows, :], "query", ci)
                Pq = xp.reshape(Pq, L + (G, cb, job.D))
                Pq = bk.update(Pq, "+", tops[..., None, :])
                m1 = xp.max(Pq, axis=-1)  # -inf before any key was accumulated
                Pq = bk.update(Pq, "-", _safe(xp, m1)[..., None])
                cf = bk.exp_(Pq)
                out_e = _combine(
                    job,
                    st,
                    cf @ Scs,
                    m1 + st["rq"],
                    lambda a1, a2: (
                        cf * Scs[..., -1][..., None, :] * a1[..., None] + u * st["Hin"] * a2[..., None]
                    ),
                    bk,
                )
            if out_f is None or out_e is None:
                nd, Lr, ess = out_f if out_e is None else out_e  # type: ignore[misc]
            else:
                nd = xp.where(ok[..., None, None], out_f[0], out_e[0])
                Lr = xp.where(ok[..., None], out_f[1], out_e[1])
                ess = None if out_f[2] is None else xp.where(ok[..., None], out_f[2], out_e[2])
        else:
            nd, Lr, ess = _combine(job, st, u @ Scs, st["lq"] + tops[..., None], None, bk)
        job.nd[..., rows, :] = xp.reshape(nd, L + (R, int(nd.shape[-1])))
        job.log_scale[..., rows] = xp.reshape(Lr, L + (R,))
        if job.want_ess:
            job.ess[..., rows] = xp.reshape(ess, L + (R,))


def _combine(
    job: CausalJob, st: dict[str, Any], carried: Any, L1: Any, weights: Any, bk: Backend
) -> tuple[Any, Any, Any]:
    """Carried and in-block parts on a common log scale; the ESS from the weights (up to a row factor)."""
    xp = bk.xp
    L2 = st["L2"]
    Lr = xp.maximum(L1, L2)  # finite: every query sees at least one key
    a1 = xp.exp(L1 - Lr)
    a2 = xp.exp(L2 - Lr)
    nd = a1[..., None] * carried + a2[..., None] * st["intra"]
    ess = None
    if job.want_ess and weights is not None:
        # w_is / e^{Lr_i - r_i} = e^{L1-Lr} (carried features) Z_carried + e^{L2-Lr} u_is H_in,is
        W = weights(a1, a2)
        W = W / xp.max(W, axis=-1, keepdims=True)
        s1 = xp.sum(W, axis=-1)
        ess = s1 * s1 / xp.sum(W * W, axis=-1)
    return nd, Lr, ess
