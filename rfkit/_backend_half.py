"""Half-precision PyTorch inputs: which arguments are float16/bfloat16, and the casts around float32.

The library-specific part of :func:`rfkit._validation.half_precision`, kept beside
:mod:`rfkit._backend` (the one place that knows which library an array belongs to) so that no
other module branches on the library.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from ._backend import _library

__all__ = ["HALF_DTYPES", "half_name", "float_tensor_dtype", "to_float32", "cast_back"]

#: PyTorch dtypes accepted by the public estimate functions, computed in float32 (see half_precision)
HALF_DTYPES: tuple[str, ...] = ("float16", "bfloat16")


def half_name(a: Any) -> str | None:
    """``"float16"``/``"bfloat16"`` for a PyTorch tensor of that dtype, else None (no torch import)."""
    if _library(a) != "torch":
        return None
    name = str(getattr(a, "dtype", "")).replace("torch.", "")
    return name if name in HALF_DTYPES else None


def float_tensor_dtype(a: Any) -> str | None:
    """The dtype of a floating-point PyTorch tensor (e.g. ``"torch.float32"``), else None."""
    if _library(a) != "torch" or not a.is_floating_point():
        return None
    return str(a.dtype)


def to_float32(a: Any) -> Any:
    """A half-precision PyTorch tensor in float32 (autograd follows the cast); anything else as it is."""
    return a.float() if half_name(a) else a


def cast_back(res: Any, dtype: Any) -> Any:
    """float32 PyTorch tensors of ``res`` (a tensor, a tuple or a dataclass) in ``dtype``; fields named
    ``log_*`` (log-space) stay float32."""
    if _library(res) == "torch" and str(getattr(res, "dtype", "")) == "torch.float32":
        return res.to(dtype)
    if isinstance(res, tuple) and not hasattr(res, "_fields"):
        return tuple(cast_back(r, dtype) for r in res)
    if dataclasses.is_dataclass(res) and not isinstance(res, type):
        out = copy.copy(res)
        for f in dataclasses.fields(res):
            if not f.name.startswith("log_"):
                object.__setattr__(out, f.name, cast_back(getattr(res, f.name), dtype))
        return out
    return res
