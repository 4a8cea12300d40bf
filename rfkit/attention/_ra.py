r"""Randomized Attention (RA; Zheng, Wang & Kong (ICML 2022)): unbiased, quadratic."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from .._backend import Backend
from .._parallel import threads
from .._random import TrialStreams
from .._validation import check_int, half_precision
from ..exceptions import InvalidParameterError
from ._common import (
    CHUNK_ELEMS,
    QKV,
    check_draw_library,
    check_qkv,
    check_shared_options,
    run,
    sampler_rng,
    threads_of,
)
from ._result import AttentionResult

__all__ = ["RA"]


def _softmax_rows(bk: Backend, L: Any) -> Any:
    xp = bk.xp
    P = bk.exp_(L - xp.max(L, axis=-1, keepdims=True))
    P /= xp.sum(P, axis=-1, keepdims=True)
    return P


#: The samples' work arrays (queries, samples, keys) of one pass hold about this many elements
#: (512 KiB in float64), so they stay in a core's cache between the passes over them: a chunk's
#: queries are computed in sub-blocks of that size. The draws and the mixture components are made
#: per chunk (``chunk_size``), not per sub-block, and each query's row is computed alone, so the sub-blocks
#: move results by round-off only.
_CACHE_ELEMS = 1 << 16


def _noise_widths(seen: np.ndarray | None, n: int, M: int, d: int, causal: bool) -> np.ndarray:
    """Normals per sample of each of a slice's ``n`` queries: ``min(#keys it sees, d)``, (n,) int64.

    ``seen`` (M,) bool marks the keys a padding mask keeps (None: every key); a causal query ``i``
    sees the kept keys ``0..i``.
    """
    if seen is None:
        counts = np.minimum(np.arange(1, n + 1), M) if causal else np.full(n, M)
    else:
        counts = np.cumsum(seen)[:n] if causal else np.full(n, int(np.count_nonzero(seen)))
    return np.minimum(counts, d).astype(np.int64)


def _span_normals(g: Any, S: int, widths: np.ndarray) -> Any:
    """Standard normals (c, S, max width): query ``i``'s first ``widths[i]`` of each sample drawn, the rest 0.

    ``g`` is a NumPy ``Generator`` or an rfkit ``BackendGenerator`` (drawing on its device). The
    numbers are drawn in one call, query by query, sample by sample: ``S * sum(widths)`` of them.
    """
    c, width, total = len(widths), int(widths.max()), S * int(widths.sum())
    flat = g.standard_normal((total,))
    host = isinstance(flat, np.ndarray)
    if int(widths.min()) == width:
        return flat.reshape(c, S, width) if host else g.backend.xp.reshape(flat, (c, S, width))
    if host:  # one copy per run of queries with the same width (causal: the first d queries, then one)
        z = np.zeros((c, S, width))
        starts = np.flatnonzero(np.diff(widths, prepend=-1))
        offsets = S * np.concatenate([[0], np.cumsum(widths)])
        for i0, i1 in zip(starts, [*starts[1:], c]):
            w = int(widths[i0])
            z[i0:i1, :, :w] = flat[offsets[i0] : offsets[i1]].reshape(i1 - i0, S, w)
        return z
    valid = np.broadcast_to((np.arange(width) < widths[:, None])[:, None, :], (c, S, width))
    bk = g.backend  # on the device: a gather from the draws with one zero appended
    pos = np.full((c, S, width), total, dtype=np.int64)
    pos[valid] = np.arange(total)
    ext = bk.xp.concat([flat, bk.zeros((1,), flat.dtype)])
    return bk.xp.reshape(bk.xp.take(ext, bk.asarray(pos.reshape(-1)), axis=0), (c, S, width))


def _key_span(x: QKV, Kb: Any, idx: np.ndarray) -> tuple[Any, Any]:
    """An orthonormal basis ``B`` (d, r) of the span of the keys ``idx``, and every key's ``B^T k_j`` (M, r).

    ``r = min(len(idx), d)``. ``B`` is the Q factor of the QR decomposition of those keys (as
    columns, in order), signed so that the diagonal of R is >= 0: its first ``j`` columns span the
    first ``j`` keys, so a query that sees only the first ``j`` keys of ``idx`` needs only the first
    ``min(j, d)`` coordinates. Keys outside ``idx`` get coordinates 0 (a query never sees them).
    """
    bk, xp = x.bk, x.xp
    M, ms = x.n_keys, int(idx.size)
    prefix = int(idx[-1]) == ms - 1  # the first ms keys
    A = Kb[:ms, ...] if prefix else xp.take(Kb, bk.asarray(idx), axis=0)
    basis, R = xp.linalg.qr(xp.matrix_transpose(A))  # (d, r), (r, ms)
    sign = 1.0 - 2.0 * xp.astype(xp.linalg.diagonal(R) < 0, x.dtype)
    basis = basis * sign[None, :]
    coords = xp.matrix_transpose(R) * sign[None, :]  # (ms, r): B^T k_j of the keys idx
    r = int(coords.shape[1])
    if prefix:
        coords = xp.concat([coords, bk.zeros((M - ms, r), x.dtype)], axis=0)
    else:
        pos = np.full(M, ms, dtype=np.int64)
        pos[idx] = np.arange(ms)
        ext = xp.concat([coords, bk.zeros((1, r), x.dtype)], axis=0)
        coords = xp.take(ext, bk.asarray(pos), axis=0)
    return basis, coords


def _ra_block(
    x: QKV,
    task: tuple[int, slice],
    draws: tuple[Any, Any, np.ndarray],
    causal: bool,
    seen: np.ndarray | None,
    out: Any,
    mcse: Any,
) -> None:
    """One slice and chunk of queries: components, samples, f_n(omega_s), mean and MCSE.

    ``draws`` are the chunk's uniforms (c, S), normals (c, S, r) (:func:`_span_normals`) and
    their widths per query (c,) (host int64): NumPy arrays, or arrays on the inputs' device when a
    study draws there (``draws = "backend"``). ``seen`` (M,) bool marks the keys the slice's
    padding mask keeps (None: every key).
    """
    bk, xp = x.bk, x.xp
    b, qs = task
    u_np, z_np, widths = draws
    Kb, Vb = x.K[b, ...], x.V[b, ...]
    V1 = xp.concat([Vb, xp.ones_like(Vb[:, :1])], axis=-1)  # (M, dv + 1): f_n's numerator and normaliser
    Qc = x.Q[b, qs, :]
    S = int(u_np.shape[1])
    neg = bk.scalar(-math.inf, x.dtype)
    L = Qc @ xp.matrix_transpose(Kb)  # (c, M) logits
    drop = None
    if causal:
        drop = bk.arange(x.n_keys)[None, :] > bk.arange(x.n_queries)[qs][:, None]
    if x.mask is not None:
        pm = x.mask[b, None, :]
        drop = pm if drop is None else (drop | pm)
    if drop is not None:
        L = xp.where(drop, neg, L)
    pi = _softmax_rows(bk, L)
    cum = xp.cumulative_sum(pi, axis=-1)
    cum /= cum[:, -1:]
    u = bk.asarray(u_np, x.dtype)
    # component m* = #{j < M-1 : cum_j <= u}  (inverse CDF, exact for u in [0, 1); padded keys have
    # pi = 0, a flat step of the CDF, and are never chosen)
    comp = bk.count_at_most(cum[:, :-1], u)  # (c, S)
    c = int(Qc.shape[0])
    # key terms of f_n's logits: -||k||^2/2, and -inf for the keys a query may not see
    key_terms = -0.5 * bk.sqnorm(Kb) if drop is None else xp.where(drop, neg, -0.5 * bk.sqnorm(Kb))
    per_query = key_terms.ndim == 2 and int(key_terms.shape[0]) > 1  # causal: a row per query
    # f_n sees omega only through omega.k_j of the keys the chunk's queries see: in an orthonormal
    # basis B of their span, k_j = B c_j and omega.k_j = c_j.(B^T q + c_m* + z) with z = B^T eps ~ N(0, I_r)
    last = min(x.n_keys, qs.stop) if causal else x.n_keys
    idx = np.arange(last) if seen is None else np.flatnonzero(seen[:last])
    basis, coords = _key_span(x, Kb, idx)
    Qs = Qc @ basis  # (c, r): B^T q
    sub = max(1, _CACHE_ELEMS // (S * max(x.n_keys, x.dim, x.value_dim)))
    for r0 in range(0, c, sub):
        r = slice(r0, min(c, r0 + sub))
        terms = key_terms[r, :] if per_query else key_terms
        # causal: the block's queries see keys 0 .. (its last query) only; the others carry weight 0
        keys = min(x.n_keys, qs.start + r.stop) if causal else x.n_keys
        # the block's queries need the first w coordinates (the keys they see lie in the span of the
        # basis' first w columns, and their normals beyond their own width are 0)
        w = int(widths[r].max())
        mean, sd = _samples(x, coords[:, :w], V1, Qs[r, :w], comp[r, :], z_np[r, :, :w], terms, keys)
        rows = slice(qs.start + r0, qs.start + r.stop)
        out[b, rows, :] = mean
        mcse[b, rows, :] = sd


def _samples(
    x: QKV, Kb: Any, V1: Any, Qr: Any, comp: Any, eps_np: Any, terms: Any, keys: int
) -> tuple[Any, Any]:
    """Mean of f_n(omega_s) over the samples of queries ``Qr`` (r, w), and its MCSE (NaN for S = 1).

    ``Kb`` (M, w) and ``Qr`` are the keys and queries in coordinates of the span of the keys the
    queries see (:func:`_key_span`; only dot products with keys enter f_n), ``comp`` (r, S) are
    the samples' mixture components, ``eps_np`` (r, S, w) their normals in those coordinates and
    ``terms`` the key terms of the logits: (M,) or (1, M) for every query, or (r, M). ``V1`` is
    (M, dv + 1): the values with a column of ones, so that one product gives both f_n's numerator
    and its normaliser. Only the first ``keys`` keys enter f_n: the others are ones no query of
    the block may see (weight 0).

    The logits are laid out keys first, (M, r*S): the max over the keys is then an elementwise
    maximum across M rows instead of M-element row reductions (six times faster in NumPy at
    M = 64), and the normaliser comes out of the product with ``V1`` instead of a row sum.
    """
    bk, xp = x.bk, x.xp
    c, S = (int(n) for n in comp.shape)
    d, M = int(Kb.shape[-1]), keys
    omega = xp.reshape(xp.take(Kb, xp.reshape(comp, (-1,)), axis=0), (c, S, d))  # k_{m*}
    omega += Qr[:, None, :]
    omega += bk.asarray(eps_np, x.dtype)  # (c, S, d), omega = q_n + k_{m*} + eps ~ p_n
    if keys < x.n_keys:
        Kb, V1, terms = Kb[:keys, ...], V1[:keys, ...], terms[..., :keys]
    # logits of f_n, keys first: one (M, w) x (w, c*S) product, then the key terms added in one pass
    Lt = xp.reshape(Kb @ xp.matrix_transpose(xp.reshape(omega, (c * S, d))), (M, c, S))
    Lt += xp.matrix_transpose(terms if terms.ndim == 2 else terms[None, :])[:, :, None]
    # f_n(omega_s) = softmax(logits) @ V, normalised after the product: (c, S, dv) = f_n(omega_s)
    Lt -= xp.max(Lt, axis=0, keepdims=True)
    E = bk.exp_(Lt)
    F1 = xp.reshape(xp.matrix_transpose(xp.reshape(E, (M, c * S))) @ V1, (c, S, -1))
    dv = int(F1.shape[-1]) - 1
    F = F1[..., :dv] / F1[..., dv:]
    mean = xp.mean(F, axis=1)
    if S == 1:
        return mean, xp.full_like(mean, math.nan)
    F -= mean[:, None, :]  # the sample standard deviation (correction 1) from the mean above
    return mean, xp.sqrt(xp.sum(F * F, axis=1) / (S - 1)) / math.sqrt(S)


@dataclasses.dataclass(frozen=True)
class RA:
    r"""Randomized Attention: an unbiased Monte Carlo estimator of softmax attention.

    For each query :math:`q_n` (Zheng, Wang & Kong (ICML 2022), "Linear Complexity Randomized
    Self-attention Mechanism")

    .. math::

        \mathrm{Attn}(q_n) = \mathbb E_{\omega\sim p_n}[f_n(\omega)],\qquad
        p_n(\omega) = \sum_m \pi_{nm}\,\mathcal N(\omega; q_n + k_m, I),\qquad
        f_n(\omega) = \sum_m \mathrm{softmax}_m\big(\omega^\top k_m - \tfrac12\|k_m\|^2\big)\,v_m,

    with :math:`\pi_{nm} = \mathrm{softmax}_m(q_n^\top k_m)`. Each sample draws a
    component :math:`m^\star \sim \mathrm{Cat}(\pi_{n\cdot})` and sets
    :math:`\omega = q_n + k_{m^\star} + \varepsilon`, :math:`\varepsilon \sim \mathcal N(0, I_d)`,
    in the coordinates where :math:`q^\top k` is the logit (rfkit has no hidden
    :math:`1/\sqrt d`). Then :math:`\mathrm{RA}_S(q_n) = \frac1S\sum_s f_n(\omega_s)` is
    **unbiased** with MSE :math:`\mathrm{Var}_{p_n}(f_n)/S`. (The public reference
    implementation adds the noise before its :math:`1/\sqrt d` scaling, i.e. uses
    noise of standard deviation :math:`d^{-1/4}` in these coordinates, which is
    biased.) Cost :math:`O(nMSd)`: quadratic, a reference estimator.

    :math:`f_n` uses :math:`\omega` only through the logits :math:`\omega^\top k_j` of the keys
    query :math:`n` sees (no density of :math:`\omega` enters the estimator), so only the part of
    :math:`\varepsilon` in the span of those keys matters: rfkit draws
    :math:`\varepsilon = B z`, :math:`z \sim \mathcal N(0, I_r)`, with :math:`B` an orthonormal
    basis of that span (QR of the keys, diagonal of R positive) and :math:`r = \min(\#\text{keys}, d)`.
    :math:`(\varepsilon^\top k_j)_j` then has exactly the law it has under
    :math:`\mathcal N(0, I_d)`, so RA's output has the same distribution, from :math:`r` instead of
    :math:`d` normals per sample (causal query :math:`i`: :math:`\min(i + 1, d)`), and
    :math:`f_n` is computed in those :math:`r` coordinates.

    Parameters
    ----------
    n_samples : int, default=1
        Samples ``S`` per query (>= 1).
    causal : bool, default=False
        Query ``i`` uses keys ``0..i`` in both :math:`p_n` and :math:`f_n`
        (still unbiased for causal softmax attention).
    chunk_size : int, optional
        Queries processed at once (default: a work array of about 2**21
        elements). The samples drawn depend on it.
    n_threads : int, optional
        Threads of the NumPy backend (default: ``rk.threads(...)``, else
        ``RFKIT_NUM_THREADS``, else every CPU). The random numbers are drawn in a
        fixed order, one batch of chunks at a time, the next batch while the
        threads compute the current one, so results do not depend on it.

    Notes
    -----
    Samples are independent for every query and slice (there is no draw to share
    across heads). Per chunk of queries the uniforms (c, S) are drawn first, then the normals
    query by query and sample by sample. The uniforms and normals are NumPy draws (the same numbers on every
    backend), moved to the inputs' device; a study with ``draws = "backend"`` draws them
    on the device instead (docs page *Backends and scaling*). The result carries ``mcse``: the per-entry
    Monte Carlo standard error :math:`\mathrm{sd}_s f_n(\omega_s)/\sqrt S` (NaN for S = 1).
    A key padding mask removes keys from both :math:`p_n` and :math:`f_n` (the result
    equals RA on the unmasked keys with the same ``chunk_size`` and ``rng``).

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> rng = np.random.default_rng(0)
    >>> Q, K, V = 0.3 * rng.normal(size=(3, 16, 8))
    >>> rk.attention.RA(n_samples=4)(Q, K, V, rng=0).output.shape
    (16, 8)
    """

    n_samples: int = 1
    causal: bool = False
    chunk_size: int | None = None
    n_threads: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_samples", check_int(self.n_samples, "n_samples", "RA", low=1))
        check_shared_options(self, "RA")

    @half_precision()
    def __call__(
        self, Q: Any, K: Any, V: Any, *, rng: Any = None, key_padding_mask: Any = None
    ) -> AttentionResult:
        """Estimate attention; ``rng`` keyword-only (None, int, SeedSequence or Generator).

        ``key_padding_mask`` (..., M) bool, True = padded key (ignored).
        """
        x = check_qkv(Q, K, V, "RA", causal=self.causal, key_padding_mask=key_padding_mask)
        if not x.bk.inplace_ok and any(getattr(a, "requires_grad", False) for a in (Q, K)):
            raise InvalidParameterError(
                "RA does not support gradients with respect to `Q` or `K`: it samples the key m* of each "
                "query from softmax(q K^T), a discrete draw that depends on Q and K, so the estimate is not "
                "differentiable in them. Detach Q and K (V may require grad), or use RFA, SNIS or LARA."
            )
        gen = sampler_rng(rng, x, "RA")
        nt = threads_of(self.n_threads, "RA")
        if isinstance(gen, TrialStreams):
            check_draw_library(gen, x.bk, "RA")
            gen.slices_per_trial(x.n_slices, "RA")
        bk = x.bk
        S = self.n_samples
        B, n, M, d, dv = x.n_slices, x.n_queries, x.n_keys, x.dim, x.value_dim
        out = bk.empty((B, n, dv), x.dtype)
        mcse = bk.empty((B, n, dv), x.dtype)
        per_query = S * max(M, d, dv)
        qc = self.chunk_size or max(1, CHUNK_ELEMS // per_query)
        tasks = [(b, slice(q0, min(n, q0 + qc))) for b in range(B) for q0 in range(0, n, qc)]
        # the keys each slice's padding mask keeps, on the host (they size the draws)
        seen = None if x.mask is None else ~np.broadcast_to(bk.to_numpy(x.mask), (B, M))
        widths = [_noise_widths(None if seen is None else seen[b], n, M, d, self.causal) for b in range(B)]

        def draw(part: list[tuple[int, slice]]) -> list[tuple[Any, Any, np.ndarray]]:
            """The uniforms and normals of ``part``'s tasks, in task order."""
            draws = []
            for b, qs in part:
                c = qs.stop - qs.start
                g = gen.of_slice(b, B) if isinstance(gen, TrialStreams) else gen
                w = widths[b][qs]
                draws.append((g.random((c, S)), _span_normals(g, S, w), w))
            return draws

        def item(it: tuple[bool, Any]) -> Any:
            is_draw, arg = it
            if is_draw:
                return draw(arg)
            b = arg[0][0]
            _ra_block(x, arg[0], arg[1], self.causal, None if seen is None else seen[b], out, mcse)
            return None

        # The draws are made in task order, a part (a few tasks) ahead of the blocks that use them.
        # On rfkit's thread pool the next part's draws are one more item of the current part's run,
        # so they are made while its blocks are computed (NumPy draws release the interpreter lock):
        # the same numbers in the same order, whatever the thread count.
        ahead = max(1, nt) if bk.uses_thread_pool else 1
        parts = [tasks[r0 : r0 + ahead] for r0 in range(0, len(tasks), ahead)]
        overlap = bk.uses_thread_pool and nt > 1
        with threads(nt):
            draws = draw(parts[0])
            for k, part in enumerate(parts):
                last = k + 1 == len(parts)
                items = [(False, w) for w in zip(part, draws)]
                if overlap and not last:
                    draws = run(bk, item, [(True, parts[k + 1]), *items], nt)[0]
                    continue
                run(bk, item, items, nt)
                if not last:
                    draws = draw(parts[k + 1])
        return AttentionResult(output=x.unflatten(out), method="RA", estimator=self, mcse=x.unflatten(mcse))
