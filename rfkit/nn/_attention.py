"""``rfkit.nn.Attention``: one attention estimator of rfkit as an ``nn.Module`` with SDPA's conventions."""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

from .._params import check_int
from .._random import check_rng
from ..attention import AttentionResult, softmax
from ..exceptions import DegenerateInputWarning, InvalidParameterError, ShapeError
from ._masks import batch_shape, split_mask

__all__ = ["Attention"]

_OWNER = "rfkit.nn.Attention"


class Attention(nn.Module):
    r"""An attention estimator of rfkit as a PyTorch module, called like SDPA.

    ``forward(q, k, v, attn_mask=None, is_causal=False)`` follows
    :func:`torch.nn.functional.scaled_dot_product_attention`: ``q`` (..., L, E), ``k`` (..., S, E),
    ``v`` (..., S, Ev) give (..., L, Ev), and with the exact estimator the output equals SDPA's
    (to rounding). The random-feature and sampling estimators give their estimate of it, and
    gradients flow through them as through any PyTorch operation.

    **Scale.** SDPA computes :math:`\mathrm{softmax}(s\,QK^\top)V` with :math:`s = 1/\sqrt{E}` by
    default; rfkit's core estimators compute :math:`\mathrm{softmax}(QK^\top)V` (the kernel
    :math:`\exp(q^\top k)`, no hidden :math:`1/\sqrt d`). The module folds the scale into the
    queries, :math:`Q \to sQ`, as rfkit's real-data loaders do. Calling the core estimators
    directly on SDPA's inputs skips that factor: on N(0, 1) inputs with d = 64 the logits are 8
    times too large and the result differs from SDPA's by a large relative error.

    **Masks.** ``attn_mask`` as SDPA: bool (True = take part) or float (added to the logits), of
    shape (..., L, S) broadcastable to the batch. A mask that is the same for every query, of
    shape (S,) or (..., 1, S) (bool, or float holding only 0 and -inf), is a key padding mask:
    every estimator that takes ``key_padding_mask`` (all of rfkit's) gets it. A mask that differs
    between queries, or finite additive biases, is taken by the exact estimator only; the others
    refuse it with an :class:`~rfkit.exceptions.InvalidParameterError`. ``is_causal=True`` calls the
    estimator's causal form (a copy made with ``dataclasses.replace(estimator, causal=True)``;
    an estimator without a ``causal`` field refuses it); unlike SDPA it may be combined with
    ``attn_mask``. With exact attention a query that sees no key gets NaN (with a
    :class:`~rfkit.exceptions.DegenerateInputWarning`); the randomized estimators refuse such a mask.

    **Random features and redraws.** A randomized estimator is called with ``rng=seed``, an int
    derived from the buffers ``root_seed`` and ``draw_index``, so the same seed gives the same
    features (and samples) at every call: the features are drawn once and kept, as a Performer
    keeps its projection. With ``redraw_interval=k`` a new draw is made every ``k`` forwards in
    training mode (performer-pytorch's ``feature_redraw_interval``: the forward after ``k``
    training forwards increments ``draw_index``); in eval mode the draw never changes. The three
    buffers (``root_seed``, ``draw_index``, ``calls_since_draw``, int64) are in the state dict, so
    ``load_state_dict`` restores the same outputs and the same future redraws.

    Parameters
    ----------
    estimator : callable
        :func:`rfkit.attention.softmax` (exact attention) or an estimator with the call
        ``(Q, K, V, *, rng, n_draws) -> AttentionResult`` (:class:`~rfkit.attention.RFA`,
        :class:`~rfkit.attention.RA`, :class:`~rfkit.attention.SNIS`,
        :class:`~rfkit.attention.LARA`, :class:`~rfkit.attention.Hybrid` or one of your own).
    scale : float, optional
        Factor of the logits; default ``1/sqrt(E)`` with E the last axis of ``q`` (SDPA's).
    redraw_interval : int, optional
        Redraw the random features every this many training forwards; None (default) keeps one
        draw for ever (until :meth:`redraw`).
    rng : {None, int, SeedSequence, Generator}, keyword-only
        Source of ``root_seed``. None draws it from PyTorch's default generator, so
        ``torch.manual_seed`` makes a model reproducible as it does its weights; otherwise as
        everywhere in rfkit (:func:`numpy.random.default_rng` semantics).

    Raises
    ------
    InvalidParameterError
        An estimator that is not callable, a scale that is not a finite real number, a
        ``redraw_interval`` that is not an int >= 1, or a bad ``rng``.

    Examples
    --------
    >>> import torch, rfkit as rk
    >>> from rfkit.nn import Attention
    >>> q, k, v = torch.randn(3, 2, 4, 5, 8, dtype=torch.float64).unbind(0)
    >>> exact = Attention(rk.attention.softmax)
    >>> sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    >>> bool((exact(q, k, v, is_causal=True) - sdpa).abs().max() < 1e-12)
    True
    >>> rfa = Attention(rk.attention.RFA(rk.features.Positive(64)), rng=0)
    >>> rfa(q, k, v).shape
    torch.Size([2, 4, 5, 8])
    """

    root_seed: torch.Tensor
    draw_index: torch.Tensor
    calls_since_draw: torch.Tensor

    def __init__(
        self,
        estimator: Any,
        *,
        scale: float | None = None,
        redraw_interval: int | None = None,
        rng: Any = None,
    ) -> None:
        super().__init__()
        if not callable(estimator):
            raise InvalidParameterError(
                f"The `estimator` parameter of {_OWNER} must be rk.attention.softmax or an attention "
                f"estimator called as (Q, K, V, *, rng, n_draws). Got {estimator!r} instead."
            )
        self.estimator = estimator
        self.exact = estimator is softmax
        self.scale = _check_scale(scale)
        self.redraw_interval = (
            None if redraw_interval is None else check_int(redraw_interval, "redraw_interval", _OWNER, low=1)
        )
        self.takes_key_mask = self.exact or _accepts(estimator, "key_padding_mask")
        self._forms: dict[bool, Any] = {}
        self.register_buffer("root_seed", torch.tensor(_root_seed(rng), dtype=torch.long))
        self.register_buffer("draw_index", torch.tensor(0, dtype=torch.long))
        self.register_buffer("calls_since_draw", torch.tensor(0, dtype=torch.long))

    @property
    def seed(self) -> int:
        """The int the estimator gets as ``rng`` for the current draw (from ``root_seed`` and
        ``draw_index``)."""
        ss = np.random.SeedSequence(int(self.root_seed), spawn_key=(int(self.draw_index),))
        return int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))

    def redraw(self) -> None:
        """Make a new draw of the random features now (the next forward uses it)."""
        with torch.no_grad():
            self.draw_index += 1
            self.calls_since_draw.zero_()

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attn_mask: Any = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        """Attention of ``q`` (..., L, E) over ``k`` (..., S, E) and ``v`` (..., S, Ev).

        Parameters
        ----------
        q, k, v : torch.Tensor
            Queries, keys and values; leading axes broadcast (float32 or float64).
        attn_mask : torch.Tensor, optional
            Bool (True = take part) or float (added to the logits), shape (..., L, S),
            (..., 1, S) or (S,): see the class docstring for which estimators take which masks.
        is_causal : bool, default=False
            Query i attends to keys 0..i only (needs L == S).

        Returns
        -------
        torch.Tensor
            (..., L, Ev), in the dtype and on the device of the inputs.
        """
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor) or t.ndim < 2:
                raise InvalidParameterError(
                    f"The `{name}` parameter of {_OWNER}.forward must be a torch.Tensor with at least 2 axes "
                    f"(..., rows, features). Got {_describe(t)} instead."
                )
        if not isinstance(is_causal, bool | np.bool_):
            raise InvalidParameterError(
                f"The `is_causal` parameter of {_OWNER}.forward must be a bool. Got {is_causal!r} instead."
            )
        L, S, E = int(q.shape[-2]), int(k.shape[-2]), int(q.shape[-1])
        mask = split_mask(attn_mask, L, S, batch_shape(q, k, v, _OWNER), _OWNER)
        if self.training:
            if self.redraw_interval is not None and int(self.calls_since_draw) >= self.redraw_interval:
                self.redraw()
            with torch.no_grad():
                self.calls_since_draw += 1
        qs = q * (1.0 / math.sqrt(E) if self.scale is None else self.scale)
        if self.exact:
            if mask.general is not None:
                return _exact_with_mask(qs, k, v, mask.general, bool(is_causal))
            return softmax(qs, k, v, causal=bool(is_causal), key_padding_mask=mask.key_padding)
        if mask.general is not None:
            m = mask.general
            raise InvalidParameterError(
                f"The `attn_mask` parameter of {_OWNER} with {self._name()} must be the same for every query "
                "(a key padding mask of shape (S,) or (..., 1, S), bool or 0/-inf float; use is_causal=True "
                "for a causal mask): only the exact estimator rk.attention.softmax takes a mask that differs "
                f"between queries or finite additive biases. Got shape {tuple(m.shape)}, dtype {m.dtype} instead."
            )
        kwargs: dict[str, Any] = {}
        if mask.key_padding is not None:
            if not self.takes_key_mask:
                raise InvalidParameterError(
                    f"The `attn_mask` parameter of {_OWNER} must be None for {self._name()}, which takes no "
                    f"`key_padding_mask`. Got a mask of shape {tuple(attn_mask.shape)} instead."
                )
            kwargs["key_padding_mask"] = mask.key_padding
        res = self._form(bool(is_causal))(qs, k, v, rng=self.seed, **kwargs)
        return res.output if isinstance(res, AttentionResult) else res

    def _form(self, causal: bool) -> Any:
        """The estimator in its causal or bidirectional form (made once, with dataclasses.replace)."""
        est = self._forms.get(causal)
        if est is not None:
            return est
        fields = (
            {f.name for f in dataclasses.fields(self.estimator)}
            if dataclasses.is_dataclass(self.estimator) and not isinstance(self.estimator, type)
            else set()
        )
        if "causal" not in fields:
            if causal:
                raise InvalidParameterError(
                    f"The `is_causal` parameter of {_OWNER} must be False for {self._name()}, which has no "
                    "`causal` field to make a causal copy of. Got True instead."
                )
            est = self.estimator
        elif bool(self.estimator.causal) == causal:
            est = self.estimator
        else:
            est = dataclasses.replace(self.estimator, causal=causal)  # type: ignore[type-var]
        self._forms[causal] = est
        return est

    def _name(self) -> str:
        if self.exact:
            return "rk.attention.softmax"
        if inspect.isfunction(self.estimator):
            return f"the function {self.estimator.__qualname__}"
        return type(self.estimator).__name__

    def extra_repr(self) -> str:
        est = "rk.attention.softmax" if self.exact else repr(self.estimator)
        return f"estimator={est}, scale={self.scale}, redraw_interval={self.redraw_interval}"


