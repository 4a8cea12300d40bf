"""The result of a real-model extraction and the loop that fills it.

:class:`TransformerQK` holds per-text, per-layer, per-head queries, keys, values and
attention probabilities (padded to the longest text); :func:`collect` runs a model's forward
pass chunk by chunk and keeps the requested layers and heads; :func:`cache_read` and
:func:`cache_write` convert a result to and from the plain arrays of a cache entry;
:class:`QKSource` holds what the extraction functions of the real models share: checking
their arguments, the cache entry, the split of the logit scale between queries and keys.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np

from ..exceptions import InvalidParameterError
from . import _cache
from ._cache import read_arrays, write_arrays
from ._texts import CHUNK_BUDGET, check_dtype, check_indices, check_max_len, check_texts, chunks, pad

__all__ = ["TransformerQK", "collect", "cache_read", "cache_write"]

_ARRAYS = ("q", "k", "v", "attention", "mask", "tokens")

#: ``run(ids, mask, n_layers, keep)``: runs ``n_layers`` layers on one padded chunk, calling
#: ``keep(layer, q, k, v, p)`` with (chunk, heads, tokens, ·) arrays after each layer's softmax.
RunModel = Callable[[np.ndarray, np.ndarray, int, Callable[..., None]], None]


@dataclasses.dataclass(frozen=True, eq=False)
class TransformerQK:
    """Per-layer, per-head attention inputs and outputs of a pretrained transformer.

    Unpacks as ``q, k = result``. Padded positions (``mask`` False) hold zeros in ``q``,
    ``k``, ``v`` and in the rows and columns of ``attention``. ``causal`` (a class
    attribute) says whether query ``i`` attends only to keys ``j <= i``.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    attention: np.ndarray
    mask: np.ndarray
    tokens: list[list[str]]
    texts: tuple[str, ...]
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    scale: str
    max_len: int | None

    causal: ClassVar[bool] = False

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter((self.q, self.k))

    @property
    def lengths(self) -> np.ndarray:
        """Number of valid tokens of each text."""
        return self.mask.sum(axis=1)

    def head(self, text: int, layer: int, head: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(q, k, v)`` of one text, model layer and model head, valid tokens only: (n, d) each."""
        if layer not in self.layers:
            raise InvalidParameterError(
                f"`layer`={layer!r} was not extracted; available: {list(self.layers)}."
            )
        if head not in self.heads:
            raise InvalidParameterError(f"`head`={head!r} was not extracted; available: {list(self.heads)}.")
        if (
            isinstance(text, bool)
            or not isinstance(text, numbers.Integral)
            or not 0 <= text < len(self.texts)
        ):
            raise InvalidParameterError(f"`text` must be an int in [0, {len(self.texts) - 1}]. Got {text!r}.")
        li, hi, n = self.layers.index(layer), self.heads.index(head), int(self.lengths[text])
        return self.q[text, li, hi, :n], self.k[text, li, hi, :n], self.v[text, li, hi, :n]


def collect(
    encoded: list[list[int]],
    pad_id: int,
    layers: tuple[int, ...],
    heads: tuple[int, ...],
    head_dim: int,
    dtype: np.dtype,
    run: RunModel,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Run the model over cache-sized chunks of texts; returns q, k, v, attention and the mask."""
    ids, mask = pad(encoded, pad_id)
    n, T = ids.shape
    L, H = len(layers), len(heads)
    q_out = np.zeros((n, L, H, T, head_dim), dtype=dtype)
    k_out = np.zeros_like(q_out)
    v_out = np.zeros_like(q_out)
    a_out = np.zeros((n, L, H, T, T), dtype=dtype)
    head_idx = np.asarray(heads)
    slot = {layer: i for i, layer in enumerate(layers)}
    lengths = [len(e) for e in encoded]
    for sl in chunks(lengths, CHUNK_BUDGET):
        t_c = max(lengths[sl])
        ids_c, mask_c = ids[sl, :t_c], mask[sl, :t_c]

        def keep(li: int, q, k, v, p, sl=sl, t_c=t_c, mask_c=mask_c) -> None:
            if li not in slot:
                return
            j = slot[li]
            m = mask_c[:, None, :, None]  # zero the padded query rows
            q_out[sl, j, :, :t_c] = np.where(m, q[:, head_idx], 0)
            k_out[sl, j, :, :t_c] = np.where(m, k[:, head_idx], 0)
            v_out[sl, j, :, :t_c] = np.where(m, v[:, head_idx], 0)
            a_out[sl, j, :, :t_c, :t_c] = np.where(m, p[:, head_idx], 0)

        run(ids_c, mask_c, max(layers) + 1, keep)
    return q_out, k_out, v_out, a_out, mask


def softmax_(logits: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Attention probabilities from ``logits`` (overwritten): softmax over the last axis of
    ``logits + bias``, where ``bias`` is 0 for a visible key and -inf for a hidden one (its
    probability is then exactly 0)."""
    logits += bias
    logits -= logits.max(axis=-1, keepdims=True)
    p = np.exp(logits, out=logits)
    p /= p.sum(axis=-1, keepdims=True)
    return p


R = TypeVar("R", bound=TransformerQK)


def cache_read(path: Path, cls: type[R], head_dim: int, key: str, **fields: Any) -> R | None:
    """A cached result stored under ``key`` and matching ``fields`` (texts, layers, heads, dtype, ...), or None."""
    arrays = read_arrays(path, _ARRAYS, key=key)
    if arrays is None:
        return None
    texts, layers, heads, dtype = fields["texts"], fields["layers"], fields["heads"], fields.pop("dtype")
    n, T = arrays["mask"].shape
    shape = (n, len(layers), len(heads), T, head_dim)
    if (
        n != len(texts)
        or arrays["mask"].dtype != bool
        or any(arrays[a].shape != shape or arrays[a].dtype != dtype for a in ("q", "k", "v"))
        or arrays["attention"].shape != shape[:4] + (T,)
        or arrays["tokens"].shape != (n, T)
    ):
        return None
    mask = arrays["mask"]
    tokens = [[str(t) for t in row[m]] for row, m in zip(arrays["tokens"], mask)]
    return cls(
        q=arrays["q"],
        k=arrays["k"],
        v=arrays["v"],
        attention=arrays["attention"],
        mask=mask,
        tokens=tokens,
        **fields,
    )


def cache_write(path: Path, res: TransformerQK, key: str) -> None:
    width = max(1, max(len(t) for row in res.tokens for t in row))
    tokens = np.full(res.mask.shape, "", dtype=f"<U{width}")
    for i, row in enumerate(res.tokens):
        tokens[i, : len(row)] = row
    arrays = dict(q=res.q, k=res.k, v=res.v, attention=res.attention, mask=res.mask, tokens=tokens)
    write_arrays(path, arrays, key=key)


@dataclasses.dataclass(frozen=True)
class Request:
    """One checked extraction request: its result fields, dtype, logit scales and cache entry."""

    fields: dict[str, Any]  # texts, layers, heads, max_len, scale: the result's own fields
    dtype: np.dtype
    scale_q: float
    scale_k: float
    file: Path | None  # the cache entry, None without a cache
    key: str = ""  # the cache entry's full key (stored in it and compared on read)


@dataclasses.dataclass(frozen=True)
class QKSource:
    """What the shared steps of a real model's extraction need to know about the model.

    ``owner`` is the public function (for messages), ``name`` the cache's subfolder and the
    prefix of its files; ``min_len`` and ``unit`` describe ``max_len`` (what a position counts).
    """

    owner: str
    model: str
    name: str
    n_layers: int
    n_heads: int
    head_dim: int
    max_positions: int
    min_len: int
    unit: str
    weights_sha256: str
    cache_format: int

    def check_max_len(self, max_len: Any, owner: str) -> int | None:
        """None or an int in ``[min_len, max_positions]``."""
        return check_max_len(max_len, owner, self.min_len, self.max_positions, self.unit)

    def request(
        self,
        texts: Any,
        layers: Any,
        heads: Any,
        max_len: Any,
        dtype: Any,
        cache: Any,
        scale: Any,
        cache_dir: Callable[[], Path],
    ) -> Request:
        """Check the arguments of the extraction function and name its cache entry.

        ``scale="symmetric"`` puts :math:`d^{-1/4}` on each of q and k, ``"query"`` all of
        :math:`d^{-1/2}` on q (``d`` the head dimension), so that ``q_i · k_j`` is the logit.
        """
        texts = check_texts(texts)
        layers = check_indices(layers, "layers", self.n_layers, self.owner, self.model)
        heads = check_indices(heads, "heads", self.n_heads, self.owner, self.model)
        max_len = self.check_max_len(max_len, self.owner)
        dt = check_dtype(dtype, self.owner)
        if scale not in ("symmetric", "query"):
            raise InvalidParameterError(
                f"The `scale` parameter of {self.owner} must be 'symmetric' or 'query'. Got {scale!r} instead."
            )
        directory = _cache.resolve(cache, self.owner, cache_dir)
        file, key = None, ""
        if directory is not None:
            key = _cache.cache_key(
                {
                    "format": self.cache_format,
                    "weights": self.weights_sha256,
                    "texts": list(texts),
                    "layers": list(layers),
                    "heads": list(heads),
                    "max_len": max_len,
                    "dtype": dt.name,
                    "scale": scale,
                }
            )
            file = directory / f"{self.name}-{key[:40]}.npz"
        d = self.head_dim
        s_q, s_k = (d**-0.25, d**-0.25) if scale == "symmetric" else (d**-0.5, 1.0)
        fields = dict(texts=texts, layers=layers, heads=heads, max_len=max_len, scale=scale)
        return Request(fields=fields, dtype=dt, scale_q=s_q, scale_k=s_k, file=file, key=key)

    def cached(self, req: Request, cls: type[R]) -> R | None:
        """The cached result of ``req``, or None (no cache, no entry, or an unreadable one)."""
        if req.file is None:
            return None
        return cache_read(req.file, cls, self.head_dim, req.key, dtype=req.dtype, **req.fields)

    def store(self, req: Request, res: TransformerQK) -> None:
        """Write ``res`` to the cache entry of ``req`` (if any)."""
        if req.file is not None:
            cache_write(req.file, res, req.key)

    def extract(
        self,
        req: Request,
        cls: type[R],
        encoded: list[list[int]],
        pad_id: int,
        tokens: list[list[str]],
        run: Callable[[np.ndarray, np.ndarray, int, Any], None],
    ) -> R:
        """Run the model (``run``, as in :func:`collect`) on the token ids ``encoded``, keep the
        requested layers and heads, and store the result in the cache entry of ``req``."""
        f = req.fields
        q, k, v, a, mask = collect(encoded, pad_id, f["layers"], f["heads"], self.head_dim, req.dtype, run)
        res = cls(q=q, k=k, v=v, attention=a, mask=mask, tokens=tokens, **f)
        self.store(req, res)
        return res
