r"""The Llama decoder forward pass in NumPy (RMSNorm, rotary positions, grouped-query
attention, SwiGLU feed-forward, causal mask), on weights read from a GGUF file.

Per layer, with :math:`x` the residual stream (pre-norm):

.. math::
    h = \mathrm{RMSNorm}(x)\,g_{\rm attn},\quad q = R_t W_q h,\ k = R_t W_k h,\ v = W_v h,\\
    x \leftarrow x + W_o\,\mathrm{concat}_h\big(\mathrm{softmax}(q_h k_{g(h)}^\top/\sqrt{d_h} + C)\,v_{g(h)}\big),\\
    x \leftarrow x + W_{\rm down}\big(\mathrm{silu}(W_{\rm gate} h') \odot W_{\rm up} h'\big),\quad
    h' = \mathrm{RMSNorm}(x)\,g_{\rm ffn},

with :math:`\mathrm{RMSNorm}(x) = x/\sqrt{\overline{x^2} + \epsilon}`, :math:`C` the causal
mask (:math:`-\infty` above the diagonal), :math:`g(h) = \lfloor h / (H / H_{kv})\rfloor` the
key/value head shared by query head :math:`h`, and :math:`R_t` the rotary embedding at
position :math:`t` in the "rotate-half" layout of Hugging Face ``transformers``: dimension
:math:`i < d_h/2` is paired with :math:`i + d_h/2` and rotated by
:math:`t\,\theta^{-2i/d_h}` (Su et al. 2021, RoFormer). llama.cpp's converter stores
:math:`W_q, W_k` with each head's rows interleaved for its adjacent-pair rotation; they are
put back in the rotate-half order on load, so ``q`` and ``k`` here equal those of
``transformers`` (and the logits, which do not depend on the order, equal llama.cpp's).
The output logits are :math:`E\,\mathrm{RMSNorm}(x)\,g_{\rm out}` with the tied token
embedding :math:`E`.

Weights stay quantised in memory and each layer is dequantised when it runs (about
0.4 s for all 30 layers of SmolLM2-135M), so a forward pass never holds the whole float
model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ..exceptions import CorruptWeightsError
from ._forward import call_hook
from ._gemm import matmul
from ._gguf import GGUFFile, GGUFTensor, dequantize
from ._qk import softmax_

__all__ = ["LlamaConfig", "LlamaLayer", "LlamaWeights", "forward", "logits", "final_hidden", "unembedding"]


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    rope_theta: float
    eps: float


@dataclasses.dataclass(frozen=True)
class LlamaLayer:
    attn_norm: np.ndarray  # (hidden,)
    w_q: np.ndarray  # (hidden, heads * head_dim), rotate-half order; x @ w_q
    w_k: np.ndarray  # (hidden, kv_heads * head_dim)
    w_v: np.ndarray
    w_o: np.ndarray  # (heads * head_dim, hidden)
    ffn_norm: np.ndarray
    w_gate: np.ndarray  # (hidden, ffn)
    w_up: np.ndarray
    w_down: np.ndarray  # (ffn, hidden)


def _from_interleaved(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Rows (out, in) of a q/k projection from llama.cpp's interleaved pairs to rotate-half order."""
    out, inp = w.shape
    half = out // n_heads // 2
    return w.reshape(n_heads, half, 2, inp).transpose(0, 2, 1, 3).reshape(out, inp)


