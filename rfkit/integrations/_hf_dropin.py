"""Drop-in designs on any Hugging Face model: the ``transformers`` source's model, run as rfkit's own models are.

A drop-in design names it as ``[data] source = "transformers"`` with ``model`` (a model folder
or an installed package holding one), optionally ``gguf_file``, ``texts`` (a list of strings, or
``"passages"``/``"long"``), ``n_texts`` (default 1), ``n_tokens`` (the context length: each text
cut there by the model's own tokenizer, special tokens included; a text giving fewer is
refused), ``layers`` (the layers replaced; default all), ``dtype`` (``"float64"``, the default,
or ``"float32"``: the precision the model runs in) and ``scale``. The drop-in evaluation
(:mod:`rfkit.study._eval_dropin`) runs :class:`TransformersDropIn` exactly as it runs
:class:`rfkit.data.SmolLM2Model` and :class:`~rfkit.data.MiniLMModel`: a causal model (a
``...ForCausalLM``) gives the decoder's measures (next-token KL, top-1 agreement, perplexity
ratio, from the logits of its output embedding), any other model the encoder's (cosine of the
last hidden states and of the mean-pooled, L2-normalised sentence embeddings).

An estimator goes into the model through :func:`rfkit.integrations.transformers.use_estimator`
with the evaluation's per-layer streams, called on NumPy copies of q, k, v at the run's
precision, as the NumPy forward passes call it: a decoder draws the random numbers SmolLM2 draws
in the same cell and trial, an encoder those of MiniLM. The exact run's hook (exact attention,
and each estimator's per-head error on that layer's exact q, k, v) is routed the same way.
``data.one_layer`` (each layer replaced alone) needs rfkit's own forward pass and is refused.
The source's ``dropin`` hook (:mod:`rfkit.integrations._hf_source`) loads the model and the texts.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from ..data import EstimatorAttention
from ..data._forward import call_hook
from ..exceptions import InvalidParameterError
from .transformers import _exact, _layer_of, _libraries, _qkv, _routed, _split_mask, use_estimator

__all__ = ["TransformersDropIn"]


@dataclasses.dataclass(frozen=True, eq=False)
class _Run:
    hidden: np.ndarray
    inputs: None = None


class _OnNumPy:
    """An rfkit estimator called on NumPy copies (at the run's precision) of what use_estimator hands it."""

    def __init__(self, estimator: Any, dtype: np.dtype) -> None:
        self.estimator, self.dtype = estimator, dtype
        self.causal = getattr(estimator, "causal", None)  # use_estimator checks it against each layer's

    def __call__(self, q: Any, k: Any, v: Any, *, rng: Any, key_padding_mask: Any = None) -> Any:
        kw = {} if key_padding_mask is None else {"key_padding_mask": key_padding_mask.cpu().numpy()}
        q, k, v = (t.detach().cpu().numpy().astype(self.dtype, copy=False) for t in (q, k, v))
        return self.estimator(q, k, v, rng=rng, **kw)


class TransformersDropIn:
    """A ``transformers`` model with the drop-in interface of :class:`rfkit.data.PretrainedModel`.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        The model (a ``...ForCausalLM`` for a decoder), in eval mode, at the precision ``dtype``.
    causal : bool
        Whether its attention is causal (a decoder).
    dtype : numpy.dtype
        The precision the model runs in; hooks and estimators get q, k, v at it.
    scale : {"symmetric", "query"}
        How the logit scale is split between the hook's q and k.
    name : str
        The model's name in messages.

    Attributes
    ----------
    n_layers, n_heads, head_dim, hidden_size, max_positions : int
        Read from the model's config (``max_positions``: ``max_position_embeddings``, else no limit).
    """

    def __init__(self, model: Any, causal: bool, dtype: Any, scale: str, name: str) -> None:
        cfg = model.config
        self.model, self.causal, self.dtype, self.scale, self.name = (
            model,
            causal,
            np.dtype(dtype),
            scale,
            name,
        )
        self.n_layers = int(cfg.num_hidden_layers)
        self.n_heads = int(cfg.num_attention_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        self.hidden_size = int(cfg.hidden_size)
        self.max_positions = int(getattr(cfg, "max_position_embeddings", None) or 2**31 - 1)
        self._body = model.base_model  # its last hidden state: after the final norm, before the head

    def __repr__(self) -> str:
        return f"TransformersDropIn({self.name!r}, causal={self.causal}, dtype={self.dtype.name})"

    def run(
        self,
        ids: Any,
        mask: Any = None,
        *,
        attention: Any = None,
        layers: Any = None,
        keep_inputs: bool = False,
    ) -> _Run:
        """The last hidden states (texts, tokens, hidden) with ``attention`` in ``layers`` (None: every layer).

        ``attention``: None (the model's own attention), an :class:`rfkit.data.EstimatorAttention`
        (its estimator goes in through :func:`~rfkit.integrations.transformers.use_estimator`, with
        its root), or any hook ``(q, k, v, *, causal, layer, key_padding_mask) -> output`` on NumPy
        arrays. ``keep_inputs`` (the inputs of each layer) is not available: a named error.
        """
        if keep_inputs:
            raise InvalidParameterError(
                f"{self.name}: `keep_inputs` needs rfkit's own forward pass (each layer's input); a transformers "
                "model runs whole."
            )
        torch, _ = _libraries()
        ids_t = torch.as_tensor(np.asarray(ids), dtype=torch.long)
        m = np.ones(ids_t.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        inputs = {"input_ids": ids_t, "attention_mask": torch.as_tensor(m).long()}
        chosen = tuple(range(self.n_layers)) if layers is None else tuple(layers)
        with torch.no_grad():
            if attention is None:
                hidden = self._body(**inputs).last_hidden_state
            elif isinstance(attention, EstimatorAttention):
                est = _OnNumPy(attention.estimator, self.dtype)
                with use_estimator(self.model, est, chosen, rng=attention.root, scale=self.scale) as swap:
                    hidden = self._body(**inputs).last_hidden_state
                attention.n_nonpositive.update(swap.n_nonpositive)
            else:
                with _routed(self.model, functools.partial(self._hooked, attention, frozenset(chosen))):
                    hidden = self._body(**inputs).last_hidden_state
        return _Run(hidden=hidden.cpu().numpy())

    def _hooked(
        self,
        hook: Any,
        chosen: frozenset[int],
        module: Any,
        query: Any,
        key: Any,
        value: Any,
        mask: Any,
        **kw: Any,
    ) -> Any:
        """A hook on NumPy q, k, v in the layers ``chosen``; the model's own attention elsewhere."""
        layer = _layer_of(module)
        if layer not in chosen:
            return _exact(module, query, key, value, mask, **kw)
        torch, _ = _libraries()
        causal = bool(getattr(module, "is_causal", False))
        B, _, T, _ = query.shape
        pad = _split_mask(torch, mask, causal, (B, T, key.shape[-2]), layer)
        q, k, v = (
            t.cpu().numpy().astype(self.dtype, copy=False)
            for t in _qkv(torch, module, query, key, value, kw.get("scaling"), self.scale)
        )
        out = call_hook(
            hook,
            q,
            k,
            v,
            causal=causal,
            layer=layer,
            key_padding_mask=pad.cpu().numpy() if bool(pad.any()) else None,
        )
        return torch.as_tensor(out).to(device=query.device, dtype=query.dtype).transpose(
            1, 2
        ).contiguous(), None

    def logits(self, hidden: Any) -> np.ndarray:
        """Next-token logits (..., vocabulary) of last hidden states: the model's output embedding (a decoder)."""
        torch, _ = _libraries()
        head = self.model.get_output_embeddings() if self.causal else None
        if head is None:
            raise InvalidParameterError(
                f"{self.name} has no output embedding (next-token logits): not a decoder."
            )
        with torch.no_grad():
            z = head(torch.as_tensor(np.asarray(hidden)))
            cap = getattr(self.model.config, "final_logit_softcapping", None)
            if cap:
                z = torch.tanh(z / cap) * cap
        return z.cpu().numpy()  # type: ignore[no-any-return]

    def embedding(self, hidden: Any, mask: Any) -> np.ndarray:
        """Sentence embeddings (texts, hidden): the mean of ``hidden`` over valid tokens, L2-normalised."""
        h, w = np.asarray(hidden), np.asarray(mask).astype(np.asarray(hidden).dtype)
        pooled = np.einsum("bt,btd->bd", w, h) / w.sum(axis=1, keepdims=True)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)  # type: ignore[no-any-return]
