r"""The max-relative-error bound of every map with a closed-form relative MSE, on a set of inputs.

Blackwelder (2024), Lemma 3.2, corrected: the printed factor
:math:`W(r) = e^{2r^2}(1-e^{4r^2})` is negative for every :math:`r > 0`; the factor that
follows from the HCEXP MSE of Lemma 3.1 is :math:`W(r) = e^{2r^2}(1-e^{-4r^2}) = 2\sinh(2r^2)`,
and the lemma's "=" is a "≤" (docs page *Theory*, sections 4 and 5). The same argument gives
the bound of the positive, hyperbolic and trigonometric maps (Choromanski et al. (ICLR 2021),
Lemma 2) and of their orthogonal versions (the pair moment of docs page *Theory*, section 1).
Public through :mod:`rfkit.theory.bounds`.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np

from .._validation import caller_stacklevel, check_int, check_option, check_real
from ..exceptions import InvalidParameterError, NumericalOverflowError, VacuousBoundWarning
from ._orth_pair import orth_pair_gap
from ._special import orf_pair_count

__all__ = [
    "W",
    "max_relative_error",
    "MaxRelativeErrorBound",
    "BoundResult",
    "rel_rmse",
    "check_kind",
    "warn_if_vacuous",
    "KINDS",
    "TRIVIAL_BOUND",
]


class BoundResult:
    """Base of the frozen result dataclasses of :mod:`rfkit.theory.bounds`."""

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-serialisable)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]


#: The maps with a bound: CEXP/HCEXP (transform ``A``), Positive (PRF), Hyperbolic, Trig.
KINDS = ("hcexp", "cexp", "positive", "hyperbolic", "trig")
#: The projections with a bound (``"orthogonal"``: block-orthogonal, chi(d) norms; not for trig).
PROJECTIONS = ("iid", "orthogonal")
#: The relative RMS error of the estimate 0, at every pair: a bound at or above it says nothing.
TRIVIAL_BOUND = 1.0
_CEXP_LIKE = ("cexp", "positive")  # relative variance (e^s - 1)/m per direction


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


def check_kind(kind: Any, projection: Any, d: Any, owner: str) -> tuple[str, str, int | None]:
    """Check ``kind``, ``projection`` and (orthogonal only) the dimension ``d``."""
    kind = check_option(kind, "kind", owner, KINDS)
    projection = check_option(projection, "projection", owner, PROJECTIONS)
    if projection == "iid":
        return kind, projection, None
    if kind == "trig":
        raise InvalidParameterError(
            f"The `projection` parameter of {owner} must be 'iid' for kind='trig'; got 'orthogonal'. The "
            "orthogonal pair term of trig features is signed, and no bound over a ball is derived for it "
            "(its iid bound does not carry over)."
        )
    if d is None:
        raise InvalidParameterError(
            f"The `d` parameter of {owner} is needed for projection='orthogonal' (the block size); got None."
        )
    return kind, projection, check_int(d, "d", owner, low=1)


def _log_sinh(h: float) -> float:
    """log sinh(h) for h > 0, without overflow or cancellation."""
    return h + math.log(-math.expm1(-2.0 * h)) - math.log(2.0)


def _log_rel_var(s2: float, kind: str) -> float:
    """log of the relative variance per direction, MSE * m / SM^2, at squared norm s2 > 0."""
    if kind in _CEXP_LIKE:  # e^{s} - 1
        return s2 + math.log(-math.expm1(-s2))
    return math.log(2.0) + 2.0 * _log_sinh(0.5 * s2)  # cosh s - 1 = 2 sinh^2(s/2)


def rel_rmse(s2: float, m: int, kind: str, projection: str = "iid", d: int | None = None) -> float:
    r"""Relative RMS error :math:`\sqrt{\mathrm{MSE}}/\mathrm{SM}` at the worst pair, squared norm ``s2``.

    ``s2`` is :math:`\|z_A\|^2` (CEXP/HCEXP), :math:`\|x+y\|^2` (positive, hyperbolic) or
    :math:`\|x-y\|^2` (trig). Orthogonal: the iid value plus :math:`\frac{K}{m^2}(R(s)-1)`,
    :math:`R(s) = e^{-s}{}_1F_1(d;\tfrac d2;\tfrac s2)`, :math:`K` the ordered same-block pairs.
    """
    if s2 <= 0.0:
        return 0.0
    with np.errstate(over="ignore"):
        log_iid = _log_rel_var(s2, kind) - math.log(m)
        if projection == "orthogonal" and d is not None and d >= 2:
            K = float(orf_pair_count(np.asarray(m), d))
            if K > 0 and log_iid < 700.0:  # beyond, the pair term (>= -1) is below the float64 resolution
                gap = float(orth_pair_gap(d, np.asarray(s2), np.asarray(s2), np.asarray(s2)))
                rel = math.exp(log_iid) + K / (m * m) * gap
                return math.sqrt(max(rel, 0.0))
        val = math.exp(0.5 * log_iid) if 0.5 * log_iid < 709.0 else math.inf
    if not math.isfinite(val):
        raise NumericalOverflowError(
            f"The max-relative-error bound overflows float64 (squared norm up to {s2:.4g}); the bound is vacuous there."
        )
    return val


def warn_if_vacuous(bound: float, owner: str) -> bool:
    """True (with a :class:`~rfkit.exceptions.VacuousBoundWarning`) when ``bound >= TRIVIAL_BOUND``."""
    if bound < TRIVIAL_BOUND:
        return False
    warnings.warn(
        f"{owner}: the bound {bound:.4g} on the relative RMS error is vacuous: it is >= {TRIVIAL_BOUND:g}, "
        "the relative error of the estimate 0, which needs no features. Use more features or smaller radii.",
        VacuousBoundWarning,
        stacklevel=caller_stacklevel(),
    )
    return True


@dataclasses.dataclass(frozen=True)
class MaxRelativeErrorBound(BoundResult):
    """Result of :func:`max_relative_error`.

    Parameters
    ----------
    bound : float
        Upper bound on :math:`\\sup\\sqrt{\\mathrm{MSE}}/\\mathrm{SM}`.
    r_x, r_y : float
        Radii with :math:`\\|Ax\\|\\le r_x`, :math:`\\|A^{-T}y\\|\\le r_y` (``A = I`` but for CEXP/HCEXP).
    z_max : float
        :math:`r_x + r_y`, the largest possible :math:`\\|Ax + A^{-T}y\\|` (trig: :math:`\\|x - y\\|`).
    W : float
        ``bound * sqrt(2m)``: :math:`2\\sinh((r_x+r_y)^2/2)` for HCEXP, hyperbolic and trig
        (:math:`= W(r)` when :math:`r_x=r_y=r`); :math:`\\sqrt{2(e^{(r_x+r_y)^2}-1)}` for CEXP and positive.
    n_features : int
        The number of random features ``m``.
    kind : str
        The estimator the bound is for (one of ``"hcexp"``, ``"cexp"``, ``"positive"``,
        ``"hyperbolic"``, ``"trig"``).
    assumptions : str
        The assumptions under which the bound holds, in words.
    projection : str
        ``"iid"`` or ``"orthogonal"`` (block-orthogonal directions with :math:`\\chi(d)` norms).
    d : int or None
        The dimension (orthogonal projection only; None for iid).
    vacuous : bool
        True when ``bound >= 1``, the relative error of the estimate 0 (then a
        :class:`~rfkit.exceptions.VacuousBoundWarning` was emitted).
    """

    bound: float
    r_x: float
    r_y: float
    z_max: float
    W: float
    n_features: int
    kind: str
    assumptions: str
    projection: str = "iid"
    d: int | None = None
    vacuous: bool = False


_WORST = {
    "hcexp": "A x = A^-T y",
    "cexp": "A x = A^-T y",
    "positive": "x = y",
    "hyperbolic": "x = y",
    "trig": "x = -y",
}


def max_relative_error(
    r: float,
    n_features: int,
    *,
    r_y: float | None = None,
    kind: str = "hcexp",
    projection: str = "iid",
    d: int | None = None,
) -> MaxRelativeErrorBound:
    r"""Bound on the max relative RMS error of a random-feature map on a ball (Blackwelder (2024), Lemma 3.2, corrected).

    .. math::

        \epsilon_C(\widehat{\mathrm{SM}}^{\rm hcexp}_{A,m}) \le \frac{W(r)}{\sqrt{2m}},\qquad
        W(r) = e^{2r^2}(1-e^{-4r^2}) = 2\sinh(2r^2),

    for :math:`C` with :math:`\|Ax\|\le r`, :math:`\|A^{-\top}y\|\le r`. With separate
    radii: :math:`\frac{2}{\sqrt{2m}}\sinh\frac{s}{2}`, :math:`s = (r_x+r_y)^2`. Every map's
    relative MSE is an increasing function of one squared norm, bounded by :math:`s` on the set
    (triangle inequality), so its supremum is the value at :math:`s`:

    * ``"cexp"``: :math:`\mathrm{MSE}/\mathrm{SM}^2 = (e^{\|z_A\|^2}-1)/m`, :math:`z_A = Ax + A^{-\top}y`
      (Blackwelder (2024), Lemma 3.1).
    * ``"positive"`` (PRF, :math:`\phi^+`): the same with :math:`A = I`, :math:`z = x + y`
      (Choromanski et al. (ICLR 2021), Lemma 2): bound :math:`\sqrt{(e^{s}-1)/m}`, attained at :math:`x = y`.
    * ``"hcexp"``, ``"hyperbolic"`` (:math:`\phi^{++}`, :math:`A = I`): :math:`\frac2m\sinh^2(\|z_A\|^2/2)`
      (Choromanski et al. (ICLR 2021), Lemma 2; Likhosherstov et al. (NeurIPS 2022), hyperbolic
      OPRF with :math:`A = 0`): bound :math:`\frac{2}{\sqrt{2m}}\sinh\frac s2`.
    * ``"trig"``: :math:`\frac2m\sinh^2(\|x-y\|^2/2)` (Choromanski et al. (ICLR 2021), Lemma 2),
      :math:`\|x-y\|\le r_x+r_y`: the same bound, attained at :math:`x = -y` (no transform ``A``).
    * ``projection="orthogonal"`` (positive, hyperbolic, CEXP, HCEXP; :math:`\chi(d)` norms, blocks
      of ``d``): the relative MSE gains :math:`\frac{K}{m^2}(R(s)-1)`,
      :math:`R(s) = e^{-s}{}_1F_1(d;\tfrac d2;\tfrac s2)` the relative moment of an orthogonal pair and
      :math:`K = \sum_b k_b(k_b-1)` (docs page *Theory*, section 1; Choromanski et al. (ICLR 2021),
      App. F.4: :math:`R \le 1`, so it never exceeds the iid bound). That the orthogonal relative
      MSE still increases with :math:`s` is checked numerically (``d`` up to 512, :math:`s \le 60`;
      a unit test checks the bound grows with ``r``), not proved. Trig is refused: its orthogonal pair
      term is signed.

    Domain: the features are drawn independently of the data, and every query and key lies
    in the ball. The bound is on the RMS error (expectation over the features), not on realised
    errors. It is **vacuous** when it is ``>= 1`` (the relative error of the estimate 0, at every pair):
    then a :class:`~rfkit.exceptions.VacuousBoundWarning` is emitted and ``vacuous`` is True.

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
    kind : {"hcexp", "cexp", "positive", "hyperbolic", "trig"}, default="hcexp"
    projection : {"iid", "orthogonal"}, default="iid"
        ``"orthogonal"``: block-orthogonal directions with :math:`\chi(d)` norms (not for trig).
    d : int, optional
        The dimension, needed for ``projection="orthogonal"``.

    Returns
    -------
    MaxRelativeErrorBound

    Raises
    ------
    InvalidParameterError
        Negative or non-finite radii, ``n_features < 1``, unknown ``kind`` or ``projection``,
        orthogonal without ``d`` or with ``kind="trig"``.
    NumericalOverflowError
        When the bound exceeds the float range.

    Warns
    -----
    VacuousBoundWarning
        When the bound is ``>= 1``.
    """
    owner = "max_relative_error"
    rx = check_real(r, "r", owner, low=0.0)
    ry = rx if r_y is None else check_real(r_y, "r_y", owner, low=0.0)
    m = check_int(n_features, "n_features", owner, low=1)
    kind, projection, dim = check_kind(kind, projection, d, owner)
    s = rx + ry
    b = rel_rmse(s * s, m, kind, projection, dim)
    w = b * math.sqrt(2.0 * m)
    vac = warn_if_vacuous(b, owner)
    directions = "iid Gaussian" if projection == "iid" else f"block-orthogonal (d={dim}, chi(d) norms)"
    norms = (
        f"||A x|| <= {rx:g} and ||A^-T y|| <= {ry:g}"
        if kind in ("hcexp", "cexp")
        else f"||x|| <= {rx:g} and ||y|| <= {ry:g}"
    )
    return MaxRelativeErrorBound(
        bound=b,
        r_x=rx,
        r_y=ry,
        z_max=s,
        W=float(w),
        n_features=m,
        kind=kind,
        assumptions=(
            f"{kind.upper()} estimator with m={m} {directions} directions drawn independently of the data; every "
            f"query x and key y satisfies {norms} (worst pair: {_WORST[kind]} at the radii). Bounds the RMS "
            "relative error sqrt(MSE)/SM (expectation over the features), not realised errors."
        ),
        projection=projection,
        d=dim,
        vacuous=vac,
    )
