r"""Hugging Face ``transformers`` bridge: capture a model's q, k, v; swap its attention for an rfkit estimator.

Both functions work through ``transformers``' attention interface (``AttentionInterface``): they
register an attention function (and a mask function for it, in ``AttentionMaskInterface``) under
a fresh name, select it with ``model.set_attn_implementation(name)``, and on exit select the
model's previous implementation again and remove both registrations, also when the forward pass
raises. Any model whose attention layers call the interface works (Llama, Mistral, Qwen, BERT,
...); the tests run all-MiniLM-L6-v2 (BERT, bidirectional) and SmolLM2-135M-Instruct (Llama,
causal, grouped-query attention), both loaded offline from the weight packages of
:func:`rfkit.data.minilm_qk` and :func:`rfkit.data.smollm2_qk`.

Conventions, translated at the border (rfkit's core kernel is :math:`\exp(q\cdot k)` with no
hidden :math:`1/\sqrt{d}`):

* **Scale folding.** The model's logit scale :math:`s` (the ``scaling`` its attention layer
  passes, :math:`1/\sqrt{d_h}` for both tested models) is folded into q and k so that
  ``q_i · k_j`` is the logit, split as rfkit's real-data loaders split it: ``scale="symmetric"``
  puts :math:`\sqrt{s}` on each side, ``scale="query"`` all of :math:`s` on q.
* **Rotary positions** are already applied: the interface receives rotated q and k.
* **Grouped-query attention.** Key/value heads are repeated to one per query head (query head
  ``h`` reads key/value head ``h // (H / H_kv)``, as ``transformers``' ``repeat_kv``).
* **Masks.** The registered mask function asks ``transformers`` for its boolean 4-D mask (True =
  take part) with no shortcut, so every layer sees the causal and padding structure explicitly.
  The bridge splits it into ``causal`` (the layer's ``is_causal``) and a key-padding mask (True at
  padded keys, shape (batch, 1, keys), rfkit's convention) and refuses any other structure
  (sliding windows, packed sequences, a fully masked query row, e.g. left padding in a decoder).

Requires ``pip install "rfkit[hf]"`` (transformers, and gguf and accelerate for GGUF files).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .._random import as_seed_sequence
from ..attention import AttentionResult
from ..data import layer_stream
from ..data._forward import check_replaced_layers
from ..exceptions import BackendNotInstalledError, InvalidParameterError, ShapeError

__all__ = ["CapturedQKV", "EstimatorSwap", "capture_qkv", "use_estimator"]

_COUNTER = itertools.count()
_LOCK = threading.Lock()


def _libraries() -> tuple[Any, Any]:
    """``(torch, transformers)``, imported on first use, or a named error saying what to install."""
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise BackendNotInstalledError(
            "rfkit.integrations.transformers needs PyTorch and Hugging Face transformers: "
            f'pip install "rfkit[hf]" (missing: {exc.name}).'
        ) from None
    return torch, transformers


def _check_model(model: Any, owner: str) -> int:
    """The number of layers of a ``transformers`` model whose attention goes through the interface."""
    _, transformers = _libraries()
    if not isinstance(model, transformers.PreTrainedModel):
        raise InvalidParameterError(
            f"The `model` parameter of {owner} must be a transformers PreTrainedModel. "
            f"Got {type(model).__name__} instead."
        )
    if not model._can_set_attn_implementation():
        raise InvalidParameterError(
            f"The `model` parameter of {owner}: {type(model).__name__} does not route its attention through "
            "transformers' AttentionInterface, so its attention cannot be captured or replaced."
        )
    n_layers = getattr(model.config, "num_hidden_layers", None)
    if not isinstance(n_layers, int) or n_layers < 1:
        raise InvalidParameterError(
            f"The `model` parameter of {owner}: its config has no positive num_hidden_layers. Got {n_layers!r}."
        )
    return n_layers


def _check_scale(scale: Any, owner: str) -> str:
    if scale not in ("symmetric", "query"):
        raise InvalidParameterError(
            f"The `scale` parameter of {owner} must be 'symmetric' or 'query'. Got {scale!r} instead."
        )
    return str(scale)


def _full_mask(*args: Any, **kwargs: Any) -> Any:
    """``transformers``' boolean SDPA mask, never skipped: (batch, 1, queries, keys), True = take part."""
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    kwargs["allow_is_bidirectional_skip"] = False
    return sdpa_mask(*args, **kwargs)


