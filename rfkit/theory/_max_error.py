r"""The max-relative-error bound of CEXP and HCEXP on a set of inputs.

Blackwelder (2024), Lemma 3.2, corrected: the printed factor
:math:`W(r) = e^{2r^2}(1-e^{4r^2})` is negative for every :math:`r > 0`; the factor that
follows from the HCEXP MSE of Lemma 3.1 is :math:`W(r) = e^{2r^2}(1-e^{-4r^2}) = 2\sinh(2r^2)`,
and the lemma's "=" is a "≤" (docs page *Theory*, sections 4 and 5). Public through
:mod:`rfkit.theory.bounds`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._validation import check_int, check_option, check_real
from ..exceptions import NumericalOverflowError

__all__ = ["W", "max_relative_error", "MaxRelativeErrorBound", "BoundResult", "rel_rmse"]


class BoundResult:
    """Base of the frozen result dataclasses of :mod:`rfkit.theory.bounds`."""

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-serialisable)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]


_KINDS = ("hcexp", "cexp")


def W(r: Any) -> np.ndarray:
    r"""The factor :math:`W(r) = e^{2r^2}(1 - e^{-4r^2}) = 2\sinh(2r^2)` of Blackwelder (2024), Lemma 3.2, corrected.

    Derived from the HCEXP MSE of Blackwelder (2024), Lemma 3.1: :math:`\sqrt{\mathrm{MSE}}/\mathrm{SM}
    = \frac{2}{\sqrt{2m}}\sinh(\|z_A\|^2/2)` with :math:`\|z_A\|\le 2r`. The printed Lemma 3.2 has
    :math:`e^{2r^2}(1-e^{4r^2})`, negative for every :math:`r>0` (a sign error in the exponent),
    corrected here; see docs page *Theory*, section 5.

    Parameters
    ----------
    r : float or array_like
        The radius :math:`r` (any shape).

    Returns
    -------
    ndarray
        :math:`2\sinh(2r^2)`, float64 (``inf`` where it overflows).
    """
    r = np.asarray(r, dtype=np.float64)
    with np.errstate(over="ignore"):
        return 2.0 * np.sinh(2.0 * r * r)


def rel_rmse(s2: float, m: int, kind: str) -> float:
    """Relative RMS error at ||z_A||^2 = s2 (the supremum over the set)."""
    with np.errstate(over="ignore"):
        if kind == "hcexp":
            val = 2.0 * np.sinh(0.5 * s2) / np.sqrt(2.0 * m)
        else:
            val = np.sqrt(np.expm1(s2) / m)
    if not np.isfinite(val):
        raise NumericalOverflowError(
            f"The max-relative-error bound overflows float64 (||z||^2 up to {s2:.4g}); the bound is vacuous there."
        )
    return float(val)


@dataclasses.dataclass(frozen=True)
class MaxRelativeErrorBound(BoundResult):
    """Result of :func:`max_relative_error`.

    Parameters
    ----------
    bound : float
        Upper bound on :math:`\\sup\\sqrt{\\mathrm{MSE}}/\\mathrm{SM}`.
    r_x, r_y : float
        Radii with :math:`\\|Ax\\|\\le r_x`, :math:`\\|A^{-T}y\\|\\le r_y`.
    z_max : float
        :math:`r_x + r_y`, the largest possible :math:`\\|Ax + A^{-T}y\\|`.
    W : float
        :math:`2\\sinh((r_x+r_y)^2/2)` (:math:`= W(r)` when :math:`r_x=r_y=r`); for
        ``kind="cexp"`` :math:`\\sqrt{2(e^{(r_x+r_y)^2}-1)}`.
    n_features : int
        The number of random features ``m``.
    kind : str
        The estimator the bound is for (``"hcexp"`` or ``"cexp"``).
    assumptions : str
        The assumptions under which the bound holds, in words.
    """

    bound: float
    r_x: float
    r_y: float
    z_max: float
    W: float
    n_features: int
    kind: str
    assumptions: str


def max_relative_error(
    r: float, n_features: int, *, r_y: float | None = None, kind: str = "hcexp"
) -> MaxRelativeErrorBound:
    r"""Bound on the max relative RMS error of HCEXP (or CEXP) on a ball (Blackwelder (2024), Lemma 3.2, corrected).

    .. math::

        \epsilon_C(\widehat{\mathrm{SM}}^{\rm hcexp}_{A,m}) \le \frac{W(r)}{\sqrt{2m}},\qquad
        W(r) = e^{2r^2}(1-e^{-4r^2}) = 2\sinh(2r^2),

    for :math:`C` with :math:`\|Ax\|\le r`, :math:`\|A^{-\top}y\|\le r`. With separate
    radii: :math:`\frac{2}{\sqrt{2m}}\sinh\frac{(r_x+r_y)^2}{2}`; for CEXP (``kind="cexp"``):
    :math:`\sqrt{(e^{(r_x+r_y)^2}-1)/m}`. The same :math:`W(r)/\sqrt{2m}` holds for trig
    features on the sphere :math:`\|x\|=\|y\|=r` (attained at :math:`x=-y`).

    Source: Blackwelder (2024), Lemma 3.2. The printed :math:`W` has :math:`e^{+4r^2}`, a sign
    error, and the printed "=" holds only if :math:`Ax = A^{-\top}y` of norm :math:`r` is
    feasible (in general "≤"); both are corrected here by deriving the bound from the HCEXP MSE
    of Lemma 3.1 (docs page *Theory*, sections 4 and 5).

    Parameters
    ----------
    r : float
        Radius (>= 0) of the transformed queries, and of the keys unless ``r_y`` is given.
    n_features : int
        Number of random directions ``m`` (>= 1).
    r_y : float, optional
        Separate radius of the transformed keys.
    kind : {"hcexp", "cexp"}, default="hcexp"

    Returns
    -------
    MaxRelativeErrorBound

    Raises
    ------
    InvalidParameterError
        Negative or non-finite radii, ``n_features < 1``, unknown ``kind``.
    NumericalOverflowError
        When the bound exceeds the float range.
    """
    owner = "max_relative_error"
    rx = check_real(r, "r", owner, low=0.0)
    ry = rx if r_y is None else check_real(r_y, "r_y", owner, low=0.0)
    m = check_int(n_features, "n_features", owner, low=1)
    kind = check_option(kind, "kind", owner, _KINDS)
    s = rx + ry
    b = rel_rmse(s * s, m, kind)
    w = b * np.sqrt(2.0 * m)
    return MaxRelativeErrorBound(
        bound=b,
        r_x=rx,
        r_y=ry,
        z_max=s,
        W=float(w),
        n_features=m,
        kind=kind,
        assumptions=(
            f"{kind.upper()} estimator with m={m} iid (or Gaussian-marginal) directions; every query x and key y "
            f"satisfies ||A x|| <= {rx:g} and ||A^-T y|| <= {ry:g}. Bounds the RMS relative error "
            "sqrt(MSE)/SM (expectation over the features), not realised errors."
        ),
    )
