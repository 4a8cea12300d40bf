r"""Max-relative-error bounds and their probabilistic (concentration) versions (THEORY.md §5).

The quantity bounded is the *root-mean-square* relative error over a set
:math:`C` of inputs (seed 004, "as in HRF"),

.. math:: \epsilon_C(\widehat{\mathrm{SM}}) = \sup_{x,y\in C}\frac{\sqrt{\mathrm{MSE}(\widehat{\mathrm{SM}}(x,y))}}{\mathrm{SM}(x,y)},

an expectation over the random features, **not** a bound on realised errors
(seed 004 says "largest observed relative error"; that is an imprecision, THEORY.md §11).

* :func:`max_relative_error` - :math:`W(r)/\sqrt{2m}` with the corrected
  :math:`W(r) = e^{2r^2}(1-e^{-4r^2}) = 2\sinh(2r^2)` (seed 004 Lemma 3.2 prints
  :math:`e^{2r^2}(1-e^{4r^2})`, which is negative), and variants.
* :func:`chi2_concentration` - seed 004 Theorem 3.3 restated precisely.
* :func:`hotelling_concentration` - the same with estimated means and covariances
  (Hotelling :math:`T^2 \to F` quantile, union bound).

Every function returns a frozen dataclass with ``.bound`` and all intermediates.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from scipy import stats

from .._validation import as_float_array, check_int, check_option, check_real
from ..exceptions import InvalidParameterError, NumericalOverflowError, ShapeError, SingularMatrixError

__all__ = [
    "W",
    "max_relative_error",
    "chi2_concentration",
    "hotelling_concentration",
    "MaxRelativeErrorBound",
    "ConcentrationBound",
]

_KINDS = ("hcexp", "cexp")


def W(r: Any) -> np.ndarray:
    r"""Corrected seed-004 factor :math:`W(r) = e^{2r^2}(1 - e^{-4r^2}) = 2\sinh(2r^2)` (THEORY.md §5).

    Derived from the HCEXP MSE (seed 004 Lemma 3.1): :math:`\sqrt{\mathrm{MSE}}/\mathrm{SM}
    = \frac{2}{\sqrt{2m}}\sinh(\|z_A\|^2/2)` with :math:`\|z_A\|\le 2r`. The printed
    :math:`e^{2r^2}(1-e^{4r^2})` is negative for every :math:`r>0` (**seed error**).
    """
    r = np.asarray(r, dtype=np.float64)
    with np.errstate(over="ignore"):
        return 2.0 * np.sinh(2.0 * r * r)


def _rel_rmse(s2: float, m: int, kind: str) -> float:
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
class MaxRelativeErrorBound:
    """Result of :func:`max_relative_error`.

    Attributes
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
    kind : str
    assumptions : str
    """

    bound: float
    r_x: float
    r_y: float
    z_max: float
    W: float
    n_features: int
    kind: str
    assumptions: str

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-serialisable)."""
        return dataclasses.asdict(self)


