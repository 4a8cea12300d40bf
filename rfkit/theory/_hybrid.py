r"""Delta-method bias and variance of hybrid (sparse + random-feature) attention, and the budget split.

Hybrid attention (Chen, Dao et al. (NeurIPS 2021), "Scatterbrain") computes the keys of a
support :math:`S` exactly and the rest :math:`R` with positive random features :math:`\phi^+`.
With :math:`X_j = \xi(q,\omega)\xi(k_j,\omega)` the one-direction estimate of
:math:`\kappa_j = e^{q^\top k_j}` (:math:`\xi(x,\omega)=e^{\omega^\top x-\|x\|^2/2}`, iid
:math:`\omega\sim\mathcal N(0,I)`), the one-direction covariance is

.. math:: C_{jl} = G_{jl} - \kappa_j\kappa_l,\qquad
    G_{jl} = \mathbb E[X_jX_l] = \kappa_j\kappa_l\,e^{(q+k_j)^\top(q+k_l)}

(the matrix of :func:`rfkit.theory.rfa_delta_method`). Both variants of
:class:`rfkit.attention.Hybrid` are ratios :math:`\hat o = \hat N/\hat Z` whose errors are sums
:math:`\delta\hat Z = \sum_j w_j\delta_j`, :math:`\delta\hat N - a\,\delta\hat Z =
\sum_j u_j\delta_j` of the centred estimates :math:`\delta_j` (covariance :math:`C/m`):

* plain: :math:`w = \mathbb 1_R`, :math:`u_j = (v_j - a)\mathbb 1_R(j)`;
* ratio: :math:`w = \mathbb 1`, :math:`u_j = v'_j - a` with :math:`v'_j = \mu^S` on the
  support (its exact mean output) and :math:`v_j` elsewhere.

The delta method for a ratio estimator (Owen (2013), ch. 9) gives, per output coordinate,

.. math:: \mathrm{Bias} \approx -\frac{w^\top C u}{m Z^2},\qquad
    \mathrm{Var} \approx \frac{u^\top C u}{m Z^2},

with remainders :math:`O(m^{-2})`. For the ratio variant :math:`\sum_j\kappa_ju_j = 0`, so
:math:`C` may be replaced by :math:`G` (the cancellation of RFA); for the plain variant
:math:`\sum_{j\in R}\kappa_j(v_j-a) = N_R - aR \ne 0` in general, which is the cost of the
exact terms. Derivation: docs page *Sparse + random features*, section "Theory".
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._validation import host_float_array
from ..exceptions import InvalidParameterError
from ._ratio import RFADeltaMethod, query_keys_values
from ._special import scipy_special

__all__ = ["hybrid_delta_method", "hybrid_budget_split", "HybridSplit"]

_OWNER = "hybrid_delta_method"


def hybrid_delta_method(q: Any, K: Any, V: Any, exact: Any = None, variant: str = "plain") -> RFADeltaMethod:
    r"""Delta-method bias and variance of hybrid attention for one query, as functions of ``m``.

    .. math::

        \mathrm{Bias}\approx -\frac{w^\top C u}{m Z^2},\qquad
        \mathrm{Var}\approx \frac{u^\top C u}{m Z^2},\qquad C = G - \kappa\kappa^\top,

    per output coordinate, with :math:`w`, :math:`u` as in the module docstring (plain:
    :math:`w=\mathbb 1_R`, :math:`u = (v - a)\mathbb 1_R`; ratio: :math:`w=\mathbb 1`,
    :math:`u = v' - a`). Source: the ratio-estimator delta method (Owen (2013), ch. 9) applied
    to the estimator of Chen, Dao et al. (NeurIPS 2021); derived in docs page *Sparse + random
    features*, section "Theory". With no exact key both variants reduce to
    :func:`rfkit.theory.rfa_delta_method`.

    Domain of validity: positive random features :math:`\phi^+` with **iid** Gaussian directions
    (orthogonal directions have a smaller variance, not covered here), and
    :math:`m \gg` ``moment_ratio`` (the relative second moment
    :math:`w^\top G w/(w^\top\kappa)^2` of the estimated mass); the neglected terms are
    :math:`O(m^{-2})`.

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

    Returns
    -------
    RFADeltaMethod
        ``attention`` (exact output), ``bias_coef`` and ``var_coef`` (bias and variance times
        ``m``), ``moment_ratio``; ``.mse(m)`` gives the first-order MSE.

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
    if variant not in ("plain", "ratio"):
        raise InvalidParameterError(
            f"The `variant` parameter of {_OWNER} must be one of 'plain', 'ratio'. Got {variant!r} instead."
        )
    qv, Kv, V2, scalar = query_keys_values(q, K, V, _OWNER)
    M = Kv.shape[0]
    ex = np.zeros(M, dtype=bool) if exact is None else np.asarray(exact)
    if ex.dtype != bool or ex.shape != (M,):
        raise InvalidParameterError(
            f"The `exact` parameter of {_OWNER} must be a boolean array of shape ({M},). "
            f"Got {getattr(ex, 'dtype', type(ex))} of shape {getattr(ex, 'shape', None)} instead."
        )
    s = Kv @ qv
    logZ = scipy_special().logsumexp(s)
    p = np.exp(s - logZ)  # kappa / Z
    a = p @ V2
    Gn = np.exp(qv @ qv + 2.0 * s[:, None] + 2.0 * s[None, :] + Kv @ Kv.T - 2.0 * logZ)  # G / Z^2
    Cn = Gn - np.outer(p, p)
    rem = ~ex
    if variant == "plain":
        w = rem.astype(np.float64)
        U = (V2 - a[None, :]) * w[:, None]
    else:
        w = np.ones(M)
        Vp = V2.copy()
        if ex.any():
            Vp[ex] = (p[ex] @ V2[ex]) / p[ex].sum()
        U = Vp - a[None, :]
    bias_coef = -(w @ Cn @ U)
    var_coef = np.einsum("md,mn,nd->d", U, Cn, U)
    mass = float(w @ p)
    ratio = float(w @ Gn @ w) / mass**2 if mass > 0 else 0.0
    if scalar:
        a, bias_coef, var_coef = a[:1], bias_coef[:1], var_coef[:1]
    return RFADeltaMethod(
        attention=a, bias_coef=bias_coef, var_coef=np.maximum(var_coef, 0.0), moment_ratio=ratio
    )


