"""The BERT encoder forward pass in NumPy (post-LayerNorm, exact GELU, learned positions).

:func:`load_bert` turns the tensors of a Hugging Face ``BertModel`` checkpoint (names as in
``model.safetensors``) into a :class:`BertModel` in the compute dtype; :func:`forward` runs
its layers on padded token ids, vectorised over texts and heads, and can hand each layer's
scaled queries, keys, values and softmax probabilities to a callback.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.special import erf

from ..exceptions import CorruptWeightsError
from ._forward import call_hook
from ._gemm import matmul
from ._qk import softmax_

__all__ = ["BertLayer", "BertModel", "load_bert", "forward", "layer_norm"]


@dataclasses.dataclass(frozen=True)
class BertLayer:
    w_qkv: np.ndarray  # (hidden, 3*hidden): columns [query | key | value], head-major inside each
    b_qkv: np.ndarray
    w_out: np.ndarray  # (hidden, hidden)
    b_out: np.ndarray
    ln1: tuple[np.ndarray, np.ndarray]
    w_in: np.ndarray  # (hidden, intermediate)
    b_in: np.ndarray
    w_ffn_out: np.ndarray  # (intermediate, hidden)
    b_ffn_out: np.ndarray
    ln2: tuple[np.ndarray, np.ndarray]


@dataclasses.dataclass(frozen=True)
class BertModel:
    word: np.ndarray
    position: np.ndarray
    token_type0: np.ndarray
    ln_emb: tuple[np.ndarray, np.ndarray]
    layers: tuple[BertLayer, ...]
    eps: float
    n_heads: int
    tokenizer: Any

    @property
    def hidden(self) -> int:
        return int(self.word.shape[1])

    @property
    def head_dim(self) -> int:
        return self.hidden // self.n_heads


def load_bert(
    tensors: dict[str, np.ndarray],
    config: dict[str, Any],
    dtype: np.dtype,
    tokenizer: Any,
) -> BertModel:
    """The model's tensors in ``dtype``, each checked for presence, shape and floating type."""
    hidden = int(config["hidden_size"])
    inter = int(config["intermediate_size"])

    def get(name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in tensors:
            raise CorruptWeightsError(f"model.safetensors has no tensor {name!r}.")
        arr = tensors[name]
        if arr.shape != shape or arr.dtype.kind != "f":
            raise CorruptWeightsError(
                f"model.safetensors: tensor {name!r} has shape {arr.shape} and dtype {arr.dtype}; "
                f"expected floating point of shape {shape}."
            )
        return np.ascontiguousarray(arr, dtype=dtype)  # F16/F32 -> compute dtype

    def linear(prefix: str, n_out: int, n_in: int) -> tuple[np.ndarray, np.ndarray]:
        # PyTorch Linear stores (out, in); we multiply rows by (in, out)
        w = get(prefix + ".weight", (n_out, n_in))
        return np.ascontiguousarray(w.T), get(prefix + ".bias", (n_out,))

    def norm(prefix: str) -> tuple[np.ndarray, np.ndarray]:
        return get(prefix + ".weight", (hidden,)), get(prefix + ".bias", (hidden,))

    layers = []
    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}."
        wq, bq = linear(p + "attention.self.query", hidden, hidden)
        wk, bk = linear(p + "attention.self.key", hidden, hidden)
        wv, bv = linear(p + "attention.self.value", hidden, hidden)
        wo, bo = linear(p + "attention.output.dense", hidden, hidden)
        wi, bi = linear(p + "intermediate.dense", inter, hidden)
        wf, bf = linear(p + "output.dense", hidden, inter)
        layers.append(
            BertLayer(
                w_qkv=np.ascontiguousarray(np.concatenate([wq, wk, wv], axis=1)),
                b_qkv=np.concatenate([bq, bk, bv]),
                w_out=wo,
                b_out=bo,
                ln1=norm(p + "attention.output.LayerNorm"),
                w_in=wi,
                b_in=bi,
                w_ffn_out=wf,
                b_ffn_out=bf,
                ln2=norm(p + "output.LayerNorm"),
            )
        )
    return BertModel(
        word=get("embeddings.word_embeddings.weight", (config["vocab_size"], hidden)),
        position=get("embeddings.position_embeddings.weight", (config["max_position_embeddings"], hidden)),
        token_type0=get("embeddings.token_type_embeddings.weight", (config["type_vocab_size"], hidden))[0],
        ln_emb=norm("embeddings.LayerNorm"),
        layers=tuple(layers),
        eps=float(config["layer_norm_eps"]),
        n_heads=int(config["num_attention_heads"]),
        tokenizer=tokenizer,
    )


