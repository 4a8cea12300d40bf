r"""Closed-form data-dependent optima of the DERF family (ADERF and SDERF).

The minimiser of the log second moment averaged over all query-key pairs (the objective of
Likhosherstov et al. (NeurIPS 2023)), derived in closed form on the docs page *Theory*,
section 1b; or averaged over a selection of pairs (``pairs="causal"``: :math:`j \le i` in each
sequence, rfkit's own weighting), where the same closed forms hold with the pair-weighted
moments of :func:`rfkit.features.pair_moments` in place of the sample moments (the objective
is a mean of :math:`\|Gx_i + G^{-\top}y_j\|^2` resp. :math:`(x_i+y_j)(x_i+y_j)^\top` terms, so
only :math:`M_x`, :math:`M_y` and :math:`C = \overline{x_iy_j^\top}` enter). The maps themselves
are in :mod:`rfkit.features._derf`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._backend import get_backend, to_numpy
from .._validation import as_float_array, check_same_dim
from ..exceptions import ShapeError, SingularMatrixError
from ._pairs import is_plain, pair_moments, pooled

__all__ = ["aderf_optimal", "sderf_optimal_A", "oprf_root", "second_moments"]


def oprf_root(rho: np.ndarray | float) -> np.ndarray:
    r""":math:`\tfrac1{16}\big(1-2\rho-\sqrt{(2\rho+1)^2+8\rho}\big)`, the minimiser of
    :math:`\tfrac d2\log\frac{(1-4a)^2}{1-8a} + \frac{d\rho}{1-8a}` over :math:`a < 1/8` (Likhosherstov et al. (NeurIPS 2022); docs page *Theory*, section 1b)."""
    r = np.asarray(rho, dtype=np.float64)
    return (1.0 - 2.0 * r - np.sqrt((2.0 * r + 1.0) ** 2 + 8.0 * r)) / 16.0


def second_moments(Q: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Mean (d,) and uncentred second moment (d, d) of the rows, pooled over leading axes.

    Computed in the array's own library and device; only the d-vector and the d x d matrix
    come back to the host (float64 NumPy).
    """
    bk = get_backend((name, Q))
    arr = as_float_array(Q, name, min_ndim=2, shape_hint=f"`{name}` must have shape (..., n, d).", backend=bk)
    if arr.shape[-2] == 0 or math.prod(arr.shape) == 0:
        raise ShapeError(f"`{name}` must contain at least one point; got shape {tuple(arr.shape)}.")
    xp = bk.xp
    X = xp.reshape(xp.astype(arr, xp.float64), (-1, arr.shape[-1]))
    n = int(X.shape[0])
    mean = xp.mean(X, axis=0)
    M = (xp.matrix_transpose(X) @ X) / n
    M = to_numpy(M)
    return to_numpy(mean), 0.5 * (M + M.T)


def _sym_sqrt(M: np.ndarray) -> np.ndarray:
    """Symmetric square root of a symmetric positive semi-definite matrix (eigenvalues floored at 0).

    Only round-off makes an eigenvalue of a Gram matrix negative; it is set to 0.
    """
    w, V = np.linalg.eigh(M)
    return (V * np.sqrt(np.maximum(w, 0.0))) @ V.T


def _check_nonsingular(M: np.ndarray, name: str) -> None:
    w = np.linalg.eigvalsh(M)
    top = float(np.max(np.abs(w)))
    rcond = float(np.min(w)) / top if top > 0 else 0.0
    if rcond <= M.shape[0] * np.finfo(np.float64).eps:
        raise SingularMatrixError(
            f"The second-moment matrix of `{name}` (mean of x x^T over its rows) is singular "
            f"(rcond={rcond:.3g}); ADERF's optimal G needs it invertible: pass at least d points "
            "spanning R^d, or give G explicitly."
        )


