r"""Random-feature (linear) attention with any rfkit feature map, bidirectional and causal."""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np

from .._backend import NUMPY, Backend, get_backend
from .._parallel import threads
from .._params import check_allocation
from .._random import check_rng
from .._validation import caller_stacklevel, check_int, half_precision
from ..exceptions import InvalidParameterError, NonPositiveNormalizerWarning
from ..features import FeatureDraw, FeatureMap, fit_to_pairs
from ._causal import CausalJob, run_causal
from ._common import (
    QKV,
    blocks_per_job,
    budget,
    check_feature_map_field,
    check_qkv,
    check_shared_options,
    finish_ratio,
    nonpositive_message,
    row_blocks,
    run,
    shifted_sum,
    threads_of,
    with_ones,
)
from ._result import AttentionResult

__all__ = ["RFA"]

_CAUSAL_BLOCK = 128
# Row blocks of the bidirectional passes hold about this many elements (1 MiB in float64):
# L2-resident, and enough blocks to keep every core busy at moderate n.
_BLOCK_ELEMS = 1 << 18
# Slices sharing a draw are processed together in groups of about this many feature elements.
_GROUP_ELEMS = 1 << 19


def fit_and_sample(
    spec: FeatureMap, x: QKV, gen: np.random.Generator, shared: bool, n_draws: int | None
) -> tuple[list[FeatureMap], list[FeatureDraw]]:
    """Resolve data-dependent parameters on (Q, K) and draw once, or once per head.

    The fit runs on the pairs the map's ``fit_pairs`` selects (:func:`rfkit.features.fit_to_pairs`):
    ``"all"`` (the default, also for causal attention) pools the queries and unpadded keys of
    all slices; ``"causal"`` weights the pairs ``j <= i`` of each slice (the pairs causal
    attention uses). Padded keys never count (padding = dropping keys).
    """
    d = x.dim

    def fitted(sel: slice) -> FeatureMap:
        if not spec.needs_data:
            return spec
        mask = None if x.mask is None else x.mask[sel, ...]
        return fit_to_pairs(spec, x.Q[sel, ...], x.K[sel, ...], key_padding_mask=mask)

    if shared:
        used = fitted(slice(None))
        return [used], [used.sample(d, rng=gen, n_draws=n_draws)]
    specs, draws = [], []
    h = x.n_heads
    for j in range(h):
        used = fitted(slice(j, None, h))
        specs.append(used)
        draws.append(used.sample(d, rng=gen, n_draws=n_draws))
    return specs, draws


def _rescale(old: Any, new: Any) -> Any:
    """exp(old - new), 0 where nothing was accumulated yet (old = -inf)."""
    xp = get_backend(("old", old)).xp
    return xp.exp(old - xp.where(xp.isfinite(new), new, xp.zeros_like(new)))