def layer_norm(x: np.ndarray, wb: tuple[np.ndarray, np.ndarray], eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    x = x - mean
    var = np.mean(x * x, axis=-1, keepdims=True)
    x *= 1.0 / np.sqrt(var + eps)
    x *= wb[0]
    x += wb[1]
    return x


def _gelu_(x: np.ndarray) -> np.ndarray:
    """Exact GELU, 0.5 x (1 + erf(x / sqrt 2)), in place."""
    e = erf(x * x.dtype.type(1.0 / math.sqrt(2.0)))
    e += 1.0
    x *= e
    x *= 0.5
    return x


def forward(
    model: BertModel,
    ids: np.ndarray,
    mask: np.ndarray,
    *,
    n_layers: int,
    scale_q: float,
    scale_k: float,
    on_attention: Callable[..., None] | None = None,
    attention: Callable[..., Any] | None = None,
    replaced: frozenset[int] | None = None,
    start: int = 0,
    x: np.ndarray | None = None,
    inputs: list[np.ndarray] | None = None,
) -> np.ndarray:
    """Run encoder layers ``start`` to ``n_layers - 1`` on padded ``ids`` (B, T); returns the hidden states.

    ``on_attention(layer, q, k, v, p)`` receives, per layer, the scaled queries and keys,
    the values and the softmax probabilities, each shaped (B, heads, T, ·). When it is
    given, the last layer stops after its attention (its output is not needed).

    ``attention`` (the hook of :mod:`rfkit.data._forward`) computes the attention output of the
    layers in ``replaced`` (None: every layer) from the same q, k, v, with ``causal=False`` and
    ``key_padding_mask`` = ``~mask`` of shape (B, 1, T) (None when no text is padded); the other
    layers compute exact softmax attention as without a hook. ``x`` (B, T, hidden) is the hidden
    state entering layer ``start`` (default: the embeddings, ``start`` = 0); ``inputs``, a list,
    receives the state entering each layer run.
    """
    B, T = ids.shape
    D, H = model.hidden, model.n_heads
    dh = D // H
    dt = model.word.dtype
    if x is None:
        x = model.word[ids]
        x += model.position[:T]
        x += model.token_type0
        x = layer_norm(x, model.ln_emb, model.eps)
    key_bias = np.where(mask, dt.type(0), dt.type(-np.inf))[:, None, None, :]
    padding = None if bool(np.all(mask)) else ~mask[:, None, :]
    sq, sk = dt.type(scale_q), dt.type(scale_k)
    for li in range(start, n_layers):
        if inputs is not None:
            inputs.append(x)
        layer = model.layers[li]
        qkv = matmul(x.reshape(B * T, D), layer.w_qkv).reshape(B, T, 3, H, dh)
        qkv += layer.b_qkv.reshape(3, H, dh)
        qkv = qkv.transpose(2, 0, 3, 1, 4)  # (3, B, H, T, dh)
        q = qkv[0] * sq
        k = qkv[1] * sk
        v = qkv[2]
        if attention is not None and (replaced is None or li in replaced):
            out = call_hook(attention, q, k, v, causal=False, layer=li, key_padding_mask=padding)
            ctx = out.transpose(0, 2, 1, 3).reshape(B * T, D)
        else:
            p = softmax_(q @ k.swapaxes(-1, -2), key_bias)  # masked keys: probability exactly 0
            if on_attention is not None:
                on_attention(li, q, k, v, p)
                if li == n_layers - 1:
                    return x
            ctx = (p @ v).transpose(0, 2, 1, 3).reshape(B * T, D)
        h = matmul(ctx, layer.w_out)
        h += layer.b_out
        h += x.reshape(B * T, D)
        x2 = layer_norm(h, layer.ln1, model.eps)
        f = matmul(x2, layer.w_in)
        f += layer.b_in
        f = matmul(_gelu_(f), layer.w_ffn_out)
        f += layer.b_ffn_out
        f += x2
        x = layer_norm(f, layer.ln2, model.eps).reshape(B, T, D)
    return x