def max_relative_error(
    r: float, n_features: int, *, r_y: float | None = None, kind: str = "hcexp"
) -> MaxRelativeErrorBound:
    r"""Bound on the max relative RMS error of HCEXP (or CEXP) on a ball (seed 004 Lemma 3.2, corrected).

    .. math::

        \epsilon_C(\widehat{\mathrm{SM}}^{\rm hcexp}_{A,m}) \le \frac{W(r)}{\sqrt{2m}},\qquad
        W(r) = e^{2r^2}(1-e^{-4r^2}) = 2\sinh(2r^2),

    for :math:`C` with :math:`\|Ax\|\le r`, :math:`\|A^{-\top}y\|\le r`. With separate
    radii: :math:`\frac{2}{\sqrt{2m}}\sinh\frac{(r_x+r_y)^2}{2}`; for CEXP (``kind="cexp"``):
    :math:`\sqrt{(e^{(r_x+r_y)^2}-1)/m}`. The same :math:`W(r)/\sqrt{2m}` holds for trig
    features on the sphere :math:`\|x\|=\|y\|=r` (attained at :math:`x=-y`).

    Source: seed 004 Lemma 3.2 (its printed :math:`W` has :math:`e^{+4r^2}` - a sign error;
    and it is "≤", with equality iff :math:`Ax = A^{-\top}y` of norm :math:`r` is feasible),
    derived from Lemma 3.1 in THEORY.md §5.

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
    b = _rel_rmse(s * s, m, kind)
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


@dataclasses.dataclass(frozen=True)
class ConcentrationBound:
    """Result of :func:`chi2_concentration` / :func:`hotelling_concentration`.

    Attributes
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
    method : str
        "chi2" or "hotelling-new" / "hotelling-in-sample".
    assumptions : str
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

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-serialisable)."""
        return dataclasses.asdict(self)


def _check_A(A: Any, d: int, owner: str) -> tuple[np.ndarray, np.ndarray]:
    """Return (A, A^{-1}) as full (d, d) matrices; None means the identity."""
    if A is None or (isinstance(A, str) and A == "identity"):
        return np.eye(d), np.eye(d)
    if isinstance(A, str):
        raise InvalidParameterError(
            f"The `A` parameter of {owner} must be None, 'identity', a diagonal (d,) or a (d, d) array. "
            f"Got {A!r} instead (resolve rule names with rfkit.features.adaptive_A)."
        )
    arr = as_float_array(A, "A")
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


def _check_p(p: Any, owner: str) -> float:
    return check_real(p, "p", owner, low=0.0, high=1.0, closed="neither")


def _check_mean_cov(mean: Any, cov: Any, nm: str, nc: str, owner: str) -> tuple[np.ndarray, np.ndarray]:
    mu = as_float_array(mean, nm)
    if mu.ndim != 1 or mu.size == 0:
        raise ShapeError(f"The `{nm}` parameter of {owner} must be a vector (d,); got shape {mu.shape}.")
    d = mu.shape[0]
    S = as_float_array(cov, nc)
    if S.shape != (d, d):
        raise ShapeError(f"The `{nc}` parameter of {owner} must have shape ({d}, {d}); got {S.shape}.")
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


def _assemble(
    *,
    A: tuple[np.ndarray, np.ndarray],
    cov: tuple[np.ndarray, np.ndarray],
    mean: tuple[np.ndarray, np.ndarray],
    Qx: float,
    Qy: float,
    p: float,
    q: float,
    s: int,
    m: int,
    method: str,
    assumptions: str,
) -> ConcentrationBound:
    """The bound from ``A`` (and ``A^-1``), the covariances and means of x and y, and the thresholds."""
    Am, Ainv = A
    lam_x = float(np.linalg.eigvalsh(Am @ cov[0] @ Am.T).max())
    lam_y = float(np.linalg.eigvalsh(Ainv.T @ cov[1] @ Ainv).max())
    mx, my = Am @ mean[0], Ainv.T @ mean[1]  # transformed means A mu_x, A^-T mu_y
    r_x = float(np.sqrt(lam_x * Qx) + np.linalg.norm(mx))
    r_y = float(np.sqrt(lam_y * Qy) + np.linalg.norm(my))
    r = max(r_x, r_y)
    return ConcentrationBound(
        bound=_rel_rmse(4.0 * r * r, m, "hcexp"),
        bound_separate=_rel_rmse((r_x + r_y) ** 2, m, "hcexp"),
        p=p,
        q=q,
        r=r,
        r_x=r_x,
        r_y=r_y,
        lambda_x=lam_x,
        lambda_y=lam_y,
        quantile_x=Qx,
        quantile_y=Qy,
        mean_x=tuple(float(v) for v in mx),
        mean_y=tuple(float(v) for v in my),
        n_points=s,
        n_features=m,
        method=method,
        assumptions=assumptions,
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
) -> ConcentrationBound:
    r"""Seed 004 Theorem 3.3 (restated precisely): a max-relative-error bound holding with probability ``p``.

    :math:`x_1..x_s \sim\mathcal N(\mu_x,\Sigma_x)`, :math:`y_1..y_s\sim\mathcal N(\mu_y,\Sigma_y)` all
    independent, :math:`A` invertible, :math:`q = p^{1/(2s)}`, :math:`\chi^2_d(q)` the
    :math:`q`-quantile,

    .. math::

        r = \max\Big(\sqrt{\lambda_{\max}(A\Sigma_xA^\top)\chi^2_d(q)} + \|A\mu_x\|,\
        \sqrt{\lambda_{\max}(A^{-\top}\Sigma_yA^{-1})\chi^2_d(q)} + \|A^{-\top}\mu_y\|\Big).

    Then with probability :math:`\ge p` over the data,
    :math:`\max_{i,j}\sqrt{\mathrm{MSE}(\widehat{\mathrm{SM}}^{\rm hcexp}_{A,m}(x_i,y_j))}/\mathrm{SM}(x_i,y_j)
    \le W(r)/\sqrt{2m}`. Proof (THEORY.md §5): the :math:`2s` Mahalanobis events are
    independent with probability :math:`q` each; Rayleigh quotient; triangle inequality;
    :func:`max_relative_error`. The bound is on RMS errors (over features), not realised
    errors (seed imprecision, THEORY.md §11).

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

    Returns
    -------
    ConcentrationBound

    Raises
    ------
    InvalidParameterError
        ``p`` outside (0, 1), ``n_points < 1``, ``n_features < 1``, covariance not
        symmetric positive definite.
    SingularMatrixError
        Singular ``A``.
    ShapeError
        Inconsistent dimensions.
    """
    owner = "chi2_concentration"
    mx, Sx = _check_mean_cov(mean_x, cov_x, "mean_x", "cov_x", owner)
    my, Sy = _check_mean_cov(mean_y, cov_y, "mean_y", "cov_y", owner)
    if mx.shape != my.shape:
        raise ShapeError(f"`mean_x` and `mean_y` must have the same dimension: {mx.shape} != {my.shape}.")
    d = mx.shape[0]
    Am, Ainv = _check_A(A, d, owner)
    s = check_int(n_points, "n_points", owner, low=1)
    pp = _check_p(p, owner)
    m = check_int(n_features, "n_features", owner, low=1)
    q = float(np.exp(np.log(pp) / (2 * s)))
    Qd = float(stats.chi2.ppf(q, d))
    return _assemble(
        A=(Am, Ainv),
        cov=(Sx, Sy),
        mean=(mx, my),
        Qx=Qd,
        Qy=Qd,
        p=pp,
        q=q,
        s=s,
        m=m,
        method="chi2",
        assumptions=(
            f"x_1..x_{s} ~ N(mean_x, cov_x) and y_1..y_{s} ~ N(mean_y, cov_y), all independent, with known "
            f"parameters; HCEXP with m={m} Gaussian-marginal directions. With probability >= {pp:g} over the "
            "data, every ||A x_i|| <= r_x and ||A^-T y_j|| <= r_y, hence max_ij sqrt(MSE)/SM <= bound. "
            "RMS (over features) relative error, not realised error."
        ),
    )


def _sample_stats(Z: Any, name: str, owner: str) -> tuple[np.ndarray, np.ndarray, int]:
    arr = as_float_array(Z, name, min_ndim=2)
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
    mu = arr.mean(axis=0)
    S = np.cov(arr, rowvar=False, ddof=1).reshape(d, d)
    try:
        np.linalg.cholesky(S)
    except np.linalg.LinAlgError:
        raise InvalidParameterError(
            f"The sample covariance of `{name}` in {owner} is singular (collinear samples)."
        ) from None
    return mu, S, n


def _hotelling_quantile(q: float, n: int, d: int, points: str) -> float:
    if points == "new":
        return float((n + 1) * (n - 1) * d / (n * (n - d)) * stats.f.ppf(q, d, n - d))
    return float((n - 1) ** 2 / n * stats.beta.ppf(q, d / 2.0, (n - d - 1) / 2.0))


def hotelling_concentration(
    X: Any,
    Y: Any,
    A: Any,
    p: float,
    n_features: int,
    *,
    n_points: int | None = None,
    points: str = "new",
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
    likewise :math:`r_y`, and the bound is :math:`W(\max(r_x,r_y))/\sqrt{2m}`.

    Source: THEORY.md §5 (Hotelling variant; seed 004 only remarks that "the same proof"
    works - it does not, the events are dependent; THEORY.md §11). The naive
    :math:`\chi^2_d` quantile with estimated parameters under-covers.

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

    Returns
    -------
    ConcentrationBound

    Raises
    ------
    InvalidParameterError
        ``p`` outside (0, 1), ``n <= d``, ``n_points < 1``, ``n_features < 1``, singular sample covariance.
    SingularMatrixError
        Singular ``A``.
    """
    owner = "hotelling_concentration"
    points = check_option(points, "points", owner, ("new", "in-sample"))
    mx, Sx, nx = _sample_stats(X, "X", owner)
    my, Sy, ny = _sample_stats(Y, "Y", owner)
    if mx.shape != my.shape:
        raise ShapeError(f"`X` and `Y` must have the same dimension d: {mx.shape[0]} != {my.shape[0]}.")
    d = mx.shape[0]
    Am, Ainv = _check_A(A, d, owner)
    pp = _check_p(p, owner)
    m = check_int(n_features, "n_features", owner, low=1)
    if points == "in-sample":
        for n, nm in ((nx, "X"), (ny, "Y")):
            if n <= d + 1:
                raise InvalidParameterError(
                    f"The `{nm}` parameter of {owner} needs n > d + 1 for points='in-sample'. Got n={n}, d={d}."
                )
        s = nx + ny
        q = 1.0 - (1.0 - pp) / s
        s_rep = max(nx, ny)
    else:
        s_rep = max(nx, ny) if n_points is None else check_int(n_points, "n_points", owner, low=1)
        q = 1.0 - (1.0 - pp) / (2 * s_rep)
    Qx = _hotelling_quantile(q, nx, d, points)
    Qy = _hotelling_quantile(q, ny, d, points)
    return _assemble(
        A=(Am, Ainv),
        cov=(Sx, Sy),
        mean=(mx, my),
        Qx=Qx,
        Qy=Qy,
        p=pp,
        q=q,
        s=s_rep,
        m=m,
        method=f"hotelling-{points}",
        assumptions=(
            f"Rows of X (n={nx}) and Y (n={ny}) iid Gaussian with unknown parameters; "
            + (
                f"covers {s_rep} new queries and {s_rep} new keys independent of the samples"
                if points == "new"
                else "covers the sample points themselves"
            )
            + f"; union bound over the events (q = 1 - (1 - p)/{'2s' if points == 'new' else '(n_x + n_y)'}). "
            f"HCEXP with m={m}; bounds the RMS (over features) relative error, with probability >= {pp:g}."
        ),
    )
