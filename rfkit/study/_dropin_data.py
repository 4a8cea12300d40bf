"""The data of drop-in designs: the models and the texts (their parameters: :mod:`rfkit.study._dropin_design`).

A drop-in cell runs pretrained models (:class:`rfkit.data.SmolLM2Model`, the causal decoder,
and :class:`rfkit.data.MiniLMModel`, the encoder) on texts made of the built-in passages
(:data:`rfkit.data.PASSAGES`): text ``i`` is passages joined by a space, from the first one the
previous text did not use, until the model's tokeniser gives ``n_tokens`` tokens (MiniLM:
positions, counting ``[CLS]`` and ``[SEP]``), then cut there. At 64 tokens each text is one
passage (the texts of the real-attention study); at 512 each joins about seven.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .. import data as rkdata
from ..exceptions import InvalidParameterError
from ._dropin_design import MODEL_CLASSES, dropin_data

__all__ = ["dropin_model", "passage_texts", "dropin_factory"]


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