class _Featurizer:
    r"""Scaled features of a draw, with an exact fast path for draws that have an exponential form.

    Every draw goes through the public draw protocol of :class:`~rfkit.features.FeatureDraw`.
    When ``draw.exp_form()`` gives an :class:`~rfkit.features.ExpForm` (PRF, hyperbolic PRF,
    CEXP, HCEXP, OPRF, ADERF, SADERF, GERF with ``s=1``) the log-features are
    :math:`u W^\top + e + c - \|u\|^2/2` with :math:`u` the form's ``transform`` of the rows;
    computing them directly here saves several passes over the (rows, m) arrays. Other maps
    go through ``draw.features``. Inputs are (g, rows, d) arrays of the call's backend;
    outputs get the draw's leading T axis when it has one. The form's NumPy parameters are
    moved to the backend's device once per draw (``draw.param_on``).
    """

    def __init__(self, draw: FeatureDraw, dtype: Any, bk: Backend = NUMPY) -> None:
        self.draw = draw
        self.bk = bk
        form = draw.exp_form()
        self.fast = form is not None
        if form is not None:
            W, e = form.W, form.offsets  # (D, d) / (T, D, d); (D,) / (T, D) or None
            host = isinstance(W, np.ndarray)  # else drawn on the device (draws = "backend")
            WT = np.swapaxes(W, -1, -2) if host else bk.xp.matrix_transpose(W)
            if W.ndim == 3:  # T draws: (T, 1, d, D) broadcasts against (g, rows, d) slices
                WT = WT[:, None]
                if e is not None:
                    e = e[:, None, None, :]
            # on the backend's device, once per draw (a draw reused across calls moves them once)
            self.WT = draw.param_on(bk, "rfa_WT", np.ascontiguousarray(WT) if host else WT, dtype)
            self.e = (
                None
                if e is None
                else draw.param_on(bk, "rfa_e", np.ascontiguousarray(e) if host else e, dtype)
            )
            self.c = form.constant
            self.transform = form.transform

    def logits(self, X: Any, side: str, chunk: int = 0) -> tuple[Any, Any]:
        """(b W u' + e, row constant c - |u'|^2/2) for validated rows X."""
        U = self.transform(X, side)
        P = U @ self.WT
        if self.e is not None:
            P = self.bk.update(P, "+", self.e)
        return P, self.c - 0.5 * self.bk.sqnorm(U)

    def features(self, X: Any, side: str) -> tuple[Any, Any]:
        """(values (..., rows, D), log_scale (..., rows)) with phi = exp(log_scale) * values."""
        if not self.fast:
            f = self.draw.features(X, side)  # validated rows of one backend: no second check
            return f.values, f.log_scale
        xp = self.bk.xp
        P, r = self.logits(X, side)
        rm = xp.max(P, axis=-1)
        P = self.bk.update(P, "-", rm[..., None])
        return self.bk.exp_(P), rm + r

    def key_offset(self, chunk: int) -> None:
        return None

    def rescale(self, S1: Any, old: Any, new: Any) -> None:
        """Rescale accumulated key sums from shift ``old`` to ``new`` in place."""
        f = _rescale(old, new)
        S1 *= f[..., :, None] if self.fast else f[..., None, None]


@dataclasses.dataclass
class _Job:
    fz: _Featurizer
    Q: Any
    K: Any
    V: Any
    pad: Any
    lead: tuple[int, ...]
    D: int
    top: Any = None
    S1: Any = None
    log_scale: Any = None
    nd: Any = None


def _key_block(job: _Job, ks: slice, bk: Backend) -> tuple[Any, Any]:
    """Block sums ``S_b = sum_m e^{l(k_m) - t_b} [v_m, 1]`` with the block's own shift ``t_b``."""
    xp = bk.xp
    fz = job.fz
    pad = None if job.pad is None else job.pad[:, ks]
    keep = None if pad is None else xp.astype(~pad, job.K.dtype)
    V1 = with_ones(bk, job.V[:, ks, :], keep)
    neg = bk.scalar(-math.inf, job.K.dtype)
    if fz.fast:
        P, r = fz.logits(job.K[:, ks, :], "key")
        P = bk.update(P, "+", r[..., None])  # full log-features of the keys
        if pad is not None:
            P = xp.where(pad[..., None], neg, P)
        t = xp.max(P, axis=-2)  # one shift per feature column, common to every key of the block
        P = bk.update(
            P, "-", (t if pad is None else xp.where(xp.isfinite(t), t, xp.zeros_like(t)))[..., None, :]
        )
        return t, xp.matrix_transpose(bk.exp_(P)) @ V1
    w, ls = fz.features(job.K[:, ks, :], "key")
    if pad is not None:
        ls = xp.where(pad, neg, ls)
    t = xp.max(ls, axis=-1)
    scale = xp.exp(ls - (t if pad is None else xp.where(xp.isfinite(t), t, xp.zeros_like(t)))[..., None])
    return t, xp.matrix_transpose(w * scale[..., None]) @ V1


def _query_block(job: _Job, qs: slice, bk: Backend) -> None:
    xp = bk.xp
    fz = job.fz
    if fz.fast:
        P, r = fz.logits(job.Q[:, qs, :], "query")
        P = bk.update(P, "+", job.top[..., None, :])
        rm = xp.max(P, axis=-1)
        P = bk.update(P, "-", rm[..., None])
        u, ls = bk.exp_(P), rm + r
    else:
        u, ls = fz.features(job.Q[:, qs, :], "query")
        ls = ls + job.top[..., None]
    if job.nd is None:  # one block of every row (an accelerator): the product is the result, no copy
        job.nd, job.log_scale = u @ job.S1, ls
        return
    bk.matmul_into(u, job.S1, job.nd, (Ellipsis, qs, slice(None)))
    job.log_scale[..., qs] = ls


