r"""Data-averaged optimal GERF parameter :math:`A` where the objective is not affine in the data.

For positive GERFs/OPRF (:math:`s=+1`) the log second moment is affine in :math:`\|x+y\|^2`, so
the data-averaged optimum has the closed form :func:`~rfkit.features.oprf_optimal_A`. Two
variants are not affine, and are solved here numerically (exactly, for the averaged objective):

* the hyperbolic OPRF (:math:`\pm\omega`, ``OPRF(hyperbolic=True)``):
  :math:`\mathbb E[(\widehat{\mathrm{SM}}/\mathrm{SM})^2] = \tfrac12 K(A)\big(e^{-\|z\|^2} + e^{\|z\|^2/(1-8A)}\big)`;
* GERF with :math:`s=-1` (the trigonometric branch, ``GERF(s=-1)``):
  :math:`\mathbb E[(\widehat{\mathrm{SM}}/\mathrm{SM})^2] = \tfrac12 K(A)\big(e^{\|\Delta\|^2} + e^{-\|\Delta\|^2/(1-8A)}\big)`,

with :math:`K(A) = \big(\frac{(1-4A)^2}{1-8A}\big)^{d/2}`, :math:`z = x+y`, :math:`\Delta = x-y`
(derivations: docs page *Theory*, section 1a, "GERF"). In :math:`u = 1/(1-8A) \in (0, \infty)` (i.e.
:math:`A < 1/8`, the finite-variance domain), :math:`K = \big(\frac{(u+1)^2}{4u}\big)^{d/2}` and the
objective, the mean over all query/key pairs of the log second moment (the criterion of
Likhosherstov et al. 2022/2023 for OPRF and SADERF),

.. math:: J(u) = \tfrac d2\log\frac{(u+1)^2}{4u} + \frac1{n_x n_y}\sum_{i,j}\log\tfrac12\big(e^{t_{ij}} + e^{-t_{ij}u}\big),
    \qquad t_{ij} = \|x_i - y_j\|^2\ (s=-1)\ \text{ or }\ -\|x_i + y_j\|^2\ (\text{hyperbolic}),

is minimised over :math:`\log u`: for the hyperbolic map, where :math:`J` is convex in
:math:`\log u`, by Newton's method on :math:`J'` (analytic derivatives, kept in a bracket); for
:math:`s=-1` by a grid search followed by bounded Brent refinement.
With a pair selection (``pairs="causal"``: :math:`j \le i` in each sequence; rfkit's own
weighting) the mean runs over the selected pairs only (:func:`rfkit.features.pair_values`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._backend import get_backend, to_numpy
from .._validation import as_float_array, check_same_dim
from ..exceptions import InvalidParameterError, ShapeError
from ._adaptive import oprf_optimal_A
from ._pairs import is_plain, pair_values, pooled

__all__ = ["gerf_optimal_A", "gerf_objective", "check_sign"]

_GRID = np.linspace(-20.0, 20.0, 161)  # log u


def check_sign(s: Any, owner: str) -> int:
    """The GERF sign ``s`` as the int 1 or -1, or InvalidParameterError."""
    if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)) or int(s) not in (1, -1):
        raise InvalidParameterError(
            f"The `s` parameter of {owner} must be 1 (positive features) or -1 (trigonometric features). "
            f"Got {s!r} instead."
        )
    return int(s)


def _points(X: Any, name: str) -> Any:
    bk = get_backend((name, X))
    arr = as_float_array(X, name, min_ndim=2, shape_hint=f"`{name}` must have shape (..., n, d).", backend=bk)
    xp = bk.xp
    flat = xp.reshape(xp.astype(arr, xp.float64), (-1, arr.shape[-1]))
    if flat.shape[0] == 0:
        raise ShapeError(f"`{name}` must contain at least one point; got shape {tuple(arr.shape)}.")
    return flat


def _pair_values(Q: Any, K: Any, sign: float) -> np.ndarray:
    r""":math:`\|x_i + \text{sign}\,y_j\|^2` for all pairs (leading axes pooled), float64 NumPy (n_x * n_y,)."""
    get_backend(("Q", Q), ("K", K))  # one library and device for both
    X, Y = _points(Q, "Q"), _points(K, "K")
    check_same_dim(X, Y, "Q", "K")
    xp = get_backend(("X", X)).xp
    sx = xp.sum(X * X, axis=1)
    sy = xp.sum(Y * Y, axis=1)
    t = sx[:, None] + sy[None, :] + (2.0 * sign) * (X @ xp.matrix_transpose(Y))
    return np.maximum(to_numpy(t).reshape(-1), 0.0)  # >= 0 exactly; the max removes round-off


def gerf_objective(A: Any, t: Any, dim: int) -> np.ndarray:
    r"""Mean log relative second moment :math:`J` at parameter(s) ``A`` for pair values ``t`` (see module docstring).

    ``t`` holds :math:`t_{ij}` (:math:`\|x-y\|^2` for :math:`s=-1`, :math:`-\|x+y\|^2` for the
    hyperbolic OPRF); returns :math:`\log\mathbb E[(\widehat{\mathrm{SM}}/\mathrm{SM})^2]` averaged over ``t``
    (``+inf`` for :math:`A \ge 1/8`).
    """
    A = np.asarray(A, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64).reshape(-1)
    out = np.full(A.shape, np.inf)
    ok = A < 0.125
    u = 1.0 / (1.0 - 8.0 * A[ok])
    out[ok] = _j(np.log(u), t, dim)
    return out


def _j(v: np.ndarray, t: np.ndarray, dim: int) -> np.ndarray:
    v = np.atleast_1d(v)
    u = np.exp(v)
    head = 0.5 * dim * (2.0 * np.log1p(u) - np.log(4.0) - v)
    # mean over pairs of log((e^t + e^{-t u}) / 2), in blocks of pairs
    acc = np.zeros_like(u)
    step = max(1, (1 << 20) // max(u.size, 1))
    for s in range(0, t.size, step):
        tt = t[s : s + step, None]
        acc += np.sum(np.logaddexp(tt, -tt * u[None, :]), axis=0)
    return head + acc / t.size - np.log(2.0)


def _dj(v: float, t: np.ndarray, dim: int) -> tuple[float, float]:
    r""":math:`J'(v)` and :math:`J''(v)` of the objective in :math:`v = \log u` (module docstring), one pass over ``t``.

    With :math:`\sigma_{ij} = 1/(1 + e^{t_{ij}(1+u)})` (the weight of :math:`e^{-t u}` in
    :math:`e^t + e^{-t u}`) and :math:`a_{ij} = -t_{ij} u`:
    :math:`J' = \tfrac d2\,\frac{u-1}{u+1} + \overline{a\sigma}` and
    :math:`J'' = \frac{d\,u}{(1+u)^2} + \overline{a\sigma + a^2\sigma(1-\sigma)}`.
    For the hyperbolic map (:math:`t \le 0`) :math:`e^{t(1+u)} \le 1`: no overflow.
    """
    u = float(np.exp(v))
    s1 = s2 = 0.0
    step = 1 << 16  # blocks of pairs that stay in the cache
    for k in range(0, t.size, step):
        tt = t[k : k + step]
        w = np.exp(tt * (1.0 + u))  # e^{-z}, z = -t (1 + u) >= 0
        sig = 1.0 / (1.0 + w)
        a_sig = (-u) * tt * sig
        s1 += float(np.sum(a_sig))
        s2 += float(np.sum(a_sig * (1.0 + (-u) * tt * w * sig)))  # a s + a^2 s (1 - s), 1 - s = w s
    n = t.size
    return 0.5 * dim * (u - 1.0) / (u + 1.0) + s1 / n, dim * u / (1.0 + u) ** 2 + s2 / n


def _convex_minimiser(t: np.ndarray, dim: int, lo: float, hi: float) -> float:
    r"""The minimiser over ``[lo, hi]`` of the hyperbolic objective, convex in :math:`v = \log u`: Newton's
    method on :math:`J'`, kept inside a bracket of the sign change (bisection where a step would
    leave it), to a step of 1e-12."""
    v = 0.0 if lo < 0.0 < hi else 0.5 * (lo + hi)
    for _ in range(200):
        d1, d2 = _dj(v, t, dim)
        if d1 > 0.0:
            hi = v
        else:
            lo = v
        new = v - d1 / d2 if d2 > 0.0 else np.inf
        if not lo < new < hi:
            new = 0.5 * (lo + hi)
        if abs(new - v) <= 1e-12 or hi - lo <= 1e-12:
            return float(new)
        v = new
    return float(v)  # pragma: no cover - Newton in a shrinking bracket converges long before


def gerf_optimal_A(
    Q: Any,
    K: Any,
    *,
    s: int = 1,
    hyperbolic: bool = False,
    pairs: Any = "all",
    key_padding_mask: Any = None,
    exclude: Any = None,
) -> float:
    r"""Data-averaged optimal GERF parameter :math:`A` (minimiser of the mean log second moment).

    Parameters
    ----------
    Q, K : array_like of shape (..., n, d)
        Query and key samples (leading axes pooled; every query is paired with every key).
    s : {1, -1}, default=1
        GERF sign: ``1`` positive features (OPRF), ``-1`` the trigonometric branch.
    hyperbolic : bool, default=False
        The :math:`\pm\omega` (hyperbolic) positive map; only with ``s=1``.
    pairs : {"all", "sequence", "causal"} or array of bool (..., n, M), default="all"
        The pairs :math:`J` averages over: ``"all"`` every query with every key (leading axes
        pooled; the papers' objective); otherwise the selection of
        :func:`rfkit.features.pair_values` (``Q``, ``K`` keep their sequence axis).
    key_padding_mask : array of bool (..., M), optional
        True marks padded keys (in no pair).
    exclude : (idx, valid), optional
        Pairs left out.

    Returns
    -------
    float
        :math:`A^* < 1/8`. ``s=1, hyperbolic=False``: the closed form of
        :func:`oprf_optimal_A` (:math:`A^* \le 0`). Otherwise the minimiser of :math:`J` over
        :math:`A < 1/8` (module docstring), found over all :math:`n_x n_y` pairs, in
        :math:`v = \log(1/(1-8A))` over :math:`[-20, 20]`: for the hyperbolic map (:math:`J` convex
        in :math:`v`) by Newton's method on :math:`J'` kept in a bracket, to a step of 1e-12; for
        ``s=-1`` by a grid of step 0.25 then bounded Brent refinement (``xatol`` 1e-12).
        For ``s=-1`` the optimum is :math:`\ge 0` (with :math:`A = 0`, plain trig features, at
        :math:`x = y`); for the hyperbolic map it lies between the positive OPRF optimum and 0.

    Notes
    -----
    Cost :math:`O(n_x n_y)` per pass over the pairs: for the hyperbolic map one pass (an
    exponential per pair) per Newton step, 3-9 steps in a one-off check on Gaussian data; for
    ``s=-1`` one evaluation of :math:`J` per grid point (161) and per Brent step. The pair values
    are formed in the data's library and device and brought to the host once.
    """
    s = check_sign(s, "gerf_optimal_A")
    if not isinstance(hyperbolic, (bool, np.bool_)):
        raise InvalidParameterError(
            f"The `hyperbolic` parameter of gerf_optimal_A must be a bool. Got {hyperbolic!r} instead."
        )
    sel = {"pairs": pairs, "key_padding_mask": key_padding_mask, "exclude": exclude}
    if s == 1 and not hyperbolic:
        return oprf_optimal_A(Q, K, **sel)
    if s == -1 and hyperbolic:
        raise InvalidParameterError(
            "gerf_optimal_A: `hyperbolic=True` needs s=1 (with s=-1 the +/-omega features repeat the "
            "cosine ones). Got s=-1, hyperbolic=True instead."
        )
    if is_plain(pairs, exclude):
        Q, K = pooled(Q, K, key_padding_mask)
        t = _pair_values(Q, K, -1.0) if s == -1 else -_pair_values(Q, K, 1.0)
    else:
        t = pair_values(Q, K, -1.0, **sel) if s == -1 else -pair_values(Q, K, 1.0, **sel)
    dim = int(Q.shape[-1] if hasattr(Q, "shape") else np.shape(Q)[-1])
    if s == 1:
        # The hyperbolic objective is convex in v = log u (a softplus term plus log(e^-a + e^(a e^v)),
        # a convex increasing function of the convex a e^v): Newton's method on J' over the grid's
        # range finds its minimiser in a few passes over the pairs (a grid and Brent's method took
        # about 23 evaluations of J, each an exp and a log1p per pair)
        v = _convex_minimiser(t, dim, float(_GRID[0]), float(_GRID[-1]))
        return float(-np.expm1(-v) / 8.0)  # A = (1 - 1/u) / 8
    # s = -1: the minimiser lies within one step (0.25) of the best grid point
    grid = _GRID
    J = _j(grid, t, dim)
    k = int(np.argmin(J))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]
    from scipy.optimize import minimize_scalar  # SciPy's optimize loads only when asked for

    res = minimize_scalar(
        lambda v: float(_j(np.asarray([v]), t, dim)[0]),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-12},
    )
    v = float(res.x) if res.fun <= J[k] else float(grid[k])
    return float(-np.expm1(-v) / 8.0)  # A = (1 - 1/u) / 8
