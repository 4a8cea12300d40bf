"""A minimal reader for GGUF model files (llama.cpp's format), in NumPy.

Layout (GGUF version 2 and 3, little-endian; ggml's ``docs/gguf.md``):

* ``b"GGUF"``, ``uint32`` version, ``uint64`` tensor count, ``uint64`` metadata count;
* metadata: key (``uint64`` length + UTF-8), ``uint32`` value type, value (scalars,
  strings, or typed arrays);
* tensor infos: name, ``uint32`` number of dimensions, ``uint64`` sizes (``ne[0]`` first,
  the contiguous one), ``uint32`` ggml type, ``uint64`` offset into the data section;
* padding to ``general.alignment`` (default 32), then the data section.

A tensor with sizes ``[ne0, ne1]`` is a C-order NumPy array of shape ``(ne1, ne0)``: for a
linear layer, ``(out_features, in_features)``. Quantised types are stored in blocks of 32
values along ``ne0``; the two block formats this reader dequantises are

* ``Q8_0``: float16 scale ``d``, 32 ``int8`` ``q``: value ``d * q``;
* ``Q4_1``: float16 ``d``, float16 ``m``, 16 bytes of 4-bit ``q`` (low nibbles are values
  0-15 of the block, high nibbles 16-31): value ``d * q + m``;

plus plain ``F32`` and ``F16``. Every size and offset is checked; a truncated or corrupt
file raises :class:`CorruptWeightsError` naming the tensor.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from typing import Any

import numpy as np

from ..exceptions import CorruptWeightsError

__all__ = ["GGUFFile", "GGUFTensor", "parse_gguf", "dequantize"]

_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")
_NUMPY_ARRAY = {
    0: "u1",
    1: "i1",
    2: "<u2",
    3: "<i2",
    4: "<u4",
    5: "<i4",
    6: "<f4",
    10: "<u8",
    11: "<i8",
    12: "<f8",
}

#: ggml type -> (name, values per block, bytes per block)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    3: ("Q4_1", 32, 20),
    8: ("Q8_0", 32, 34),
}


@dataclasses.dataclass(frozen=True)
class GGUFTensor:
    """One stored tensor: its NumPy shape (``ne`` reversed), ggml type and raw bytes."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    data: np.ndarray  # uint8 view of the stored blocks

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.ggml_type][0]


@dataclasses.dataclass(frozen=True)
class GGUFFile:
    version: int
    metadata: dict[str, Any]
    tensors: dict[str, GGUFTensor]


class _Reader:
    def __init__(self, buf: memoryview, source: str) -> None:
        self.buf, self.pos, self.source = buf, 0, source

    def fail(self, what: str) -> CorruptWeightsError:
        return CorruptWeightsError(f"{self.source}: {what} (at byte {self.pos}); not a valid GGUF file.")

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise self.fail("truncated header")
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        n = self.unpack("<Q")
        if self.pos + n > len(self.buf):
            raise self.fail("truncated string")
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("a string is not UTF-8") from None

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, n = self.unpack("<I"), self.unpack("<Q")
            if etype in _NUMPY_ARRAY:  # numeric arrays in one read
                size = n * np.dtype(_NUMPY_ARRAY[etype]).itemsize
                if self.pos + size > len(self.buf):
                    raise self.fail("truncated array")
                arr = np.frombuffer(self.buf, dtype=_NUMPY_ARRAY[etype], count=n, offset=self.pos)
                self.pos += size
                return arr
            if etype == _STRING:  # a tokenizer's vocabulary and merges: ~10^5 strings
                return self.strings(n)
            return [self.value(etype) for _ in range(n)]
        raise self.fail(f"unknown metadata value type {vtype}")

    def strings(self, n: int) -> list[str]:
        """``n`` strings in a row, as :meth:`string` reads them, in one tight loop (same checks)."""
        buf, pos, end = self.buf, self.pos, len(self.buf)
        length = _U64.unpack_from
        out = []
        for _ in range(n):
            if pos + 8 > end:
                self.pos = pos
                raise self.fail("truncated header")
            (m,) = length(buf, pos)
            pos += 8
            if pos + m > end:
                self.pos = pos
                raise self.fail("truncated string")
            try:
                out.append(str(buf[pos : pos + m], "utf-8"))
            except UnicodeDecodeError:
                self.pos = pos + m
                raise self.fail("a string is not UTF-8") from None
            pos += m
        self.pos = pos
        return out


