r"""Exact target kernels.

The softmax kernel is :math:`\mathrm{SM}(x, y) = \exp(x^\top y)` with no hidden
:math:`1/\sqrt d` (docs page *User guide*, "Conventions"); the Gaussian kernel is
:math:`\exp(-\|x-y\|^2/2)`. Every function accepts NumPy, PyTorch, CuPy or
array_api_strict arrays and returns the same library, device and dtype
(:mod:`rfkit._backend`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._backend import Backend, get_backend
from ._validation import check_pairwise_memory, check_point_pair, exp_checked, half_precision
from .exceptions import InvalidParameterError

__all__ = ["softmax_kernel", "log_softmax_kernel", "gaussian_kernel", "log_gaussian_kernel"]


def _pair_iv(X: Any, Y: Any, check_finite: bool, owner: str) -> tuple[Any, Any, Backend]:
    if not isinstance(check_finite, (bool, np.bool_)):
        raise InvalidParameterError(
            f"The `check_finite` parameter of {owner} must be a bool. Got {check_finite!r} instead."
        )
    X, Y, bk = check_point_pair(X, Y, owner, check_finite=check_finite)
    check_pairwise_memory(X, Y, owner)
    return X, Y, bk


@half_precision(cast_back=False)
def log_softmax_kernel(X: Any, Y: Any, *, check_finite: bool = True) -> np.ndarray:
    r"""Logarithm of the softmax kernel, :math:`\log \mathrm{SM}(x_i, y_j) = x_i^\top y_j`.

    Parameters
    ----------
    X : array_like of shape (..., n, d)
        Queries (rows are points), float32 or float64.
    Y : array_like of shape (..., m, d)
        Keys; leading axes broadcast against those of ``X``.
    check_finite : bool, default=True
        Refuse NaN/inf inputs (set False only in inner loops on checked data).

    Returns
    -------
    ndarray of shape (..., n, m)
        ``X @ Y.T`` in the common float dtype of the inputs.
    """
    X, Y, bk = _pair_iv(X, Y, check_finite, "log_softmax_kernel")
    return bk.xp.matmul(X, bk.xp.matrix_transpose(Y))


@half_precision()
def softmax_kernel(X: Any, Y: Any, *, check_finite: bool = True) -> np.ndarray:
    r"""Exact softmax kernel :math:`\mathrm{SM}(x_i, y_j) = \exp(x_i^\top y_j)`.

    Parameters
    ----------
    X : array_like of shape (..., n, d)
    Y : array_like of shape (..., m, d)
    check_finite : bool, default=True

    Returns
    -------
    ndarray of shape (..., n, m)

    Raises
    ------
    NumericalOverflowError
        If some :math:`x_i^\top y_j` exceeds ``log(max float)``; use
        :func:`log_softmax_kernel` instead.
    """
    X, Y, bk = _pair_iv(X, Y, check_finite, "softmax_kernel")
    logits = bk.xp.matmul(X, bk.xp.matrix_transpose(Y))
    return exp_checked(logits, "softmax_kernel", "log_softmax_kernel()")


@half_precision(cast_back=False)
def log_gaussian_kernel(X: Any, Y: Any, *, check_finite: bool = True) -> np.ndarray:
    r"""Logarithm of the Gaussian kernel, :math:`-\|x_i - y_j\|^2 / 2`, shape (..., n, m).

    Parameters
    ----------
    X : array_like of shape (..., n, d)
        The points :math:`x_i` (rows); leading axes broadcast with those of ``Y``.
    Y : array_like of shape (..., m, d)
        The points :math:`y_j` (rows).
    check_finite : bool, default=True
        Refuse NaN and infinite entries.

    Returns
    -------
    ndarray of shape (..., n, m)
        :math:`-\|x_i - y_j\|^2 / 2`, never positive (round-off below zero distance is
        clipped).
    """
    X, Y, bk = _pair_iv(X, Y, check_finite, "log_gaussian_kernel")
    xp = bk.xp
    xx = xp.sum(X * X, axis=-1)[..., :, None]
    yy = xp.sum(Y * Y, axis=-1)[..., None, :]
    d2 = xx + yy - 2.0 * xp.matmul(X, xp.matrix_transpose(Y))
    return -0.5 * xp.clip(d2, min=0.0)  # only removes round-off below 0 (d2 >= 0 exactly)


@half_precision()
def gaussian_kernel(X: Any, Y: Any, *, check_finite: bool = True) -> np.ndarray:
    r"""Gaussian kernel :math:`\exp(-\|x_i - y_j\|^2/2)`, shape (..., n, m).

    Parameters
    ----------
    X : array_like of shape (..., n, d)
        The points :math:`x_i` (rows); leading axes broadcast with those of ``Y``.
    Y : array_like of shape (..., m, d)
        The points :math:`y_j` (rows).
    check_finite : bool, default=True
        Refuse NaN and infinite entries.

    Returns
    -------
    ndarray of shape (..., n, m)
        The kernel values, in the array library and dtype of the inputs.
    """
    logk = log_gaussian_kernel(X, Y, check_finite=check_finite)
    return get_backend(("X", logk)).xp.exp(logk)
