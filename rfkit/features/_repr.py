"""Short reprs of draws and scaled features: maps with their parameters, arrays by shape and dtype."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["array_summary", "map_repr"]


def array_summary(a: Any) -> str:
    """``array(shape=(5, 64), dtype=float64)``: an array named by shape, dtype (and device), no values."""
    shape = tuple(int(s) for s in a.shape)
    if isinstance(a, np.ndarray):
        return f"array(shape={shape}, dtype={a.dtype})"
    lib = type(a).__module__.split(".", 1)[0]
    dtype = str(a.dtype).removeprefix(f"{lib}.")
    return f"{lib}.{type(a).__name__}(shape={shape}, dtype={dtype}, device={getattr(a, 'device', '?')})"


def map_repr(spec: Any) -> str:
    """The repr of a map with array parameters shown by :func:`array_summary` (no values)."""
    if not dataclasses.is_dataclass(spec) or isinstance(spec, type):
        return repr(spec)
    parts = []
    for f in dataclasses.fields(spec):
        if f.repr:
            v = getattr(spec, f.name)
            is_array = hasattr(v, "shape") and hasattr(v, "dtype") and len(v.shape) > 0
            shown = array_summary(v) if is_array else repr(v)
            parts.append(f"{f.name}={shown}")
    return f"{type(spec).__name__}({', '.join(parts)})"