class LlamaWeights:
    """The tensors of a GGUF Llama checkpoint, dequantised on demand."""

    def __init__(self, gguf: GGUFFile, config: LlamaConfig, source: str) -> None:
        self.gguf, self.config, self.source = gguf, config, source
        c = config
        shapes = {
            "token_embd.weight": (c.vocab, c.hidden),
            "output_norm.weight": (c.hidden,),
        }
        for i in range(c.n_layers):
            p = f"blk.{i}."
            shapes.update(
                {
                    p + "attn_norm.weight": (c.hidden,),
                    p + "attn_q.weight": (c.n_heads * c.head_dim, c.hidden),
                    p + "attn_k.weight": (c.n_kv_heads * c.head_dim, c.hidden),
                    p + "attn_v.weight": (c.n_kv_heads * c.head_dim, c.hidden),
                    p + "attn_output.weight": (c.hidden, c.n_heads * c.head_dim),
                    p + "ffn_norm.weight": (c.hidden,),
                    p + "ffn_gate.weight": (c.ffn, c.hidden),
                    p + "ffn_up.weight": (c.ffn, c.hidden),
                    p + "ffn_down.weight": (c.hidden, c.ffn),
                }
            )
        for name, shape in shapes.items():
            t = gguf.tensors.get(name)
            if t is None or t.shape != shape:
                got = "missing" if t is None else f"of shape {t.shape}"
                raise CorruptWeightsError(f"{source}: tensor {name!r} is {got}; expected shape {shape}.")

    def tensor(self, name: str) -> GGUFTensor:
        return self.gguf.tensors[name]

    def embedding_rows(self, ids: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """Rows ``ids`` (any shape) of the token embedding, shape ``ids.shape + (hidden,)``."""
        uniq, inverse = np.unique(ids, return_inverse=True)
        rows = dequantize(self.tensor("token_embd.weight"), dtype, rows=uniq)
        return rows[inverse.reshape(ids.shape)]

    def layer(self, i: int, dtype: np.dtype) -> LlamaLayer:
        c, p = self.config, f"blk.{i}."

        def get(name: str) -> np.ndarray:
            return dequantize(self.tensor(p + name), dtype)

        # the products' operands are transposed views of the (out, in) rows: BLAS reads them as
        # they are (the same products, bit for bit, as from contiguous copies, without the copies)
        return LlamaLayer(
            attn_norm=get("attn_norm.weight"),
            w_q=_from_interleaved(get("attn_q.weight"), c.n_heads).T,
            w_k=_from_interleaved(get("attn_k.weight"), c.n_kv_heads).T,
            w_v=get("attn_v.weight").T,
            w_o=get("attn_output.weight").T,
            ffn_norm=get("ffn_norm.weight"),
            w_gate=get("ffn_gate.weight").T,
            w_up=get("ffn_up.weight").T,
            w_down=get("ffn_down.weight").T,
        )


def rms_norm(x: np.ndarray, g: np.ndarray, eps: float) -> np.ndarray:
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x * (1.0 / np.sqrt(ms + eps)) * g


def _rope_tables(T: int, head_dim: int, theta: float, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)  # (d/2,)
    angle = np.arange(T, dtype=np.float64)[:, None] * inv_freq  # (T, d/2)
    return np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)


