r"""Exact MSE and bias of the random-feature softmax-kernel estimators (THEORY.md §1-§4, §6).

Every random estimator of :math:`\mathrm{SM}(x,y)=e^{x^\top y}` in rfkit is
:math:`\widehat{\mathrm{SM}} = \frac1m\sum_i F_i` with :math:`F_i = s\,g(\omega_i^\top u)`.
With :math:`K=\sum_b k_b(k_b-1)` ordered same-block pairs (0 for iid directions),

.. math::

    \mathrm{MSE} = \frac{\mathrm{Var}F}{m} + \frac{K}{m^2}\,\mathrm{Cov}(F_1,F_2)
    + (\mathbb E F - \mathrm{SM})^2

(THEORY.md §3, boxed formula). The code works with the *relative* quantities
:math:`\mathrm{Var}F/\mathrm{SM}^2`, :math:`\mathrm{Cov}/\mathrm{SM}^2`,
:math:`\mathrm{bias}/\mathrm{SM}` in log space, so :func:`log_mse` is finite for
:math:`\|x+y\|^2` in the hundreds (and much beyond).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from .._validation import as_float_array, check_broadcast, check_int, check_same_dim
from ..exceptions import InvalidParameterError, NumericalOverflowError
from ..features import CEXP, HCEXP, OPRF, Hyperbolic, Limit, Positive, Taylor, Trig
from ._simplex import simplex_exp_pair_cov, simplex_trig_pair_cov
from ._special import (
    hyp0f1_neg,
    log_2sinh2_half,
    log_abs_expm1,
    log_expm1,
    log_hyp0f1_pos,
    log_orf_gap_series,
    orf_pair_count,
    signed_logsumexp,
    trig_orf_pair_minus_sq,
)

__all__ = [
    "mse",
    "log_mse",
    "bias",
    "relative_mse",
    "performer_orthogonal_bound",
    "CLOSED_FORM_PROJECTIONS",
    "register_closed_form",
]

#: Projections with an exact closed form.
CLOSED_FORM_PROJECTIONS = ("iid", "orthogonal", "orthogonal-fixed", "simplex")

#: Closed forms of feature-map classes outside the PRF/trig family of ``_parts``:
#: class -> (log_relative(fm, X, Y, d, m) -> log(MSE/SM^2), log_rel_bias or None).
_REGISTRY: dict[
    type, tuple[Callable[..., np.ndarray], Callable[..., tuple[np.ndarray, np.ndarray]] | None]
] = {}


def register_closed_form(
    cls: type,
    log_relative: Callable[..., np.ndarray],
    bias: Callable[..., tuple[np.ndarray, np.ndarray]] | None = None,
) -> None:
    r"""Register the closed-form MSE of a feature-map class with :func:`log_mse` and friends.

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
    X = as_float_array(x, "x", min_ndim=1, shape_hint="`x` must have shape (..., d).")
    Y = as_float_array(y, "y", min_ndim=1, shape_hint="`y` must have shape (..., d).")
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


