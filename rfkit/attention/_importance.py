r"""The importance-sampling core shared by SNIS and LARA: weights and shared shifted sums.

For a query :math:`q_n` the unnormalised target is
:math:`\tilde p_n(\omega) = \mathcal N(\omega; 0, I)\,\xi(q_n,\omega)\sum_m\xi(k_m,\omega)`
with :math:`\xi(x,\omega) = e^{\omega^\top x - \|x\|^2/2}`; it integrates to
:math:`Z_n = \sum_m e^{q_n^\top k_m}`, and :math:`\mathrm{Attn}(q_n)` is the mean of
:math:`f_n(\omega) = \sum_m \mathrm{softmax}_m(\omega^\top k_m - \frac12\|k_m\|^2)v_m`
under :math:`\tilde p_n / Z_n` (Zheng, Wang & Kong (ICML 2022), section 3; docs page
*Attention*). With samples :math:`\omega_s` shared by all queries and weights
:math:`w_{ns} = c_s\,\tilde p_n(\omega_s)/q_s(\omega_s)` every estimator here is

.. math:: \widehat{\mathrm{Attn}}(q_n) = \frac{\sum_s w_{ns} f_n(\omega_s)}{\sum_s w_{ns}},

computed in log space: :math:`\log w_{ns} = \omega_s^\top q_n - \frac12\|q_n\|^2
+ \log\sum_m \xi(k_m,\omega_s) + \log\frac{\mathcal N(\omega_s;0,I)}{q_s(\omega_s)} + \log c_s`
(+ :math:`\log|\alpha_{ns}|` for LARA); the proposals :math:`q_s` and their corrections
are in :mod:`rfkit.attention._proposals`. :math:`f_n(\omega_s)` does not depend on
:math:`n` (the :math:`\xi(q_n,\cdot)` factor cancels), so the cost is linear:
:math:`O((n+M)Sd + MSd_v + nSd_v)`.

**Causal form.** With keys restricted to :math:`m \le n`, the numerator is
:math:`\sum_s \phi_s(q_n)\sum_{m\le n}\xi(k_m,\omega_s)v_m` with query "features"
:math:`\phi_s(q) = c_s\,\xi(q,\omega_s)\,\mathcal N(\omega_s;0,I)/q_s(\omega_s)`: causal
RFA whose columns are the samples. It runs through the same blocked prefix scan and
shared-shift numerics as causal RFA (:mod:`rfkit.attention._causal`).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .._backend import Backend
from .._validation import caller_stacklevel
from ..exceptions import NonPositiveNormalizerWarning
from ._causal import CausalJob, run_causal
from ._common import (
    QKV,
    blocks_per_job,
    budget,
    finish_ratio,
    nonpositive_message,
    row_blocks,
    run,
    shifted_sum,
    with_ones,
)
from ._proposals import chunk_edges
from ._result import AttentionResult

__all__ = [
    "importance_sampling",
    "ISJob",
    "jobs_of",
    "sampled_result",
    "causal_sample_attention",
    "slice_groups",
    "warn_nonpositive",
]

# Row blocks of the linear passes hold about this many elements (1 MiB in float64).
IS_BLOCK_ELEMS = 1 << 17
# Slices processed together (batched matrix products) hold about this many elements.
IS_GROUP_ELEMS = 1 << 19
_CAUSAL_BLOCK = 128

#: LARA's query-specific weights: ``alpha(job, rows) -> (log|alpha|, sign or None, n_negative, n_floored)``.
AlphaFn = Callable[[Any, slice], tuple[Any, Any, int, int]]


def warn_nonpositive(owner: str, nbad: int, shape: tuple[int, ...]) -> None:
    warnings.warn(
        nonpositive_message(owner, nbad, shape, "Negative MIS weights or underflow of every weight."),
        NonPositiveNormalizerWarning,
        stacklevel=caller_stacklevel(),
    )


# ----------------------------------------------------------------------------- bidirectional core
@dataclasses.dataclass(frozen=True)
class SampledOptions:
    """The options SNIS and LARA share, keyword-only fields after each estimator's own.

    ``projection`` (how the Gaussian samples' directions are drawn), ``shared_across_heads``
    (one set of samples for every head), ``chunk_size`` (query rows per block), ``causal``
    and ``n_threads``; validated by :func:`rfkit.attention._common.check_shared_options`.
    """

    projection: str = dataclasses.field(default="iid", kw_only=True)
    shared_across_heads: bool = dataclasses.field(default=True, kw_only=True)
    chunk_size: int | None = dataclasses.field(default=None, kw_only=True)
    causal: bool = dataclasses.field(default=False, kw_only=True)
    n_threads: int | None = dataclasses.field(default=None, kw_only=True)


@dataclasses.dataclass
class ISJob:
    """A group of slices ``sl`` with samples ``omega`` (g or 1, S, d) and ``log_corr`` (g or 1, S)."""

    sl: slice
    Q: Any
    K: Any
    V: Any
    pad: Any
    omega: Any
    log_corr: Any
    alpha: AlphaFn | None = None
    ctx: dict[str, Any] = dataclasses.field(default_factory=dict)
    F: Any = None
    base: Any = None


def _is_key_block(job: ISJob, ks: slice, bk: Backend) -> tuple[Any, Any]:
    xp = bk.xp
    Kb = job.K[:, ks, :]
    L = Kb @ xp.matrix_transpose(job.omega) - 0.5 * bk.sqnorm(Kb)[..., None]  # (g, c, S)
    keep = None
    if job.pad is not None:
        pad = job.pad[:, ks]
        L = xp.where(pad[..., None], bk.scalar(-math.inf, L.dtype), L)
        keep = xp.astype(~pad, L.dtype)
    t = xp.max(L, axis=-2)  # one shift per sample, common to every key (never per key)
    L = bk.update(
        L, "-", (t if keep is None else xp.where(xp.isfinite(t), t, xp.zeros_like(t)))[..., None, :]
    )
    GH = xp.matrix_transpose(bk.exp_(L)) @ with_ones(bk, job.V[:, ks, :], keep)  # (g, S, dv + 1)
    return t, GH


def _is_query_block(job: ISJob, qs: slice, bk: Backend, out: dict[str, Any]) -> tuple[int, int]:
    xp = bk.xp
    Qb = job.Q[:, qs, :]
    lw = Qb @ xp.matrix_transpose(job.omega) - 0.5 * bk.sqnorm(Qb)[..., None]
    lw = bk.update(lw, "+", job.base[..., None, :])
    sign = None
    n_neg = n_floor = 0
    if job.alpha is not None:
        la, sign, n_neg, n_floor = job.alpha(job, qs)
        lw = bk.update(lw, "+", la)
    mx = xp.max(lw, axis=-1)
    mx = xp.where(xp.isfinite(mx), mx, xp.zeros_like(mx))
    w = bk.exp_(lw - mx[..., None])
    if sign is not None:
        w = w * sign
    rows = (job.sl, qs)
    out["num"][rows[0], rows[1], :] = w @ job.F
    out["den"][rows[0], rows[1]] = xp.sum(w, axis=-1)
    aw = xp.abs(w)
    with np.errstate(invalid="ignore", divide="ignore"):
        s1 = xp.sum(aw, axis=-1)
        out["ess"][rows[0], rows[1]] = s1 * s1 / xp.sum(aw * aw, axis=-1)
    out["log_scale"][rows[0], rows[1]] = mx
    return n_neg, n_floor


def importance_sampling(
    jobs: list[ISJob], x: QKV, n_threads: int, cap: int | None
) -> tuple[Any, Any, Any, Any, int, int]:
    """Bidirectional weighted importance sampling for every job (group of slices).

    Key pass: fixed blocks, each with its own per-sample shift; block sums combined exactly
    in block order. Query pass: independent blocks. Both on the thread pool (NumPy).

    Returns
    -------
    log_scale (B, n), numerator values (B, n, dv), denominator values (B, n), ess (B, n),
    number of negative and of floored LARA weights.
    """
    bk, xp = x.bk, x.xp
    B, n, M, dv = x.n_slices, x.n_queries, x.n_keys, x.value_dim
    S = int(jobs[0].omega.shape[-2])
    kt = [
        (ji, ks)
        for ji, job in enumerate(jobs)
        for ks in row_blocks(M, S * int(job.Q.shape[0]), budget=budget(bk, IS_BLOCK_ELEMS), cap=cap)
    ]
    per_job = blocks_per_job(bk, lambda t: _is_key_block(jobs[t[0]], t[1], bk), kt, len(jobs), n_threads)
    for job, blocks in zip(jobs, per_job):
        top, GH = shifted_sum(xp, blocks, lambda f: f[..., None])
        H = GH[..., dv]  # type: ignore[index]
        job.F = GH[..., :dv] / H[..., None]  # type: ignore[index]  # f(w_s), (g, S, dv)
        job.base = top + xp.log(H) + job.log_corr
    out = {
        "log_scale": bk.empty((B, n), x.dtype),
        "num": bk.empty((B, n, dv), x.dtype),
        "den": bk.empty((B, n), x.dtype),
        "ess": bk.empty((B, n), x.dtype),
    }
    qt = [
        (ji, qs)
        for ji, job in enumerate(jobs)
        for qs in row_blocks(n, S * int(job.Q.shape[0]), budget=budget(bk, IS_BLOCK_ELEMS), cap=cap)
    ]
    counts = run(bk, lambda t: _is_query_block(jobs[t[0]], t[1], bk, out), qt, n_threads)
    n_neg = sum(c[0] for c in counts)
    n_floor = sum(c[1] for c in counts)
    return out["log_scale"], out["num"], out["den"], out["ess"], n_neg, n_floor


def slice_groups(x: QKV, S: int) -> list[slice]:
    """Contiguous groups of slices processed together (sizes only)."""
    g = max(1, budget(x.bk, IS_GROUP_ELEMS) // (max(x.n_queries, x.n_keys) * max(S, 1)))
    return [slice(s, min(x.n_slices, s + g)) for s in range(0, x.n_slices, g)]


def jobs_of(x: QKV, omega: Any, log_corr: Any) -> list[ISJob]:
    """One :class:`ISJob` per group of slices (:func:`slice_groups`).

    ``omega`` (B or 1, S, d) and ``log_corr`` (B or 1, S), or None to be set per job later.
    """
    S = int(omega.shape[-2])

    def part(a: Any, sl: slice) -> Any:
        return a if a is None or int(a.shape[0]) == 1 else a[sl, ...]

    return [
        ISJob(
            sl,
            x.Q[sl, ...],
            x.K[sl, ...],
            x.V[sl, ...],
            None if x.mask is None else x.mask[sl, ...],
            part(omega, sl),
            part(log_corr, sl),
        )
        for sl in slice_groups(x, S)
    ]


def sampled_result(
    method: str,
    estimator: Any,
    x: QKV,
    parts: tuple[Any, Any, Any, Any],
    n_threads: int,
    proposal_means: Any,
    **extra: Any,
) -> AttentionResult:
    """The :class:`AttentionResult` of SNIS or LARA from ``(log_scale, numerator, denominator, ess)``.

    Forms the ratio, warns about non-positive normalisers and unflattens the (B, ...) arrays
    (``proposal_means`` (B, C, d) or None); ``extra`` fields (``omega``, LARA's counts) are
    passed as they are.
    """
    log_scale, num, den, ess = parts
    out, nbad = finish_ratio(log_scale, num, den, n_threads)
    if nbad:
        warn_nonpositive(method, nbad, (x.n_slices, x.n_queries))
    return AttentionResult(
        output=x.unflatten(out),
        method=method,
        estimator=estimator,
        log_scale=x.unflatten(log_scale),
        numerator_values=x.unflatten(num),
        denominator_values=x.unflatten(den),
        n_nonpositive=nbad,
        ess=x.unflatten(ess),
        proposal_means=None if proposal_means is None else x.unflatten(proposal_means),
        **extra,
    )


# ----------------------------------------------------------------------------- causal core
class SampleFeaturizer:
    """Causal SNIS/LARA as causal RFA: the samples are the feature columns.

    Query log-features :math:`\\omega_s^\\top q - \\|q\\|^2/2 + o_{cs}` with the offsets
    ``qoff`` (g, chunks, S) of the query's chunk (``-inf`` for samples it may not use);
    key log-features :math:`\\omega_s^\\top k - \\|k\\|^2/2`.
    """

    fast = True

    def __init__(self, bk: Backend, omega: Any, qoff: Any) -> None:
        xp = bk.xp
        self.bk = bk
        self.omegaT = xp.matrix_transpose(omega)  # (g, d, S)
        self.qoff = qoff
        self.n_chunks = int(qoff.shape[-2])

    def logits(self, X: Any, side: str, chunk: int = 0) -> tuple[Any, Any]:
        P = X @ self.omegaT
        if side == "query":
            P = self.bk.update(P, "+", self.qoff[:, chunk : chunk + 1, :])
        return P, -0.5 * self.bk.sqnorm(X)

    def features(self, X: Any, side: str) -> tuple[Any, Any]:  # pragma: no cover - fast only
        raise NotImplementedError

    def key_offset(self, chunk: int) -> Any:
        """0 for the samples the queries of ``chunk`` may use, ``-inf`` for the others."""
        if self.n_chunks == 1:
            return None
        xp = self.bk.xp
        q = self.qoff[:, chunk, :]
        return xp.where(xp.isfinite(q), xp.zeros_like(q), q)


def causal_sample_attention(
    x: QKV, omega: Any, qoff: Any, n_threads: int, block: int | None
) -> tuple[Any, Any, Any, Any]:
    """Causal SNIS/LARA for every slice: ``omega`` (B or 1, S, d), ``qoff`` (B or 1, chunks, S).

    The queries of chunk ``c`` of ``chunks`` contiguous chunks (:func:`chunk_edges`) use the
    offsets ``qoff[:, c]``. Returns log_scale (B, n), numerator values (B, n, dv),
    denominator values (B, n), ess (B, n).
    """
    edges = chunk_edges(x.n_queries, int(qoff.shape[-2]))
    bk = x.bk
    B, n, dv = x.n_slices, x.n_queries, x.value_dim
    S = int(omega.shape[-2])
    jobs, slots = [], []
    for sl in slice_groups(x, S):
        g = sl.stop - sl.start
        om = omega if int(omega.shape[0]) == 1 else omega[sl, ...]
        qo = qoff if int(qoff.shape[0]) == 1 else qoff[sl, ...]
        fz = SampleFeaturizer(bk, om, qo)
        pad = None if x.mask is None else x.mask[sl, ...]
        jobs.append(
            CausalJob(fz, x.Q[sl, ...], x.K[sl, ...], x.V[sl, ...], pad, (g,), S, tuple(edges), want_ess=True)
        )
        slots.append(sl)
    run_causal(jobs, bk, block or _CAUSAL_BLOCK, n_threads)
    log_scale = bk.empty((B, n), x.dtype)
    nd = bk.empty((B, n, dv + 1), x.dtype)
    ess = bk.empty((B, n), x.dtype)
    for job, sl in zip(jobs, slots):
        log_scale[sl, :] = job.log_scale
        nd[sl, :, :] = job.nd
        ess[sl, :] = job.ess
    return log_scale, nd[..., :dv], nd[..., dv], ess
