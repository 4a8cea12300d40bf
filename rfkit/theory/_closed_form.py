r"""The pieces every closed-form MSE is assembled from.

Every random estimator of :math:`\mathrm{SM}(x,y)=e^{x^\top y}` in rfkit is
:math:`\widehat{\mathrm{SM}} = \frac1m\sum_i F_i` with :math:`F_i = s\,g(\omega_i^\top u)`.
With :math:`K=\sum_b k_b(k_b-1)` ordered same-block pairs (0 for iid directions),

.. math::

    \mathrm{MSE} = \frac{\mathrm{Var}F}{m} + \frac{K}{m^2}\,\mathrm{Cov}(F_1,F_2)
    + (\mathbb E F - \mathrm{SM})^2

(docs page *Theory*, section 1). This module holds what the formulas of the map families
share: the registry of closed forms of other map classes (:func:`register_mse_formula`), the
plan of a built-in map (:class:`_Plan`: family, projection, parameter, transform), the
relative parts :class:`_Parts` (:math:`\mathrm{Var}F/\mathrm{SM}^2`, :math:`\mathrm{Cov}/\mathrm{SM}^2`,
:math:`\mathrm{bias}/\mathrm{SM}`, in log space) and their sum :func:`_log_relative`. The parts
of the built-in families are computed in :mod:`rfkit.theory._prf_parts`.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .._params import check_ints
from .._validation import check_broadcast, check_same_dim, host_float_array
from ..exceptions import InvalidParameterError, NumericalOverflowError, RFKitDeprecationWarning
from ..features import CEXP, HCEXP, OPRF, Hyperbolic, Limit, Positive, Taylor, Trig
from ._special import orf_pair_count, signed_logsumexp

__all__ = ["CLOSED_FORM_PROJECTIONS", "register_mse_formula"]

#: Projections with an exact closed form.
CLOSED_FORM_PROJECTIONS = ("iid", "orthogonal", "orthogonal-fixed", "simplex")

#: Closed forms of feature-map classes outside the PRF/trig family of ``_parts``:
#: class -> (log_relative(fm, X, Y, d, m) -> log(MSE/SM^2), log_rel_bias or None).
_REGISTRY: dict[
    type, tuple[Callable[..., np.ndarray], Callable[..., tuple[np.ndarray, np.ndarray]] | None]
] = {}


def register_mse_formula(  # numpydoc ignore=PR02
    cls: type,  # documented: numpydoc's PR02 drops a first argument named cls as if a classmethod's
    log_relative: Callable[..., np.ndarray],
    bias: Callable[..., tuple[np.ndarray, np.ndarray]] | None = None,
) -> None:
    r"""Register the closed-form MSE of a feature-map class with :func:`log_mse` and friends.

    This is the theory-side registry, keyed by class, that :func:`mse`, :func:`log_mse`,
    :func:`relative_mse` and :func:`bias` dispatch on. A study's record of a closed form, keyed
    by the map's name, is :func:`rfkit.study.register_closed_form`.

    Parameters
    ----------
    cls : type
        The feature-map class (its instances dispatch here; subclasses do not).
    log_relative : callable
        ``log_relative(fm, X, Y, d, m) -> ndarray``: :math:`\log(\mathrm{MSE}/\mathrm{SM}^2)`
        for float64 pairs ``X``, ``Y`` of shape (..., d) and feature counts ``m`` (an int64
        array broadcasting against the pair shape). Raise
        :class:`~rfkit.exceptions.InvalidParameterError` for settings without a closed form.
    bias : callable, optional
        ``bias(fm, X, Y, d) -> (sign, log|bias/SM|)``; omitted for unbiased estimators.
    """
    _REGISTRY[cls] = (log_relative, bias)


def register_closed_form(
    cls: type,
    log_relative: Callable[..., np.ndarray],
    bias: Callable[..., tuple[np.ndarray, np.ndarray]] | None = None,
) -> None:
    """Deprecated alias of :func:`register_mse_formula` (same arguments), kept for one release.

    Warns
    -----
    RFKitDeprecationWarning
        Always; the message names :func:`register_mse_formula`.
    """
    warnings.warn(
        "rfkit.theory.register_closed_form(cls, log_relative, bias) is deprecated and will be removed "
        "in the next release; call rfkit.theory.register_mse_formula(cls, log_relative, bias) instead "
        "(rfkit.study.register_closed_form, which takes a ClosedFormRecord, is unchanged).",
        RFKitDeprecationWarning,
        stacklevel=2,
    )
    register_mse_formula(cls, log_relative, bias)


@dataclasses.dataclass(frozen=True)
class _Plan:
    family: str  # "exp" or "trig"
    projection: str
    n_features: int
    hyperbolic: bool = False
    a: float = 0.0  # OPRF / GERF parameter (exp family; trig family: GERF with s = -1)
    A: np.ndarray | None = None  # CEXP/HCEXP transform (diag (d,) or full (d, d))


def _plan(fm: Any, owner: str) -> _Plan:
    if isinstance(fm, (Taylor, Limit)):
        raise InvalidParameterError(
            f"{owner}: {type(fm).__name__} is deterministic (zero variance); its error is the "
            "truncation bias. Use rfkit.theory.relative_truncation_error / truncation_error_bound / truncated_kernel instead."
        )
    if isinstance(fm, Trig):
        fam, hyp, a, A = "trig", False, 0.0, None
    elif isinstance(fm, (CEXP, HCEXP)):
        if fm.needs_data:
            raise InvalidParameterError(
                f"{owner}: {type(fm).__name__}(A={fm.A!r}) is a rule resolved from data; the MSE needs "
                "a concrete A. Call fm.fit(Q, K) first (or pass an explicit A)."
            )
        A = None if isinstance(fm.A, str) else np.asarray(fm.A, dtype=np.float64)
        fam, hyp, a = "exp", isinstance(fm, HCEXP), 0.0
    elif isinstance(fm, OPRF):
        if fm.A is None:
            raise InvalidParameterError(
                f"{owner}: OPRF(A=None) resolves A* from data; the MSE needs a concrete A. "
                "Call fm.fit(Q, K) first or pass A explicitly."
            )
        fam, hyp, a, A = "exp", bool(fm.hyperbolic), float(fm.A), None
    elif isinstance(fm, (Positive, Hyperbolic)):
        fam, hyp, a, A = "exp", isinstance(fm, Hyperbolic), 0.0, None
    else:
        raise InvalidParameterError(
            f"{owner}: no closed form for feature map {fm!r}; supported: Trig, Positive, Hyperbolic, "
            "CEXP, HCEXP, OPRF."
        )
    proj = fm.projection
    if proj not in CLOSED_FORM_PROJECTIONS:
        raise InvalidParameterError(
            f"{owner}: projection={proj!r} has no closed-form MSE (only {list(CLOSED_FORM_PROJECTIONS)}); "
            "measure it with rfkit.theory.check(...) instead."
        )
    return _Plan(fam, proj, int(fm.n_features), hyp, a, A)


def _pair_iv(x: Any, y: Any, owner: str) -> tuple[np.ndarray, np.ndarray, int]:
    X = host_float_array(x, "x", min_ndim=1, shape_hint="`x` must have shape (..., d).")
    Y = host_float_array(y, "y", min_ndim=1, shape_hint="`y` must have shape (..., d).")
    check_same_dim(X, Y, "x", "y")
    check_broadcast({"x": X.shape[:-1], "y": Y.shape[:-1]})
    if X.shape[-1] == 0:
        raise InvalidParameterError(f"{owner}: `x` and `y` must have d >= 1; got shape {X.shape}.")
    return X.astype(np.float64), Y.astype(np.float64), int(X.shape[-1])


def _transform(plan: _Plan, X: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if plan.A is None:
        return X, Y
    if plan.A.ndim == 1:
        return X * plan.A, Y / plan.A
    return X @ plan.A.T, Y @ np.linalg.inv(plan.A)


@dataclasses.dataclass(frozen=True)
class _Parts:
    """Relative parts, each ``(sign, log|value|)``; ``cov``/``bias`` None when identically 0."""

    log_sm: np.ndarray
    log_relvar: np.ndarray
    cov: tuple[np.ndarray, np.ndarray] | None
    bias: tuple[np.ndarray, np.ndarray] | None


def _registered_relative(
    fm: Any, X: np.ndarray, Y: np.ndarray, d: int, n_features: Any, owner: str
) -> np.ndarray:
    default = getattr(fm, "n_features", None)
    if n_features is None and default is None:
        raise InvalidParameterError(f"{owner}: {type(fm).__name__} has no `n_features`; pass n_features=.")
    m = _m_array(default if n_features is None else n_features, None, owner)
    return _REGISTRY[type(fm)][0](fm, X, Y, d, m)


def _m_array(n_features: Any, plan: _Plan | None, owner: str) -> np.ndarray:
    if n_features is None:
        assert plan is not None
        return np.asarray(plan.n_features, dtype=np.int64)
    return check_ints(n_features, "n_features", owner).astype(np.int64)


def _log_relative(parts: _Parts, m: np.ndarray, d: int, projection: str) -> np.ndarray:
    logm = np.log(m.astype(np.float64))
    logs = [parts.log_relvar - logm]
    signs: list[Any] = [1.0]
    if parts.cov is not None and projection != "iid":
        K = orf_pair_count(m, d)
        with np.errstate(divide="ignore"):
            logs.append(parts.cov[1] + np.log(K) - 2.0 * logm)
        signs.append(parts.cov[0])
    if parts.bias is not None:
        logs.append(2.0 * parts.bias[1])
        signs.append(np.abs(parts.bias[0]))
    if np.any(np.isposinf(parts.log_relvar)):
        inf = np.isposinf(
            np.broadcast_to(parts.log_relvar, np.broadcast_shapes(parts.log_relvar.shape, m.shape))
        )
    else:
        inf = None
    with np.errstate(invalid="ignore"):
        sign, out = signed_logsumexp(logs, signs)
    out = np.where(sign > 0, out, -np.inf)  # total is >= 0; exact 0 (e.g. x = -y for PRF) gives -inf
    if inf is not None:
        out = np.where(inf, np.inf, out)
    return out


def _exp(logv: np.ndarray, where: str) -> np.ndarray:
    limit = np.log(np.finfo(np.float64).max)
    fin = logv[np.isfinite(logv)]
    if fin.size and np.max(fin) > limit:
        raise NumericalOverflowError(
            f"rfkit.theory.{where}: the value exp({float(np.max(fin)):.4g}) exceeds the float64 range; "
            "use rfkit.theory.log_mse (log space) instead."
        )
    return np.exp(logv)
