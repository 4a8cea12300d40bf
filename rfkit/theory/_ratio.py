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

import dataclasses
from typing import Any

import numpy as np

from .._validation import check_real, host_float_array
from ..exceptions import InvalidParameterError, ShapeError
from ._special import scipy_special

__all__ = [
    "RFADeltaMethod",
    "rfa_delta_method",
    "ratio_bias_identity",
    "ra_mse",
    "attention_error_bound",
]


@dataclasses.dataclass(frozen=True)
class RFADeltaMethod:
    r"""First-order (delta-method) bias and variance of RFA with :math:`\phi^+` for one query.

    Attributes
    ----------
    attention : ndarray (dv,)
        Exact softmax attention output :math:`a`.
    bias_coef, var_coef : ndarray (dv,)
        :math:`-\mathbf 1^\top G(v-a\mathbf 1)/Z^2` and :math:`(v-a\mathbf1)^\top G(v-a\mathbf1)/Z^2`;
        bias :math:`\approx` ``bias_coef / S``, variance :math:`\approx` ``var_coef / S``.
    moment_ratio : float
        :math:`\mathbb E[X^2]/\mathbb E[X]^2 = \mathbf 1^\top G\mathbf 1/Z^2`; the expansion needs
        :math:`S \gg` this (and control of higher moments: with log-normal weights
        convergence is slow: 12x the first-order bias was measured at ratio 5.6, S=64; docs page
        *Theory*, section 3).
    """

    attention: np.ndarray
    bias_coef: np.ndarray
    var_coef: np.ndarray
    moment_ratio: float

    def bias(self, n_samples: Any) -> np.ndarray:
        """First-order bias at ``S`` samples (``S`` may be an array; result (..., dv))."""
        S = np.asarray(n_samples, dtype=np.float64)[..., None]
        return self.bias_coef / S

    def variance(self, n_samples: Any) -> np.ndarray:
        """First-order variance at ``S`` samples."""
        S = np.asarray(n_samples, dtype=np.float64)[..., None]
        return self.var_coef / S

    def mse(self, n_samples: Any) -> np.ndarray:
        """First-order MSE (= variance; the squared bias is :math:`O(S^{-2})`, like the neglected terms)."""
        return self.variance(n_samples)

    def is_asymptotic(self, n_samples: int, factor: float = 10.0) -> bool:
        """True when ``S >= factor * moment_ratio`` (a necessary condition, not sufficient)."""
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


def rfa_delta_method(q: Any, K: Any, V: Any) -> RFADeltaMethod:
    r"""Delta-method bias and variance of RFA (:math:`\phi^+`, iid directions) as functions of ``S``.

    .. math::

        \mathrm{Bias}(\mathrm{RFA}_S) \approx -\frac{\mathbf 1^\top G(v-a\mathbf 1)}{S Z^2},\qquad
        \mathrm{Var}(\mathrm{RFA}_S) \approx \frac{(v-a\mathbf1)^\top G(v-a\mathbf 1)}{S Z^2},

    per output coordinate, with remainders :math:`O(S^{-2})` (ratio-estimator delta method,
    Owen (2013), ch. 9; closed form of :math:`G` derived in docs page *Theory*, section 3, and
    verified by simulation for :math:`\mathbb E[X^2]/\mathbb E[X]^2 = 1.31`).

    Domain of validity: :math:`S \gg \mathbb E[X^2]/\mathbb E[X]^2` (reported as
    ``moment_ratio``); for heavier tails use :func:`ratio_bias_identity` on simulations.

    Parameters
    ----------
    q : array_like (d,)
        One query.
    K : array_like (M, d)
        Keys.
    V : array_like (M,) or (M, dv)
        Values.
    """
    qv, Kv, V2, scalar = query_keys_values(q, K, V, "rfa_delta_method")
    s = Kv @ qv  # q.k_m
    logZ = scipy_special().logsumexp(s)
    a = np.exp(s - logZ) @ V2  # (dv,)
    logG = qv @ qv + 2.0 * s[:, None] + 2.0 * s[None, :] + Kv @ Kv.T
    Gn = np.exp(logG - 2.0 * logZ)  # G / Z^2
    C = V2 - a[None, :]  # (M, dv)
    bias_coef = -(Gn.sum(axis=0) @ C)
    var_coef = np.einsum("md,mn,nd->d", C, Gn, C)
    ratio = float(Gn.sum())
    if scalar:
        a, bias_coef, var_coef = a[:1], bias_coef[:1], var_coef[:1]
    return RFADeltaMethod(attention=a, bias_coef=bias_coef, var_coef=var_coef, moment_ratio=ratio)


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
