r"""Attention inside a model's forward pass: the hook protocol, exact attention, estimators as hooks.

:func:`rfkit.data.smollm2_forward` and :func:`rfkit.data.minilm_forward` run a pretrained model and
call, in every layer whose attention is replaced, a function ``attention`` with that layer's scaled
queries, keys and values:

.. code-block:: python

    out = attention(q, k, v, *, causal, layer, key_padding_mask)

* ``q``, ``k`` of shape (texts, heads, tokens, d_h), scaled so that ``q[..., i, :] @ k[..., j, :]``
  is the model's attention logit (rfkit hides no :math:`1/\sqrt{d_h}`; the same convention as
  :func:`rfkit.data.smollm2_qk` and :func:`rfkit.data.minilm_qk`); ``v`` of shape
  (texts, heads, tokens, d_h). SmolLM2 uses grouped-query attention (9 query heads, 3
  key/value heads): ``k`` and ``v`` are repeated to one per query head, so heads ``3g``,
  ``3g+1``, ``3g+2`` receive the same ``k`` and ``v`` (those of key/value head ``g``).
* ``causal``: True for the decoder (query ``i`` sees keys ``j <= i``), False for the encoder.
* ``layer``: the model layer (0-based), so one function can treat layers differently.
* ``key_padding_mask``: None, or a bool array of shape (texts, 1, tokens), True at padded keys
  (rfkit's convention, broadcast over heads); it is given only when the texts of a batch have
  different lengths.

It returns the attention output of shape (texts, heads, tokens, d_h) (an array the model can
reshape; NaN rows flow into the model unchanged, never clipped). :func:`exact_attention` is the
model's own softmax attention; :func:`estimator_attention` turns any rfkit attention estimator
(:class:`rfkit.attention.RFA`, :class:`~rfkit.attention.SNIS`, :class:`~rfkit.attention.LARA`,
:class:`~rfkit.attention.Hybrid`, ... or one of your own with the same protocol) into such a
function, with one random stream per layer derived from one ``rng``.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from .._backend import to_numpy
from .._random import as_seed_sequence
from ..attention import AttentionResult
from ..exceptions import InvalidParameterError, ShapeError
from ._qk import softmax_

__all__ = [
    "AttentionHook",
    "exact_attention",
    "estimator_attention",
    "EstimatorAttention",
    "layer_stream",
    "check_attention_hook",
    "check_replaced_layers",
    "call_hook",
    "replaced_layers",
]


class AttentionHook(Protocol):  # numpydoc ignore=PR01
    """``attention(q, k, v, *, causal, layer, key_padding_mask) -> output`` (see the module docstring)."""

    def __call__(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, *, causal: bool, layer: int, key_padding_mask: Any
    ) -> Any: ...


def exact_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    causal: bool = False,
    layer: int | None = None,
    key_padding_mask: np.ndarray | None = None,
) -> np.ndarray:
    r"""The models' own attention: :math:`\mathrm{softmax}(q k^\top + C)\,v`, the default hook.

    :math:`C` is :math:`-\infty` above the diagonal when ``causal`` and at padded keys, 0
    elsewhere (Vaswani et al. (NeurIPS 2017), eq. (1), with the :math:`1/\sqrt{d_h}` already in
    ``q`` and ``k``). Computed with exactly the operations of the forward passes, so passing it
    as ``attention=`` gives the same numbers as passing nothing. ``layer`` is ignored.

    Parameters
    ----------
    q, k, v : ndarray of shape (texts, heads, tokens, d_h)
    causal : bool, default=False
    layer : int, optional
    key_padding_mask : ndarray of bool, shape (texts, 1, tokens), optional
        True at padded keys.

    Returns
    -------
    ndarray of shape (texts, heads, tokens, d_h)
    """
    del layer
    T = q.shape[-2]
    dt = q.dtype
    bias: Any = dt.type(0)
    if causal:
        bias = np.triu(np.full((T, T), -np.inf, dtype=dt), k=1)
    if key_padding_mask is not None:
        pad_bias = np.where(np.asarray(key_padding_mask), dt.type(-np.inf), dt.type(0))[..., None, :]
        bias = bias + pad_bias
    return softmax_(q @ k.swapaxes(-1, -2), bias) @ v  # type: ignore[no-any-return]


def layer_stream(root: np.random.SeedSequence, layer: int) -> np.random.SeedSequence:
    """The stream of ``layer``: ``SeedSequence(root.entropy, spawn_key=root.spawn_key + (layer,))``.

    Parameters
    ----------
    root : numpy.random.SeedSequence
        The root stream.
    layer : int
        The layer.

    Returns
    -------
    numpy.random.SeedSequence
        The layer's stream.

    Examples
    --------
    >>> layer_stream(np.random.SeedSequence(7, spawn_key=(2,)), 5).spawn_key
    (2, 5)
    """
    return np.random.SeedSequence(root.entropy, spawn_key=tuple(root.spawn_key) + (int(layer),))


class EstimatorAttention:
    """An attention estimator used as a forward-pass hook (made by :func:`estimator_attention`).

    Parameters
    ----------
    estimator : callable
        The estimator, ``(Q, K, V, *, rng, key_padding_mask) -> AttentionResult``.
    root : numpy.random.SeedSequence
        The root of the per-layer streams: layer ``l`` draws from :func:`layer_stream` ``(root, l)``.

    Attributes
    ----------
    n_nonpositive : dict of int to int
        Per layer, the query rows whose estimated normaliser was not positive in the last call
        (their output is NaN).
    cost : dict of int to float
        Per layer, the cost per query of the last call where the estimator's result reports one
        (``AttentionResult.cost``: exact logits plus random features, averaged over the texts,
        heads and queries of the call); layers whose result reports none are left out.
    """

    def __init__(self, estimator: Any, root: np.random.SeedSequence) -> None:
        self.estimator = estimator
        self.root = root
        self.n_nonpositive: dict[int, int] = {}
        self.cost: dict[int, float] = {}

    def __repr__(self) -> str:
        return f"EstimatorAttention({self.estimator!r}, root={self.root!r})"

    def __call__(
        self,
        q: np.ndarray,
        k: np.ndarray,
        v: np.ndarray,
        *,
        causal: bool,
        layer: int,
        key_padding_mask: Any = None,
    ) -> np.ndarray:
        est_causal = getattr(self.estimator, "causal", None)
        if est_causal is not None and bool(est_causal) != bool(causal):
            model = "a causal decoder" if causal else "a bidirectional encoder"
            raise InvalidParameterError(
                f"The estimator {type(self.estimator).__name__} has causal={est_causal!r} but layer {layer} "
                f"belongs to {model}: build it with causal={bool(causal)!r}."
            )
        kwargs = {} if key_padding_mask is None else {"key_padding_mask": key_padding_mask}
        res = self.estimator(q, k, v, rng=layer_stream(self.root, layer), **kwargs)
        if not isinstance(res, AttentionResult):
            raise InvalidParameterError(
                f"The estimator {type(self.estimator).__name__} must return an rk.attention.AttentionResult "
                f"(the attention-estimator protocol). Got {type(res).__name__} instead."
            )
        self.n_nonpositive[int(layer)] = int(res.n_nonpositive)
        if res.cost is not None:
            logits, features = (
                np.asarray(to_numpy(c)) for c in (res.cost.exact_logits, res.cost.random_features)
            )
            self.cost[int(layer)] = float(np.mean(logits + features))
        return np.asarray(to_numpy(res.output))


def estimator_attention(estimator: Any, *, rng: Any = None) -> EstimatorAttention:
    """An rfkit attention estimator as a forward-pass ``attention=`` hook, one random stream per layer.

    Layer ``l`` calls ``estimator(q, k, v, rng=SeedSequence(root.entropy, spawn_key=root.spawn_key
    + (l,)), key_padding_mask=...)`` with ``root`` the SeedSequence of ``rng``: the same ``rng``
    gives the same numbers in every call and every forward pass, each layer has its own stream,
    and which layers are replaced (``layers=`` of the forward functions) does not change any
    layer's draw. The estimator sees all heads of a layer at once, as a batch (texts, heads)
    (``shared_across_heads=False`` on :class:`~rfkit.attention.RFA` and
    :class:`~rfkit.attention.Hybrid` gives every head its own draw and, for data-dependent maps,
    its own fit). It must attend causally in a decoder (``causal=True``) and bidirectionally in
    an encoder: a mismatch raises at the call.

    Parameters
    ----------
    estimator : callable
        ``(Q, K, V, *, rng, key_padding_mask=None) -> AttentionResult``: an rfkit estimator or one
        of your own (docs page *Bring your own estimator*).
    rng : {None, int, SeedSequence, Generator}
        Root of the per-layer streams (None: fresh OS entropy, kept in ``.root``).

    Returns
    -------
    EstimatorAttention

    Raises
    ------
    InvalidParameterError
        ``estimator`` is not callable, or ``rng`` is not a valid seed.

    Examples
    --------
    >>> import rfkit as rk
    >>> est = rk.attention.RFA(rk.features.Positive(64, projection="orthogonal"), causal=True)
    >>> hook = rk.data.estimator_attention(est, rng=0)
    >>> # rk.data.smollm2_forward("Call me Ishmael.", attention=hook).logits   (needs the weights)
    """
    if not callable(estimator) or isinstance(estimator, type):
        raise InvalidParameterError(
            "The `estimator` parameter of estimator_attention must be an attention estimator instance, callable "
            f"as (Q, K, V, *, rng) -> AttentionResult. Got {estimator!r} instead."
        )
    return EstimatorAttention(estimator, as_seed_sequence(rng))


def check_attention_hook(attention: Any, owner: str) -> Any:
    """None (exact attention) or a callable that is not a class, else a named error."""
    if attention is None:
        return None
    if isinstance(attention, type) or not callable(attention):
        raise InvalidParameterError(
            f"The `attention` parameter of {owner} must be None or a function (q, k, v, *, causal, layer, "
            "key_padding_mask) -> output; an rfkit estimator becomes one with rk.data.estimator_attention(est, "
            f"rng=...). Got {attention!r} instead."
        )
    return attention


def check_replaced_layers(layers: Any, n_layers: int, owner: str, model: str) -> frozenset[int]:
    """The layers whose attention is replaced: None (every layer), an int or a sequence of distinct ints."""
    if layers is None:
        return frozenset(range(n_layers))
    items: Sequence[Any]
    if isinstance(layers, numbers.Integral) and not isinstance(layers, (bool, np.bool_)):
        items = (layers,)
    elif isinstance(layers, (str, bytes)) or not isinstance(layers, (Sequence, np.ndarray)):
        raise InvalidParameterError(
            f"The `layers` parameter of {owner} must be None (every layer), an int or a sequence of ints in "
            f"[0, {n_layers - 1}] ({model} has {n_layers} layers). Got {layers!r} instead."
        )
    else:
        items = list(layers)
    if len(items) == 0:
        raise InvalidParameterError(f"The `layers` parameter of {owner} is empty; give at least one layer.")
    out = []
    for it in items:
        if (
            isinstance(it, (bool, np.bool_))
            or not isinstance(it, numbers.Integral)
            or not 0 <= int(it) < n_layers
        ):
            raise InvalidParameterError(
                f"The `layers` parameter of {owner} must hold layer indices in [0, {n_layers - 1}] ({model} has "
                f"{n_layers} layers). Got {it!r} instead."
            )
        out.append(int(it))
    if len(set(out)) != len(out):
        raise InvalidParameterError(f"The `layers` parameter of {owner} has repeated entries: {out}.")
    return frozenset(out)


def call_hook(
    attention: Callable[..., Any],
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    causal: bool,
    layer: int,
    key_padding_mask: np.ndarray | None,
) -> np.ndarray:
    """Call a hook and check that its output is an array of the shape of the exact output."""
    out = np.asarray(attention(q, k, v, causal=causal, layer=layer, key_padding_mask=key_padding_mask))
    want = q.shape[:-1] + (v.shape[-1],)
    if out.shape != want:
        raise ShapeError(
            f"The `attention` hook must return the attention output of shape (texts, heads, tokens, d_h) = {want} "
            f"at layer {layer}. Got shape {out.shape} instead."
        )
    if out.dtype.kind != "f":
        raise InvalidParameterError(
            f"The `attention` hook must return floating-point values at layer {layer}. Got dtype {out.dtype} instead."
        )
    return out.astype(q.dtype, copy=False)


def replaced_layers(attention: Any, layers: Any, n_layers: int) -> tuple[int, ...]:
    """The layers a forward pass replaced, sorted (empty without a hook); ``layers`` already checked."""
    if attention is None:
        return ()
    if layers is None:
        return tuple(range(n_layers))
    items = [layers] if np.ndim(layers) == 0 else list(layers)
    return tuple(sorted(int(i) for i in items))
