"""Array operations with a NumPy fast path, kept in the backend layer so that estimators call one
function whatever the array library is."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "array_device",
    "dense_members",
    "first_of_order",
    "promoted_matmul",
    "row_weighted_sum",
    "scatter_inverse",
    "top_order",
]


def top_order(key: Any, w: int, xp: Any) -> Any:
    """``argsort(key, stable=True)[..., :w]``: the ``w`` smallest of each row, ties to the earlier.

    NumPy: a partition and a sort of the ``w`` kept only (rows with NaN sort whole); other
    namespaces sort whole rows.
    """
    M = int(key.shape[-1])
    if not isinstance(key, np.ndarray) or w >= M:
        return xp.argsort(key, axis=-1, stable=True)[..., :w]
    kth = np.partition(key, w - 1, axis=-1)[..., w - 1 : w]  # the w-th smallest of each row
    if np.isnan(kth).any():
        return np.argsort(key, axis=-1, kind="stable")[..., :w]
    below, tie = key < kth, key == kth
    # all keys below the w-th smallest, and the earliest of those equal to it: w per row
    keep = below | (tie & (np.cumsum(tie, axis=-1) <= w - np.count_nonzero(below, axis=-1)[..., None]))
    kept = np.nonzero(keep)[-1].reshape(key.shape[:-1] + (w,))  # in key order
    order = np.argsort(np.take_along_axis(key, kept, axis=-1), axis=-1, kind="stable")
    return np.take_along_axis(kept, order, axis=-1)


def first_of_order(key: Any, w: int, xp: Any) -> Any:
    """``argsort(key)[..., :w]``: the positions of each row's ``w`` smallest keys, smallest first.

    NumPy: its default sort (the numbers NumPy calls have always given; ties in the sort's own
    order); other namespaces a stable sort (ties to the earlier). Ties of distinct positions arise
    only where keys are equal (float32 uniforms may be).
    """
    if isinstance(key, np.ndarray):
        return np.argsort(key, axis=-1)[..., :w]
    return xp.argsort(key, axis=-1, stable=True)[..., :w]


def row_weighted_sum(w: Any, v: Any, xp: Any) -> Any:
    """``sum_j w[..., j] * v[..., j, :]``: (..., c) from ``w`` (..., k) and ``v`` (..., k, c).

    NumPy: ``einsum`` (its own summation order, kept so NumPy's numbers do not change); other
    namespaces a batched matrix product (the same sums, another rounding).
    """
    if isinstance(w, np.ndarray) and isinstance(v, np.ndarray):
        return np.einsum("...j,...jc->...c", w, v)
    return (w[..., None, :] @ v)[..., 0, :]


def promoted_matmul(a: Any, b: Any, xp: Any) -> Any:
    """``a @ b`` in the two arrays' promoted dtype (float32 with float64: float64).

    NumPy: its matmul promotes inside the product (no float64 copy of the float32 operand); other
    namespaces cast the operand of the lower precision first.
    """
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a @ b
    dt = xp.result_type(a, b)
    return (a if a.dtype == dt else xp.astype(a, dt)) @ (b if b.dtype == dt else xp.astype(b, dt))


def array_device(a: Any) -> Any:
    """The device of an array (None for NumPy arrays)."""
    return getattr(a, "device", None)


def dense_members(idx: Any, valid: Any, M: int, xp: Any) -> Any:
    """Boolean (B, r, M): key ``j`` is in row ``(b, i)``'s padded support ``idx``/``valid`` (B, r, s)."""
    B, r, s = (int(v) for v in idx.shape)
    dev = array_device(idx)
    if s == 0:
        return xp.zeros((B, r, M), dtype=xp.bool, device=dev)
    if isinstance(idx, np.ndarray):  # NumPy: one scatter (the same mask as the search below)
        dense = np.zeros((B, r, M + 1), dtype=bool)
        np.put_along_axis(dense, np.where(valid & (idx >= 0) & (idx < M), idx, M), True, axis=-1)
        return dense[..., :M]
    keys = xp.sort(xp.where(valid, idx, xp.full_like(idx, M)), axis=-1)  # invalid entries sort last
    row = xp.reshape(xp.arange(B * r, dtype=xp.int64, device=dev), (B, r, 1))
    flat = xp.reshape(keys + row * (M + 1), (-1,))
    j = xp.arange(M, dtype=xp.int64, device=dev)[None, None, :]
    le = xp.astype(xp.searchsorted(flat, j + row * (M + 1), side="right"), xp.int64) - row * s
    before = xp.concat([xp.zeros_like(le[..., :1]), le[..., :-1]], axis=-1)
    return le > before


def scatter_inverse(values: Any, order: Any, xp: Any) -> Any:
    """``out`` with ``out[..., order[..., i]] = values[..., i]``: ``values`` put back in the order a
    permutation ``order`` (each row a permutation of the last axis) took them from.

    NumPy: one scatter; other namespaces take along the inverse permutation (a stable argsort).
    """
    if isinstance(order, np.ndarray):
        out = np.empty_like(values)
        np.put_along_axis(out, order, values, axis=-1)
        return out
    return xp.take_along_axis(values, xp.argsort(order, axis=-1, stable=True), axis=-1)