@contextlib.contextmanager
def _routed(model: Any, attention: Any) -> Iterator[None]:
    """Register ``attention`` (and :func:`_full_mask`) under a fresh name and select it for ``model``."""
    _, transformers = _libraries()
    from transformers.masking_utils import AttentionMaskInterface

    with _LOCK:
        name = f"rfkit_{next(_COUNTER)}"
    previous = model.config._attn_implementation
    transformers.AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, _full_mask)
    try:
        model.set_attn_implementation(name)
        yield
    finally:
        try:
            model.set_attn_implementation(previous)
        finally:
            transformers.AttentionInterface._global_mapping.pop(name, None)
            AttentionMaskInterface._global_mapping.pop(name, None)


def _layer_of(module: Any) -> int:
    layer = getattr(module, "layer_idx", None)
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise InvalidParameterError(
            f"The attention module {type(module).__name__} has no integer `layer_idx` (got {layer!r}); "
            "the bridge needs it to tell layers apart."
        )
    return layer


def _split_mask(torch: Any, mask: Any, causal: bool, shape: tuple[int, int, int], layer: int) -> Any:
    """The key-padding mask (batch, 1, keys), True at padded keys, of a boolean or additive 4-D mask.

    Raises :class:`InvalidParameterError` unless the mask is exactly "causal (if the layer is) and
    not a padded key", the structure rfkit's estimators honour.
    """
    B, T, S = shape
    if mask is None:
        return torch.zeros((B, 1, S), dtype=torch.bool)
    visible = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    if visible.ndim != 4 or visible.shape[-2:] != (T, S) or visible.shape[1] != 1:
        raise ShapeError(
            f"The attention mask of layer {layer} must have shape (batch, 1, {T}, {S}). Got {tuple(mask.shape)}."
        )
    visible = visible.expand(B, 1, T, S)
    key_visible = visible.any(dim=-2)  # (B, 1, S)
    expected = key_visible[:, :, None, :].expand(B, 1, T, S)
    if causal:
        expected = expected & torch.ones((T, S), dtype=torch.bool, device=mask.device).tril(S - T)
    if not torch.equal(visible, expected) or not visible.any(dim=-1).all():
        raise InvalidParameterError(
            f"The attention mask of layer {layer} is not 'causal={causal} and padded keys hidden' with every "
            "query seeing a key: rfkit's estimators honour a causal mask and a key-padding mask only "
            "(use right padding; sliding windows and packed sequences are not supported)."
        )
    return ~key_visible