def aderf_optimal(
    Q: Any, K: Any, *, pairs: Any = "all", key_padding_mask: Any = None, exclude: Any = None
) -> tuple[float, np.ndarray]:
    r"""Closed-form optimal ADERF parameters :math:`(a^*, G^*)` for queries ``Q`` and keys ``K``.

    Minimises the paper's objective, the log second moment
    :math:`\log\mathbb E[(f^{(1)}(\omega,x_i)f^{(2)}(\omega,y_j))^2]` averaged over all pairs
    :math:`(i, j)` (Likhosherstov et al., NeurIPS 2023, their ADERF optimum, Thm. 4.2 as
    numbered by public summaries; re-derived on the docs page *Theory*, section 1b). With :math:`M_1 = \overline{xx^\top}`, :math:`M_2 = \overline{yy^\top}`
    (uncentred second moments), :math:`S = G^\top G` must minimise
    :math:`\mathrm{tr}(SM_1) + \mathrm{tr}(S^{-1}M_2)`, whose minimiser is the matrix
    geometric mean

    .. math::

        S^* = M_1^{-1/2}\big(M_1^{1/2}M_2M_1^{1/2}\big)^{1/2}M_1^{-1/2},\qquad G^* = (S^*)^{1/2},

    with minimum :math:`2\,\mathrm{tr}(M_1^{1/2}M_2M_1^{1/2})^{1/2} = 2\sum_l\sigma_l`
    (:math:`\sigma_l` the singular values of :math:`M_2^{1/2}M_1^{1/2}`); then
    :math:`a^* = \tfrac1{16}(1-2\rho-\sqrt{(2\rho+1)^2+8\rho})` with
    :math:`\rho = (2\sum_l\sigma_l + 2\bar x^\top\bar y)/d`, OPRF's rule for the transformed
    data :math:`G^*x`, :math:`G^{*-\top}y`. Since :math:`\sum_l\sigma_l \le
    (\mathrm{tr}M_1 + \mathrm{tr}M_2)/2`, the objective is never above OPRF's.

    With a pair selection (``pairs``) :math:`M_1`, :math:`M_2` are the pair-weighted second
    moments (each query weighted by its number of keys, each key by its number of queries)
    and :math:`\bar x^\top\bar y` becomes :math:`\mathrm{tr}\,C`, the mean of
    :math:`x_i^\top y_j` over the selected pairs: the objective over those pairs is
    :math:`\tfrac d2\log\frac{(1-4a)^2}{1-8a} + \frac{\mathrm{tr}(SM_1) + \mathrm{tr}(S^{-1}M_2)
    + 2\,\mathrm{tr}\,C}{1-8a}` + const, minimised by the same formulas.

    Parameters
    ----------
    Q, K : array_like of shape (..., n, d)
        Query and key samples (leading axes pooled for ``"all"``, else sequences), any
        supported array library.
    pairs : {"all", "sequence", "causal"} or array of bool (..., n, M), default="all"
        The pairs averaged over (:func:`rfkit.features.pair_moments`).
    key_padding_mask : array of bool (..., M), optional
    exclude : (idx, valid), optional

    Returns
    -------
    a : float
        The scalar :math:`a^* \le 0` (the paper's :math:`A = a I`).
    G : ndarray of shape (d, d)
        Symmetric positive definite :math:`G^*` (float64 NumPy).

    Raises
    ------
    SingularMatrixError
        If :math:`M_1` or :math:`M_2` is singular (fewer than d points, or points in a
        subspace): the optimum then does not exist (the infimum is approached by a
        degenerate :math:`G`).
    """
    M1, M2, cross = _moments_of_pairs(Q, K, pairs, key_padding_mask, exclude)
    d = M1.shape[-1]
    _check_nonsingular(M1, "Q")
    _check_nonsingular(M2, "K")
    R1 = _sym_sqrt(M1)
    w1, V1 = np.linalg.eigh(M1)
    R1inv = (V1 / np.sqrt(w1)) @ V1.T
    C = _sym_sqrt(R1 @ M2 @ R1)
    S = R1inv @ C @ R1inv
    G = _sym_sqrt(0.5 * (S + S.T))
    rho = max(2.0 * float(np.trace(C)) + 2.0 * cross, 0.0) / d  # >= 0 exactly (see docs)
    return float(oprf_root(rho)), G