def _rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate-half rotary embedding of ``x`` (B, heads, T, d) with tables (T, d/2)."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def forward(
    weights: LlamaWeights,
    ids: np.ndarray,
    dtype: np.dtype,
    *,
    n_layers: int,
    scale_q: float,
    scale_k: float,
    on_attention: Callable[..., None] | None = None,
    attention: Callable[..., Any] | None = None,
    replaced: frozenset[int] | None = None,
    key_padding_mask: np.ndarray | None = None,
    start: int = 0,
    x: np.ndarray | None = None,
    inputs: list[np.ndarray] | None = None,
    layer_of: Callable[[int], LlamaLayer] | None = None,
) -> np.ndarray:
    """Run decoder layers ``start`` to ``n_layers - 1`` on ids (B, T) (right padding needs no mask: causal).

    ``on_attention(layer, q, k, v, p)`` receives, per layer, the rotated and scaled queries
    and keys, the values (keys and values repeated to one per query head) and the softmax
    probabilities, each shaped (B, heads, T, ·). When it is given, the last layer stops
    after its attention. Returns the residual stream (B, T, hidden).

    ``attention`` (the hook of :mod:`rfkit.data._forward`) computes the attention output of the
    layers in ``replaced`` (None: every layer) from the same q, k, v, with ``causal=True`` and
    ``key_padding_mask`` (B, 1, T) (True at padding; None without padding); the other layers
    compute exact softmax attention as without a hook. ``x`` (B, T, hidden) is the residual stream
    entering layer ``start`` (default: the token embeddings, ``start`` = 0); ``inputs``, a list,
    receives the stream entering each layer run; ``layer_of(i)`` gives layer ``i``'s weights
    (default: dequantised on each call).
    """
    c = weights.config
    B, T = ids.shape
    H, G, dh = c.n_heads, c.n_kv_heads, c.head_dim
    if x is None:
        x = weights.embedding_rows(ids, dtype)
    cos, sin = _rope_tables(T, dh, c.rope_theta, dtype)
    causal = np.triu(np.full((T, T), -np.inf, dtype=dtype), k=1)
    sq, sk = dtype.type(scale_q), dtype.type(scale_k)
    for li in range(start, n_layers):
        if inputs is not None:
            inputs.append(x)
        L = weights.layer(li, dtype) if layer_of is None else layer_of(li)
        h = rms_norm(x, L.attn_norm, c.eps).reshape(B * T, c.hidden)
        q = matmul(h, L.w_q).reshape(B, T, H, dh).transpose(0, 2, 1, 3)
        k = matmul(h, L.w_k).reshape(B, T, G, dh).transpose(0, 2, 1, 3)
        v = matmul(h, L.w_v).reshape(B, T, G, dh).transpose(0, 2, 1, 3)
        q = _rope(q, cos, sin) * sq
        k = np.repeat(_rope(k, cos, sin) * sk, H // G, axis=1)  # query head h reads kv head h // (H/G)
        v = np.repeat(v, H // G, axis=1)
        if attention is not None and (replaced is None or li in replaced):
            out = call_hook(attention, q, k, v, causal=True, layer=li, key_padding_mask=key_padding_mask)
            ctx = out.transpose(0, 2, 1, 3).reshape(B * T, H * dh)
        else:
            p = softmax_(q @ k.swapaxes(-1, -2), causal)
            if on_attention is not None:
                on_attention(li, q, k, v, p)
                if li == n_layers - 1:
                    return x
            ctx = (p @ v).transpose(0, 2, 1, 3).reshape(B * T, H * dh)
        x = x + matmul(ctx, L.w_o).reshape(B, T, c.hidden)
        h = rms_norm(x, L.ffn_norm, c.eps).reshape(B * T, c.hidden)
        gate = matmul(h, L.w_gate)
        gate *= 1.0 / (1.0 + np.exp(-gate))  # silu
        gate *= matmul(h, L.w_up)
        x = x + matmul(gate, L.w_down).reshape(B, T, c.hidden)
    return x


def final_hidden(weights: LlamaWeights, x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The last hidden states: the final RMSNorm of the residual stream (B, T, hidden)."""
    return rms_norm(x, dequantize(weights.tensor("output_norm.weight"), dtype), weights.config.eps)


def unembedding(weights: LlamaWeights, dtype: np.dtype) -> np.ndarray:
    """The (tied) token embedding (vocab, hidden): logits are ``final_hidden @ unembedding.T``."""
    return dequantize(weights.tensor("token_embd.weight"), dtype)


def logits(weights: LlamaWeights, ids: np.ndarray, dtype: Any) -> np.ndarray:
    """Next-token logits (B, T, vocab) of the full model on ids (B, T)."""
    dt = np.dtype(dtype)
    c = weights.config
    x = forward(weights, ids, dt, n_layers=c.n_layers, scale_q=c.head_dim**-0.25, scale_k=c.head_dim**-0.25)
    x = rms_norm(x, dequantize(weights.tensor("output_norm.weight"), dt), c.eps)
    return matmul(x, dequantize(weights.tensor("token_embd.weight"), dt).T)