def _parts(plan: _Plan, X: np.ndarray, Y: np.ndarray, d: int) -> _Parts:
    log_sm = np.sum(X * Y, axis=-1)
    fixed = plan.projection == "orthogonal-fixed"
    orth = plan.projection in ("orthogonal", "orthogonal-fixed") and d > 1
    simplex = plan.projection == "simplex" and d > 1
    a = plan.a
    if plan.family == "trig":
        D2 = np.sum((X - Y) ** 2, axis=-1)
        if not fixed:
            if a == 0.0:
                log_relvar = log_2sinh2_half(D2)
            elif a >= 0.125:
                log_relvar = np.full_like(D2, np.inf)
            else:  # GERF, s = -1: E[(est/SM)^2] = K(A) (e^{D2} + e^{-D2/(1-8A)}) / 2
                L = _log_k(d, a) + np.logaddexp(D2, -D2 / (1.0 - 8.0 * a)) - np.log(2.0)
                log_relvar = log_expm1(np.maximum(L, 0.0))
            cov = None
            if orth:
                cov = trig_orf_pair_minus_sq(d, D2)
            elif simplex:
                cov = simplex_trig_pair_cov(d, D2)
            return _Parts(log_sm, log_relvar, cov, None)
        if a != 0.0:
            raise InvalidParameterError(
                "GERF with s=-1 has no closed form for projection='orthogonal-fixed' (fixed norms); "
                "use 'iid', 'orthogonal' or 'simplex', or measure it with rfkit.theory.check."
            )
        b, v = d / 2.0, d * D2 / 4.0
        mu1 = hyp0f1_neg(b, v)
        musq = 0.5 * (1.0 + hyp0f1_neg(b, 4.0 * v))
        with np.errstate(divide="ignore"):
            log_relvar = D2 + np.log(np.maximum(musq - mu1**2, 0.0))
            cov = None
            if orth:
                c = hyp0f1_neg(b, 2.0 * v) - mu1**2
                cov = (np.sign(c), D2 + np.log(np.abs(c)))
            l1 = 0.5 * D2 + np.log(np.abs(mu1))
        bias = signed_logsumexp([l1, np.zeros_like(l1)], [np.sign(mu1), -1.0])
        return _Parts(log_sm, log_relvar, cov, bias)
    Xq, Yk = _transform(plan, X, Y)
    z2 = np.sum((Xq + Yk) ** 2, axis=-1)
    if not fixed:
        if plan.hyperbolic and a == 0.0:
            log_relvar = log_2sinh2_half(z2)
        elif a == 0.0:
            log_relvar = log_expm1(z2)
        elif a >= 0.125:
            log_relvar = np.full_like(z2, np.inf)
        elif plan.hyperbolic:  # hyperbolic OPRF: E[(est/SM)^2] = K(A) (e^{-z2} + e^{z2/(1-8A)}) / 2
            L = _log_k(d, a) + np.logaddexp(-z2, z2 / (1.0 - 8.0 * a)) - np.log(2.0)
            log_relvar = log_expm1(np.maximum(L, 0.0))
        else:
            L = _log_k(d, a) + z2 / (1.0 - 8.0 * a)
            log_relvar = log_expm1(np.maximum(L, 0.0))
        cov = None
        if orth:
            cov = (-np.ones_like(z2), -z2 + log_orf_gap_series(d, z2))
        elif simplex:
            cov = simplex_exp_pair_cov(d, z2, plan.hyperbolic)
        return _Parts(log_sm, log_relvar, cov, None)
    # fixed norms: e^{2a||w||^2} = e^{2ad} is a constant, so every moment is finite for a < 1/4
    b2 = 1.0 - 4.0 * a
    log_c = 0.5 * d * np.log1p(-4.0 * a) + 2.0 * a * d
    v = d * b2 * z2 / 4.0
    E1 = log_c + log_hyp0f1_pos(d / 2.0, v) - 0.5 * z2
    if plan.hyperbolic:
        E2 = 2.0 * log_c - z2 - np.log(2.0) + np.logaddexp(0.0, log_hyp0f1_pos(d / 2.0, 4.0 * v))
    else:
        E2 = 2.0 * log_c - z2 + log_hyp0f1_pos(d / 2.0, 4.0 * v)
    log_relvar = 2.0 * E1 + log_expm1(np.maximum(E2 - 2.0 * E1, 0.0))
    cov = None
    if orth:
        Ep = 2.0 * log_c - z2 + log_hyp0f1_pos(d / 2.0, 2.0 * v)
        s, lg = log_abs_expm1(Ep - 2.0 * E1)
        cov = (s, 2.0 * E1 + lg)
    bias = log_abs_expm1(E1)
    return _Parts(log_sm, log_relvar, cov, bias)


def _log_k(d: int, a: float) -> float:
    r""":math:`\log K(A) = \tfrac d2\log\frac{(1-4A)^2}{1-8A}` (the GERF/OPRF variance prefactor, :math:`A < 1/8`)."""
    return float(0.5 * d * (2.0 * np.log1p(-4.0 * a) - np.log1p(-8.0 * a)))


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
    arr = np.asarray(n_features)
    if arr.dtype.kind not in "iu" or np.any(arr < 1):
        if arr.ndim == 0:
            check_int(n_features, "n_features", owner, low=1)
        raise InvalidParameterError(
            f"The `n_features` parameter of {owner} must be ints >= 1. Got {n_features!r} instead."
        )
    return arr.astype(np.int64)


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