def _moments_of_pairs(
    Q: Any, K: Any, pairs: Any, key_padding_mask: Any, exclude: Any
) -> tuple[np.ndarray, np.ndarray, float]:
    """``(M_x, M_y, mean of x_i . y_j)`` over the selected pairs (the sample moments for ``"all"``)."""
    if is_plain(pairs, exclude):
        Q, K = pooled(Q, K, key_padding_mask)
        mx, M1 = second_moments(Q, "Q")
        my, M2 = second_moments(K, "K")
        check_same_dim(mx, my, "Q", "K")
        return M1, M2, float(mx @ my)
    pm = pair_moments(Q, K, pairs=pairs, key_padding_mask=key_padding_mask, exclude=exclude)
    return pm.second_q, pm.second_k, float(np.trace(pm.cross))


def sderf_optimal_A(
    Q: Any, K: Any, *, pairs: Any = "all", key_padding_mask: Any = None, exclude: Any = None
) -> np.ndarray:
    r"""Closed-form optimal SDERF matrix :math:`A^*` (symmetric, :math:`8A^* \prec I`) for queries and keys.

    Minimises the log second moment averaged over all query-key pairs (Likhosherstov et al.,
    NeurIPS 2023, their SDERF optimum, Thm. 4.3 as numbered by public summaries; re-derived on the docs page *Theory*, section 1b). With
    :math:`M_3 = \overline{(x_i+y_j)(x_i+y_j)^\top} = M_1 + M_2 + \bar x\bar y^\top + \bar y\bar x^\top
    = V\Lambda V^\top`,

    .. math::

        A^* = V\,\mathrm{diag}(a_l)\,V^\top,\qquad
        a_l = \tfrac1{16}\Big(1-2\lambda_l-\sqrt{(2\lambda_l+1)^2+8\lambda_l}\Big) \le 0,

    i.e. OPRF's one-dimensional optimum along each eigen-direction of :math:`M_3`. With a pair
    selection (``pairs``, rfkit's own weighting) :math:`M_3` is the mean of
    :math:`(x_i+y_j)(x_i+y_j)^\top` over the selected pairs, :math:`M_x + M_y + C + C^\top` in
    the pair-weighted moments of :func:`rfkit.features.pair_moments` (causally: prefix sums,
    :math:`O(nd^2)`).

    Parameters
    ----------
    Q, K : array_like of shape (..., n, d)
    pairs : {"all", "sequence", "causal"} or array of bool (..., n, M), default="all"
    key_padding_mask : array of bool (..., M), optional
    exclude : (idx, valid), optional

    Returns
    -------
    ndarray of shape (d, d)
        Symmetric :math:`A^*` (float64 NumPy).
    """
    if is_plain(pairs, exclude):
        Q, K = pooled(Q, K, key_padding_mask)
        mx, M1 = second_moments(Q, "Q")
        my, M2 = second_moments(K, "K")
        check_same_dim(mx, my, "Q", "K")
        M3 = M1 + M2 + np.outer(mx, my) + np.outer(my, mx)
    else:
        pm = pair_moments(Q, K, pairs=pairs, key_padding_mask=key_padding_mask, exclude=exclude)
        M3 = pm.second_q + pm.second_k + pm.cross + pm.cross.T
    lam, V = np.linalg.eigh(0.5 * (M3 + M3.T))
    a = oprf_root(np.maximum(lam, 0.0))  # M3 is a Gram matrix: negative eigenvalues are round-off
    return (V * a) @ V.T