def parse_gguf(buffer: bytes | memoryview, *, source: str = "<buffer>") -> GGUFFile:
    """Parse a GGUF file held in memory; tensors view ``buffer`` (no copy)."""
    buf = memoryview(buffer)
    r = _Reader(buf, source)
    if bytes(buf[:4]) != b"GGUF":
        raise r.fail("missing GGUF magic")
    r.pos = 4
    version = r.unpack("<I")
    if version not in (2, 3):
        raise r.fail(f"unsupported GGUF version {version}")
    n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string()
        metadata[key] = r.value(r.unpack("<I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.unpack("<I")
        if not 1 <= n_dims <= 4:
            raise r.fail(f"tensor {name!r} has {n_dims} dimensions")
        ne = [r.unpack("<Q") for _ in range(n_dims)]
        infos.append((name, tuple(reversed(ne)), r.unpack("<I"), r.unpack("<Q")))
    align = int(metadata.get("general.alignment", 32))
    start = -(-r.pos // align) * align
    raw = np.frombuffer(buf, dtype=np.uint8)
    tensors = {}
    for name, shape, gtype, offset in infos:
        if gtype not in GGML_TYPES:
            raise CorruptWeightsError(
                f"{source}: tensor {name!r} has ggml type {gtype}, which rfkit cannot read."
            )
        _, per_block, block_bytes = GGML_TYPES[gtype]
        count = math.prod(shape)
        if shape[-1] % per_block:
            raise CorruptWeightsError(f"{source}: tensor {name!r} rows of {shape[-1]} are not whole blocks.")
        nbytes = count // per_block * block_bytes
        begin = start + offset
        if offset % align or begin + nbytes > len(raw):
            raise CorruptWeightsError(
                f"{source}: tensor {name!r} (bytes {begin}..{begin + nbytes}) lies outside the file "
                f"of {len(raw)} bytes or is misaligned; the file is truncated or corrupt."
            )
        tensors[name] = GGUFTensor(name, shape, gtype, raw[begin : begin + nbytes])
    return GGUFFile(version, metadata, tensors)


def dequantize(t: GGUFTensor, dtype: Any = np.float64, rows: np.ndarray | None = None) -> np.ndarray:
    """Values of ``t`` (or of the given rows of a 2-D ``t``) as ``dtype``, shape ``t.shape``.

    Products and sums are formed in float64, where they are exact for these formats, then cast;
    for a float32 ``dtype`` they are formed in float32, which gives the same values: a Q8_0 or
    Q4_1 product of an f16 scale (11 significant bits) and a quant (at most 8 bits) is exact in
    float32, and Q4_1's one addition of the f16 minimum is then rounded once, as the cast of the
    exact float64 sum is.
    """
    name, per_block, block_bytes = GGML_TYPES[t.ggml_type]
    row_len = t.shape[-1]
    blocks = t.data.reshape(-1, row_len // per_block * block_bytes)  # one row of blocks per tensor row
    out_shape: tuple[int, ...] = t.shape
    if rows is not None:
        blocks = blocks[rows]
        out_shape = (len(rows), row_len)
    b = blocks.reshape(-1, block_bytes)
    work = np.float32 if np.dtype(dtype) == np.float32 else np.float64
    if name == "F32":
        vals = b.view("<f4")
    elif name == "F16":
        vals = b.view("<f2")
    elif name == "Q8_0":
        d = b[:, :2].copy().view("<f2").astype(work)
        vals = d * b[:, 2:].view(np.int8)
    else:  # Q4_1: low nibbles are quants 0-15 of the block, high nibbles 16-31
        dm = b[:, :4].copy().view("<f2").astype(work)
        qs = b[:, 4:]
        vals = np.empty((b.shape[0], 2 * qs.shape[1]), dtype=work)
        np.bitwise_and(qs, 0x0F, out=vals[:, : qs.shape[1]], casting="unsafe")  # exact small integers
        np.right_shift(qs, 4, out=vals[:, qs.shape[1] :], casting="unsafe")
        vals *= dm[:, :1]
        vals += dm[:, 1:2]
    return np.ascontiguousarray(vals.reshape(out_shape), dtype=dtype)
