r"""The delta method for ratio estimators of attention: RFA, and hybrid attention with exact keys.

RFA (Peng et al. (ICLR 2021); read as self-normalised importance sampling as in Zheng, Wang &
Kong (ICML 2022)) and both variants of :class:`rfkit.attention.Hybrid` (Chen, Dao et al.
(NeurIPS 2021), "Scatterbrain") are ratios :math:`\hat o = \hat N/\hat Z` whose errors are linear
in the centred kernel estimates :math:`\delta_j = \hat\kappa_j - \kappa_j`:
:math:`\delta\hat Z = \sum_j w_j\delta_j`, :math:`\delta\hat N - a\,\delta\hat Z = \sum_j u_j\delta_j`
per output coordinate, with

* plain: :math:`w = \mathbb 1_R`, :math:`u_j = (v_j - a)\mathbb 1_R(j)` (:math:`R`: the keys not
  computed exactly; RFA: all keys);
* ratio: :math:`w = \mathbb 1`, :math:`u_j = v'_j - a`, :math:`v'_j = \mu^S` (the support's exact
  mean output) on the support and :math:`v_j` elsewhere.

With :math:`\mathrm{Cov}(\delta) = C/m + (K(m)/m^2)P` (:mod:`rfkit.theory._pairwise`) the
ratio-estimator delta method (Owen (2013), ch. 9) gives, per output coordinate,

.. math::

    \mathrm{Bias} \approx -\frac{w^\top\mathrm{Cov}(\delta)u}{Z^2},\qquad
    \mathrm{Var} \approx \frac{u^\top\mathrm{Cov}(\delta)u}{Z^2},

with remainders :math:`O(m^{-2})`. Derivation and domain: docs page *Sparse + random features*,
section "Theory".
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._backend import to_numpy
from .._validation import host_float_array
from ..exceptions import InvalidParameterError, ShapeError
from ._pairwise import CrossMoments, cross_moments
from ._special import log_abs_expm1, orf_pair_count, scipy_special

__all__ = ["RFADeltaMethod", "delta_method", "query_keys_values", "NormalisedMoments", "normalised_moments"]

_VARIANTS = ("plain", "ratio")


@dataclasses.dataclass(frozen=True)
class RFADeltaMethod:
    r"""First-order (delta-method) bias and variance of a ratio attention estimator for one query.

    With ``m`` features (directions) the bias is :math:`(b_1 + b_2K(m)/m)/m` and the variance
    :math:`(v_1 + v_2K(m)/m)/m`, where :math:`K(m) = \sum_b k_b(k_b-1)` counts the ordered pairs of
    directions in one orthogonal block (:math:`b_2 = v_2 = 0` for iid directions).

    Attributes
    ----------
    attention : ndarray (dv,)
        Exact softmax attention output :math:`a`.
    bias_coef, var_coef : ndarray (dv,)
        :math:`b_1 = -w^\top Cu/Z^2` and :math:`v_1 = u^\top Cu/Z^2` (the one-direction covariance
        :math:`C`); for RFA with :math:`\phi^+`, :math:`-\mathbf 1^\top G(v-a\mathbf 1)/Z^2` and
        :math:`(v-a\mathbf1)^\top G(v-a\mathbf1)/Z^2`.
    moment_ratio : float
        :math:`w^\top Gw/(w^\top\kappa)^2`, the relative second moment of one direction's estimate
        of the estimated mass; the expansion needs ``m`` :math:`\gg` this (and control of higher
        moments: with log-normal weights convergence is slow: 12x the first-order bias was
        measured at ratio 5.6, m=64; docs page *Theory*, section 3).
    pair_bias_coef, pair_var_coef : ndarray (dv,) or None
        :math:`b_2 = -w^\top Pu/Z^2` and :math:`v_2 = u^\top Pu/Z^2` (the covariance :math:`P` of two
        directions of one orthogonal block); None for iid directions.
    dim : int or None
        Block size :math:`d` of the orthogonal construction (None for iid directions).
    """

    attention: np.ndarray
    bias_coef: np.ndarray
    var_coef: np.ndarray
    moment_ratio: float
    pair_bias_coef: np.ndarray | None = None
    pair_var_coef: np.ndarray | None = None
    dim: int | None = None

    def _pair_weight(self, n_samples: Any) -> np.ndarray:
        S = np.asarray(n_samples, dtype=np.float64)[..., None]
        if self.dim is None:
            return np.zeros_like(S)
        return orf_pair_count(np.asarray(n_samples, dtype=np.int64), self.dim)[..., None] / S

    def bias(self, n_samples: Any) -> np.ndarray:
        """First-order bias at ``m`` features (``m`` may be an array; result (..., dv))."""
        S = np.asarray(n_samples, dtype=np.float64)[..., None]
        out = self.bias_coef / S
        if self.pair_bias_coef is not None:
            out = out + self.pair_bias_coef * self._pair_weight(n_samples) / S
        return out

    def variance(self, n_samples: Any) -> np.ndarray:
        """First-order variance at ``m`` features."""
        S = np.asarray(n_samples, dtype=np.float64)[..., None]
        out = self.var_coef / S
        if self.pair_var_coef is not None:
            out = out + self.pair_var_coef * self._pair_weight(n_samples) / S
        return np.maximum(out, 0.0)

    def mse(self, n_samples: Any) -> np.ndarray:
        """First-order MSE (= variance; the squared bias is :math:`O(m^{-2})`, like the neglected terms)."""
        return self.variance(n_samples)

    def is_asymptotic(self, n_samples: int, factor: float = 10.0) -> bool:
        """True when ``m >= factor * moment_ratio`` (a necessary condition, not sufficient)."""
        return bool(n_samples >= factor * self.moment_ratio)


def query_keys_values(q: Any, K: Any, V: Any, owner: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """One query ``(d,)``, keys ``(M, d)`` and values ``(M,)`` or ``(M, dv)`` as float64 arrays.

    Returns ``(q, K, V2, scalar)`` with ``V2`` of shape ``(M, dv)`` and ``scalar`` True when
    ``V`` was one-dimensional. Raises ShapeError naming ``owner`` on mismatched shapes.
    """
    qv = host_float_array(q, "q", min_ndim=1)
    Kv = host_float_array(K, "K", min_ndim=2)
    Vv = host_float_array(V, "V", min_ndim=1)
    if qv.ndim != 1 or Kv.ndim != 2 or Kv.shape[1] != qv.shape[0]:
        raise ShapeError(f"{owner}: need q (d,), K (M, d); got q {qv.shape}, K {Kv.shape}.")
    scalar = Vv.ndim == 1
    V2 = Vv[:, None] if scalar else Vv
    if V2.ndim != 2 or V2.shape[0] != Kv.shape[0]:
        raise ShapeError(f"{owner}: V must be (M,) or (M, dv) with M={Kv.shape[0]}; got {Vv.shape}.")
    return qv, Kv, V2, scalar


@dataclasses.dataclass(frozen=True)
class NormalisedMoments:
    """Softmax weights ``p`` (M,) and the covariances ``C/Z^2``, ``P/Z^2`` (M, M) of one query."""

    p: np.ndarray
    Cn: np.ndarray
    Pn: np.ndarray | None
    dim: int


def normalised_moments(fm: Any, q: np.ndarray, K: np.ndarray, owner: str) -> NormalisedMoments:
    """:class:`NormalisedMoments` of ``fm`` (None: iid positive features) for one query (log space)."""
    cm: CrossMoments = cross_moments(fm, q, K, owner)
    s = cm.log_kappa
    logp = s - scipy_special().logsumexp(s)
    p = np.exp(logp)
    sign, lg = log_abs_expm1(cm.log_second)
    with np.errstate(under="ignore"):
        Cn = sign * np.exp(logp[:, None] + logp[None, :] + lg)
    Pn = None if cm.pair_gap is None else np.outer(p, p) * cm.pair_gap
    return NormalisedMoments(p=p, Cn=Cn, Pn=Pn, dim=cm.dim)


def _check_exact(exact: Any, M: int, owner: str) -> np.ndarray:
    if exact is None:
        return np.zeros(M, dtype=bool)
    ex = to_numpy(exact) if not isinstance(exact, np.ndarray) else exact
    ex = np.asarray(ex)
    if ex.dtype != bool or ex.shape != (M,):
        raise InvalidParameterError(
            f"The `exact` parameter of {owner} must be a boolean array of shape ({M},). "
            f"Got {getattr(ex, 'dtype', type(ex))} of shape {getattr(ex, 'shape', None)} instead."
        )
    return ex


def check_variant(variant: Any, owner: str) -> str:
    """``variant`` if it is ``"plain"`` or ``"ratio"``; else InvalidParameterError."""
    if not isinstance(variant, str) or variant not in _VARIANTS:
        raise InvalidParameterError(
            f"The `variant` parameter of {owner} must be one of 'plain', 'ratio'. Got {variant!r} instead."
        )
    return variant


def coefficients(nm: NormalisedMoments, V2: np.ndarray, ex: np.ndarray, variant: str) -> RFADeltaMethod:
    """The delta-method coefficients of one query from its moments, values and exact-key mask."""
    p, Cn, Pn = nm.p, nm.Cn, nm.Pn
    a = p @ V2
    if variant == "plain":
        w = (~ex).astype(np.float64)
        U = (V2 - a[None, :]) * w[:, None]
    else:
        w = np.ones(p.shape[0])
        Vp = V2.copy()
        if ex.any():
            Vp[ex] = (p[ex] @ V2[ex]) / p[ex].sum()
        U = Vp - a[None, :]
    bias_coef = -(w @ Cn @ U)
    var_coef = np.einsum("md,mn,nd->d", U, Cn, U)
    mass = float(w @ p)
    ratio = float(w @ Cn @ w) / mass**2 + 1.0 if mass > 0 else 0.0
    pb = pv = None
    dim = None
    if Pn is not None:
        pb = -(w @ Pn @ U)
        pv = np.einsum("md,mn,nd->d", U, Pn, U)
        dim = nm.dim
    return RFADeltaMethod(a, bias_coef, var_coef, ratio, pb, pv, dim)


def delta_method(
    q: Any, K: Any, V: Any, exact: Any, variant: Any, feature_map: Any, owner: str
) -> RFADeltaMethod:
    """The shared body of :func:`rfkit.theory.rfa_delta_method` and :func:`rfkit.theory.hybrid_delta_method`."""
    variant = check_variant(variant, owner)
    qv, Kv, V2, scalar = query_keys_values(q, K, V, owner)
    ex = _check_exact(exact, Kv.shape[0], owner)
    res = coefficients(normalised_moments(feature_map, qv, Kv, owner), V2, ex, variant)
    if scalar:
        res = dataclasses.replace(
            res,
            **{
                f.name: getattr(res, f.name)[:1]
                for f in dataclasses.fields(res)
                if isinstance(getattr(res, f.name), np.ndarray)
            },
        )
    return res
