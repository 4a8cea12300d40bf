r"""Random-feature (linear) attention with any rfkit feature map, bidirectional and causal."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from .._random import check_rng
from .._validation import check_int
from ..exceptions import InvalidParameterError, NonPositiveNormalizerWarning
from ..features import FeatureDraw, FeatureMap
from ..features._exp import ExpDraw
from ._common import QKV, check_bool, check_chunk_size, check_qkv, row_blocks
from ._result import AttentionResult

__all__ = ["RFA"]

_CAUSAL_BLOCK = 128
# Row blocks of about this many elements (4 MiB in float64): few BLAS calls, L2/L3-resident.
_BLOCK_ELEMS = 1 << 19


def fit_and_sample(
    spec: FeatureMap, x: QKV, gen: np.random.Generator, shared: bool, n_draws: int | None
) -> tuple[list[FeatureMap], list[FeatureDraw]]:
    """Resolve data-dependent parameters on (Q, K) and draw once, or once per head."""
    d = x.d
    if shared:
        used = spec.fit(x.Q.reshape(-1, d), x.K.reshape(-1, d)) if spec.needs_data else spec
        return [used], [used.sample(d, rng=gen, n_draws=n_draws)]
    specs, draws = [], []
    h = x.n_heads
    for j in range(h):
        used = spec.fit(x.Q[j::h].reshape(-1, d), x.K[j::h].reshape(-1, d)) if spec.needs_data else spec
        specs.append(used)
        draws.append(used.sample(d, rng=gen, n_draws=n_draws))
    return specs, draws


def _rescale(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """exp(old - new), 0 where nothing was accumulated yet (old = -inf)."""
    with np.errstate(invalid="ignore"):
        return np.where(old == -np.inf, 0.0, np.exp(old - new))


class _Featurizer:
    r"""Scaled features of a draw, with an exact fast path for the exponential family.

    For :class:`~rfkit.features._exp.ExpDraw` (PRF, hyperbolic, CEXP, HCEXP,
    OPRF) the log-features are :math:`b\,\omega_i^\top u' + a\|\omega_i\|^2 + c - \|u'\|^2/2`
    (``rfkit.features._exp``); computing them directly here saves several passes
    over the (rows, m) arrays. Other maps (and batches of draws) go through
    ``draw.queries``/``draw.keys``. Inputs are (g, rows, d); outputs get the
    draw's leading T axis when it has one.
    """

    def __init__(self, draw: FeatureDraw, dtype: np.dtype[Any]) -> None:
        self.draw = draw
        self.fast = isinstance(draw, ExpDraw)
        if isinstance(draw, ExpDraw):
            W, e, c = draw.log_linear_form()  # (D, d) / (T, D, d); (D,) / (T, D) or None; constant
            WT = np.swapaxes(W, -1, -2).astype(dtype)
            if W.ndim == 3:  # T draws: (T, 1, d, D) broadcasts against (g, rows, d) slices
                WT = WT[:, None]
                if e is not None:
                    e = e[:, None, None, :]
            self.WT = np.ascontiguousarray(WT)
            self.e = e.astype(dtype) if e is not None else None
            self.c = c

    def _logits(self, X: np.ndarray, side: str) -> tuple[np.ndarray, np.ndarray]:
        """(b W u' + e, row constant c - |u'|^2/2) for validated rows X."""
        U = self.draw.transform(X, side)  # type: ignore[attr-defined]
        P = U @ self.WT
        if self.e is not None:
            P += self.e
        return P, self.c - 0.5 * np.einsum("...ij,...ij->...i", U, U)

    def features(self, X: np.ndarray, side: str) -> tuple[np.ndarray, np.ndarray]:
        """(values (..., rows, D), log_scale (..., rows)) with phi = exp(log_scale) * values."""
        if not self.fast:
            f = self.draw.queries(X) if side == "query" else self.draw.keys(X)
            return f.values, f.log_scale
        P, r = self._logits(X, side)
        rm = np.max(P, axis=-1)
        P -= rm[..., None]
        np.exp(P, out=P)
        return P, rm + r

    def key_weights(self, X: np.ndarray, top: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        r"""Key features with their scales shifted by a maximum that is common to all keys.

        Returns ``(w, old, new)``: ``w = exp(-new) * phi(k)`` for the rows of ``X`` and the
        running maximum before (``old``) and after (``new``) this block. Generic maps: one
        maximum of the key log-scales per slice (shape (...,)). Exponential maps: one
        maximum per feature column (shape (..., D)), still common to every key; the
        column shifts are folded into the query side by :meth:`query_features`, so
        :math:`\phi(q)^\top\phi(k)` is unchanged and no column underflows as a whole.
        """
        if not self.fast:
            f = self.draw.keys(X)
            new = np.max(f.log_scale, axis=-1)
            if top is not None:
                new = np.maximum(top, new)
            w = np.exp(f.log_scale - new[..., None])[..., None] * f.values
        else:
            P, r = self._logits(X, "key")
            P += r[..., None]  # full log-features of the keys
            new = np.max(P, axis=-2)
            if top is not None:
                new = np.maximum(top, new)
            P -= new[..., None, :]
            w = np.exp(P, out=P)
        old = np.full_like(new, -np.inf) if top is None else top
        return w, old, new

    def query_features(self, X: np.ndarray, top: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Query features matching :meth:`key_weights`' shift: (values, total log-scale)."""
        if not self.fast:
            u, ls = self.features(X, "query")
            return u, ls + top[..., None]
        P, r = self._logits(X, "query")
        P += top[..., None, :]
        rm = np.max(P, axis=-1)
        P -= rm[..., None]
        np.exp(P, out=P)
        return P, rm + r

    def rescale(self, S1: np.ndarray, old: np.ndarray, new: np.ndarray) -> None:
        """Rescale accumulated key sums from shift ``old`` to ``new`` in place."""
        f = _rescale(old, new)
        S1 *= f[..., :, None] if self.fast else f[..., None, None]