def _qkv(
    torch: Any, module: Any, query: Any, key: Any, value: Any, scaling: Any, scale: str
) -> tuple[Any, Any, Any]:
    """Scaled q, k (so that q·k is the logit) and v, with key/value heads repeated per query head."""
    H, Hkv = query.shape[1], key.shape[1]
    if H % Hkv != 0:
        raise ShapeError(f"{H} query heads cannot share {Hkv} key/value heads evenly.")
    if H != Hkv:  # query head h reads key/value head h // (H / Hkv), as transformers' repeat_kv
        key = key.repeat_interleave(H // Hkv, dim=1)
        value = value.repeat_interleave(H // Hkv, dim=1)
    s = float(query.shape[-1] ** -0.5 if scaling is None else scaling)
    s_q, s_k = (s**0.5, s**0.5) if scale == "symmetric" else (s, 1.0)
    return query * s_q, key * s_k, value


def _exact(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
    """The model's exact attention (transformers' SDPA function, which reads the boolean mask)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


# ----------------------------------------------------------------------------- capture


@dataclasses.dataclass(frozen=True, eq=False)
class CapturedQKV:
    """Queries, keys and values of a ``transformers`` model's forward pass (:func:`capture_qkv`).

    Unpacks as ``q, k = captured``. Padded positions (``mask`` False) hold zeros in ``q``, ``k``
    and ``v``, as in :class:`rfkit.data.TransformerQK`.

    Parameters
    ----------
    q, k : ndarray of shape (batch, layers, heads, tokens, d_h)
        Rotated queries and keys, scaled so that ``q[..., i, :] @ k[..., j, :]`` is the model's
        attention logit (see ``scale``); key heads repeated to one per query head.
    v : ndarray of shape (batch, layers, heads, tokens, d_h)
        Values, one per query head.
    mask : ndarray of bool, shape (batch, tokens)
        Valid (non-padding) positions.
    causal : bool
        Whether query ``i`` attends only to keys ``j <= i``.
    layers : tuple of int
        The model layer of each index along axis 1.
    scale : {"symmetric", "query"}
        How the model's logit scale was split between ``q`` and ``k``.
    outputs : object
        What the model returned for the forward pass.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: np.ndarray
    causal: bool
    layers: tuple[int, ...]
    scale: str
    outputs: Any

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter((self.q, self.k))


def _as_kwargs(inputs: Any, torch: Any, owner: str) -> dict[str, Any]:
    if isinstance(inputs, Mapping):
        return dict(inputs)
    if isinstance(inputs, torch.Tensor):
        return {"input_ids": inputs}
    raise InvalidParameterError(
        f"The `inputs` parameter of {owner} must be a mapping of model keyword arguments (e.g. a tokenizer's "
        f"BatchEncoding with input_ids and attention_mask) or a tensor of input ids. Got {type(inputs).__name__}."
    )


def capture_qkv(
    model: Any,
    inputs: Any,
    layers: int | Sequence[int] | None = None,
    *,
    scale: str = "symmetric",
) -> CapturedQKV:
    """Run ``model`` on ``inputs`` and keep the queries, keys and values of the chosen layers.

    The model's own attention is computed unchanged (transformers' SDPA function on the captured
    tensors), so ``.outputs`` are the model's outputs.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A model whose attention layers use transformers' ``AttentionInterface``.
    inputs : mapping or torch.Tensor
        Keyword arguments of the forward pass (``input_ids``, ``attention_mask``, ...), or input ids.
    layers : int, sequence of int, or None
        The layers to keep, in increasing order in the result; None: every layer.
    scale : {"symmetric", "query"}, default="symmetric"
        How the logit scale is split between q and k (as :func:`rfkit.data.smollm2_qk`).

    Returns
    -------
    CapturedQKV
        Arrays in rfkit's layout (batch, layers, heads, tokens, d_h), as NumPy arrays.

    Raises
    ------
    BackendNotInstalledError
        torch or transformers is not installed.
    InvalidParameterError
        Not a supported model, bad ``layers``, ``scale`` or ``inputs``, or a mask rfkit cannot honour.
    """
    owner = "capture_qkv"
    torch, _ = _libraries()
    n_layers = _check_model(model, owner)
    chosen = sorted(check_replaced_layers(layers, n_layers, owner, type(model).__name__))
    scale = _check_scale(scale, owner)
    kwargs = _as_kwargs(inputs, torch, owner)
    kept: dict[int, tuple[Any, ...]] = {}

    def capture(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kw: Any) -> Any:
        layer = _layer_of(module)
        if layer in chosen:
            causal = bool(getattr(module, "is_causal", False))
            B, _, T, _ = query.shape
            pad = _split_mask(torch, attention_mask, causal, (B, T, key.shape[-2]), layer)
            q, k, v = _qkv(torch, module, query, key, value, kw.get("scaling"), scale)
            kept[layer] = (q.detach(), k.detach(), v.detach(), pad, causal)
        return _exact(module, query, key, value, attention_mask, **kw)

    with _routed(model, capture), torch.no_grad():
        outputs = model(**kwargs)
    missing = [layer for layer in chosen if layer not in kept]
    if missing:
        raise InvalidParameterError(
            f"{owner}: layers {missing} of {type(model).__name__} never called the attention interface."
        )

    def stack(i: int) -> np.ndarray:
        return np.stack([kept[layer][i].cpu().numpy() for layer in chosen], axis=1)

    pad0, causal0 = kept[chosen[0]][3], bool(kept[chosen[0]][4])
    valid = ~pad0[:, 0].cpu().numpy()  # (B, S): the keys that are not padding
    q, k, v = stack(0), stack(1), stack(2)
    m = valid[:, None, None, :, None]
    return CapturedQKV(
        q=np.where(m, q, 0),
        k=np.where(m, k, 0),
        v=np.where(m, v, 0),
        mask=valid,
        causal=causal0,
        layers=tuple(chosen),
        scale=scale,
        outputs=outputs,
    )


# ----------------------------------------------------------------------------- swap


class EstimatorSwap:
    """The state of a :func:`use_estimator` block.

    Parameters
    ----------
    estimator : callable
        The attention estimator in use.
    root : numpy.random.SeedSequence
        Root of the per-layer streams: layer ``l`` draws from
        :func:`rfkit.data.layer_stream` ``(root, l)``.
    layers : tuple of int
        The layers whose attention the estimator computes.
    scale : {"symmetric", "query"}
        How the logit scale is split between the estimator's q and k.

    Attributes
    ----------
    n_nonpositive : dict of int to int
        Per layer, the query rows whose estimated normaliser was not positive in the last call
        (estimators returning an :class:`~rfkit.attention.AttentionResult` only).
    """

    def __init__(
        self, estimator: Any, root: np.random.SeedSequence, layers: tuple[int, ...], scale: str
    ) -> None:
        self.estimator = estimator
        self.root = root
        self.layers = layers
        self.scale = scale
        self.n_nonpositive: dict[int, int] = {}
        params = _parameters(estimator)
        self._takes_rng = params is None or "rng" in params
        self._takes_causal = params is not None and "causal" in params

    def __repr__(self) -> str:
        return f"EstimatorSwap({self.estimator!r}, root={self.root!r}, layers={self.layers})"

    def __call__(
        self, module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kw: Any
    ) -> tuple[Any, None]:
        layer = _layer_of(module)
        if layer not in self.layers:
            return _exact(module, query, key, value, attention_mask, **kw)  # type: ignore[no-any-return]
        torch, _ = _libraries()
        causal = bool(getattr(module, "is_causal", False))
        B, _, T, _ = query.shape
        pad = _split_mask(torch, attention_mask, causal, (B, T, key.shape[-2]), layer)
        q, k, v = _qkv(torch, module, query, key, value, kw.get("scaling"), self.scale)
        call: dict[str, Any] = {}
        if bool(pad.any()):
            call["key_padding_mask"] = pad
        if self._takes_causal:
            call["causal"] = causal
        else:
            est_causal = getattr(self.estimator, "causal", None)
            if est_causal is not None and bool(est_causal) != causal:
                kind = "a causal decoder" if causal else "a bidirectional encoder"
                raise InvalidParameterError(
                    f"The estimator {type(self.estimator).__name__} has causal={est_causal!r} but layer {layer} "
                    f"belongs to {kind}: build it with causal={causal!r}."
                )
        if self._takes_rng:
            call["rng"] = layer_stream(self.root, layer)
        res = self.estimator(q, k, v, **call)
        if isinstance(res, AttentionResult):
            self.n_nonpositive[layer] = int(res.n_nonpositive)
            res = res.output
        out = res if isinstance(res, torch.Tensor) else torch.as_tensor(np.asarray(res))
        if tuple(out.shape) != tuple(q.shape[:-1]) + (v.shape[-1],):
            raise ShapeError(
                f"The estimator must return the attention output of shape {tuple(q.shape[:-1]) + (v.shape[-1],)} "
                f"at layer {layer}. Got {tuple(out.shape)}."
            )
        out = out.to(device=query.device, dtype=query.dtype)
        return out.transpose(1, 2).contiguous(), None


def _parameters(estimator: Any) -> Mapping[str, inspect.Parameter] | None:
    try:
        return inspect.signature(estimator).parameters
    except (TypeError, ValueError):
        return None


@contextlib.contextmanager
def use_estimator(
    model: Any,
    estimator: Any,
    layers: int | Sequence[int] | None = None,
    *,
    rng: Any = None,
    scale: str = "symmetric",
) -> Iterator[EstimatorSwap]:
    """Route the attention of ``model`` through an rfkit estimator inside a ``with`` block.

    In each layer of ``layers`` the estimator receives q, k, v of shape (batch, heads, tokens, d_h)
    scaled so that q·k is the logit, key/value heads repeated per query head, the key-padding mask
    (True at padded keys, (batch, 1, tokens)) when the batch is padded, and the stream
    :func:`rfkit.data.layer_stream` ``(root, layer)`` with ``root`` the SeedSequence of ``rng``,
    exactly as :func:`rfkit.data.estimator_attention` does for rfkit's own NumPy forward passes:
    the same ``rng`` gives the same random features on both paths, each layer has its own stream,
    and the estimator sees all heads of a layer as a batch (``shared_across_heads=False`` on
    :class:`~rfkit.attention.RFA` gives every head its own draw). Tensors stay torch tensors, so
    gradients flow where the estimator supports them. Other layers keep exact attention. On exit
    the model's previous attention implementation is selected again.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A model whose attention layers use transformers' ``AttentionInterface``.
    estimator : callable
        An attention estimator ``(Q, K, V, *, rng, key_padding_mask=None) -> AttentionResult``
        (:class:`~rfkit.attention.RFA`, :class:`~rfkit.attention.Hybrid`, ... built with the
        model's causality), or a function with a ``causal`` parameter such as
        :func:`rfkit.attention.softmax` (called with ``causal`` and without ``rng``).
    layers : int, sequence of int, or None
        The layers whose attention is replaced; None: every layer.
    rng : {None, int, SeedSequence, Generator}
        Root of the per-layer streams (None: fresh OS entropy, kept in ``.root``).
    scale : {"symmetric", "query"}, default="symmetric"
        How the logit scale is split between q and k (random-feature errors depend on it).

    Yields
    ------
    EstimatorSwap
        The block's state (``.root``, ``.layers``, ``.n_nonpositive``).

    Raises
    ------
    BackendNotInstalledError
        torch or transformers is not installed.
    InvalidParameterError
        Not a supported model or estimator, bad ``layers``, ``scale`` or ``rng``; in the forward
        pass, an estimator whose causality differs from the model's or a mask it cannot honour.
    """
    owner = "use_estimator"
    n_layers = _check_model(model, owner)
    if not callable(estimator) or isinstance(estimator, type):
        raise InvalidParameterError(
            f"The `estimator` parameter of {owner} must be an attention estimator instance or function, callable "
            f"as (Q, K, V, *, rng) -> AttentionResult. Got {estimator!r} instead."
        )
    chosen = tuple(sorted(check_replaced_layers(layers, n_layers, owner, type(model).__name__)))
    swap = EstimatorSwap(estimator, as_seed_sequence(rng), chosen, _check_scale(scale, owner))
    with _routed(model, swap):
        yield swap
