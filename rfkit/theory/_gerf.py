r"""Closed-form MSE of GERF (Likhosherstov et al. (NeurIPS 2022)) and SADERF (Likhosherstov et al. (2023)), registered with :mod:`rfkit.theory`.

Both are sums :math:`\frac1m\sum_i F_i` of i.i.d. (or block-coupled) terms, so the formula of
docs page *Theory*, section 1, applies: :math:`\mathrm{MSE}/\mathrm{SM}^2 = \rho_V/m + (K/m^2)\rho_C + \rho_B^2`, with

* :math:`\rho_V = K(A)\,e^{\|z\|^2/(1-8A)} - 1` (GERF :math:`s=+1`, SADERF with
  :math:`z = \Psi x + \Psi^{-1}y`) and :math:`\rho_V = \tfrac12K(A)\big(e^{\|\Delta\|^2} +
  e^{-\|\Delta\|^2/(1-8A)}\big) - 1` (GERF :math:`s=-1`, :math:`\Delta = x - y`), where
  :math:`K(A) = \big(\frac{(1-4A)^2}{1-8A}\big)^{d/2}`; :math:`+\infty` for :math:`A \ge 1/8`.
  Source: Likhosherstov et al. (NeurIPS 2022), Thm 3.2 (variance of GERFs), rescaled from the
  Gaussian to the softmax kernel; re-derived in docs page *Theory*, section 1a ("GERF"), where the
  :math:`s=-1` form is derived for real :math:`A`.
* :math:`\rho_C`: the pair covariance of ``"orthogonal"`` / ``"simplex"`` directions, which does
  not depend on :math:`A` (the :math:`e^{2A(\rho_1^2+\rho_2^2)}` factor integrates out against
  :math:`D^4 = (1-4A)^d`), so it equals that of :class:`~rfkit.features.Positive` (:math:`s=+1`) or
  :class:`~rfkit.features.Trig` (:math:`s=-1`) at the same (transformed) inputs.
* :math:`\rho_B`: only for ``"orthogonal-fixed"`` with :math:`s=+1` (as OPRF).

Domain: as :func:`rfkit.theory.log_mse`; GERF with :math:`s=-1` and ``"orthogonal-fixed"`` has no
closed form here (InvalidParameterError).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exceptions import InvalidParameterError
from ..features import GERF, SADERF
from ._closed_form import CLOSED_FORM_PROJECTIONS, _log_relative, _Plan, register_mse_formula
from ._prf_parts import _parts

__all__: list[str] = []


def _plan_of(fm: Any, owner: str) -> _Plan:
    if fm.needs_data:
        raise InvalidParameterError(
            f"{owner}: {type(fm).__name__} resolves its parameters from data; the MSE needs concrete values. "
            "Call fm.fit(Q, K) first (or pass them explicitly)."
        )
    if fm.projection not in CLOSED_FORM_PROJECTIONS:
        raise InvalidParameterError(
            f"{owner}: projection={fm.projection!r} has no closed-form MSE (only {list(CLOSED_FORM_PROJECTIONS)}); "
            "measure it with rfkit.theory.check(...) instead."
        )
    assert fm.A is not None
    if isinstance(fm, SADERF):
        return _Plan(
            "exp", fm.projection, int(fm.n_features), False, float(fm.A), np.asarray(fm.psi, dtype=np.float64)
        )
    family = "exp" if fm.s == 1 else "trig"
    return _Plan(family, fm.projection, int(fm.n_features), False, float(fm.A), None)


def _check_dim(fm: Any, d: int) -> None:
    if isinstance(fm, SADERF) and np.asarray(fm.psi).shape[0] != d:
        raise InvalidParameterError(
            f"rfkit.theory: SADERF's `psi` has {np.asarray(fm.psi).shape[0]} entries but the pairs have d={d}."
        )


def _log_relative_gerf(fm: Any, X: np.ndarray, Y: np.ndarray, d: int, m: np.ndarray) -> np.ndarray:
    plan = _plan_of(fm, "rfkit.theory.log_mse")
    _check_dim(fm, d)
    return _log_relative(_parts(plan, X, Y, d), m, d, plan.projection)


def _bias_gerf(fm: Any, X: np.ndarray, Y: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    plan = _plan_of(fm, "rfkit.theory.bias")
    _check_dim(fm, d)
    parts = _parts(plan, X, Y, d)
    if parts.bias is None:
        shape = np.broadcast_shapes(X.shape[:-1], Y.shape[:-1])
        return np.zeros(shape), np.full(shape, -np.inf)
    return parts.bias


register_mse_formula(GERF, _log_relative_gerf, _bias_gerf)
register_mse_formula(SADERF, _log_relative_gerf, _bias_gerf)