def _with_ones(V: np.ndarray) -> np.ndarray:
    """[V | 1]: one matrix product then gives both the numerator and the normaliser."""
    V1 = np.empty(V.shape[:-1] + (V.shape[-1] + 1,), dtype=V.dtype)
    V1[..., :-1] = V
    V1[..., -1] = 1.0
    return V1


def _bidirectional(
    fz: _Featurizer,
    Q: np.ndarray,
    K: np.ndarray,
    V: np.ndarray,
    D: int,
    pre: tuple[int, ...],
    block: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Slices (g, n, d), (g, M, d), (g, M, dv) -> log_scale ([T,] g, n), [num | den] ([T,] g, n, dv+1).

    ``[S | z] = sum_m phi(k_m) [v_m, 1]^T`` is accumulated over key blocks with a shift
    common to every key (the running maximum, rescaled exactly when it grows: per slice,
    or per feature column for the exponential maps); queries are then processed in blocks.
    """
    g, n, M = Q.shape[0], Q.shape[1], K.shape[1]
    dv1 = V.shape[-1] + 1
    per_row = D * g * int(np.prod(pre, dtype=np.int64))
    S1 = top = None
    for ks in row_blocks(M, per_row, budget=_BLOCK_ELEMS, cap=block):
        wk, old, top = fz.key_weights(K[:, ks], top)
        part = np.swapaxes(wk, -1, -2) @ _with_ones(V[:, ks])
        if S1 is None:
            S1 = part
        else:
            fz.rescale(S1, old, top)
            S1 += part
    assert S1 is not None and top is not None
    lead_shape = S1.shape[:-2]
    log_scale = np.empty(lead_shape + (n,), dtype=Q.dtype)
    nd = np.empty(lead_shape + (n, dv1), dtype=Q.dtype)
    for qs in row_blocks(n, per_row, budget=_BLOCK_ELEMS, cap=block):
        u, ls = fz.query_features(Q[:, qs], top)
        np.matmul(u, S1, out=nd[..., qs, :])
        log_scale[..., qs] = ls
    return log_scale, nd


def _causal(
    fz: _Featurizer,
    Q: np.ndarray,
    K: np.ndarray,
    V: np.ndarray,
    D: int,
    pre: tuple[int, ...],
    block: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Causal prefix sums in row blocks: O(n m + m dv + block^2) extra memory per slice.

    Within a block the small masked product is formed directly; across blocks the
    running sums ``[S | z] = sum_{j<block} phi(k_j)[v_j, 1]^T`` are carried. Every shift
    is common to the keys a row sees and uses only keys ``0..i`` for row ``i``, so the
    output of row ``i`` depends on keys ``0..i`` only, also numerically (bit for bit).

    Generic maps: row ``i`` uses :math:`B_i = \max_{j\le i} b_j` of the key log-scales.
    Exponential maps: the carried sums use one shift per feature column (the column
    maximum over previous blocks, folded into the query side) and the in-block part
    uses :math:`B_i`; the two parts are combined on a common log scale.
    """
    n = Q.shape[1]
    g = Q.shape[0]
    dv1 = V.shape[-1] + 1
    c = block if block is not None else _CAUSAL_BLOCK
    L = pre + (g,)
    S1 = np.zeros(L + (D, dv1), dtype=Q.dtype)
    top = np.full(L + ((D,) if fz.fast else ()), -np.inf, dtype=Q.dtype)
    log_scale = np.empty(L + (n,), dtype=Q.dtype)
    nd = np.empty(L + (n, dv1), dtype=Q.dtype)
    for blk in row_blocks(n, D * g * int(np.prod(pre, dtype=np.int64)), budget=_BLOCK_ELEMS, cap=c):
        V1 = _with_ones(V[:, blk])
        if fz.fast:
            Pq, rq = fz._logits(Q[:, blk], "query")
            Lk, rk_ = fz._logits(K[:, blk], "key")
            Lk += rk_[..., None]  # key log-features
            b = np.max(Lk, axis=-1)
            w = np.exp(Lk - b[..., None])
            qm = np.max(Pq, axis=-1)
            u = np.exp(Pq - qm[..., None])
            lq = qm + rq
        else:
            u, lq = fz.features(Q[:, blk], "query")
            w, b = fz.features(K[:, blk], "key")
        # in-block part: row i sees keys j <= i of the block, shift B_i = max_{j<=i} b_j
        Bi = np.maximum.accumulate(b, axis=-1)
        if not fz.fast:
            Bi = np.maximum(Bi, top[..., None])  # also covers the carried keys
        A = u @ np.swapaxes(w, -1, -2)  # (..., c, c)
        lower = np.tri(A.shape[-1], dtype=bool)
        E = np.where(lower, b[..., None, :] - Bi[..., :, None], 0.0)
        A = np.where(lower, A * np.exp(E), 0.0)
        intra = A @ V1
        if fz.fast:
            # carried part with per-column shifts `top` (previous blocks only)
            Pc = Pq + top[..., None, :]
            m1 = np.max(Pc, axis=-1)  # -inf before any key was accumulated
            fin = np.isfinite(m1)
            Pc -= np.where(fin, m1, 0.0)[..., None]
            carried = np.exp(Pc, out=Pc) @ S1
            L1, L2 = m1 + rq, lq + Bi
            Lr = np.maximum(L1, L2)
            nd[..., blk, :] = np.exp(L1 - Lr)[..., None] * carried + np.exp(L2 - Lr)[..., None] * intra
            log_scale[..., blk] = Lr
            new_top = np.maximum(top, np.max(Lk, axis=-2))
            fz.rescale(S1, top, new_top)
            top = new_top
            S1 += np.swapaxes(np.exp(Lk - top[..., None, :]), -1, -2) @ V1
        else:
            carry = np.exp(top[..., None] - Bi)  # 0 before any key was accumulated
            nd[..., blk, :] = carry[..., None] * (u @ S1) + intra
            log_scale[..., blk] = lq + Bi
            new_top = Bi[..., -1]
            fz.rescale(S1, top, new_top)
            top = new_top
            S1 += np.swapaxes(np.exp(b - top[..., None])[..., None] * w, -1, -2) @ V1
    return log_scale, nd


def finish_ratio(log_scale: np.ndarray, num: np.ndarray, den: np.ndarray) -> tuple[np.ndarray, int]:
    """Output ``num / den`` with NaN rows where ``den <= 0`` (or non-finite); count of such rows."""
    bad = ~(den > 0) | ~np.isfinite(den)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        out = num / den[..., None]
    nbad = int(np.count_nonzero(bad))
    if nbad:
        out[bad] = np.nan
    return out, nbad


def nonpositive_message(owner: str, nbad: int, shape: tuple[int, ...], hint: str) -> str:
    total = int(np.prod(shape, dtype=np.int64))
    return (
        f"{owner}: {nbad} of {total} query rows have an estimated normaliser <= 0; their output is NaN "
        f"(counted in AttentionResult.n_nonpositive, never clipped). {hint}"
    )


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
    :math:`\mathcal N(0, I)` (Zheng et al., ICML 2022; THEORY.md §8): consistent,
    with bias :math:`O(1/m)` (THEORY.md §9).

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
    the carried prefix sums and a per-row shift inside each block of rows.

    Parameters
    ----------
    feature_map : FeatureMap
        Any rfkit feature map (``Positive``, ``Trig``, ``Hyperbolic``, ``CEXP``,
        ``HCEXP``, ``OPRF``, ``Taylor``, ``Limit``). Data-dependent maps
        (``OPRF(A=None)``, ``CEXP(A="mean")``, ...) are fitted on the call's
        ``(Q, K)`` (per head when draws are per head).
    causal : bool, default=False
        Query ``i`` attends to keys ``0..i`` (needs ``n == M``). Computed by
        blocked prefix sums with O(n m + m dv) extra memory.
    shared_across_heads : bool, default=True
        One draw for every slice; if False an independent draw per head (axis
        -3 of the inputs; shared along further leading batch axes).
    chunk_size : int, optional
        Rows per block (default: blocks of about 2**19 elements, i.e. 2048 rows
        for 256 feature columns, bidirectionally; 128 rows causally). Results do
        not depend on it beyond round-off.

    Returns (from ``__call__``)
    ---------------------------
    AttentionResult
        ``output``, ``log_scale``/``numerator_values``/``denominator_values``
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

    def __post_init__(self) -> None:
        if not isinstance(self.feature_map, FeatureMap):
            raise InvalidParameterError(
                "The `feature_map` parameter of RFA must be an rfkit feature map "
                f"(e.g. rk.features.Positive(256)). Got {self.feature_map!r} instead."
            )
        object.__setattr__(self, "causal", check_bool(self.causal, "causal", "RFA"))
        object.__setattr__(
            self, "shared_across_heads", check_bool(self.shared_across_heads, "shared_across_heads", "RFA")
        )
        object.__setattr__(self, "chunk_size", check_chunk_size(self.chunk_size, "RFA"))

    def __call__(
        self, Q: Any, K: Any, V: Any, *, rng: Any = None, n_draws: int | None = None
    ) -> AttentionResult:
        """Estimate attention for ``Q`` (..., n, d), ``K`` (..., M, d), ``V`` (..., M, dv).

        Parameters
        ----------
        Q, K, V : array_like
            Queries, keys, values; leading axes broadcast.
        rng : {None, int, SeedSequence, Generator}, keyword-only
            When ``rng`` is None, a new Generator is created using entropy from the
            operating system. An int gives reproducible output; a Generator passed
            twice gives different draws.
        n_draws : int, optional
            ``T`` independent feature draws at once (``spec.sample(n_draws=T)``):
            every output gains a leading axis of length ``T``, so Monte Carlo
            trials vectorise.

        Returns
        -------
        AttentionResult
        """
        x = check_qkv(Q, K, V, "RFA", causal=self.causal)
        T = None if n_draws is None else check_int(n_draws, "n_draws", "RFA", low=1)
        gen = check_rng(rng)
        specs, draws = fit_and_sample(self.feature_map, x, gen, self.shared_across_heads, T)
        B, n, M, dv = x.n_slices, x.n, x.m, x.dv
        lead = 1 if T is None else T
        D = specs[0].feature_dim(x.d)
        pre = () if T is None else (T,)
        log_scale = np.empty(pre + (B, n), dtype=x.dtype)
        nd = np.empty(pre + (B, n, dv + 1), dtype=x.dtype)
        run = _causal if self.causal else _bidirectional
        # Slices sharing a draw are processed together in groups small enough for the cache.
        g = max(1, _BLOCK_ELEMS // (lead * D * max(n, M)))
        h = len(draws)
        for j, draw in enumerate(draws):
            fz = _Featurizer(draw, x.dtype)
            idx = np.arange(j, B, h)
            for s0 in range(0, len(idx), g):
                sel = idx[s0 : s0 + g]
                sl = slice(sel[0], sel[-1] + 1, h)
                ls, part = run(fz, x.Q[sl], x.K[sl], x.V[sl], D, pre, self.chunk_size)
                log_scale[..., sl, :] = ls
                nd[..., sl, :, :] = part
        out, nbad = finish_ratio(log_scale, nd[..., :dv], nd[..., dv])
        if nbad:
            hint = (
                f"{specs[0].name} features are positive, so the estimate underflowed; use float64 or smaller inputs."
                if specs[0].is_positive
                else f"{specs[0].name} features are not positive; use Positive/OPRF features or more features."
            )
            warnings.warn(
                nonpositive_message("RFA", nbad, out.shape[:-1], hint),
                NonPositiveNormalizerWarning,
                stacklevel=2,
            )

        def shape(arr: np.ndarray) -> np.ndarray:
            return arr.reshape(pre + x.batch_shape + arr.shape[len(pre) + 1 :])

        return AttentionResult(
            output=shape(out),
            method="RFA",
            estimator=self,
            feature_map=specs[0] if len(specs) == 1 else tuple(specs),
            draw=draws[0] if len(draws) == 1 else tuple(draws),
            log_scale=shape(log_scale),
            numerator_values=shape(nd[..., :dv]),
            denominator_values=shape(nd[..., dv]),
            n_nonpositive=nbad,
        )
