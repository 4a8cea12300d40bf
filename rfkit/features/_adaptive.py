r"""Data-adaptive parameters: the CEXP/HCEXP matrix :math:`A` and OPRF's :math:`A^*`.

CEXP/HCEXP estimate :math:`\mathrm{SM}(x, y)` with :math:`\phi^{+}` / :math:`\phi^{++}`
applied to :math:`Ax` and :math:`A^{-\top}y` (unbiased for any invertible
:math:`A`); the MSE grows with :math:`\|Ax + A^{-\top}y\|^2` (Blackwelder (2024),
Lemma 3.1), so :math:`A` is chosen to make it small on the data.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from .._backend import get_backend, to_numpy
from .._validation import as_float_array, check_option
from ..exceptions import IllConditionedWarning, ShapeError, SingularMatrixError
from ._pairs import PairMoments, is_plain, pair_moments, pooled

__all__ = ["adaptive_A", "oprf_optimal_A", "A_RULES", "validate_A"]

A_RULES = ("identity", "mean", "variance")


def _pair_moments(Q: Any, K: Any) -> tuple[int, np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]:
    """Moments of the query and key samples (see :func:`_moments`), which must share ``d``."""
    bk = get_backend(("Q", Q), ("K", K))
    nx, mx, ssx, shx = _moments(Q, "Q", bk)
    ny, my, ssy, shy = _moments(K, "K", bk)
    if shx[-1] != shy[-1]:
        raise ShapeError(f"`Q` and `K` must share the last dimension: Q.shape={shx}, K.shape={shy}.")
    return nx, mx, ssx, ny, my, ssy


def _moments(Q: Any, name: str, bk: Any = None) -> tuple[int, np.ndarray, np.ndarray, tuple[int, ...]]:
    """(n points, per-coordinate mean, per-coordinate centred sum of squares), float64 NumPy.

    Computed in the array's own library and device (only the d-vectors come back to the host).
    """
    bk = get_backend((name, Q)) if bk is None else bk
    arr = as_float_array(Q, name, min_ndim=2, shape_hint=f"`{name}` must have shape (..., n, d).", backend=bk)
    if arr.shape[-2] == 0 or math.prod(arr.shape) == 0:
        raise ShapeError(f"`{name}` must contain at least one point; got shape {tuple(arr.shape)}.")
    xp = bk.xp
    X = xp.reshape(xp.astype(arr, xp.float64), (-1, arr.shape[-1]))
    mean = xp.mean(X, axis=0)
    ss = xp.sum((X - mean) ** 2, axis=0)
    return int(X.shape[0]), to_numpy(mean), to_numpy(ss), tuple(arr.shape)


def adaptive_A(
    Q: Any,
    K: Any,
    rule: str = "mean",
    *,
    ddof: int = 1,
    pairs: Any = "all",
    key_padding_mask: Any = None,
    exclude: Any = None,
) -> np.ndarray:
    r"""Diagonal of the data-adaptive matrix :math:`A` for CEXP/HCEXP.

    Parameters
    ----------
    Q, K : array_like of shape (..., n, d)
        Query and key samples (all leading axes are pooled).
    rule : {"mean", "variance", "identity"}
        ``"mean"``: :math:`A_{ii} = \sqrt{|\mu_{y,i}| / |\mu_{x,i}|}`, the exact
        minimiser of :math:`\|A\mu_x + A^{-\top}\mu_y\|^2` over positive diagonal
        :math:`A` (Blackwelder (2024); Choromanski et al. (ICLR 2022); the reciprocal rule is
        wrong). ``"variance"``: :math:`A_{ii} = \big((\sigma^2_{y,i}+\mu^2_{y,i}) /
        (\sigma^2_{x,i}+\mu^2_{x,i})\big)^{1/4}`, the minimiser of
        :math:`\mathbb E\|Ax\|^2 + \mathbb E\|A^{-\top}y\|^2` (Blackwelder (2024), Lemma 3.4;
        it minimises the expected exponent, not the expected MSE). Here
        :math:`x` are queries and :math:`y` keys; :math:`\sigma^2` are the
        per-coordinate sample variances (divisor ``n - ddof``).
    ddof : int, default=1
        Delta degrees of freedom of the variance estimate (Blackwelder (2024) uses the
        unbiased estimator, ``ddof=1``).
    pairs : {"all", "sequence", "causal"} or array of bool (..., n, M), default="all"
        The query-key pairs the rule is computed on (:func:`rfkit.features.pair_moments`).
        ``"all"``: the plain sample means and variances above (every query with every key).
        Otherwise each query counts once per key it is paired with, each key once per query
        (``Q``, ``K`` keep their sequence axis): :math:`\mu_x = \sum_i r_ix_i/W`,
        :math:`\mu_y = \sum_j c_jy_j/W`, the minimisers of the same objectives over the selected
        pairs, and :math:`\sigma^2` the unbiased variance with reliability weights,
        :math:`\sum_i r_i(x_i-\mu_x)^2/(W - \mathrm{ddof}\,\sum_i r_i^2/W)` (equal to the plain
        one when every query has the same number of keys). The weighting is rfkit's own
        (docs page *Attention estimators*, "Fitting on the pairs attention uses").
    key_padding_mask : array of bool (..., M), optional
        True marks padded keys, which are in no pair.
    exclude : (idx, valid), optional
        Pairs left out (:func:`rfkit.features.pair_moments`).

    Returns
    -------
    ndarray of shape (d,)
        The diagonal of :math:`A` (float64).

    Raises
    ------
    SingularMatrixError
        If a coordinate makes the rule degenerate (a zero mean or zero second
        moment gives :math:`A_{ii} = 0` or :math:`\infty`). rfkit does not clip.
    """
    rule = check_option(rule, "rule", "adaptive_A", A_RULES)
    if not is_plain(pairs, exclude):
        return _adaptive_weighted(
            pair_moments(Q, K, pairs=pairs, key_padding_mask=key_padding_mask, exclude=exclude), rule, ddof
        )
    Q, K = pooled(Q, K, key_padding_mask)
    nx, mx, ssx, ny, my, ssy = _pair_moments(Q, K)
    d = mx.shape[-1]
    if rule == "identity":
        return np.ones(d)
    if rule == "mean":
        num, den, what = np.abs(my), np.abs(mx), "mean"
        with np.errstate(divide="ignore", invalid="ignore"):
            a = np.sqrt(num / den)
    else:
        for npts, nm in ((nx, "Q"), (ny, "K")):
            if npts <= ddof:
                raise ShapeError(
                    f"adaptive_A(rule='variance', ddof={ddof}) needs more than {ddof} points in `{nm}`; "
                    f"got {npts}."
                )
        num = ssy / (ny - ddof) + my**2
        den = ssx / (nx - ddof) + mx**2
        what = "second moment"
        a = fourth_root_ratio(num, den)
    return _checked_rule(a, rule, what, num, den)


def _checked_rule(a: np.ndarray, rule: str, what: str, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return check_nondegenerate(
        a,
        lambda i: (
            f"adaptive_A(rule={rule!r}) is degenerate at coordinate {i}: query {what} "
            f"{den[i]:.3g}, key {what} {num[i]:.3g}; A_ii would be {a[i]!r} (A singular). "
            "rfkit does not clip; pass an explicit A or use another rule."
        ),
    )


def _adaptive_weighted(pm: PairMoments, rule: str, ddof: int) -> np.ndarray:
    """:func:`adaptive_A` on pair-weighted moments (queries weighted by r_i, keys by c_j)."""
    if rule == "identity":
        return np.ones(pm.dim)
    if rule == "mean":
        num, den, what = np.abs(pm.mean_k), np.abs(pm.mean_q), "mean"
        with np.errstate(divide="ignore", invalid="ignore"):
            a = np.sqrt(num / den)
        return _checked_rule(a, rule, what, num, den)
    W = pm.weight
    eff_q, eff_k = W - ddof * pm.sq_weight_q / W, W - ddof * pm.sq_weight_k / W
    for eff, nm in ((eff_q, "Q"), (eff_k, "K")):
        if not eff > 0:
            raise ShapeError(
                f"adaptive_A(rule='variance', ddof={ddof}) on the selected pairs needs an effective sample "
                f"size W - ddof * sum(w^2) / W > 0 for `{nm}`; got {eff:.3g} (too few pairs)."
            )
    num = pm.ss_k / eff_k + pm.mean_k**2
    den = pm.ss_q / eff_q + pm.mean_q**2
    return _checked_rule(fourth_root_ratio(num, den), rule, "second moment", num, den)


def fourth_root_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``(num / den) ** (1/4)`` per coordinate (inf or NaN where ``den`` is 0: see :func:`check_nondegenerate`)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (num / den) ** 0.25


def check_nondegenerate(diag: np.ndarray, message: Any) -> np.ndarray:
    """``diag`` if every entry is finite and non-zero, else SingularMatrixError(``message(i)``) at the first bad ``i``."""
    bad = np.flatnonzero(~np.isfinite(diag) | (diag == 0))
    if bad.size:
        raise SingularMatrixError(message(int(bad[0])))
    return diag


def oprf_optimal_A(
    Q: Any, K: Any, *, pairs: Any = "all", key_padding_mask: Any = None, exclude: Any = None
) -> float:
    r"""Data-averaged optimal OPRF/FAVOR++ parameter :math:`A^*` (Likhosherstov et al. (NeurIPS 2022)).

    .. math::

        A^* = \tfrac1{16}\Big(1 - 2\rho - \sqrt{(2\rho + 1)^2 + 8\rho}\Big) \le 0,
        \qquad \rho = \frac{1}{d\,W}\sum_{i,j} w_{ij}\|x_i + y_j\|^2,

    It minimises the average over the selected pairs of the log second moment
    :math:`\log\mathbb E[(f(\omega,x_i)f(\omega,y_j))^2] = \tfrac d2\log\frac{(1-4A)^2}{1-8A}
    + \frac{\|x_i+y_j\|^2}{1-8A} + \text{const}`, which is affine in :math:`\|x_i+y_j\|^2`
    (Likhosherstov et al. (NeurIPS 2022), "Chefs' Random Tables"; matches the TF Model Garden
    ``expplus`` code). With every pair (``pairs="all"``, :math:`w_{ij} = 1`, the paper's
    objective) it is computed in :math:`O(nd)` as :math:`\overline{\|x\|^2} + \overline{\|y\|^2}
    + 2\bar x^\top\bar y`; with a selection (``"causal"``: :math:`j \le i` in each sequence,
    rfkit's own weighting) as :math:`\mathrm{tr}\,M_x + \mathrm{tr}\,M_y + 2\,\mathrm{tr}\,C` of the
    pair-weighted moments (:func:`rfkit.features.pair_moments`: prefix sums, :math:`O(nd^2)`).

    Parameters
    ----------
    Q, K : array_like of shape (..., n, d)
        Queries and keys (``"all"``: leading axes pooled; otherwise they index sequences).
    pairs : {"all", "sequence", "causal"} or array of bool (..., n, M), default="all"
    key_padding_mask : array of bool (..., M), optional
        True marks padded keys (in no pair).
    exclude : (idx, valid), optional
        Pairs left out (Hybrid's exact support).

    Returns
    -------
    float
        :math:`A^* \le 0`.
    """
    if not is_plain(pairs, exclude):
        pm = pair_moments(Q, K, pairs=pairs, key_padding_mask=key_padding_mask, exclude=exclude)
        s = np.trace(pm.second_q) + np.trace(pm.second_k) + 2.0 * np.trace(pm.cross)
        return oprf_root_scalar(max(float(s), 0.0) / pm.dim)
    Q, K = pooled(Q, K, key_padding_mask)
    nx, mx, ssx, ny, my, ssy = _pair_moments(Q, K)
    d = mx.shape[-1]
    # mean_i |x_i|^2 = sum_k (ss_k / n + mean_k^2)
    s = np.sum(ssx / nx + mx**2) + np.sum(ssy / ny + my**2) + 2.0 * mx @ my
    rho = max(float(s), 0.0) / d  # s >= 0 exactly; max only removes round-off
    return float((1.0 - 2.0 * rho - np.sqrt((2.0 * rho + 1.0) ** 2 + 8.0 * rho)) / 16.0)


def oprf_root_scalar(rho: float) -> float:
    r""":math:`\tfrac1{16}(1-2\rho-\sqrt{(2\rho+1)^2+8\rho})` for one :math:`\rho \ge 0` (OPRF's optimum)."""
    return float((1.0 - 2.0 * rho - np.sqrt((2.0 * rho + 1.0) ** 2 + 8.0 * rho)) / 16.0)


def host_matrix(A: Any, owner: str, name: str, what: str, *, scalar: bool = False) -> np.ndarray:
    """A matrix parameter as a float64 NumPy array: a diagonal (d,) or a square (d, d).

    ``A`` may be an array of any supported library (a validated float array, finite);
    ``scalar=True`` also lets a 0-d array through. Other shapes raise a
    :class:`~rfkit.exceptions.ShapeError` saying that ``name`` of ``owner`` must be ``what``.
    """
    arr = np.asarray(to_numpy(A)) if not isinstance(A, np.ndarray) and hasattr(A, "shape") else A
    arr = as_float_array(arr, name)
    if scalar and arr.ndim == 0:
        return np.array(arr, dtype=np.float64)
    if arr.ndim not in (1, 2) or (arr.ndim == 2 and arr.shape[0] != arr.shape[1]) or arr.size == 0:
        raise ShapeError(f"The `{name}` parameter of {owner} must be {what}; got shape {arr.shape}.")
    return np.array(arr, dtype=np.float64)


def validate_A(
    A: Any, owner: str, name: str = "A", need: str = "the estimator needs its inverse"
) -> np.ndarray:
    """Validate an explicit invertible matrix (CEXP's ``A``, ADERF's ``G``): diagonal (d,) or (d, d), finite.

    Raises :class:`~rfkit.exceptions.SingularMatrixError` (saying what ``need`` s the inverse)
    when the reciprocal condition number is below machine epsilon, and warns
    (:class:`~rfkit.exceptions.IllConditionedWarning`) below 1e-12. Read-only float64 result.
    """
    arr = host_matrix(A, owner, name, "a diagonal (d,) or a square (d, d) array")
    sv = np.abs(arr) if arr.ndim == 1 else np.linalg.svd(arr, compute_uv=False)
    smax = float(sv.max())
    rcond = float(sv.min()) / smax if smax > 0 else 0.0
    if rcond <= np.finfo(np.float64).eps:
        raise SingularMatrixError(
            f"`{name}` is singular (rcond={rcond:.3g}) in {owner}; {need}. Pass an invertible {name}."
        )
    if rcond < 1e-12:
        warnings.warn(
            f"`{name}` is ill-conditioned (rcond={rcond:.3g}) in {owner}; its inverse may lose precision.",
            IllConditionedWarning,
            stacklevel=4,
        )
    arr.setflags(write=False)
    return arr
