"""Shared plumbing of the attention estimators: input checks, batching, chunking."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._validation import check_broadcast, check_int, check_points, check_square_norms, float_dtype
from ..exceptions import InvalidParameterError, ShapeError

__all__ = [
    "QKV",
    "check_qkv",
    "row_blocks",
    "CHUNK_ELEMS",
    "check_chunk_size",
    "check_bool",
    "gaussian_noise",
]

#: Work arrays of the chunked loops stay below about this many elements (16 MiB in float64).
CHUNK_ELEMS = 1 << 21


@dataclasses.dataclass(frozen=True)
class QKV:
    """Validated attention inputs, broadcast and flattened to ``(B, n, d)`` slices.

    Attributes
    ----------
    Q, K, V : ndarray of shape (B, n, d), (B, M, d), (B, M, dv)
        Slices in C order of the broadcast batch shape (views where possible).
    batch_shape : tuple of int
        Broadcast leading shape; ``B = prod(batch_shape)``.
    n_heads : int
        Length of the head axis (``batch_shape[-1]``; 1 for 2-D input).
    dtype : numpy.dtype
        Common float dtype of the output (float32 only if all inputs are).
    """

    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    batch_shape: tuple[int, ...]
    n_heads: int
    dtype: np.dtype[Any]

    @property
    def n_slices(self) -> int:
        return int(self.Q.shape[0])

    @property
    def n(self) -> int:
        return int(self.Q.shape[1])

    @property
    def m(self) -> int:
        return int(self.K.shape[1])

    @property
    def d(self) -> int:
        return int(self.Q.shape[2])

    @property
    def dv(self) -> int:
        return int(self.V.shape[2])

    def unflatten(self, arr: np.ndarray) -> np.ndarray:
        """Reshape ``(B, ...)`` back to ``batch_shape + (...)``."""
        return arr.reshape(self.batch_shape + arr.shape[1:])


def check_qkv(Q: Any, K: Any, V: Any, owner: str, *, causal: bool = False) -> QKV:
    """Validate ``Q`` (..., n, d), ``K`` (..., M, d), ``V`` (..., M, dv) and flatten the batch.

    Raises
    ------
    InvalidParameterError
        Non-float dtypes.
    NonFiniteInputError
        NaN or infinity in any input.
    NumericalOverflowError
        A row of ``Q`` or ``K`` whose squared norm overflows the dtype.
    ShapeError
        ``d`` differs between ``Q`` and ``K``, ``K`` and ``V`` have different
        numbers of rows, batch shapes do not broadcast, empty inputs, or
        ``causal=True`` with ``n != M``.
    """
    Q = check_points(Q, "Q")
    K = check_points(K, "K")
    V = check_points(V, "V")
    if Q.shape[-1] != K.shape[-1]:
        raise ShapeError(
            f"{owner}: `Q` and `K` must have the same feature dimension d (last axis): "
            f"Q.shape={Q.shape}, K.shape={K.shape}."
        )
    if K.shape[-2] != V.shape[-2]:
        raise ShapeError(
            f"{owner}: `K` and `V` must have the same number of rows M (axis -2, one value per key): "
            f"K.shape={K.shape}, V.shape={V.shape}."
        )
    if Q.shape[-2] == 0 or K.shape[-2] == 0 or Q.shape[-1] == 0 or V.shape[-1] == 0:
        raise ShapeError(
            f"{owner}: empty input (Q.shape={Q.shape}, K.shape={K.shape}, V.shape={V.shape}); "
            "attention needs n >= 1 queries, M >= 1 keys, d >= 1 and dv >= 1."
        )
    if causal and Q.shape[-2] != K.shape[-2]:
        raise ShapeError(
            f"{owner}: `causal=True` needs as many queries as keys (query i sees keys 0..i): "
            f"Q has n={Q.shape[-2]} rows, K has M={K.shape[-2]}."
        )
    batch = check_broadcast({"Q": Q.shape[:-2], "K": K.shape[:-2], "V": V.shape[:-2]})
    check_square_norms(Q, "Q", owner)
    check_square_norms(K, "K", owner)
    dt = float_dtype(Q, K, V)
    B = int(np.prod(batch, dtype=np.int64)) if batch else 1

    def flat(X: np.ndarray) -> np.ndarray:
        X = X.astype(dt, copy=False)
        X = np.broadcast_to(X, batch + X.shape[-2:])
        return X.reshape((B,) + X.shape[-2:])

    n_heads = int(batch[-1]) if batch else 1
    return QKV(flat(Q), flat(K), flat(V), tuple(batch), n_heads, np.dtype(dt))


def row_blocks(
    total: int, per_row: int, budget: int = CHUNK_ELEMS, cap: int | None = None
) -> Iterator[slice]:
    """Contiguous row blocks so that a ``(block, per_row)`` work array stays within ``budget``."""
    step = max(1, budget // max(per_row, 1))
    if cap is not None:
        step = min(step, cap)
    for start in range(0, total, step):
        yield slice(start, min(total, start + step))


def check_chunk_size(chunk_size: Any, owner: str) -> int | None:
    """``None`` (automatic) or an int >= 1."""
    if chunk_size is None:
        return None
    return check_int(chunk_size, "chunk_size", owner, low=1)


def check_bool(value: Any, name: str, owner: str) -> bool:
    """Refuse non-bool flags (``causal="yes"`` is a bug, not True)."""
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidParameterError(
            f"The `{name}` parameter of {owner} must be a bool. Got {value!r} instead."
        )
    return bool(value)


def gaussian_noise(gen: np.random.Generator, n_samples: int, dim: int, projection: str) -> np.ndarray:
    """``(n_samples, dim)`` standard-normal rows drawn like ``Positive(n_samples, projection)``.

    Uses :func:`rfkit.projections.sample_projection`, so with the same generator
    state the rows equal the directions of a positive-feature draw (the RFA/SNIS
    and RFA/LARA identities rely on this).
    """
    from ..projections import sample_projection

    return sample_projection(projection, n_samples, dim, rng=gen)