def _bidirectional(jobs: list[_Job], bk: Backend, n_threads: int, cap: int | None) -> None:
    r"""``[S | z] = \sum_m \phi(k_m)[v_m, 1]^\top`` per job, then ``\phi(q_n)^\top [S | z]``.

    Key pass: fixed blocks, each with its own shift (per feature column for the exponential
    maps, per slice otherwise); the block sums are combined exactly, in block order, on the
    common shift ``top = max_b t_b`` (never per key). Query pass: the shift folded into the
    query features. Both passes run their blocks on the thread pool (NumPy).
    """
    xp = bk.xp
    M = int(jobs[0].K.shape[-2])
    n = int(jobs[0].Q.shape[-2])
    kt = [
        (ji, ks)
        for ji, job in enumerate(jobs)
        for ks in row_blocks(M, job.D * math.prod(job.lead), budget=budget(bk, _BLOCK_ELEMS), cap=cap)
    ]
    per_job = blocks_per_job(bk, lambda t: _key_block(jobs[t[0]], t[1], bk), kt, len(jobs), n_threads)
    for job, blocks in zip(jobs, per_job):
        # per feature column (exponential maps) or per slice: top is finite, every slice keeps a key
        expand = (lambda f: f[..., :, None]) if job.fz.fast else (lambda f: f[..., None, None])
        job.top, job.S1 = shifted_sum(xp, blocks, expand)
    qt = [
        (ji, qs)
        for ji, job in enumerate(jobs)
        for qs in row_blocks(n, job.D * math.prod(job.lead), budget=budget(bk, _BLOCK_ELEMS), cap=cap)
    ]
    whole = len(qt) == len(jobs) and not bk.uses_thread_pool  # one block per job: no output arrays to fill
    for job in jobs:
        if not whole:
            dv1 = int(job.S1.shape[-1])  # type: ignore[union-attr]
            job.log_scale = bk.empty(job.lead + (n,), job.Q.dtype)
            job.nd = bk.empty(job.lead + (n, dv1), job.Q.dtype)
    run(bk, lambda t: _query_block(jobs[t[0]], t[1], bk), qt, n_threads)


