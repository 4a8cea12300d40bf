r"""Hybrid attention: exact softmax terms on a sparse support, random features for the rest."""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np

from .._random import check_rng
from .._validation import check_int, half_precision
from ..exceptions import (
    IllConditionedWarning,
    InvalidParameterError,
    NonPositiveNormalizerWarning,
)
from ..features import FeatureDraw, FeatureMap, fit_to_pairs
from ._budget import budgeted_attention, check_budget_options
from ._common import (
    QKV,
    check_feature_map_field,
    check_option,
    check_qkv,
    check_shared_options,
    finish_ratio,
    nonpositive_message,
)
from ._remainder import check_content_options, sampled_attention
from ._result import AttentionResult, QueryCost
from ._rfa import RFA
from ._scorers import Scorer, scoring_cost, top_k_support
from ._support import lsh_codes, lsh_support, sink_support, union_support, window_support

__all__ = ["Hybrid", "HYBRID_VARIANTS"]

#: The combinations of exact support terms and random-feature remainder (see :class:`Hybrid`).
HYBRID_VARIANTS = ("plain", "ratio")
#: The pairs a data-dependent map is fitted on (see :class:`Hybrid`).
HYBRID_FIT_ON = ("all", "remainder")
# Work arrays of one row block hold about this many elements.
_BLOCK_ELEMS = 1 << 18


