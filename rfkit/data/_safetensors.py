"""A minimal reader for the safetensors format, in NumPy (no ``safetensors`` package).

Layout of a ``.safetensors`` file:

* 8 bytes: ``N``, the length of the header, unsigned 64-bit little-endian;
* ``N`` bytes: a UTF-8 JSON object mapping each tensor name to
  ``{"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}`` (offsets relative
  to the first byte after the header), plus an optional ``"__metadata__"`` of strings;
* the raw tensor bytes, little-endian, C order.

Every offset, size and dtype is checked: a truncated or corrupt file raises
:class:`CorruptWeightsError` naming the tensor, never returns garbage.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np

from ..exceptions import CorruptWeightsError

__all__ = ["CorruptWeightsError", "parse_safetensors", "SAFETENSORS_DTYPES"]


#: safetensors dtype name -> little-endian NumPy dtype ("BF16" is widened to float32 on read).
SAFETENSORS_DTYPES: dict[str, str] = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "BF16": "<u2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "BOOL": "?",
}

_MAX_HEADER = 100 * 2**20  # the format's own limit on the header size


def parse_safetensors(buffer: bytes | memoryview, *, source: str = "<buffer>") -> dict[str, np.ndarray]:
    """Parse a safetensors file held in memory.

    Parameters
    ----------
    buffer : bytes
        The whole file.
    source : str
        Name used in error messages (usually the path).

    Returns
    -------
    dict of str -> ndarray
        Read-only arrays viewing ``buffer`` in their stored dtype, except ``BF16``
        tensors, which are widened to float32 (exactly: bfloat16 is the top half of a
        float32). ``"__metadata__"`` is not returned.
    """
    mv = memoryview(buffer)
    size = len(mv)
    if size < 8:
        raise CorruptWeightsError(f"{source}: {size} bytes is too short for a safetensors file.")
    (n_header,) = struct.unpack("<Q", mv[:8])
    if n_header > _MAX_HEADER or 8 + n_header > size:
        raise CorruptWeightsError(
            f"{source}: header length {n_header} does not fit a file of {size} bytes "
            "(truncated or not a safetensors file)."
        )
    try:
        header = json.loads(bytes(mv[8 : 8 + n_header]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptWeightsError(f"{source}: the safetensors header is not valid JSON ({exc}).") from None
    if not isinstance(header, dict):
        raise CorruptWeightsError(f"{source}: the safetensors header is not a JSON object.")
    start = 8 + n_header
    n_data = size - start
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype_name = info["dtype"]
            shape = tuple(int(s) for s in info["shape"])
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise CorruptWeightsError(
                f"{source}: tensor {name!r} has a malformed header entry {info!r}."
            ) from None
        if dtype_name not in SAFETENSORS_DTYPES:
            raise CorruptWeightsError(
                f"{source}: tensor {name!r} has dtype {dtype_name!r}; supported: {sorted(SAFETENSORS_DTYPES)}."
            )
        np_dtype = np.dtype(SAFETENSORS_DTYPES[dtype_name])
        count = math.prod(shape)
        if (
            any(s < 0 for s in shape)
            or not 0 <= begin <= end <= n_data
            or end - begin != count * np_dtype.itemsize
        ):
            raise CorruptWeightsError(
                f"{source}: tensor {name!r} (dtype {dtype_name}, shape {list(shape)}) has data offsets "
                f"[{begin}, {end}] inconsistent with its size or with the {n_data} data bytes."
            )
        arr = np.frombuffer(mv, dtype=np_dtype, count=count, offset=start + begin).reshape(shape)
        if dtype_name == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr
    return out


def describe_header(buffer: bytes | memoryview) -> dict[str, Any]:
    """The raw JSON header (for debugging)."""
    (n_header,) = struct.unpack("<Q", memoryview(buffer)[:8])
    return json.loads(bytes(memoryview(buffer)[8 : 8 + n_header]).decode("utf-8"))
