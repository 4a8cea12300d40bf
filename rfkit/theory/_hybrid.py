r"""Delta-method bias and variance of hybrid (sparse + random-feature) attention, and the budget split.

Hybrid attention (Chen, Dao et al. (NeurIPS 2021), "Scatterbrain") computes the keys of a
support :math:`S` exactly and the rest :math:`R` with random features. Both variants of
:class:`rfkit.attention.Hybrid` are ratios :math:`\hat o = \hat N/\hat Z` whose errors are sums
:math:`\delta\hat Z = \sum_j w_j\delta_j`, :math:`\delta\hat N - a\,\delta\hat Z =
\sum_j u_j\delta_j` of the centred kernel estimates :math:`\delta_j`:

* plain: :math:`w = \mathbb 1_R`, :math:`u_j = (v_j - a)\mathbb 1_R(j)`;
* ratio: :math:`w = \mathbb 1`, :math:`u_j = v'_j - a` with :math:`v'_j = \mu^S` on the
  support (its exact mean output) and :math:`v_j` elsewhere.

The delta method for a ratio estimator (Owen (2013), ch. 9) gives, per output coordinate,

.. math:: \mathrm{Bias} \approx -\frac{w^\top \mathrm{Cov}(\delta) u}{Z^2},\qquad
    \mathrm{Var} \approx \frac{u^\top \mathrm{Cov}(\delta) u}{Z^2},\qquad
    \mathrm{Cov}(\delta) = \frac Cm + \frac{K(m)}{m^2}P,

with remainders :math:`O(m^{-2})` (:mod:`rfkit.theory._delta`; the cross-key covariances
:math:`C`, :math:`P` of every map with a closed form in :mod:`rfkit.theory._pairwise`). For the
ratio variant :math:`\sum_j\kappa_ju_j = 0` (the cancellation of RFA); for the plain variant
:math:`\sum_{j\in R}\kappa_j(v_j-a) = N_R - aR \ne 0` in general, which is the cost of the
exact terms. Derivation: docs page *Sparse + random features*, section "Theory".
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from .._validation import check_int, host_float_array
from ..exceptions import InvalidParameterError, OutOfDomainWarning, ShapeError
from ._delta import (
    DOMAIN_REL_VAR,
    RFADeltaMethod,
    check_variant,
    coefficients_many,
    delta_method,
    normalised_moments,
)

__all__ = ["hybrid_delta_method", "hybrid_budget_split", "HybridSplit"]

_OWNER = "hybrid_delta_method"


def hybrid_delta_method(
    q: Any,
    K: Any,
    V: Any,
    exact: Any = None,
    variant: str = "plain",
    *,
    feature_map: Any = None,
    n_features: int | None = None,
) -> RFADeltaMethod:
    r"""Delta-method bias and variance of hybrid attention for one query: :func:`rfa_delta_method` with ``exact``.

    .. math::

        \mathrm{Bias}\approx -\frac{w^\top\mathrm{Cov}(\delta) u}{Z^2},\qquad
        \mathrm{Var}\approx \frac{u^\top\mathrm{Cov}(\delta) u}{Z^2},\qquad
        \mathrm{Cov}(\delta) = \frac{C}{m} + \frac{K(m)}{m^2}P,

    per output coordinate, with :math:`w`, :math:`u` as in the module docstring (plain:
    :math:`w=\mathbb 1_R`, :math:`u = (v - a)\mathbb 1_R`; ratio: :math:`w=\mathbb 1`,
    :math:`u = v' - a`). Source: the ratio-estimator delta method (Owen (2013), ch. 9) applied
    to the estimator of Chen, Dao et al. (NeurIPS 2021); derived in docs page *Sparse + random
    features*, section "Theory". Equal to ``rfa_delta_method(q, K, V, exact=exact,
    variant=variant, feature_map=feature_map)``, which documents the maps, projections
    (iid and block-orthogonal) and the domain of validity (:math:`m \gg` ``moment_ratio``;
    neglected terms :math:`O(m^{-2})`).

    Parameters
    ----------
    q : array_like (d,)
        One query.
    K : array_like (M, d)
        The keys it sees.
    V : array_like (M,) or (M, dv)
        Values.
    exact : array_like of bool (M,), optional
        True for the keys computed exactly (the support); None: none (RFA).
    variant : {"plain", "ratio"}, default="plain"
    feature_map : FeatureMap, optional
        None: :class:`~rfkit.features.Positive` with iid directions.
    n_features : int, optional
        A feature count ``m`` (>= 1): the result records it and whether it is inside the
        expansion's domain, and an :class:`~rfkit.exceptions.OutOfDomainWarning` is emitted
        when it is not.

    Returns
    -------
    RFADeltaMethod
        The first-order coefficients (:meth:`RFADeltaMethod.mse` and friends evaluate them at
        any ``m``).

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> rng = np.random.default_rng(0)
    >>> q, K, V = 0.3 * rng.normal(size=8), 0.3 * rng.normal(size=(20, 8)), rng.normal(size=(20, 2))
    >>> mask = np.arange(20) < 5
    >>> dm = rk.theory.hybrid_delta_method(q, K, V, exact=mask, variant="ratio")
    >>> bool(np.all(dm.mse(64) < rk.theory.rfa_delta_method(q, K, V).mse(64)))
    True
    """
    return delta_method(q, K, V, exact, variant, feature_map, _OWNER, n_features)


@dataclasses.dataclass(frozen=True)
class HybridSplit:
    r"""Predicted MSE of each split of a per-query budget between a window and features.

    Parameters
    ----------
    windows : ndarray of int
        Candidate half-widths ``w`` (-1 stands for no window, i.e. RFA with ``m = budget``).
    n_features : ndarray of int
        ``m = budget - (2w + 1)`` (causal: ``budget - (w + 1)``).
    mse : ndarray
        Predicted output MSE (first-order variance plus squared first-order bias), averaged over
        queries and output coordinates.
    best_window : int
        The window of the smallest predicted MSE (``inf`` where a prediction exceeds float64).
    in_domain : ndarray of bool
        True where the candidate's prediction is inside the delta method's domain for every query
        (:meth:`RFADeltaMethod.within_domain`); False ones are also announced by an
        :class:`~rfkit.exceptions.OutOfDomainWarning`.
    """

    windows: np.ndarray
    n_features: np.ndarray
    mse: np.ndarray
    best_window: int
    in_domain: np.ndarray | None = None


def hybrid_budget_split(
    Q: Any,
    K: Any,
    V: Any,
    budget: int,
    windows: Any,
    variant: str = "plain",
    causal: bool = False,
    *,
    feature_map: Any = None,
) -> HybridSplit:
    r"""The split of a cost budget ``|S| + m`` between a sliding window and features, by prediction.

    For each candidate half-width ``w`` the support is the window :math:`|n-j|\le w` (causal:
    :math:`n-w\le j\le n`) and ``m = budget - (2w+1)`` (causal ``budget - (w+1)``) features of
    ``feature_map``; the predicted MSE is the mean over the queries and output coordinates of
    :func:`hybrid_delta_method`'s ``variance(m) + bias(m)**2``,

    .. math:: \mathrm{MSE}(w) = \frac1n\sum_n\Big[\frac{v_1 + v_2K(m)/m}{m}
        + \Big(\frac{b_1 + b_2K(m)/m}{m}\Big)^2\Big],\qquad m = B - |S(w)|,

    with :math:`v_2 = b_2 = 0` for iid directions and :math:`K(m)/m \approx d - 1` for
    block-orthogonal ones (:math:`m - 1` while :math:`m \le d`). No closed-form optimum exists in
    general (the coefficients depend on the data through the covariances restricted to the
    remainder, and shrink as the window grows while :math:`1/m` grows), so the optimum is found
    by minimising the prediction over the candidates; ``w = -1`` is RFA with ``m = budget``.
    Derived in docs page *Sparse + random features*, section "Theory". Domain of validity: that of
    :func:`rfa_delta_method` for every candidate and query (the estimated normaliser's relative
    variance at most 0.1); candidates outside it are flagged in ``in_domain`` and announced by
    one :class:`~rfkit.exceptions.OutOfDomainWarning`. A prediction beyond float64 is ``inf``
    (e.g. RFA when the support holds all but :math:`e^{-400}` of the mass: the window then wins).

    Cost: :math:`\Theta(nM^2)` (per query one pass, in row blocks of bounded memory, over the
    :math:`M^2` cross-key moments, which depend on the query, for all candidates at once); there is
    no exact :math:`O(n^2)` evaluation (the quadratic forms need every pair of keys of every query).
    Measured at ``n = M = 512``, ``d = 16``, ``dv = 8``, six candidates, iid features
    (2026-11-28, a shared 2-core machine, one BLAS thread, median of 3): 44.0 s (28.3-68.2 s)
    before this pass was shared by the candidates and run in blocks, 24.0 s (23.3-26.0 s) after.

    Parameters
    ----------
    Q : array_like (n, d)
    K : array_like (M, d)
        Keys, one per position (the window is over positions; causal: ``M >= n``).
    V : array_like (M, dv)
    budget : int
        Cost per query (exact keys + features).
    windows : sequence of int
        Candidate half-widths (>= -1).
    variant : {"plain", "ratio"}
    causal : bool
    feature_map : FeatureMap, optional
        None: :class:`~rfkit.features.Positive` with iid directions; e.g.
        ``Positive(1, projection="orthogonal")`` for FAVOR+'s block-orthogonal directions (its
        ``n_features`` is ignored).

    Returns
    -------
    HybridSplit
    """
    owner = "hybrid_budget_split"
    variant = check_variant(variant, owner)
    Qv = host_float_array(Q, "Q", min_ndim=2)
    Kv = host_float_array(K, "K", min_ndim=2)
    Vv = host_float_array(V, "V", min_ndim=2)
    if (
        Qv.ndim != 2
        or Kv.ndim != 2
        or Vv.ndim != 2
        or Qv.shape[1] != Kv.shape[1]
        or Vv.shape[0] != Kv.shape[0]
    ):
        raise ShapeError(
            f"{owner}: need Q (n, d), K (M, d), V (M, dv); got {Qv.shape}, {Kv.shape}, {Vv.shape}."
        )
    B = check_int(budget, "budget", owner, low=1)
    ws = np.asarray(windows).reshape(-1)
    if ws.size == 0 or ws.dtype.kind not in "iu":
        raise InvalidParameterError(
            f"The `windows` parameter of {owner} must be a non-empty sequence of ints."
        )
    ws = ws.astype(np.int64)
    per = np.where(ws < 0, 0, ws + 1 if causal else 2 * ws + 1)
    ms = B - per
    if np.any(ms < 1) or np.any(ws < -1):
        raise InvalidParameterError(
            f"{owner}: every window must be >= -1 and leave m >= 1 features of the budget "
            f"{B}. Got windows {ws.tolist()}."
        )
    n, M = Qv.shape[0], Kv.shape[0]
    j = np.arange(M)
    out = np.zeros(ws.shape[0])
    inside = np.ones(ws.shape[0], dtype=bool)
    for i in range(n):
        seen = j <= i if causal else np.ones(M, dtype=bool)
        nm = normalised_moments(feature_map, Qv[i], Kv[seen], owner)
        dist = np.abs(i - j[seen])
        masks = [dist <= w if w >= 0 else np.zeros(dist.shape[0], dtype=bool) for w in ws]
        for c, dm in enumerate(coefficients_many(nm, Vv[seen], masks, variant, owner)):
            m = int(ms[c])
            with np.errstate(over="ignore"):
                out[c] += float(np.mean(dm._variance(m) + dm._bias(m) ** 2))
            inside[c] &= bool(dm.within_domain(m))
    out /= n
    if not inside.all():
        bad = [f"w={int(w)} (m={int(m)})" for w, m, ok in zip(ws, ms, inside) if not ok]
        warnings.warn(
            f"{owner}: the delta-method predictions of {', '.join(bad)} are outside its domain for some "
            f"queries: the estimated normaliser's relative variance Var(Z_hat)/Z^2 exceeds {DOMAIN_REL_VAR:g} "
            "there (HybridSplit.in_domain is False). Their predicted MSE can be wrong by orders of magnitude.",
            OutOfDomainWarning,
            stacklevel=2,
        )
    return HybridSplit(
        windows=ws, n_features=ms, mse=out, best_window=int(ws[int(np.argmin(out))]), in_domain=inside
    )