def log_mse(fm: Any, x: Any, y: Any, *, n_features: Any = None) -> np.ndarray:
    r"""Natural log of the exact MSE of ``draw.pairwise`` for each pair, overflow-free.

    Parameters
    ----------
    fm : Trig, Positive, Hyperbolic, CEXP, HCEXP, OPRF, GERF, SADERF or a registered map
        Feature-map specification with a concrete ``A`` (CEXP/HCEXP: array or
        ``"identity"``; OPRF/GERF/SADERF: a float, SADERF also ``psi``) and ``projection`` in
        ``{"iid", "orthogonal", "orthogonal-fixed", "simplex"}``.
    x, y : array_like of shape (..., d)
        Paired inputs; leading axes broadcast.
    n_features : int or array_like of int, optional
        Feature counts ``m`` to evaluate (broadcast against the pair shape);
        defaults to ``fm.n_features``.

    Returns
    -------
    ndarray of shape broadcast(x.shape[:-1], y.shape[:-1], n_features.shape)
        :math:`\log\mathrm{MSE}`; ``-inf`` where the MSE is exactly 0 (e.g. PRF at
        :math:`x=-y`), ``+inf`` for OPRF with :math:`A \ge 1/8` and :math:`\chi(d)`-normed
        directions (infinite variance; with fixed norms every moment is finite).

    Notes
    -----
    :math:`\log\mathrm{MSE} = 2x^\top y + \log\big(\rho_V/m + (K/m^2)\rho_C + \rho_B^2\big)` with the
    relative variance :math:`\rho_V`, pair covariance :math:`\rho_C` and bias :math:`\rho_B`
    (THEORY.md §1-§4, §6; Performer Lemma 2; seed 004 Lemma 3.1; Likhosherstov et al. 2022):

    * iid, PRF/CEXP: :math:`\rho_V = e^{\|z\|^2}-1`; hyperbolic/HCEXP :math:`2\sinh^2(\|z\|^2/2)`;
      trig :math:`2\sinh^2(\|\Delta\|^2/2)`; OPRF :math:`\big(\tfrac{(1-4A)^2}{1-8A}\big)^{d/2}e^{\|z\|^2/(1-8A)}-1`,
      with :math:`z = Ax + A^{-\top}y` for CEXP/HCEXP.
    * ``"orthogonal"`` (:math:`\chi(d)` norms): :math:`\rho_C = e^{-\|z\|^2}{}_1F_1(d;\tfrac d2;\tfrac{\|z\|^2}2)-1`
      for every exponential map (A-independent for OPRF), trig
      :math:`e^{\|\Delta\|^2}{}_1F_1(d;\tfrac d2;-\tfrac{\|\Delta\|^2}2)-1`; :math:`K=\sum_b k_b(k_b-1)`
      over the blocks of :func:`rfkit.projections.block_sizes` (exact for :math:`m>d`).
    * ``"simplex"`` (simplex random features, Reid et al. ICML 2023; :math:`\chi(d)` norms): the pair
      moment is :math:`\mathbb E_S\,{}_1F_1(d;\tfrac d2;(1+cS)\tfrac{\|z\|^2}2)`, :math:`c=-1/(d-1)`,
      :math:`S=\sin\psi`, :math:`\psi\propto\sin^{d-1}` on :math:`[0,\pi]` (hyperbolic maps and trig average
      :math:`\pm c`; trig with :math:`-\|\Delta\|^2`), evaluated by quadrature
      (:mod:`rfkit.theory._simplex`; docs/theory.md §1a). Same :math:`K` as ``"orthogonal"``.
    * hyperbolic OPRF (``OPRF(hyperbolic=True)``): :math:`\rho_V = \tfrac12K(A)(e^{-\|z\|^2} +
      e^{\|z\|^2/(1-8A)}) - 1`, :math:`K(A) = ((1-4A)^2/(1-8A))^{d/2}` (derived, docs/theory.md §1a).
      GERF and SADERF are registered from :mod:`rfkit.theory._gerf`.
    * ``"orthogonal-fixed"`` (norms :math:`\sqrt d`): moments from
      :math:`{}_0F_1(;\tfrac d2;\cdot)` (THEORY.md §3 table) and bias
      :math:`\rho_B = \mathrm{SMREG}/\mathrm{SM} - 1` (Performer Thm 1).

    Domain: any finite inputs; positive-series evaluation keeps relative error at
    a few :math:`10^{-13}` for :math:`\|z\|^2` up to ~1000 (series length grows like
    :math:`\|z\|^2`). The trig fixed-norm form loses relative accuracy near zeros of
    the Bessel function and for :math:`d\|\Delta\|^2 \ll 1` (cancellation in
    :math:`\mu_{sq}-\mu_1^2`).

    Raises
    ------
    InvalidParameterError
        Deterministic maps (see :func:`relative_truncation_error`), ``projection`` "qmc" /
        "structured" (no closed form), unresolved rule names for ``A``, bad ``n_features``.
    ShapeError, NonFiniteInputError
        Mismatched ``d`` or non-broadcastable pairs; NaN/inf inputs.
    """
    owner = "rfkit.theory.log_mse"
    if type(fm) in _REGISTRY:
        X, Y, d = _pair_iv(x, y, owner)
        return 2.0 * np.sum(X * Y, axis=-1) + _registered_relative(fm, X, Y, d, n_features, owner)
    plan = _plan(fm, owner)
    X, Y, d = _pair_iv(x, y, owner)
    m = _m_array(n_features, plan, owner)
    parts = _parts(plan, X, Y, d)
    rel = _log_relative(parts, m, d, plan.projection)
    return 2.0 * parts.log_sm + rel