@dataclasses.dataclass(frozen=True)
class HybridSplit:
    r"""Predicted MSE of each split of a per-query budget between a window and features.

    Attributes
    ----------
    windows : ndarray of int
        Candidate half-widths ``w`` (-1 stands for no window, i.e. RFA with ``m = budget``).
    n_features : ndarray of int
        ``m = budget - (2w + 1)`` (causal: ``budget - (w + 1)``).
    mse : ndarray
        Predicted output MSE (first-order variance plus squared first-order bias), averaged over
        queries and output coordinates.
    best_window : int
        The window of the smallest predicted MSE.
    """

    windows: np.ndarray
    n_features: np.ndarray
    mse: np.ndarray
    best_window: int


def hybrid_budget_split(
    Q: Any,
    K: Any,
    V: Any,
    budget: int,
    windows: Any,
    variant: str = "plain",
    causal: bool = False,
) -> HybridSplit:
    r"""The split of a cost budget ``|S| + m`` between a sliding window and features, by prediction.

    For each candidate half-width ``w`` the support is the window :math:`|n-j|\le w` (causal:
    :math:`n-w\le j\le n`) and ``m = budget - (2w+1)`` (causal ``budget - (w+1)``) positive iid
    features; the predicted MSE is the mean over the queries of :func:`hybrid_delta_method`'s
    ``var/m + (bias/m)^2``. No closed-form optimum exists in general (the variance depends on the
    data through :math:`C` restricted to the remainder), so the optimum is found by minimising
    the prediction over the candidates; ``w = -1`` is RFA with ``m = budget``. Same domain of
    validity as :func:`hybrid_delta_method` (every candidate needs ``m >= 1``).

    Parameters
    ----------
    Q : array_like (n, d)
    K : array_like (M, d)
    V : array_like (M, dv)
    budget : int
        Cost per query (exact keys + features).
    windows : sequence of int
        Candidate half-widths (>= -1).
    variant : {"plain", "ratio"}
    causal : bool
    """
    Qv = host_float_array(Q, "Q", min_ndim=2)
    Kv = host_float_array(K, "K", min_ndim=2)
    Vv = host_float_array(V, "V", min_ndim=2)
    ws = np.asarray(windows, dtype=np.int64).reshape(-1)
    per = np.where(ws < 0, 0, ws + 1 if causal else 2 * ws + 1)
    ms = int(budget) - per
    if np.any(ms < 1) or np.any(ws < -1):
        raise InvalidParameterError(
            f"hybrid_budget_split: every window must be >= -1 and leave m >= 1 features of the budget "
            f"{budget}. Got windows {ws.tolist()}."
        )
    n, M = Qv.shape[0], Kv.shape[0]
    j = np.arange(M)
    out = np.empty(ws.shape[0])
    for c, (w, m) in enumerate(zip(ws, ms)):
        tot = 0.0
        for i in range(n):
            seen = j <= i if causal else np.ones(M, dtype=bool)
            ex = (np.abs(i - j) <= w)[seen] if w >= 0 else np.zeros(int(seen.sum()), dtype=bool)
            dm = hybrid_delta_method(Qv[i], Kv[seen], Vv[seen], exact=ex, variant=variant)
            tot += float(np.mean(dm.var_coef / m + (dm.bias_coef / m) ** 2))
        out[c] = tot / n
    return HybridSplit(windows=ws, n_features=ms, mse=out, best_window=int(ws[int(np.argmin(out))]))
