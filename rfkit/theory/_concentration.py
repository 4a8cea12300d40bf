r"""Concentration versions of the max-relative-error bound: with probability ``p`` over the data.

* :func:`chi2_concentration` - Blackwelder (2024), Theorem 3.3, restated precisely (Gaussian
  queries and keys with known means and covariances).
* :func:`hotelling_concentration` - the same with estimated means and covariances
  (Hotelling :math:`T^2 \to F` quantile, union bound), derived here.

Both find radii :math:`r_x, r_y` that hold every transformed query and key with probability
``p`` and pass them to the bound of :mod:`rfkit.theory._max_error` (docs page *Theory*,
section 4). Public through :mod:`rfkit.theory.bounds`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from .._validation import check_int, check_option, check_real, host_float_array
from ..exceptions import InvalidParameterError, NumericalOverflowError, ShapeError, SingularMatrixError
from ._max_error import BoundResult, check_kind, rel_rmse, warn_if_vacuous
from ._special import scipy_special

__all__ = ["chi2_concentration", "hotelling_concentration", "ConcentrationBound"]


@dataclasses.dataclass(frozen=True)
class ConcentrationBound(BoundResult):
    """Result of :func:`chi2_concentration` / :func:`hotelling_concentration`.

    Parameters
    ----------
    bound : float
        :math:`W(r)/\\sqrt{2m}`, holding with probability >= ``p`` over the data.
    bound_separate : float
        Tighter :math:`\\frac{2}{\\sqrt{2m}}\\sinh\\frac{(r_x+r_y)^2}{2}` under the same event.
    p, q : float
        Target probability and the per-event level (:math:`p^{1/(2s)}` for the exact
        theorem, :math:`1-(1-p)/(2s)` (union bound) with estimated parameters).
    r, r_x, r_y : float
        :math:`r=\\max(r_x, r_y)`, :math:`r_x=\\sqrt{\\lambda_x Q_x}+\\|\\mu_{Ax}\\|`, likewise :math:`r_y`.
    lambda_x, lambda_y : float
        Largest eigenvalues of :math:`A\\Sigma_xA^\\top` and :math:`A^{-\\top}\\Sigma_yA^{-1}`.
    quantile_x, quantile_y : float
        Threshold :math:`Q` on the squared Mahalanobis distance for queries / keys.
    mean_x, mean_y : tuple of float
        Transformed means :math:`A\\mu_x`, :math:`A^{-\\top}\\mu_y`.
    n_points : int
        ``s`` (points per side covered).
    n_features : int
        The number of random features ``m``.
    method : str
        "chi2" or "hotelling-new" / "hotelling-in-sample".
    assumptions : str
        The assumptions under which the bound holds, in words.
    kind : str
        The map the bound is for (see :func:`~rfkit.theory.bounds.max_relative_error`).
    projection : str
        ``"iid"`` or ``"orthogonal"``.
    vacuous : bool
        True when ``bound >= 1``, the relative error of the estimate 0 (a
        :class:`~rfkit.exceptions.VacuousBoundWarning` was emitted).
    """

    bound: float
    bound_separate: float
    p: float
    q: float
    r: float
    r_x: float
    r_y: float
    lambda_x: float
    lambda_y: float
    quantile_x: float
    quantile_y: float
    mean_x: tuple[float, ...]
    mean_y: tuple[float, ...]
    n_points: int
    n_features: int
    method: str
    assumptions: str
    kind: str = "hcexp"
    projection: str = "iid"
    vacuous: bool = False


def _check_A(A: Any, d: int, owner: str) -> tuple[np.ndarray, np.ndarray]:
    """Return (A, A^{-1}) as full (d, d) matrices; None means the identity."""
    if A is None or (isinstance(A, str) and A == "identity"):
        return np.eye(d), np.eye(d)
    if isinstance(A, str):
        raise InvalidParameterError(
            f"The `A` parameter of {owner} must be None, 'identity', a diagonal (d,) or a (d, d) array. "
            f"Got {A!r} instead (resolve rule names with rfkit.features.adaptive_A)."
        )
    arr = host_float_array(A, "A")
    if arr.ndim == 1 and arr.shape[0] == d:
        arr = np.diag(arr)
    if arr.shape != (d, d):
        raise ShapeError(
            f"The `A` parameter of {owner} must have shape ({d},) or ({d}, {d}); got {arr.shape}."
        )
    sv = np.linalg.svd(arr, compute_uv=False)
    if sv.min() <= sv.max() * d * np.finfo(np.float64).eps:
        raise SingularMatrixError(
            f"The `A` parameter of {owner} is singular (smallest singular value {sv.min():.3g}); "
            "the bound needs A^-T."
        )
    return arr.astype(np.float64), np.linalg.inv(arr)


def _check_mean_cov(mean: Any, cov: Any, nm: str, nc: str, owner: str) -> tuple[np.ndarray, np.ndarray]:
    mu = host_float_array(mean, nm)
    if mu.ndim != 1 or mu.size == 0:
        raise ShapeError(f"The `{nm}` parameter of {owner} must be a vector (d,); got shape {mu.shape}.")
    d = mu.shape[0]
    S = host_float_array(cov, nc)
    if S.shape != (d, d):
        raise ShapeError(
            f"The `{nc}` parameter of {owner} must have shape ({d}, {d}) to match `{nm}` (d={d}); got {S.shape}."
        )
    if not np.allclose(S, S.T, rtol=1e-10, atol=1e-12 * max(1.0, float(np.max(np.abs(S))))):
        raise InvalidParameterError(f"The `{nc}` parameter of {owner} must be symmetric.")
    try:
        np.linalg.cholesky(S)
    except np.linalg.LinAlgError:
        ev = float(np.linalg.eigvalsh(S).min())
        raise InvalidParameterError(
            f"The `{nc}` parameter of {owner} must be positive definite; its smallest eigenvalue is {ev:.4g}."
        ) from None
    return mu.astype(np.float64), S.astype(np.float64)


@dataclasses.dataclass(frozen=True)
class _Problem:
    """The checked inputs both theorems share: transformed-space ingredients, ``p`` and ``m``."""

    A: np.ndarray
    A_inv: np.ndarray
    mean: tuple[np.ndarray, np.ndarray]  # of x and of y
    cov: tuple[np.ndarray, np.ndarray]
    p: float
    m: int
    kind: str = "hcexp"
    projection: str = "iid"

    @property
    def d(self) -> int:
        return self.A.shape[0]


def _problem(
    x: tuple[np.ndarray, np.ndarray],
    y: tuple[np.ndarray, np.ndarray],
    names: tuple[str, str],
    A: Any,
    p: Any,
    n_features: Any,
    owner: str,
    kind: Any = "hcexp",
    projection: Any = "iid",
) -> _Problem:
    """Check the dimensions agree, ``A`` is invertible, ``p`` in (0, 1), ``n_features >= 1`` and the kind."""
    (mx, Sx), (my, Sy) = x, y
    if mx.shape != my.shape:
        raise ShapeError(
            f"`{names[0]}` and `{names[1]}` must have the same dimension d: {mx.shape[0]} != {my.shape[0]}."
        )
    kind, projection, _ = check_kind(kind, projection, mx.shape[0], owner)
    Am, Ainv = _check_A(A, mx.shape[0], owner)
    if kind not in ("hcexp", "cexp") and not np.array_equal(Am, np.eye(Am.shape[0])):
        raise InvalidParameterError(
            f"The `A` parameter of {owner} must be None or the identity for kind={kind!r} (only CEXP and HCEXP "
            "transform the inputs); got a non-identity A. Use kind='cexp' (positive) or 'hcexp' (hyperbolic)."
        )
    pp = check_real(p, "p", owner, low=0.0, high=1.0, closed="neither")
    m = check_int(n_features, "n_features", owner, low=1)
    return _Problem(
        A=Am, A_inv=Ainv, mean=(mx, my), cov=(Sx, Sy), p=pp, m=m, kind=kind, projection=projection
    )


def _assemble(
    pr: _Problem, Q: tuple[float, float], q: float, s: int, method: str, assumptions: str
) -> ConcentrationBound:
    """The bound from the checked inputs and the thresholds ``Q`` on the Mahalanobis distances of x and y."""
    Am, Ainv = pr.A, pr.A_inv
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is detected below, never a warning
        Cx, Cy = Am @ pr.cov[0] @ Am.T, Ainv.T @ pr.cov[1] @ Ainv
        mx, my = Am @ pr.mean[0], Ainv.T @ pr.mean[1]  # transformed means A mu_x, A^-T mu_y
        finite = all(np.all(np.isfinite(a)) for a in (Cx, Cy, mx, my))
        if finite:
            lam_x = float(np.linalg.eigvalsh(Cx).max())
            lam_y = float(np.linalg.eigvalsh(Cy).max())
            r_x = float(np.sqrt(lam_x * Q[0]) + np.linalg.norm(mx))
            r_y = float(np.sqrt(lam_y * Q[1]) + np.linalg.norm(my))
            finite = math.isfinite(r_x) and math.isfinite(r_y)
    if not finite:
        raise NumericalOverflowError(
            f"{method.split('-')[0]}_concentration: the radii r_x, r_y of the transformed points (A x, A^-T y from `A`, the "
            "means and covariances) overflow float64; the bound is vacuous there. Rescale `A` or the data."
        )
    r = max(r_x, r_y)
    args = (pr.m, pr.kind, pr.projection, pr.d)
    bound = rel_rmse(4.0 * r * r, *args)
    return ConcentrationBound(
        bound=bound,
        bound_separate=rel_rmse((r_x + r_y) ** 2, *args),
        p=pr.p,
        q=q,
        r=r,
        r_x=r_x,
        r_y=r_y,
        lambda_x=lam_x,
        lambda_y=lam_y,
        quantile_x=Q[0],
        quantile_y=Q[1],
        mean_x=tuple(float(v) for v in mx),
        mean_y=tuple(float(v) for v in my),
        n_points=s,
        n_features=pr.m,
        method=method,
        assumptions=assumptions,
        kind=pr.kind,
        projection=pr.projection,
        vacuous=warn_if_vacuous(bound, f"{method.split('-')[0]}_concentration"),
    )


def chi2_concentration(
    mean_x: Any,
    cov_x: Any,
    mean_y: Any,
    cov_y: Any,
    A: Any,
    n_points: int,
    p: float,
    n_features: int,
    *,
    kind: str = "hcexp",
    projection: str = "iid",
) -> ConcentrationBound:
    r"""Blackwelder (2024), Theorem 3.3, restated precisely: a max-relative-error bound holding with probability ``p``.

    :math:`x_1..x_s \sim\mathcal N(\mu_x,\Sigma_x)`, :math:`y_1..y_s\sim\mathcal N(\mu_y,\Sigma_y)` all
    independent, :math:`A` invertible, :math:`q = p^{1/(2s)}`, :math:`\chi^2_d(q)` the
    :math:`q`-quantile,

    .. math::

        r = \max\Big(\sqrt{\lambda_{\max}(A\Sigma_xA^\top)\chi^2_d(q)} + \|A\mu_x\|,\
        \sqrt{\lambda_{\max}(A^{-\top}\Sigma_yA^{-1})\chi^2_d(q)} + \|A^{-\top}\mu_y\|\Big).

    Then with probability :math:`\ge p` over the data,
    :math:`\max_{i,j}\sqrt{\mathrm{MSE}(\widehat{\mathrm{SM}}^{\rm hcexp}_{A,m}(x_i,y_j))}/\mathrm{SM}(x_i,y_j)
    \le W(r)/\sqrt{2m}`. Proof (docs page *Theory*, section 4): the :math:`2s` Mahalanobis
    events are independent with probability :math:`q` each; Rayleigh quotient; triangle
    inequality; :func:`max_relative_error`. The bound is on RMS errors (over features), not
    realised errors: the printed theorem says "largest observed relative error", corrected here
    (docs page *Theory*, section 5).

    Every map of :func:`~rfkit.theory.bounds.max_relative_error` (``kind``, ``projection``) has
    the same proof: its relative MSE grows with one norm (:math:`\|z_A\|`, :math:`\|x+y\|` or, trig,
    :math:`\|x-y\|`), at most :math:`r_x + r_y` on the event. Positive, hyperbolic and trig maps
    have no transform: ``A`` must then be None or the identity. A bound ``>= 1`` is vacuous (the
    estimate 0 has relative error 1) and warns with :class:`~rfkit.exceptions.VacuousBoundWarning`.

    Parameters
    ----------
    mean_x, cov_x : array_like (d,), (d, d)
        Query distribution (covariance symmetric positive definite).
    mean_y, cov_y : array_like (d,), (d, d)
        Key distribution.
    A : None, "identity", array_like (d,) (diagonal) or (d, d)
        Invertible transform of CEXP/HCEXP.
    n_points : int
        ``s`` >= 1 queries and ``s`` keys.
    p : float
        Probability in (0, 1).
    n_features : int
        ``m`` >= 1.
    kind : {"hcexp", "cexp", "positive", "hyperbolic", "trig"}, default="hcexp"
        The map (see :func:`~rfkit.theory.bounds.max_relative_error`).
    projection : {"iid", "orthogonal"}, default="iid"
        Directions (orthogonal: :math:`\chi(d)` norms; not for trig).

    Returns
    -------
    ConcentrationBound

    Raises
    ------
    InvalidParameterError
        ``p`` outside (0, 1), ``n_points < 1``, ``n_features < 1``, covariance not
        symmetric positive definite, unknown ``kind``/``projection``, non-identity ``A`` for a
        map without transform.
    SingularMatrixError
        Singular ``A``.
    ShapeError
        Inconsistent dimensions.

    Warns
    -----
    VacuousBoundWarning
        When the bound is ``>= 1``.
    """
    owner = "chi2_concentration"
    pr = _problem(
        _check_mean_cov(mean_x, cov_x, "mean_x", "cov_x", owner),
        _check_mean_cov(mean_y, cov_y, "mean_y", "cov_y", owner),
        ("mean_x", "mean_y"),
        A,
        p,
        n_features,
        owner,
        kind,
        projection,
    )
    s = check_int(n_points, "n_points", owner, low=1)
    q = float(np.exp(np.log(pr.p) / (2 * s)))
    # the chi-squared quantile as scipy.stats.chi2.ppf computes it (bit for bit), without importing
    # SciPy's stats module (most of a second)
    Qd = float(2.0 * scipy_special().gammaincinv(pr.d / 2.0, q))
    return _assemble(
        pr,
        (Qd, Qd),
        q,
        s,
        "chi2",
        f"x_1..x_{s} ~ N(mean_x, cov_x) and y_1..y_{s} ~ N(mean_y, cov_y), all independent, with known "
        f"parameters; {pr.kind.upper()} with m={pr.m} {pr.projection} Gaussian-marginal directions. With probability >= {pr.p:g} over the "
        "data, every ||A x_i|| <= r_x and ||A^-T y_j|| <= r_y, hence max_ij sqrt(MSE)/SM <= bound. "
        "RMS (over features) relative error, not realised error.",
    )


def _sample_stats(Z: Any, name: str, owner: str) -> tuple[np.ndarray, np.ndarray, int]:
    arr = host_float_array(Z, name, min_ndim=2)
    if arr.ndim != 2:
        raise ShapeError(
            f"The `{name}` parameter of {owner} must be a sample of shape (n, d); got {arr.shape}."
        )
    n, d = arr.shape
    if n <= d:
        raise InvalidParameterError(
            f"The `{name}` parameter of {owner} needs n > d samples to estimate a nonsingular covariance "
            f"(Hotelling T^2 / F quantile with n - d degrees of freedom). Got n={n}, d={d}."
        )
    with np.errstate(over="ignore", invalid="ignore"):
        mu = arr.mean(axis=0)
        S = np.cov(arr, rowvar=False, ddof=1).reshape(d, d)
    if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(S))):
        raise NumericalOverflowError(
            f"The sample mean or covariance of `{name}` in {owner} overflows float64 (largest |entry| "
            f"{float(np.max(np.abs(arr))):.3g}); rescale the data."
        )
    try:
        np.linalg.cholesky(S)
    except np.linalg.LinAlgError:
        raise InvalidParameterError(
            f"The sample covariance of `{name}` in {owner} is singular (collinear samples)."
        ) from None
    return mu, S, n


def _hotelling_quantile(q: float, n: int, d: int, points: str) -> float:
    # F and beta quantiles as scipy.stats.f.ppf and beta.ppf compute them (the same special
    # functions, bit for bit), without importing SciPy's stats module (most of a second)
    sp = scipy_special()
    if points == "new":
        return float((n + 1) * (n - 1) * d / (n * (n - d)) * sp.fdtri(d, n - d, q))
    return float((n - 1) ** 2 / n * sp.betaincinv(d / 2.0, (n - d - 1) / 2.0, q))


def hotelling_concentration(
    X: Any,
    Y: Any,
    A: Any,
    p: float,
    n_features: int,
    *,
    n_points: int | None = None,
    points: str = "new",
    kind: str = "hcexp",
    projection: str = "iid",
) -> ConcentrationBound:
    r"""Concentration bound with means and covariances estimated from samples (Hotelling :math:`T^2`).

    From ``X`` (n_x, d) and ``Y`` (n_y, d): :math:`\bar x`, :math:`\hat\Sigma_x` (divisor
    :math:`n-1`), likewise for ``Y``. For a **new** point independent of the sample,

    .. math::

        P\Big[(x-\bar x)^\top\hat\Sigma^{-1}(x-\bar x)\le
        \frac{(n+1)(n-1)d}{n(n-d)}F^{-1}_{d,\,n-d}(q)\Big] = q

    (:math:`T^2\to F`); for an **in-sample** point,
    :math:`\frac{n}{(n-1)^2}(x_i-\bar x)^\top\hat\Sigma^{-1}(x_i-\bar x)\sim\mathrm{Beta}(\tfrac d2,\tfrac{n-d-1}2)`.
    The events share :math:`(\bar x,\hat\Sigma)`, so instead of :math:`q^{2s}` a union
    bound is used: :math:`q = 1-(1-p)/(2s)` (``points="in-sample"``: :math:`2s` is replaced by
    :math:`n_x+n_y`). Then :math:`r_x = \sqrt{\lambda_{\max}(A\hat\Sigma_xA^\top)Q_x}+\|A\bar x\|`,
    likewise :math:`r_y`, and the bound is :math:`W(\max(r_x,r_y))/\sqrt{2m}` (for HCEXP; any
    ``kind``/``projection`` as in :func:`chi2_concentration`).

    Source: derived here (docs page *Theory*, section 4). Blackwelder (2024) only remarks after
    Theorem 3.3 that "the same proof" works with Hotelling's :math:`T^2`; it does not, the events
    are dependent (docs page *Theory*, section 5). The naive :math:`\chi^2_d` quantile with
    estimated parameters under-covers.

    Parameters
    ----------
    X, Y : array_like (n_x, d), (n_y, d)
        Query and key samples; each needs ``n > d`` (in-sample: ``n > d + 1``).
    A : None, "identity", array_like (d,) or (d, d)
        Invertible transform.
    p : float
        Probability in (0, 1).
    n_features : int
        ``m`` >= 1.
    n_points : int, optional
        ``s``: number of new queries and of new keys covered (default: ``max(n_x, n_y)``).
        Ignored for ``points="in-sample"``.
    points : {"new", "in-sample"}, default="new"
    kind : {"hcexp", "cexp", "positive", "hyperbolic", "trig"}, default="hcexp"
        The map (see :func:`~rfkit.theory.bounds.max_relative_error`).
    projection : {"iid", "orthogonal"}, default="iid"
        Directions (orthogonal: :math:`\chi(d)` norms; not for trig).

    Returns
    -------
    ConcentrationBound

    Raises
    ------
    InvalidParameterError
        ``p`` outside (0, 1), ``n <= d``, ``n_points < 1``, ``n_features < 1``, singular sample covariance,
        unknown ``kind``/``projection``, non-identity ``A`` for a map without transform.
    SingularMatrixError
        Singular ``A``.

    Warns
    -----
    VacuousBoundWarning
        When the bound is ``>= 1``.
    """
    owner = "hotelling_concentration"
    points = check_option(points, "points", owner, ("new", "in-sample"))
    mx, Sx, nx = _sample_stats(X, "X", owner)
    my, Sy, ny = _sample_stats(Y, "Y", owner)
    pr = _problem((mx, Sx), (my, Sy), ("X", "Y"), A, p, n_features, owner, kind, projection)
    d = pr.d
    if points == "in-sample":
        for n, nm in ((nx, "X"), (ny, "Y")):
            if n <= d + 1:
                raise InvalidParameterError(
                    f"The `{nm}` parameter of {owner} needs n > d + 1 for points='in-sample'. Got n={n}, d={d}."
                )
        q = 1.0 - (1.0 - pr.p) / (nx + ny)
        s_rep = max(nx, ny)
        covers = "covers the sample points themselves"
    else:
        s_rep = max(nx, ny) if n_points is None else check_int(n_points, "n_points", owner, low=1)
        q = 1.0 - (1.0 - pr.p) / (2 * s_rep)
        covers = f"covers {s_rep} new queries and {s_rep} new keys independent of the samples"
    Q = (_hotelling_quantile(q, nx, d, points), _hotelling_quantile(q, ny, d, points))
    return _assemble(
        pr,
        Q,
        q,
        s_rep,
        f"hotelling-{points}",
        f"Rows of X (n={nx}) and Y (n={ny}) iid Gaussian with unknown parameters; {covers}"
        f"; union bound over the events (q = 1 - (1 - p)/{'2s' if points == 'new' else '(n_x + n_y)'}). "
        f"{pr.kind.upper()} ({pr.projection}) with m={pr.m}; bounds the RMS (over features) relative error, with probability >= {pr.p:g}.",
    )
