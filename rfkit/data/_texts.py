"""Text batches for the real-model loaders: argument checks, padding and chunking.

Shared by :func:`rfkit.data.minilm_qk` and :func:`rfkit.data.smollm2_qk`: which texts
(default: the built-in passages), which layers and heads, the truncation length and the
compute dtype are checked here, and encoded texts are padded into one id matrix and cut
into chunks whose attention arrays stay cache-sized.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..exceptions import InvalidParameterError
from ._passages import PASSAGES

__all__ = ["check_texts", "check_indices", "check_max_len", "check_dtype", "pad", "chunks", "CHUNK_BUDGET"]

CHUNK_BUDGET = 2**17  # texts x tokens x max(tokens, 64): 32 texts of 64 tokens, 1 of 362


def check_texts(texts: Any, name: str = "texts") -> tuple[str, ...]:
    """``texts`` as a tuple of str; None gives the built-in passages."""
    if texts is None:
        return PASSAGES
    if isinstance(texts, str):
        texts = (texts,)
    elif isinstance(texts, (bytes, np.ndarray)) or not isinstance(texts, Sequence):
        raise InvalidParameterError(
            f"`{name}` must be a str or a sequence of str (or None for the built-in passages). "
            f"Got {type(texts).__name__} instead."
        )
    texts = tuple(texts)
    if not texts:
        raise InvalidParameterError(f"`{name}` is an empty sequence; give at least one text.")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InvalidParameterError(f"`{name}[{i}]` must be a str. Got {type(t).__name__} instead.")
    return texts


def check_indices(value: Any, name: str, count: int, owner: str, model: str) -> tuple[int, ...]:
    """Layer or head indices: None (all), an int, or a sequence of distinct ints in [0, count)."""
    if value is None:
        return tuple(range(count))
    items = (value,) if isinstance(value, numbers.Integral) else value
    try:
        items = tuple(items)
    except TypeError:
        raise InvalidParameterError(
            f"The `{name}` parameter of {owner} must be None, an int or a sequence of ints in the "
            f"range [0, {count - 1}]. Got {value!r} instead."
        ) from None
    if not items:
        raise InvalidParameterError(f"The `{name}` parameter of {owner} is empty; give at least one index.")
    out = []
    for it in items:
        if (
            isinstance(it, (bool, np.bool_))
            or not isinstance(it, numbers.Integral)
            or not 0 <= int(it) < count
        ):
            raise InvalidParameterError(
                f"The `{name}` parameter of {owner} must hold ints in the range [0, {count - 1}] "
                f"({model} has {count} {name}). Got {it!r} instead."
            )
        out.append(int(it))
    if len(set(out)) != len(out):
        raise InvalidParameterError(f"The `{name}` parameter of {owner} has repeated entries: {out}.")
    return tuple(out)


def check_max_len(max_len: Any, owner: str, low: int, high: int, counting: str) -> int | None:
    """None or an int in [low, high]; ``counting`` says what a position counts (for the message)."""
    if max_len is None:
        return None
    if (
        isinstance(max_len, bool)
        or not isinstance(max_len, numbers.Integral)
        or not low <= int(max_len) <= high
    ):
        raise InvalidParameterError(
            f"The `max_len` parameter of {owner} must be None (no truncation) or an int in the range "
            f"[{low}, {high}] ({counting}). Got {max_len!r} instead."
        )
    return int(max_len)


def check_dtype(dtype: Any, owner: str) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise InvalidParameterError(
            f"The `dtype` parameter of {owner} must be numpy.float32 or numpy.float64. Got {dtype!r} instead."
        )
    return dt


def pad(encoded: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ids (texts, T_max) and the mask of valid positions."""
    T = max(len(e) for e in encoded)
    ids = np.full((len(encoded), T), pad_id, dtype=np.intp)
    mask = np.zeros((len(encoded), T), dtype=bool)
    for i, e in enumerate(encoded):
        ids[i, : len(e)] = e
        mask[i, : len(e)] = True
    return ids, mask


def chunks(lengths: list[int], budget: int) -> Iterator[slice]:
    """Consecutive text slices whose (texts x T_max^2) stays under ``budget``."""
    start = 0
    while start < len(lengths):
        stop = start + 1
        t_max = lengths[start]
        while stop < len(lengths):
            t_new = max(t_max, lengths[stop])
            if (stop + 1 - start) * t_new * max(t_new, 64) > budget:
                break
            t_max = t_new
            stop += 1
        yield slice(start, stop)
        start = stop