@dataclasses.dataclass(frozen=True)
class Hybrid:
    r"""Sparse + random-feature attention: exact softmax on a support, random features elsewhere.

    For query :math:`q_n` with support :math:`S(n)` (keys computed exactly) and remainder
    :math:`R(n)` (the other keys it may see), with any feature map :math:`\phi`:

    .. math::

        \hat Z_n = \underbrace{\sum_{j\in S(n)} e^{q_n^\top k_j}}_{Z^{ex}_n}
                 + \underbrace{\phi(q_n)^\top \sum_{j\in R(n)} \phi(k_j)}_{\hat R_n},\qquad
        \hat N_n = \underbrace{\sum_{j\in S(n)} e^{q_n^\top k_j} v_j}_{E_n}
                 + \phi(q_n)^\top \sum_{j\in R(n)} \phi(k_j) v_j^\top,

    the unbiased combination of Scatterbrain (Chen, Dao et al. (NeurIPS 2021)); the sums over
    :math:`R(n)` are the global (causal: prefix) random-feature sums of :class:`RFA` minus the
    support's random-feature terms, so the cost is :math:`O(n(|S| + m)d + n|S|m)` and the memory
    linear in :math:`n`.

    ``variant="plain"`` returns :math:`\hat N_n/\hat Z_n`: numerator and normaliser unbiased for
    unbiased features, the output consistent with bias :math:`O(1/m)`. The exact terms break the
    cancellation between the numerator's and the normaliser's errors that makes RFA's ratio
    accurate (the error is :math:`\sum_{j\in R}\delta_j(v_j-a_n)/Z_n` with :math:`a_n` the
    *whole* output, not the remainder's mean), so on weakly local data it can be worse than RFA
    at equal cost (docs page *Sparse + random features*).

    ``variant="ratio"`` keeps the cancellation: the support's share of the mass is estimated by
    the same random features as the remainder's, and the support's exact mean output
    :math:`\mu^S_n = E_n/Z^{ex}_n` replaces its random-feature estimate,

    .. math::

        \widehat{\mathrm{Attn}}(q_n) = \frac{\hat Z^{rf}_{S,n}\,\mu^S_n + \hat N^{rf}_{R,n}}
        {\hat Z^{rf}_{S,n} + \hat R_n},\qquad
        \hat Z^{rf}_{S,n} = \phi(q_n)^\top\sum_{j\in S(n)}\phi(k_j),

    i.e. RFA with the values of the support keys replaced by :math:`\mu^S_n`. It is exact when
    the support holds every key, equals RFA for an empty support, and is consistent (bias
    :math:`O(1/m)`), not unbiased. Its ``numerator_values``/``denominator_values`` are the
    output times, and the unbiased normaliser :math:`\hat Z_n` of the plain variant.

    Supports (their union): ``window=w``: keys with :math:`|n - j| \le w` (causal:
    :math:`n - w \le j \le n`); ``n_global=g``: the first ``g`` keys ("attention sinks");
    ``lsh_buckets=b``: keys in the query's angular-LSH bucket (Reformer hashing: one random
    rotation, bucket :math:`\arg\max[xR, -xR]` of the unit-normalised rows; Kitaev, Kaiser &
    Levskaya (ICLR 2020)), padded to the largest bucket. Causal: support and remainder only over
    :math:`j \le n`; padded keys are in neither. Rows whose support holds every key they may see
    get exact softmax attention (the remainder is set to 0, not computed by subtraction).

    Limits of the plain variant: at large query/key norms the random-feature remainder is
    heavy-tailed (unbiased, but typically far below its mean), so the exact support mass
    dominates every draw and the row returns about the support's exact mean; and the remainder
    is a difference of random-feature sums, so it can be lost to round-off (for positive maps a
    non-positive remainder is set to 0; such rows are counted and an
    :class:`~rfkit.exceptions.IllConditionedWarning` is emitted). The ratio variant weighs the
    support by a mass estimated on the same scale as the remainder's and has neither limit.

    Keys chosen by content and sampled remainders (docs page *Attention estimators*, section
    "Hybrid: keys by content, sampled remainders"): ``top_k=t`` adds to the support, per query,
    the ``t`` keys it may see, outside the window, sinks and LSH buckets, with the highest score
    of ``scorer`` (:mod:`rfkit.attention._scorers`: ``"oracle"`` exact logits, ``"proxy"`` a
    summary of recent queries as in H2O, ``"quest"`` Quest's block bounds, ``"lsh"`` MagicPIG's
    collision counts). ``remainder`` says what becomes of the other keys :math:`R(n)`:
    ``"features"`` (the random features above; the default with a feature map), ``"none"``
    (dropped: a biased sparse estimator), or ``n_samples=s`` exact logits of remainder keys drawn
    ``"uniform"`` (without replacement, Horvitz-Thompson), ``"stratified"`` (one key in each of
    :math:`s` contiguous strata) or by ``"importance"`` (with replacement from the scorer's softmax
    mixed with uniform by ``proposal_mix``), as in vAttention (Desai et al., arXiv 2510.05688)
    (:mod:`rfkit.attention._remainder`). The sampled numerator and normaliser are unbiased and
    rows with :math:`s \ge N_R` are exact. The result's ``cost`` (:class:`QueryCost`) counts, per
    query, the exact logits (support, samples, oracle scores), random features, values read and
    scoring products. Every remainder computes on every backend, with the same draws (NumPy's
    uniforms) and numbers as on NumPy, and gradients flow through the kept keys' logits and values
    for a fixed draw; so does an ``(epsilon, delta)`` budget (the same sample counts as on NumPy
    for the same ``rng``).

    Parameters
    ----------
    feature_map : FeatureMap, optional
        Any rfkit feature map (as :class:`RFA`; data-dependent maps are fitted as ``fit_on`` says).
        Required by ``remainder="features"``; must be None with the other remainders.
    window : int, optional
        Half-width of the sliding window (>= 0); None: no window.
    n_global : int, default=0
        Number of leading keys every query computes exactly.
    lsh_buckets : int, optional
        Number of angular-LSH buckets (even, >= 2); None: no hashing.
    variant : {"plain", "ratio"}, default="plain"
    causal : bool, default=False
        As for :class:`RFA`.
    shared_across_heads : bool, default=True
        As for :class:`RFA`.
    chunk_size, n_threads : int, optional
        As for :class:`RFA` (passed to its global sums).
    fit_on : {"all", "remainder"}, default="all"
        The query-key pairs a data-dependent map (OPRF, SADERF, ADERF, SDERF, CEXP/HCEXP rules,
        ...) is fitted on. ``"all"``: as :class:`RFA` fits it (the map's own ``fit_pairs``).
        ``"remainder"``: only the pairs the random features estimate in the plain variant, the
        pairs each query may see (causal: :math:`j \le n`; padded keys never) minus its support,
        within each sequence (:func:`rfkit.features.fit_to_pairs` with ``exclude=`` the support;
        pair-weighted moments in linear memory; the hyperbolic OPRF and GERF ``s=-1`` list the
        pairs' values, O(nM) per sequence). Needs ``shared_across_heads=True`` and a map whose
        ``fit`` takes a pair selection (rfkit's own). With ``lsh_buckets`` the LSH rotation is then
        drawn before the features (the fit needs the support), so draws differ from
        ``fit_on="all"`` with the same seed. Where the support holds every key the map is fitted
        on all pairs (its features are not used). The ratio variant also estimates the
        support's mass with the features, so ``"all"`` may suit it better.
    top_k : int, optional
        Keys (>= 1) each query adds to its support by ``scorer``; None: none.
    scorer : {"oracle", "proxy", "quest", "lsh"}, optional
        Ranks keys for ``top_k`` and gives the proxy logits of the ``"importance"`` proposal;
        required by either, refused otherwise.
    remainder : {"features", "none", "uniform", "stratified", "importance"}, optional
        How the keys outside the support enter (default ``"features"``, which needs
        ``feature_map``).
    n_samples : int, optional
        Exact logits of remainder keys per query (>= 1) for the sampled remainders.
    proposal_mix : float, default=0.1
        Uniform share :math:`\lambda \in (0, 1]` of the importance proposal.
    refresh : int, default=16
        Tokens per refresh period of the ``"proxy"`` scorer's query summary.
    block_size : int, default=16
        Keys per block of the ``"quest"`` scorer.
    n_hashes : int, default=4
        Rotations of the ``"lsh"`` scorer (each of ``lsh_buckets`` buckets, default 8).
    epsilon, delta : float, optional
        An (ε, δ) budget of the ``"uniform"`` remainder (:mod:`rfkit.attention._budget`, docs
        section "(ε, δ) budgets"): per query, the count of sampled keys that makes
        :math:`\lVert\hat a - a\rVert \le \varepsilon\lVert a\rVert` with probability about
        :math:`\ge 1-\delta` by the CLT; ε in (0, 1), δ in (0, 0.2]. ``n_samples`` must then be None.
    base_samples : int, optional
        Keys (>= 2) of the base sample that estimates the variance; required with ``epsilon``.
    max_samples : int, optional
        Most sampled keys per query (>= ``base_samples``); None: up to the whole remainder.
    budget_rule : {"normal", "t", "upper"}, default="normal"
        The count's rule: ``"normal"`` the CLT with the base sample's variance (as vAttention),
        ``"t"`` Student's t with ``base_samples - 1`` degrees of freedom (Stein's two-stage rule),
        ``"upper"`` a chi-square upper bound of the variance (the conservative correction).
        With a budget the cost counts are per draw: (T, ..., n) with ``n_draws=T``.

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> rng = np.random.default_rng(0)
    >>> Q, K, V = 0.3 * rng.normal(size=(3, 2, 32, 8))
    >>> est = rk.attention.Hybrid(rk.features.Positive(16), window=4, n_global=2, causal=True)
    >>> est(Q, K, V, rng=0).output.shape
    (2, 32, 8)
    >>> sampled = rk.attention.Hybrid(window=2, top_k=4, scorer="proxy", remainder="uniform", n_samples=8)
    >>> sampled(Q, K, V, rng=0).cost.exact_logits[0, :3]
    array([15., 16., 17.])
    """

    feature_map: FeatureMap | None = None
    window: int | None = None
    n_global: int = 0
    lsh_buckets: int | None = None
    variant: str = "plain"
    causal: bool = False
    shared_across_heads: bool = True
    chunk_size: int | None = None
    n_threads: int | None = None
    fit_on: str = "all"
    top_k: int | None = None
    scorer: str | None = None
    remainder: str | None = None
    n_samples: int | None = None
    proposal_mix: float = 0.1
    refresh: int = 16
    block_size: int = 16
    n_hashes: int = 4
    epsilon: float | None = None
    delta: float | None = None
    base_samples: int | None = None
    max_samples: int | None = None
    budget_rule: str = "normal"

    def __post_init__(self) -> None:
        check_content_options(self)
        check_budget_options(self)
        if self.feature_map is not None:
            check_feature_map_field(self, "Hybrid")
        check_shared_options(self, "Hybrid")
        if self.window is not None:
            object.__setattr__(self, "window", check_int(self.window, "window", "Hybrid", low=0))
        object.__setattr__(self, "n_global", check_int(self.n_global, "n_global", "Hybrid", low=0))
        if self.lsh_buckets is not None:
            b = check_int(self.lsh_buckets, "lsh_buckets", "Hybrid", low=2)
            if b % 2:
                raise InvalidParameterError(
                    f"The `lsh_buckets` parameter of Hybrid must be an even int >= 2 (buckets come in "
                    f"pairs [xR, -xR]). Got {b} instead."
                )
            object.__setattr__(self, "lsh_buckets", b)
        check_option(self.variant, "variant", "Hybrid", HYBRID_VARIANTS)
        check_option(self.fit_on, "fit_on", "Hybrid", HYBRID_FIT_ON)

    @property
    def is_random(self) -> bool:
        """Whether a call draws random numbers: LSH (buckets or scorer), a sampled remainder, or the
        features of a random map. False: the output does not depend on ``rng``."""
        if self.lsh_buckets is not None or self.scorer == "lsh":
            return True
        if self.remainder == "features":
            return bool(getattr(self.feature_map, "is_random", True))
        return self.remainder != "none"

    def support(self, x: QKV, gen: np.random.Generator) -> tuple[Any, Any]:
        """Padded support ``(idx, valid)`` of shape (S, n, s), S = 1 or the number of slices.

        Built in the call's namespace and on its device (the LSH rotation, a NumPy draw, is moved
        there once); nothing of ``Q``, ``K`` or the mask is copied to the host. With ``top_k`` the
        scorer's keys are added (S is then the number of slices); the ``"lsh"`` scorer draws its
        rotations after the support's.
        """
        return self._support(x, gen)[:2]

    def _support(self, x: QKV, gen: np.random.Generator) -> tuple[Any, Any, Scorer | None]:
        """The support and the call's scorer (None where neither ``top_k`` nor importance needs one)."""
        idx, valid = self._base_support(x, gen)
        if self.scorer is None:
            return idx, valid, None
        scorer = Scorer(self, x, gen)
        if self.top_k is not None:
            budget = max(_BLOCK_ELEMS, x.bk.row_block_elems)
            idx, valid = union_support([(idx, valid), top_k_support(scorer, idx, valid, budget)])
        return idx, valid, scorer

    def _base_support(self, x: QKV, gen: np.random.Generator) -> tuple[Any, Any]:
        """Window, sinks and LSH buckets."""
        n, M, bk = x.n_queries, x.n_keys, x.bk
        xp = bk.xp
        parts = []
        if self.window is not None:
            parts.append(window_support(n, M, self.window, self.causal, bk))
        if self.n_global:
            parts.append(sink_support(n, M, self.n_global, bk))
        if self.lsh_buckets is not None:
            R = bk.asarray(gen.standard_normal((x.dim, self.lsh_buckets // 2)), dtype=xp.float64)
            parts.append(lsh_support(lsh_codes(x.Q, R), lsh_codes(x.K, R), self.lsh_buckets))
        if not parts:
            return (
                xp.zeros((1, n, 0), dtype=xp.int64, device=bk.device),
                xp.zeros((1, n, 0), dtype=xp.bool, device=bk.device),
            )
        idx, valid = union_support(parts)
        if x.mask is not None:
            S, s = x.n_slices, int(idx.shape[-1])
            idx = xp.broadcast_to(idx, (S, n, s))
            padded = xp.take_along_axis(x.mask, xp.reshape(idx, (S, n * s)), axis=1)
            valid = valid & ~xp.reshape(padded, (S, n, s))
        if self.causal:
            valid = valid & (idx <= xp.arange(n, dtype=xp.int64, device=bk.device)[:, None])
        return idx, valid

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

        Arguments as for :meth:`RFA.__call__`; ``rng`` also draws the LSH rotation (after the
        features). Returns an :class:`AttentionResult` with ``method="Hybrid"``.
        """
        x = check_qkv(Q, K, V, "Hybrid", causal=self.causal, key_padding_mask=key_padding_mask)
        gen = check_rng(rng)
        if self.remainder != "features":
            return self._sampled(x, gen, n_draws, draw)
        fm, early = self._fit_remainder(x, gen, draw)
        rfa = RFA(fm, self.causal, self.shared_across_heads, self.chunk_size, self.n_threads)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NonPositiveNormalizerWarning)
            res = rfa(Q, K, V, rng=gen, n_draws=n_draws, key_padding_mask=key_padding_mask, draw=draw)
        idx, valid = self.support(x, gen) if early is None else early
        cost = self._cost(x, valid, None)
        draws = res.draw if isinstance(res.draw, tuple) else (res.draw,)
        T = draws[0].n_draws
        pre = () if T is None else (T,)
        B, n, dv = x.n_slices, x.n_queries, x.value_dim
        xp, bk = x.xp, x.bk
        s_glob = xp.reshape(res.log_scale, pre + (B, n))
        num_g = xp.reshape(res.numerator_values, pre + (B, n, dv))
        den_g = xp.reshape(res.denominator_values, pre + (B, n))
        if idx.shape[-1] == 0:
            if res.n_nonpositive:
                _warn(res.n_nonpositive, tuple(res.output.shape[:-1]))
            return dataclasses.replace(res, method="Hybrid", estimator=self, cost=cost)
        log_scale = bk.empty(pre + (B, n), x.dtype)
        num = bk.empty(pre + (B, n, dv), x.dtype)
        den = bk.empty(pre + (B, n), x.dtype)
        ratio_num = bk.empty(pre + (B, n, dv), x.dtype) if self.variant == "ratio" else None
        ratio_den = bk.empty(pre + (B, n), x.dtype) if self.variant == "ratio" else None
        h = len(draws)
        visible = _visible(x, self.causal)
        n_lost = 0
        for j, dr in enumerate(draws):
            sl = slice(j, None, h)
            job = _Group(self, x, dr, sl, idx, valid, visible, pre)
            for rs in job.row_blocks():
                out = job.block(rs, s_glob[..., sl, rs], num_g[..., sl, rs, :], den_g[..., sl, rs])
                log_scale[..., sl, rs], num[..., sl, rs, :], den[..., sl, rs] = out[:3]
                if ratio_num is not None and ratio_den is not None:
                    ratio_num[..., sl, rs, :], ratio_den[..., sl, rs] = out[3:]
            n_lost += job.n_lost
        if n_lost:
            warnings.warn(
                f"Hybrid: in {n_lost} query rows the random-feature terms of the support exceed the "
                "remainder's so far that the remainder (their difference) is lost to round-off; those rows "
                "are close to the support's exact mean. Use variant='ratio', float64, or smaller inputs.",
                IllConditionedWarning,
                stacklevel=2,
            )
        if ratio_num is None or ratio_den is None:
            output, nbad = finish_ratio(log_scale, num, den)
        else:
            output, nbad = finish_ratio(log_scale, ratio_num, ratio_den)
            num = output * den[..., None]
        if nbad:
            _warn(nbad, tuple(output.shape[:-1]))
        return dataclasses.replace(
            res,
            output=x.unflatten(output, pre),
            method="Hybrid",
            estimator=self,
            log_scale=x.unflatten(log_scale, pre),
            numerator_values=x.unflatten(num, pre),
            denominator_values=x.unflatten(den, pre),
            n_nonpositive=nbad,
            cost=cost,
        )

    def _sampled(self, x: QKV, gen: np.random.Generator, n_draws: Any, draw: Any) -> AttentionResult:
        """Remainder ``"none"``, ``"uniform"``, ``"stratified"`` or ``"importance"``: no features."""
        if draw is not None:
            raise InvalidParameterError(
                f"Hybrid(remainder={self.remainder!r}) draws no features: the `draw` argument is only "
                f"for remainder='features'. Got a {type(draw).__name__} instead."
            )
        T = None if n_draws is None else check_int(n_draws, "n_draws", "Hybrid", low=1)
        idx, valid, scorer = self._support(x, gen)
        budget = max(_BLOCK_ELEMS, x.bk.row_block_elems)
        if self.epsilon is None:
            log_scale, num, den, n_sampled = sampled_attention(self, x, idx, valid, scorer, gen, T, budget)
        else:
            log_scale, num, den, n_sampled = budgeted_attention(self, x, idx, valid, gen, T, budget)
        output, nbad = finish_ratio(log_scale, num, den)
        if nbad:
            _warn(nbad, tuple(output.shape[:-1]))
        pre = () if T is None else (T,)
        return AttentionResult(
            output=x.unflatten(output, pre),
            method="Hybrid",
            estimator=self,
            log_scale=x.unflatten(log_scale, pre),
            numerator_values=x.unflatten(num, pre),
            denominator_values=x.unflatten(den, pre),
            n_nonpositive=nbad,
            cost=self._cost(x, valid, n_sampled, pre if self.epsilon is not None else ()),
        )

    def _cost(self, x: QKV, valid: Any, n_sampled: Any, pre: tuple[int, ...] = ()) -> QueryCost:
        """Per-query counts (see :class:`~rfkit.attention.QueryCost`), shaped ``pre`` + (..., n)."""
        xp, B, n = x.xp, x.n_slices, x.n_queries
        support = xp.astype(xp.broadcast_to(xp.sum(xp.astype(valid, xp.int64), axis=-1), (B, n)), x.dtype)
        visible = xp.astype(xp.broadcast_to(_visible(x, self.causal), (B, n)), x.dtype)
        scored, products = scoring_cost(self, x, visible)
        sampled = xp.zeros_like(support) if n_sampled is None else n_sampled
        m = 0.0
        if self.remainder == "features" and self.feature_map is not None:
            m = float(getattr(self.feature_map, "n_features", None) or self.feature_map.feature_dim(x.dim))
        full = xp.zeros(pre + (B, n), dtype=x.dtype, device=x.bk.device)  # budgets: per draw
        return QueryCost(
            exact_logits=x.unflatten(full + support + sampled + scored, pre),
            random_features=x.unflatten(full + m, pre),
            values_read=x.unflatten(full + support + sampled, pre),
            scoring_products=x.unflatten(full + products, pre),
        )

    def _fit_remainder(
        self, x: QKV, gen: np.random.Generator, draw: FeatureDraw | None
    ) -> tuple[FeatureMap, tuple[np.ndarray, np.ndarray] | None]:
        """``fit_on="remainder"``: the map fitted on the visible pairs minus the support, and the support."""
        fm = self.feature_map
        assert fm is not None  # remainder="features" needs a map (checked at creation)
        if self.fit_on == "all" or draw is not None or not fm.needs_data:
            return fm, None
        if not self.shared_across_heads:
            raise InvalidParameterError(
                "Hybrid(fit_on='remainder') fits one map on the remainder of every head: it needs "
                "shared_across_heads=True (or fit_on='all' to fit each head's map on its pairs). "
                "Got shared_across_heads=False."
            )
        support = self.support(x, gen)  # drawn before the features: the fit needs it
        idx, valid = support
        if not np.any(valid.sum(axis=-1) < _visible(x, self.causal)):
            return fm, support  # no remainder: the features are not used, RFA fits on all pairs
        fitted = fit_to_pairs(
            fm,
            x.Q,
            x.K,
            pairs="causal" if self.causal else "sequence",
            key_padding_mask=x.mask,
            exclude=support,
        )
        return fitted, support


def _warn(nbad: int, shape: tuple[int, ...]) -> None:
    hint = "use Positive/OPRF features or more features."
    warnings.warn(
        nonpositive_message("Hybrid", nbad, shape, hint), NonPositiveNormalizerWarning, stacklevel=3
    )


def _visible(x: QKV, causal: bool) -> Any:
    """Number of keys each query may see (int64, on the call's device): (S, 1) bidirectionally, (S, n) causally."""
    n, M, xp, dev = x.n_queries, x.n_keys, x.xp, x.bk.device
    if x.mask is None:
        if causal:
            return (xp.arange(n, dtype=xp.int64, device=dev) + 1)[None, :]
        return xp.full((1, 1), M, dtype=xp.int64, device=dev)
    keep = xp.astype(~x.mask, xp.int64)
    if causal:
        return xp.cumulative_sum(keep, axis=1)[:, :n]
    return xp.sum(keep, axis=1, keepdims=True)


class _Group:
    """The slices of one feature draw: support terms row block by row block."""

    def __init__(
        self,
        est: Hybrid,
        x: QKV,
        dr: FeatureDraw,
        sl: slice,
        idx: Any,
        valid: Any,
        visible: Any,
        pre: tuple[int, ...],
    ) -> None:
        bk, xp = x.bk, x.xp
        self.bk, self.x, self.pre, self.variant = bk, x, pre, est.variant
        self.positive = bool(dr.spec.is_positive)
        self.Q, K, V = x.Q[sl, ...], x.K[sl, ...], x.V[sl, ...]
        g, M = int(self.Q.shape[0]), x.n_keys
        self.g, self.M = g, M
        self.idx = xp.broadcast_to(idx[sl, ...] if idx.shape[0] > 1 else idx, (g,) + tuple(idx.shape[1:]))
        self.valid = xp.broadcast_to(
            valid[sl, ...] if valid.shape[0] > 1 else valid, (g,) + tuple(valid.shape[1:])
        )
        vis = visible[sl, ...] if visible.shape[0] > 1 else visible
        n_valid = xp.sum(xp.astype(self.valid, xp.int64), axis=-1)
        self.covered = n_valid == xp.broadcast_to(vis, (g, x.n_queries))
        self.Kf = xp.reshape(K, (g * M, x.dim))
        self.Vf = xp.reshape(V, (g * M, x.value_dim))
        fk = dr.features(K, "key")
        D = int(fk.values.shape[-1])
        self.D = D
        self.uk = xp.reshape(fk.values, pre + (g * M, D))
        self.lk = xp.reshape(fk.log_scale, pre + (g * M,))
        fq = dr.features(self.Q, "query")
        self.uq, self.lq = fq.values, fq.log_scale
        self.neg = xp.asarray(-math.inf, dtype=x.dtype, device=bk.device)
        self.eps = float(bk.finfo(x.dtype).eps)
        self.n_lost = 0

    def row_blocks(self) -> list[slice]:
        s = self.idx.shape[-1]
        per_row = self.g * s * (self.D + self.x.dim + self.x.value_dim) * max(1, math.prod(self.pre))
        # accelerators: blocks of row_block_elems (2^26) elements, few kernel launches; CPUs: cache-sized
        step = max(1, max(_BLOCK_ELEMS, self.bk.row_block_elems) // max(per_row, 1))
        n = self.x.n_queries
        return [slice(a, min(n, a + step)) for a in range(0, n, step)]

    def block(self, rs: slice, s_glob: Any, num_g: Any, den_g: Any) -> tuple[Any, ...]:
        bk, xp, x = self.bk, self.x.xp, self.x
        g, s = self.g, self.idx.shape[-1]
        idx = self.idx[:, rs, :]
        r = int(idx.shape[1])
        base = xp.arange(g, dtype=xp.int64, device=bk.device)[:, None, None] * self.M
        gi = xp.reshape(base + idx, (-1,))
        vb = self.valid[:, rs, :]
        cov = self.covered[:, rs]
        Kg = xp.reshape(xp.take(self.Kf, gi, axis=0), (g, r, s, x.dim))
        Vg = xp.reshape(xp.take(self.Vf, gi, axis=0), (g, r, s, x.value_dim))
        a = xp.where(vb, (Kg @ self.Q[:, rs, :, None])[..., 0], self.neg)  # exact logits (g, r, s)
        ukg = xp.reshape(xp.take(self.uk, gi, axis=-2), self.pre + (g, r, s, self.D))
        lkg = xp.reshape(xp.take(self.lk, gi, axis=-1), self.pre + (g, r, s))
        dot = (ukg @ self.uq[..., rs, :, None])[..., 0]
        lrf = xp.where(vb, self.lq[..., rs, None] + lkg, self.neg)
        # exact part on its own shift c_ex, random-feature parts on c_rf >= the global log scale
        c_ex = xp.max(a, axis=-1)
        c_ex0 = xp.where(xp.isfinite(c_ex), c_ex, xp.zeros_like(c_ex))
        wex = xp.exp(a - c_ex0[..., None])
        z_ex = xp.sum(wex, axis=-1)
        e_ex = (wex[..., None, :] @ Vg)[..., 0, :]
        c_rf = xp.maximum(s_glob, xp.max(lrf, axis=-1))
        wrf = xp.where(vb, xp.exp(lrf - c_rf[..., None]) * dot, xp.zeros_like(dot))
        z_s = xp.sum(wrf, axis=-1)
        n_s = (wrf[..., None, :] @ Vg)[..., 0, :]
        f = xp.exp(s_glob - c_rf)
        rem = den_g * f - z_s
        n_rem = num_g * f[..., None] - n_s
        drop = cov if not self.positive else cov | (rem <= 0)
        rem = xp.where(drop, xp.zeros_like(rem), rem)
        n_rem = xp.where(drop[..., None], xp.zeros_like(n_rem), n_rem)
        c = xp.maximum(c_rf, c_ex)
        fe, fr = xp.exp(c_ex - c), xp.exp(c_rf - c)
        zero = z_ex == 0
        fe = xp.where(zero, xp.zeros_like(fe), fe)  # no exact key in this row (c_ex = -inf)
        Z = z_ex * fe + rem * fr
        N = e_ex * fe[..., None] + n_rem * fr[..., None]
        if self.variant == "plain":
            # rows whose remainder (a difference of random-feature sums) is lost to round-off
            noise = 64.0 * self.eps * xp.abs(den_g * f) * fr
            self.n_lost += bk.count(~cov & (noise > 1e-3 * xp.abs(Z)))
            return c, N, Z
        mu = e_ex / xp.where(zero, xp.ones_like(z_ex), z_ex)[..., None]
        r_den = z_s + rem
        r_num = z_s[..., None] * mu + n_rem
        one = xp.ones_like(r_den)
        r_num = xp.where(cov[..., None], mu + xp.zeros_like(r_num), r_num)
        r_den = xp.where(cov, one, r_den)
        return c, N, Z, r_num, r_den