@dataclasses.dataclass(frozen=True)
class RFA:
    r"""Random-feature attention (linear attention) with any rfkit feature map.

    .. math::

        \widehat{\mathrm{Attn}}(q_n) =
        \frac{\phi(q_n)^\top \sum_m \phi(k_m) v_m^\top}{\phi(q_n)^\top \sum_{m'} \phi(k_{m'})},

    the estimator of Peng et al. (ICLR 2021, "Random Feature Attention", trig
    features) and Choromanski et al. (ICLR 2021, "Performer"/FAVOR+, positive
    features); with causal masking the sums run over :math:`m \le n` (prefix
    sums, Katharopoulos et al. 2020). With :class:`~rfkit.features.Positive`
    features it is self-normalised importance sampling with proposal
    :math:`\mathcal N(0, I)` (Zheng, Wang & Kong (ICML 2022)): consistent,
    with bias :math:`O(1/m)` (docs page *Theory*, section 3).

    Numerics: features are scaled, :math:`\phi(x) = e^{s(x)}u(x)`. The query
    scale :math:`e^{s(q_n)}` cancels in the ratio; the key scales are shifted by a
    maximum that is common to all keys of the slice (causal: to all keys a row
    sees, computed from those keys only), never per key, so nothing overflows and
    the estimate is unchanged. For the exponential maps (Positive, Hyperbolic,
    CEXP, HCEXP, OPRF) the common shift is taken per feature column and folded
    into the query features (exact, since :math:`\phi(q)^\top\phi(k) =
    \sum_i (\phi_i(q)e^{c_i})(\phi_i(k)e^{-c_i})`), so keys whose scales span far
    more than the float range (logits ~50 from very unequal query and key norms,
    float32) still give finite outputs; causal mode uses the per-column shift for
    the carried prefix sums and a per-row shift inside each block of rows
    (:mod:`rfkit.attention._causal`: a blocked two-phase prefix scan).

    Backends and threads: ``Q``, ``K``, ``V`` (and the mask) may be NumPy, PyTorch
    (any device), CuPy or ``array_api_strict`` arrays; the estimate is computed in that
    library on that device and every array of the result has its namespace, device and
    dtype. The feature draw stays a NumPy draw (one ``rng``, the same directions on every
    backend), moved to the device once. On NumPy the row blocks run on ``n_threads``
    threads with bit-identical results for every thread count.

    Parameters
    ----------
    feature_map : FeatureMap
        Any rfkit feature map (``Positive``, ``Trig``, ``Hyperbolic``, ``CEXP``,
        ``HCEXP``, ``OPRF``, ``Taylor``, ``Limit``). Data-dependent maps
        (``OPRF(A=None)``, ``CEXP(A="mean")``, ...) are fitted on the call's
        ``(Q, K)`` (per head when draws are per head; unmasked keys only).
    causal : bool, default=False
        Query ``i`` attends to keys ``0..i`` (needs ``n == M``). Computed by a
        blocked prefix scan with memory linear in ``n``.
    shared_across_heads : bool, default=True
        One draw for every slice; if False an independent draw per head (axis
        -3 of the inputs; shared along further leading batch axes).
    chunk_size : int, optional
        Rows per block (default: blocks of about 2**17 elements, i.e. 512 rows
        for 256 feature columns, bidirectionally; 128 rows causally). Results do
        not depend on it beyond round-off.
    n_threads : int, optional
        Threads of the NumPy backend (default: ``rk.threads(...)``, else
        ``RFKIT_NUM_THREADS``, else every CPU). Results do not depend on it.

    Returns
    -------
    AttentionResult
        What calling the estimator returns: ``output``, ``log_scale``/``numerator_values``/``denominator_values``
        (the estimated normaliser :math:`\hat Z_n = \phi(q_n)^\top\sum_m\phi(k_m)`),
        ``n_nonpositive`` (rows with :math:`\hat Z_n \le 0`, possible for trig
        and odd-degree Taylor maps: NaN output and one
        :class:`~rfkit.exceptions.NonPositiveNormalizerWarning` per call),
        ``feature_map`` (fitted) and ``draw``.

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> rng = np.random.default_rng(0)
    >>> Q, K, V = 0.3 * rng.normal(size=(3, 4, 16, 8))
    >>> res = rk.attention.RFA(rk.features.Positive(64), causal=True)(Q, K, V, rng=0)
    >>> res.output.shape
    (4, 16, 8)
    """

    feature_map: FeatureMap
    causal: bool = False
    shared_across_heads: bool = True
    chunk_size: int | None = None
    n_threads: int | None = None

    def __post_init__(self) -> None:
        check_feature_map_field(self, "RFA")
        check_shared_options(self, "RFA")

    @half_precision()
    def __call__(
        self,
        Q: Any,
        K: Any,
        V: Any,
        *,
        rng: Any = None,
        n_draws: int | None = None,
        key_padding_mask: Any = None,
        draw: FeatureDraw | None = None,
    ) -> AttentionResult:
        """Estimate attention for ``Q`` (..., n, d), ``K`` (..., M, d), ``V`` (..., M, dv).

        Parameters
        ----------
        Q, K, V : array_like
            Queries, keys, values; leading axes broadcast. NumPy, PyTorch, CuPy or
            ``array_api_strict`` arrays (one library and one device per call).
        rng : {None, int, SeedSequence, Generator}, keyword-only
            When ``rng`` is None, a new Generator is created using entropy from the
            operating system. An int gives reproducible output; a Generator passed
            twice gives different draws.
        n_draws : int, optional
            ``T`` independent feature draws at once (``spec.sample(n_draws=T)``):
            every output gains a leading axis of length ``T``, so Monte Carlo
            trials vectorise.
        key_padding_mask : array of bool, shape (..., M), optional
            True marks padded keys, which are ignored (PyTorch convention): the result
            equals the estimate on the unmasked keys alone, with the same draw. Every
            query must keep at least one key it may see.
        draw : FeatureDraw, optional
            A draw of this estimator's feature map to use instead of a fresh one (``rng`` and
            ``n_draws`` are then unused): fixed features across calls, as Performer keeps its
            projection between redraws. It must have been drawn for ``d`` and, for a
            data-dependent map, from the fitted map (``feature_map.fit(Q, K).sample(d)``).

        Returns
        -------
        AttentionResult
        """
        x = check_qkv(Q, K, V, "RFA", causal=self.causal, key_padding_mask=key_padding_mask)
        nt = threads_of(self.n_threads, "RFA")
        bk = x.bk
        if draw is not None:
            if not isinstance(draw, FeatureDraw) or draw.dim != x.dim:
                raise InvalidParameterError(
                    f"The `draw` parameter of RFA must be a draw of its feature map for d={x.dim} "
                    f"(feature_map.sample({x.dim}, rng=...)). Got {draw!r} instead."
                )
            if draw.spec.needs_data or type(draw.spec) is not type(self.feature_map):
                raise InvalidParameterError(
                    f"The `draw` parameter of RFA must come from its feature map {self.feature_map!r} "
                    f"(fitted where it needs data). Got a draw of {draw.spec!r} instead."
                )
        T = None if n_draws is None or draw is not None else check_int(n_draws, "n_draws", "RFA", low=1)
        if draw is not None:
            T = draw.n_draws
        size = int(np.dtype(bk.dtype_name(x.dtype)).itemsize)
        width = (self.feature_map if draw is None else draw.spec).feature_dim(x.dim)
        lead_t = 1 if T is None else T
        check_allocation(
            (lead_t, x.n_slices, x.n_queries, x.value_dim), size, "the output (T, batch, n, dv)", "RFA"
        )
        check_allocation(
            (lead_t, x.n_slices, width, x.value_dim + 1), size, "the key sums (T, batch, D, dv+1)", "RFA"
        )
        with threads(nt):
            if draw is not None:
                specs, draws = [draw.spec], [draw]
            else:
                specs, draws = fit_and_sample(
                    self.feature_map, x, check_rng(rng), self.shared_across_heads, T
                )
            B, n, M, dv = x.n_slices, x.n_queries, x.n_keys, x.value_dim
            lead = 1 if T is None else T
            D = specs[0].feature_dim(x.dim)
            pre = () if T is None else (T,)
            # Slices sharing a draw are processed together in groups small enough for the cache.
            g = max(1, budget(bk, _GROUP_ELEMS) // (lead * D * max(n, M)))
            h = len(draws)
            jobs: list[Any] = []
            slots = []
            for j, draw in enumerate(draws):
                fz = _Featurizer(draw, x.dtype, bk)
                idx = list(range(j, B, h))
                for s0 in range(0, len(idx), g):
                    sel = idx[s0 : s0 + g]
                    sl = slice(sel[0], sel[-1] + 1, h)
                    pad = None if x.mask is None else x.mask[sl, ...]
                    args = (fz, x.Q[sl, ...], x.K[sl, ...], x.V[sl, ...], pad, pre + (len(sel),), D)
                    jobs.append(CausalJob(*args, edges=(0, n)) if self.causal else _Job(*args))
                    slots.append(sl)
            if self.causal:
                run_causal(jobs, bk, self.chunk_size or _CAUSAL_BLOCK, nt)
            else:
                _bidirectional(jobs, bk, nt, self.chunk_size)
        if len(jobs) == 1:
            log_scale, nd = jobs[0].log_scale, jobs[0].nd
        else:
            log_scale = bk.empty(pre + (B, n), x.dtype)
            nd = bk.empty(pre + (B, n, dv + 1), x.dtype)
            for job, sl in zip(jobs, slots):
                log_scale[..., sl, :] = job.log_scale
                nd[..., sl, :, :] = job.nd
        num, den = nd[..., :dv], nd[..., dv]
        out, nbad = finish_ratio(log_scale, num, den, nt)
        if nbad:
            hint = (
                f"{specs[0].name} features are positive, so the estimate underflowed; use float64 or smaller inputs."
                if specs[0].is_positive
                else f"{specs[0].name} features are not positive; use Positive/OPRF features or more features."
            )
            warnings.warn(
                nonpositive_message("RFA", nbad, tuple(out.shape[:-1]), hint),
                NonPositiveNormalizerWarning,
                stacklevel=caller_stacklevel(),
            )
        return AttentionResult(
            output=x.unflatten(out, pre),
            method="RFA",
            estimator=self,
            feature_map=specs[0] if len(specs) == 1 else tuple(specs),
            draw=draws[0] if len(draws) == 1 else tuple(draws),
            log_scale=x.unflatten(log_scale, pre),
            numerator_values=x.unflatten(num, pre),
            denominator_values=x.unflatten(den, pre),
            n_nonpositive=nbad,
        )
