r"""Exact MSE of the dense-exponential random features ADERF and SDERF (registered with log_mse).

Both are unbiased estimators :math:`\frac1m\sum_i f^{(1)}(\omega_i,x)f^{(2)}(\omega_i,y)` of
:math:`\mathrm{SM}(x,y) = e^{x^\top y}`; the variance of one term follows from
:math:`\mathbb E\,e^{\omega^\top M\omega + b^\top\omega} = \det(I-2M)^{-1/2}e^{\frac12 b^\top(I-2M)^{-1}b}`
(:math:`I - 2M \succ 0`), as in Likhosherstov et al. (NeurIPS 2023), their DERF variance theorem
(Thm 4.1 as numbered by public summaries; re-derived for the softmax kernel in docs page
*Theory*, section 1b, "The DERF family").

* **ADERF** (:math:`A = aI`, :math:`B^{(1)} = \sqrt{1-4a}\,G`, :math:`B^{(2)} = \sqrt{1-4a}\,G^{-\top}`) is
  OPRF applied to :math:`Gx` and :math:`G^{-\top}y`, so every OPRF closed form holds with
  :math:`z = Gx + G^{-\top}y`: iid :math:`\mathrm{MSE}/\mathrm{SM}^2 = \frac1m\big[\big(\tfrac{(1-4a)^2}{1-8a}\big)^{d/2}
  e^{\|z\|^2/(1-8a)} - 1\big]`, plus the orthogonal-block covariance and the fixed-norm forms
  of :mod:`rfkit.theory._prf_parts` (docs page *Theory*, sections 1 and 1a). Domain: :math:`a < 1/8` (else
  :math:`+\infty`), any invertible :math:`G`.
* **SDERF** (:math:`B = (I-4A)^{1/2}`, :math:`A = V\mathrm{diag}(a)V^\top`, :math:`u = V^\top(x+y)`), iid
  directions only:

  .. math:: \frac{\mathrm{MSE}}{\mathrm{SM}^2} = \frac1m\Big[\prod_{l=1}^d\Big(\frac{(1-4a_l)^2}{1-8a_l}\Big)^{1/2}
      \exp\Big(\sum_{l=1}^d\frac{u_l^2}{1-8a_l}\Big) - 1\Big],

  domain: every :math:`a_l < 1/8` (else :math:`+\infty`); :math:`a_l \equiv a` gives OPRF.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exceptions import InvalidParameterError, ShapeError
from ..features import ADERF, SDERF, sderf_eig
from ._closed_form import CLOSED_FORM_PROJECTIONS, _log_relative, _Plan, register_mse_formula
from ._prf_parts import _parts
from ._special import log_expm1

__all__: list[str] = []

_OWNER = "rfkit.theory"
_UNBIASED = ("iid", "orthogonal", "qmc")


def _aderf_plan(fm: ADERF, d: int) -> _Plan:
    if fm.needs_data:
        raise InvalidParameterError(
            f"{_OWNER}: ADERF(A={fm.A!r}, G={'None' if fm.G is None else '...'}) resolves its parameters "
            "from data; the MSE needs concrete A and G. Call fm.fit(Q, K) first or pass them explicitly."
        )
    G = np.asarray(fm.G, dtype=np.float64)
    if G.shape[0] != d:
        raise ShapeError(
            f"{_OWNER}: the `G` parameter of ADERF has shape {G.shape} but the inputs have d={d}."
        )
    return _Plan("exp", fm.projection, int(fm.n_features), False, float(fm.A), G)  # type: ignore[arg-type]


def _zero_bias(X: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    shape = np.broadcast_shapes(X.shape[:-1], Y.shape[:-1])
    return np.zeros(shape), np.full(shape, -np.inf)


def _aderf_log_relative(fm: ADERF, X: np.ndarray, Y: np.ndarray, d: int, m: np.ndarray) -> np.ndarray:
    r""":math:`\log(\mathrm{MSE}/\mathrm{SM}^2)` of ADERF: OPRF's closed forms at :math:`(Gx, G^{-\top}y)`."""
    plan = _aderf_plan(fm, d)
    if plan.projection not in CLOSED_FORM_PROJECTIONS:
        raise InvalidParameterError(
            f"{_OWNER}: projection={plan.projection!r} has no closed-form MSE for ADERF "
            f"(only {list(CLOSED_FORM_PROJECTIONS)})."
        )
    return _log_relative(_parts(plan, X, Y, d), m, d, plan.projection)


def _aderf_bias(fm: ADERF, X: np.ndarray, Y: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    plan = _aderf_plan(fm, d)
    if plan.projection in CLOSED_FORM_PROJECTIONS:
        b = _parts(plan, X, Y, d).bias
        return _zero_bias(X, Y) if b is None else b
    if plan.projection in _UNBIASED:
        return _zero_bias(X, Y)
    raise InvalidParameterError(
        f"{_OWNER}: projection={plan.projection!r} has no closed-form bias for ADERF."
    )


def _sderf_check(fm: SDERF) -> None:
    if fm.A is None:
        raise InvalidParameterError(
            f"{_OWNER}: SDERF(A=None) resolves its optimal A from data; the MSE needs a concrete A. "
            "Call fm.fit(Q, K) first or pass A explicitly."
        )


def sderf_log_relative_variance(A: Any, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    r""":math:`\log(\mathrm{Var}\,F/\mathrm{SM}^2)` of one SDERF term (see the module docstring); :math:`+\infty`
    where an eigenvalue of :math:`A` is :math:`\ge 1/8`."""
    d = X.shape[-1]
    a, V = sderf_eig(A, d)
    U = X + Y
    if V is not None:
        U = U @ V
    if np.any(a >= 0.125):
        return np.full(U.shape[:-1], np.inf)
    L = np.sum(0.5 * (2.0 * np.log1p(-4.0 * a) - np.log1p(-8.0 * a)) + U * U / (1.0 - 8.0 * a), axis=-1)
    return log_expm1(np.maximum(L, 0.0))  # L >= 0 exactly: (1-4a)^2 >= 1-8a; max removes round-off only


def _sderf_log_relative(fm: SDERF, X: np.ndarray, Y: np.ndarray, d: int, m: np.ndarray) -> np.ndarray:
    _sderf_check(fm)
    if fm.projection != "iid":
        raise InvalidParameterError(
            f"{_OWNER}: SDERF has a closed-form MSE for projection='iid' only; got {fm.projection!r} "
            "(measure it by simulation instead)."
        )
    lv = sderf_log_relative_variance(fm.A, X, Y)
    with np.errstate(invalid="ignore"):  # inf - log m stays inf
        return lv - np.log(m.astype(np.float64))


def _sderf_bias(fm: SDERF, X: np.ndarray, Y: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    _sderf_check(fm)
    if fm.projection in _UNBIASED:
        return _zero_bias(X, Y)
    raise InvalidParameterError(f"{_OWNER}: projection={fm.projection!r} has no closed-form bias for SDERF.")


register_mse_formula(ADERF, _aderf_log_relative, _aderf_bias)
register_mse_formula(SDERF, _sderf_log_relative, _sderf_bias)
