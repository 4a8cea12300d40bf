r"""Ratio (self-normalised importance sampling) estimators: RFA bias and variance.

RFA of Peng et al. (ICLR 2021) read as self-normalised importance sampling as in Zheng, Wang &
Kong (ICML 2022); the formulas are derived in docs page *Theory*, section 3.

RFA with positive features :math:`\phi^+` and ``S`` directions is the SNIS estimate
:math:`\hat R_S = \bar Y/\bar X` with :math:`X = \sum_m X_m`, :math:`Y=\sum_m X_m v_m`,
:math:`X_m = \xi(q,\omega)\xi(k_m,\omega)`, :math:`\xi(x,\omega)=e^{\omega^\top x-\|x\|^2/2}`,
:math:`\mathbb E X = Z`, :math:`\mathbb E Y = Z a`, and

.. math:: G_{mm'} = \mathbb E[X_mX_{m'}] = \exp\big(\|q\|^2 + 2q^\top k_m + 2q^\top k_{m'} + k_m^\top k_{m'}\big).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import check_real, host_float_array
from ..exceptions import InvalidParameterError, ShapeError
from ._delta import RFADeltaMethod, delta_method

__all__ = [
    "RFADeltaMethod",
    "rfa_delta_method",
    "ratio_bias_identity",
    "ra_mse",
    "attention_error_bound",
]


def rfa_delta_method(
    q: Any, K: Any, V: Any, *, exact: Any = None, variant: str = "plain", feature_map: Any = None
) -> RFADeltaMethod:
    r"""Delta-method bias and variance of RFA (and of hybrid attention) for one query, as functions of ``m``.

    .. math::

        \mathrm{Bias} \approx -\frac{w^\top\mathrm{Cov}(\delta)\,u}{Z^2},\qquad
        \mathrm{Var} \approx \frac{u^\top\mathrm{Cov}(\delta)\,u}{Z^2},\qquad
        \mathrm{Cov}(\delta) = \frac Cm + \frac{K(m)}{m^2}P,

    per output coordinate, with remainders :math:`O(m^{-2})` (ratio-estimator delta method,
    Owen (2013), ch. 9). :math:`C` is the covariance across keys of one direction's kernel
    estimates, :math:`P` that of two directions of one orthogonal block and
    :math:`K(m)=\sum_b k_b(k_b-1)` (0 for iid directions). Without ``exact``: RFA, :math:`w = \mathbf 1`,
    :math:`u = v - a\mathbf 1`; for :math:`\phi^+` with iid directions
    :math:`C = G - \kappa\kappa^\top`, :math:`G_{jl} = \kappa_j\kappa_l e^{(q+k_j)^\top(q+k_l)}`, and
    the familiar :math:`-\mathbf 1^\top G(v-a\mathbf1)/(mZ^2)`, :math:`(v-a\mathbf1)^\top G(v-a\mathbf1)/(mZ^2)`
    (docs page *Theory*, section 3). With ``exact`` (a support computed exactly, as in
    :class:`rfkit.attention.Hybrid`, Chen, Dao et al. (NeurIPS 2021)): ``variant="plain"``
    :math:`w = \mathbb 1_R`, :math:`u = (v - a)\mathbb 1_R`; ``variant="ratio"`` :math:`w = \mathbf 1`,
    :math:`u = v' - a` (:math:`v'` = the support's exact mean output on the support). The
    cross-key covariances :math:`C` and :math:`P` of each map and the orthogonal-pair moment are
    derived in docs page *Sparse + random features*, section "Theory".

    Domain of validity: ``m`` :math:`\gg` ``moment_ratio`` (the relative second moment of one
    direction's estimate of the estimated mass); the neglected terms are :math:`O(m^{-2})`.
    Feature maps: Positive, Hyperbolic, CEXP, HCEXP, OPRF, GERF, SADERF, ADERF and Trig with
    ``projection`` "iid" or "orthogonal" (block-orthogonal, :math:`\chi(d)` norms, any ``m``), SDERF
    with "iid"; fitted maps must be fitted (``fm.fit(Q, K)``) first. Other maps and projections
    raise :class:`~rfkit.exceptions.InvalidParameterError` naming the map. The orthogonal pair
    moment is evaluated for :math:`\|q+k\|^2 \le 1200` (trigonometric maps:
    :math:`\|q-k_j\|^2+\|q-k_l\|^2 \le 24`).

    Parameters
    ----------
    q : array_like (d,)
        One query.
    K : array_like (M, d)
        Keys.
    V : array_like (M,) or (M, dv)
        Values.
    exact : array_like of bool (M,), optional
        True for the keys computed exactly (the support); None: none (RFA).
    variant : {"plain", "ratio"}, default="plain"
        The combination of :class:`rfkit.attention.Hybrid` (irrelevant without exact keys).
    feature_map : FeatureMap, optional
        The map whose estimator is analysed (its ``n_features`` is ignored: pass ``m`` to the
        result's methods); None: :class:`~rfkit.features.Positive` with iid directions.

    Returns
    -------
    RFADeltaMethod
        ``attention``, the coefficients, ``moment_ratio``; ``.bias(m)``, ``.variance(m)``,
        ``.mse(m)``.

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> rng = np.random.default_rng(0)
    >>> q, K, V = 0.3 * rng.normal(size=16), 0.3 * rng.normal(size=(20, 16)), rng.normal(size=(20, 2))
    >>> iid = rk.theory.rfa_delta_method(q, K, V)
    >>> orth = rk.theory.rfa_delta_method(q, K, V, feature_map=rk.features.Positive(1, projection="orthogonal"))
    >>> bool(np.all(orth.mse(16) < iid.mse(16)))
    True
    """
    return delta_method(q, K, V, exact, variant, feature_map, "rfa_delta_method")


def ratio_bias_identity(R_hat: Any, X_bar: Any, mu_X: float) -> np.ndarray:
    r"""Exact-identity bias estimate :math:`\mathbb E[\hat R_S]-R = -\mathrm{Cov}(\hat R_S,\bar X)/\mu_X`.

    Holds for every ``S`` and every distribution (from :math:`\mathbb E[\hat R_S\bar X]=\mu_Y`;
    docs page *Theory*, section 3). Given ``T`` simulated replicates of :math:`\hat R_S` (shape (T, ...))
    and of the denominator mean :math:`\bar X` (shape (T,) or (T, ...)), returns the
    sample version (covariance with divisor ``T - 1``).
    """
    R = host_float_array(R_hat, "R_hat", min_ndim=1)
    Xb = host_float_array(X_bar, "X_bar", min_ndim=1)
    mu = check_real(mu_X, "mu_X", "ratio_bias_identity")
    if mu == 0.0:
        raise InvalidParameterError(
            "The `mu_X` parameter of ratio_bias_identity must be non-zero. Got 0.0 instead."
        )
    if R.shape[0] != Xb.shape[0] or R.shape[0] < 2:
        raise ShapeError(
            f"R_hat and X_bar need the same number T >= 2 of replicates; got {R.shape}, {Xb.shape}."
        )
    Xb = Xb.reshape(Xb.shape + (1,) * (R.ndim - Xb.ndim))
    cov = np.sum((R - R.mean(0)) * (Xb - Xb.mean(0)), axis=0) / (R.shape[0] - 1)
    return -cov / mu


def ra_mse(variance_f: Any, n_samples: Any) -> np.ndarray:
    r"""MSE of randomized attention (RA): :math:`\mathrm{Var}_{p_n}(f_n)/S`, exact (unbiased, iid samples).

    Source: Zheng, Wang & Kong (ICML 2022) (RA); docs page *Theory*, section 3. ``variance_f`` is
    :math:`\mathrm{Var}_{p_n}(f_n)` per output coordinate (e.g. estimated once by sampling
    :math:`p_n`); ``S`` >= 1.
    """
    v = host_float_array(variance_f, "variance_f")
    S = np.asarray(n_samples)
    if S.dtype.kind not in "iu" or np.any(S < 1):
        raise InvalidParameterError(
            f"The `n_samples` parameter of ra_mse must be ints >= 1. Got {n_samples!r} instead."
        )
    if np.any(v < 0):
        raise InvalidParameterError("The `variance_f` parameter of ra_mse must be >= 0.")
    return v / S


def _real_array(value: Any, name: str) -> np.ndarray:
    """``value`` as a float64 array; complex, text and object values raise (never a silent cast)."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        arr = np.asarray(None)
    if arr.dtype.kind not in "fiub" or arr.dtype.kind == "b":
        raise InvalidParameterError(
            f"The `{name}` parameter of attention_error_bound must be real numbers. Got {value!r:.80} "
            f"(dtype {arr.dtype}) instead."
        )
    return arr.astype(np.float64)


def attention_error_bound(eps: Any, v_max: Any = 1.0) -> np.ndarray:
    r"""Kernel-to-attention propagation bound (derived and verified here; docs page *Theory*, section 3).

    If every kernel estimate is positive with :math:`|\hat K_{nm}/K_{nm}-1|\le\varepsilon<1`, then
    :math:`|\hat\pi_{nm}-\pi_{nm}|\le\frac{2\varepsilon}{1-\varepsilon}\pi_{nm}` and
    :math:`\|\widehat{\mathrm{Attn}}(q_n)-\mathrm{Attn}(q_n)\|\le\frac{2\varepsilon}{1-\varepsilon}\max_m\|v_m\|`.
    Returns :math:`\frac{2\varepsilon}{1-\varepsilon}\,v_{\max}`.

    Raises
    ------
    InvalidParameterError
        Unless :math:`0\le\varepsilon<1` and :math:`v_{\max}\ge0`.
    """
    e, vm = _real_array(eps, "eps"), _real_array(v_max, "v_max")
    if not np.all(np.isfinite(e)) or np.any((e < 0) | (e >= 1)):
        raise InvalidParameterError(
            f"The `eps` parameter of attention_error_bound must be in [0, 1). Got {eps!r} instead."
        )
    if not np.all(np.isfinite(vm)) or np.any(vm < 0):
        raise InvalidParameterError(
            f"The `v_max` parameter of attention_error_bound must be >= 0. Got {v_max!r}."
        )
    return 2.0 * e / (1.0 - e) * vm