def _check_scale(scale: Any) -> float | None:
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(float(scale)):
        raise InvalidParameterError(
            f"The `scale` parameter of {_OWNER} must be a finite real number or None (1/sqrt(E)). "
            f"Got {scale!r} instead."
        )
    return float(scale)


def _root_seed(rng: Any) -> int:
    if rng is None:  # PyTorch's default generator: torch.manual_seed reproduces it
        return int(torch.randint(0, 2**62, (), dtype=torch.long))
    return int(check_rng(rng, "rng").integers(2**62))


def _accepts(fn: Any, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _describe(obj: Any) -> str:
    if isinstance(obj, torch.Tensor):
        return f"a tensor of shape {tuple(obj.shape)}"
    return f"{type(obj).__name__}"


def _exact_with_mask(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, causal: bool
) -> Any:
    """Exact attention with a general mask (bool: True = take part; float: added to the logits)."""
    dt = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
    q, k, v = q.to(dt), k.to(dt), v.to(dt)
    logits = q @ k.transpose(-2, -1)
    if mask.dtype == torch.bool:
        logits = logits.masked_fill(~mask, -math.inf)
    else:
        logits = logits + mask.to(dt)
    if causal:
        L, S = int(q.shape[-2]), int(k.shape[-2])
        if L != S:
            raise ShapeError(
                f"`is_causal=True` of {_OWNER} needs as many queries as keys (query i sees keys 0..i): "
                f"q has L={L} rows, k has S={S}."
            )
        later = torch.ones(L, S, dtype=torch.bool, device=logits.device).triu(1)
        logits = logits.masked_fill(later, -math.inf)
    dead = ~torch.isfinite(logits.amax(dim=-1))
    if bool(dead.any()):
        warnings.warn(
            f"{_OWNER}: {int(dead.sum())} query row(s) see no key (every key masked); their output is NaN.",
            DegenerateInputWarning,
            stacklevel=3,
        )
    return torch.softmax(logits, dim=-1) @ v