def relative_mse(fm: Any, x: Any, y: Any, *, n_features: Any = None) -> np.ndarray:
    r""":math:`\mathrm{MSE}/\mathrm{SM}^2` (relative MSE) for each pair; see :func:`log_mse`.

    Raises :class:`~rfkit.exceptions.NumericalOverflowError` if it exceeds the float range.
    """
    owner = "rfkit.theory.relative_mse"
    if type(fm) in _REGISTRY:
        X, Y, d = _pair_iv(x, y, owner)
        return _exp(_registered_relative(fm, X, Y, d, n_features, owner), "relative_mse")
    plan = _plan(fm, owner)
    X, Y, d = _pair_iv(x, y, owner)
    m = _m_array(n_features, plan, owner)
    rel = _log_relative(_parts(plan, X, Y, d), m, d, plan.projection)
    return _exp(rel, "relative_mse")


def mse(fm: Any, x: Any, y: Any, *, n_features: Any = None) -> np.ndarray:
    r"""Exact MSE :math:`\mathbb E_\omega[(\widehat{\mathrm{SM}}(x,y)-e^{x^\top y})^2]` of ``draw.pairwise``.

    Same parameters, formulas, sources and domain as :func:`log_mse`, of which
    this is the exponential. For ``projection="orthogonal-fixed"`` the estimator is
    biased and the MSE is variance + bias².

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> x = np.array([0.3, -0.1, 0.2, 0.0]); y = np.array([0.1, 0.4, -0.2, 0.3])
    >>> float(rk.theory.mse(rk.features.Positive(16), x, y)) > 0
    True

    Raises
    ------
    NumericalOverflowError
        If the MSE exceeds the float range; use :func:`log_mse`.
    """
    return _exp(log_mse(fm, x, y, n_features=n_features), "mse")


