"""The data of drop-in designs: which models, which texts, which layers.

A drop-in cell runs pretrained models (:class:`rfkit.data.SmolLM2Model`, the causal decoder,
and :class:`rfkit.data.MiniLMModel`, the encoder) on texts made of the built-in passages
(:data:`rfkit.data.PASSAGES`): text ``i`` is passages joined by a space, from the first one the
previous text did not use, until the model's tokeniser gives ``n_tokens`` tokens (MiniLM:
positions, counting ``[CLS]`` and ``[SEP]``), then cut there. At 64 tokens each text is one
passage (the texts of the real-attention study); at 512 each joins about seven.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import data as rkdata
from ..exceptions import InvalidParameterError

__all__ = [
    "DROPIN_PARAMS",
    "MODEL_CLASSES",
    "DropInData",
    "dropin_data",
    "dropin_model",
    "passage_texts",
    "dropin_factory",
    "dropin_model_dim",
]

#: the models a drop-in design can run, by the names study files use
MODEL_CLASSES: dict[str, type[rkdata.PretrainedModel]] = {
    "smollm2": rkdata.SmolLM2Model,
    "minilm": rkdata.MiniLMModel,
}
#: the data parameters of the ``passages`` source
DROPIN_PARAMS = frozenset({"models", "n_tokens", "n_texts", "layers", "one_layer", "dtype", "scale"})


@dataclasses.dataclass(frozen=True)
class DropInData:
    """The checked data parameters of one drop-in cell.

    ``layers``: the layers replaced (None: every layer of each model); ``one_layer``: whether
    this cell also replaces each of them alone (its ``n_tokens`` and ``feature_dim`` are among
    those of ``data.one_layer``), on the first ``one_layer_texts`` texts.
    """

    models: tuple[str, ...]
    n_tokens: int
    n_texts: int
    layers: tuple[int, ...] | None
    one_layer: bool
    one_layer_texts: int
    dtype: str
    scale: str

    def replaced(self, model: str) -> tuple[int, ...]:
        """The replaced layers of ``model``."""
        return tuple(range(MODEL_CLASSES[model].n_layers)) if self.layers is None else self.layers


def _int(p: Mapping[str, Any], key: str, default: Any, low: int) -> int:
    v = p.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise InvalidParameterError(
            f"`data.{key}` (or its [data] table's `{key}`) must be an integer >= {low}. Got {v!r} instead."
        )
    return int(v)


def dropin_data(p: Mapping[str, Any], feature_dim: Any = None) -> DropInData:
    """The data parameters of a drop-in cell (``design.data_params(cell)``), checked, with defaults.

    ``one_layer`` is a table ``{n_tokens = [...], feature_dim = [...], texts = k}``: the cells with
    one of those context lengths and budgets (``feature_dim``: the cell's; left out: every budget)
    also replace each layer alone, on their first ``texts`` texts (default: all).
    """
    models = p.get("models", list(MODEL_CLASSES))
    if (
        not isinstance(models, list)
        or not models
        or any(m not in MODEL_CLASSES for m in models)
        or len(set(models)) != len(models)
    ):
        raise InvalidParameterError(
            f"`data.models` must be a non-empty list of distinct names from {list(MODEL_CLASSES)}. Got {models!r} instead."
        )
    if "n_tokens" not in p:
        raise InvalidParameterError(
            "`data.n_tokens` (the context length, in [data] or the grid) must be given."
        )
    n_tokens = _int(p, "n_tokens", None, 3 if "minilm" in models else 2)
    for m in models:
        top = MODEL_CLASSES[m].max_positions
        if n_tokens > top:
            raise InvalidParameterError(
                f"`data.n_tokens` = {n_tokens} exceeds the {top} positions of {MODEL_CLASSES[m].name} ({m!r})."
            )
    n_texts = _int(p, "n_texts", 1, 1)
    layers = p.get("layers")
    if layers is not None:
        top = min(MODEL_CLASSES[m].n_layers for m in models)
        if (
            not isinstance(layers, list)
            or not layers
            or any(isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < top for v in layers)
            or len(set(layers)) != len(layers)
        ):
            raise InvalidParameterError(
                f"`data.layers` must be a non-empty list of distinct layer indices in [0, {top - 1}] (every model "
                f"of `data.models` has them); leave it out to replace every layer. Got {layers!r} instead."
            )
        layers = tuple(int(v) for v in layers)
    one = p.get("one_layer", {})
    rule = (
        "must be a table {n_tokens = [context lengths], feature_dim = [budgets] (optional), texts = k "
        "(optional)}"
    )
    if not isinstance(one, Mapping) or set(one) - {"n_tokens", "feature_dim", "texts"}:
        raise InvalidParameterError(f"`data.one_layer` {rule}. Got {one!r} instead.")
    lists = {k: one.get(k) for k in ("n_tokens", "feature_dim")}
    for k, v in lists.items():
        if v is not None and (
            not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v)
        ):
            raise InvalidParameterError(f"`data.one_layer.{k}` must be a list of ints. Got {v!r} instead.")
    if one and lists["n_tokens"] is None:
        raise InvalidParameterError(f"`data.one_layer` {rule}: `n_tokens` is missing. Got {one!r} instead.")
    one_texts = _int(one, "texts", n_texts, 1)
    if one_texts > n_texts:
        raise InvalidParameterError(
            f"`data.one_layer.texts` = {one_texts} must be at most `n_texts` = {n_texts}."
        )
    here = (
        bool(one)
        and n_tokens in (lists["n_tokens"] or [])
        and (lists["feature_dim"] is None or feature_dim in lists["feature_dim"])
    )
    dtype = p.get("dtype", "float64")
    if dtype not in ("float64", "float32"):
        raise InvalidParameterError(f"`data.dtype` must be 'float64' or 'float32'. Got {dtype!r} instead.")
    scale = p.get("scale", "symmetric")
    if scale not in ("symmetric", "query"):
        raise InvalidParameterError(f"`data.scale` must be 'symmetric' or 'query'. Got {scale!r} instead.")
    return DropInData(tuple(models), n_tokens, n_texts, layers, here, one_texts, dtype, scale)


@functools.lru_cache(maxsize=4)
def dropin_model(name: str, dtype: str, scale: str) -> rkdata.PretrainedModel:
    """The model ``name`` (one per process, dtype and scale; SmolLM2 keeps its dequantised weights)."""
    if name == "smollm2":
        return rkdata.SmolLM2Model(np.dtype(dtype), scale=scale, keep_weights=True)
    return MODEL_CLASSES[name](np.dtype(dtype), scale=scale)


@functools.lru_cache(maxsize=16)
def passage_texts(name: str, n_tokens: int, n_texts: int) -> tuple[np.ndarray, np.ndarray]:
    """Ids (n_texts, n_tokens) and mask of ``n_texts`` texts of ``n_tokens`` tokens for model ``name``.

    Text ``i`` joins passages (a space between them) from the first passage text ``i - 1`` did not
    use, until the tokeniser gives enough tokens, and is cut there; so texts never share a passage.

    Raises
    ------
    InvalidParameterError
        If the built-in passages hold too little text for ``n_texts`` such texts.
    """
    model = dropin_model(name, "float64", "symmetric")  # tokenisers do not depend on dtype or scale
    need = n_tokens - len(model.wrap([]))  # MiniLM: [CLS] and [SEP] count
    passages = rkdata.PASSAGES
    rows, first = [], 0
    for i in range(n_texts):
        last = first
        pieces: list[int] = []
        while last < len(passages):
            pieces = model.pieces(" ".join(passages[first : last + 1]))
            last += 1
            if len(pieces) >= need:
                break
        if len(pieces) < need:
            raise InvalidParameterError(
                f"`data.n_texts` = {n_texts} texts of `n_tokens` = {n_tokens} tokens need more text than the "
                f"{len(passages)} built-in passages hold for {model.name} (text {i} ran out): fewer or shorter texts."
            )
        rows.append(model.wrap(pieces[:need]))
        first = last
    ids = np.asarray(rows, dtype=np.intp)
    return ids, np.ones(ids.shape, dtype=bool)


def dropin_factory(p: dict[str, Any], gen: np.random.Generator) -> tuple[Any, ...]:
    """The ``passages`` source: ``(ids, mask)`` of each model of ``models``, in that order (no randomness)."""
    del gen
    d = dropin_data(p)
    return tuple(passage_texts(m, d.n_tokens, d.n_texts) for m in d.models)


def dropin_model_dim(p: Mapping[str, Any]) -> int:
    """The smallest head dimension of the design's models (each model's own is used when it runs)."""
    models = p.get("models", list(MODEL_CLASSES))
    dims = (
        [MODEL_CLASSES[m].head_dim for m in models if m in MODEL_CLASSES] if isinstance(models, list) else []
    )
    return min(dims) if dims else min(c.head_dim for c in MODEL_CLASSES.values())