def bias(fm: Any, x: Any, y: Any) -> np.ndarray:
    r"""Exact bias :math:`\mathbb E_\omega\widehat{\mathrm{SM}}(x,y) - \mathrm{SM}(x,y)` for each pair.

    Zero for ``projection`` "iid" and "orthogonal" (all estimators are unbiased:
    :math:`\omega_i\sim\mathcal N(0,I_d)` marginally). For ``"orthogonal-fixed"``
    (norms :math:`\sqrt d`): :math:`\mathrm{SMREG}(x,y)-\mathrm{SM}(x,y)` with
    :math:`\mathrm{SMREG}=\Lambda\,{}_0F_1(;\tfrac d2;\tfrac{d\|z\|^2}4)\le\mathrm{SM}`
    for the exponential maps (Performer Thm 1; THEORY.md §3; OPRF: with the extra factor
    :math:`(1-4A)^{d/2}e^{2Ad}` and :math:`\|z\|^2(1-4A)`), and
    :math:`e^{(\|x\|^2+\|y\|^2)/2}{}_0F_1(;\tfrac d2;-\tfrac{d\|\Delta\|^2}4)-\mathrm{SM}` for trig.

    Parameters
    ----------
    fm, x, y
        As in :func:`log_mse`.

    Returns
    -------
    ndarray of shape broadcast(x.shape[:-1], y.shape[:-1])
    """
    owner = "rfkit.theory.bias"
    if type(fm) in _REGISTRY:
        X, Y, d = _pair_iv(x, y, owner)
        bias_fn = _REGISTRY[type(fm)][1]
        if bias_fn is None:
            return np.zeros(np.broadcast_shapes(X.shape[:-1], Y.shape[:-1]))
        s, lg = bias_fn(fm, X, Y, d)
        return s * _exp(lg + np.sum(X * Y, axis=-1), "bias")
    plan = _plan(fm, owner)
    X, Y, d = _pair_iv(x, y, owner)
    parts = _parts(plan, X, Y, d)
    if parts.bias is None:
        return np.zeros(np.broadcast_shapes(X.shape[:-1], Y.shape[:-1]))
    s, lg = parts.bias
    return s * _exp(lg + parts.log_sm, "bias")


def performer_orthogonal_bound(x: Any, y: Any, n_features: int) -> np.ndarray:
    r"""Performer Theorem 2 upper bound on the MSE of orthogonal positive features (FAVOR+).

    .. math::

        \mathrm{MSE}(\widehat{\mathrm{SM}}^{\rm ort+}_m) \le \mathrm{MSE}(\widehat{\mathrm{SM}}^{+}_m)
        - \frac{2(m-1)}{m(d+2)}\Big(\mathrm{SM}(x,y) - e^{-\frac{\|x\|^2+\|y\|^2}2}\Big)^2

    Source: Choromanski et al., ICLR 2021, Theorem 2 (THEORY.md §3). A *bound*, not the
    exact value (use :func:`mse` with ``Positive(m, projection="orthogonal")``); it is
    tight to leading order :math:`\|x+y\|^4`.

    Domain: one orthogonal block, :math:`1 \le m \le d` (the theorem says nothing for
    :math:`m > d`).

    Raises
    ------
    InvalidParameterError
        If ``n_features`` is not an int in ``[1, d]``.
    """
    owner = "rfkit.theory.performer_orthogonal_bound"
    X, Y, d = _pair_iv(x, y, owner)
    m = check_int(n_features, "n_features", owner, low=1, high=d)
    iid = mse(Positive(m), X, Y)
    sm = _exp(np.sum(X * Y, -1), "performer_orthogonal_bound")
    lam = np.exp(-0.5 * (np.sum(X * X, -1) + np.sum(Y * Y, -1)))
    return iid - 2.0 * (m - 1) / (m * (d + 2.0)) * (sm - lam) ** 2


def _exp(logv: np.ndarray, where: str) -> np.ndarray:
    limit = np.log(np.finfo(np.float64).max)
    fin = logv[np.isfinite(logv)]
    if fin.size and np.max(fin) > limit:
        raise NumericalOverflowError(
            f"rfkit.theory.{where}: the value exp({float(np.max(fin)):.4g}) exceeds the float64 range; "
            "use rfkit.theory.log_mse (log space) instead."
        )
    return np.exp(logv)
