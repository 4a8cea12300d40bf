"""A pretrained model as an object that runs forward passes with replaced attention.

:class:`PretrainedModel` holds what the two real models share: checking the arguments of a
run (token ids, mask, replaced layers, a restart from a layer's input) and the result of a run
(:class:`ModelRun`). :class:`rfkit.data.SmolLM2Model` and :class:`rfkit.data.MiniLMModel`
implement the model-specific parts (tokeniser, layers, output head).
"""

from __future__ import annotations

import abc
import dataclasses
import numbers
from typing import Any, ClassVar

import numpy as np

from ..exceptions import InvalidParameterError, ShapeError
from ._forward import check_attention_hook, check_replaced_layers
from ._texts import check_dtype

__all__ = ["ModelRun", "PretrainedModel", "check_scale"]


def check_scale(scale: Any, owner: str) -> str:
    """``"symmetric"`` or ``"query"``: how the model's :math:`1/\\sqrt{d_h}` is split between q and k."""
    if scale not in ("symmetric", "query"):
        raise InvalidParameterError(
            f"The `scale` parameter of {owner} must be 'symmetric' or 'query'. Got {scale!r} instead."
        )
    return str(scale)


@dataclasses.dataclass(frozen=True, eq=False)
class ModelRun:
    """The result of :meth:`PretrainedModel.run`.

    Parameters
    ----------
    hidden : ndarray of shape (texts, tokens, hidden)
        The last hidden states (SmolLM2: after the final RMSNorm, what the output head reads;
        MiniLM: the last layer's output, what sentence-transformers pools); for a run with
        ``stop`` below the number of layers, the hidden state entering layer ``stop``.
    mask : ndarray of bool, shape (texts, tokens)
        Valid (non-padding) positions.
    inputs : tuple of ndarray or None
        With ``keep_inputs=True``: the hidden state (SmolLM2: the residual stream) entering each
        layer run, from ``start`` on; pass ``x=inputs[i]``, ``start=start + i`` to rerun from there.
    """

    hidden: np.ndarray
    mask: np.ndarray
    inputs: tuple[np.ndarray, ...] | None = None


class PretrainedModel(abc.ABC):
    """A pretrained transformer whose forward pass takes an ``attention=`` hook.

    Subclasses set the class attributes and implement :meth:`pieces`, :meth:`wrap`,
    :meth:`encode` and :meth:`_run`.

    Parameters
    ----------
    dtype : numpy.float32 or numpy.float64
        Precision of the forward pass.
    scale : {"symmetric", "query"}
        How :math:`1/\\sqrt{d_h}` is split between the hook's q and k.

    Attributes
    ----------
    name : str
    n_layers, n_heads, head_dim, hidden_size, max_positions : int
    causal : bool
        Decoder (query ``i`` sees keys ``j <= i``) or bidirectional encoder.
    dtype : numpy.dtype
        Precision of the forward pass.
    scale : {"symmetric", "query"}
        How :math:`1/\\sqrt{d_h}` is split between the hook's q and k.
    """

    name: ClassVar[str]
    n_layers: ClassVar[int]
    n_heads: ClassVar[int]
    head_dim: ClassVar[int]
    hidden_size: ClassVar[int]
    max_positions: ClassVar[int]
    causal: ClassVar[bool]
    owner: ClassVar[str]

    def __init__(self, dtype: Any, scale: str) -> None:
        self.dtype = check_dtype(dtype, self.owner)
        self.scale = check_scale(scale, self.owner)
        d = self.head_dim
        self.scale_q: float = d**-0.25 if self.scale == "symmetric" else d**-0.5
        self.scale_k: float = d**-0.25 if self.scale == "symmetric" else 1.0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dtype={self.dtype.name}, scale={self.scale!r})"

    @abc.abstractmethod
    def pieces(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special token and no truncation."""

    @abc.abstractmethod
    def wrap(self, pieces: list[int]) -> list[int]:
        """The ids the model reads for a run of ``pieces`` (MiniLM adds ``[CLS]`` and ``[SEP]``)."""

    @abc.abstractmethod
    def encode(self, texts: Any = None, max_len: int | None = 64) -> tuple[np.ndarray, np.ndarray]:
        """Right-padded token ids (texts, tokens) and the mask of valid positions, as the model reads them."""

    @abc.abstractmethod
    def _run(
        self,
        ids: np.ndarray,
        mask: np.ndarray,
        attention: Any,
        replaced: frozenset[int] | None,
        start: int,
        stop: int,
        x: np.ndarray | None,
        inputs: list[np.ndarray] | None,
    ) -> np.ndarray:
        """The last hidden states of a checked run (``stop`` < ``n_layers``: the input of layer ``stop``)."""

    def run(
        self,
        ids: Any,
        mask: Any = None,
        *,
        attention: Any = None,
        layers: Any = None,
        start: int = 0,
        stop: int | None = None,
        x: Any = None,
        keep_inputs: bool = False,
    ) -> ModelRun:
        """Run the model on token ids, with ``attention`` in the layers ``layers`` (None: every layer).

        Parameters
        ----------
        ids : array_like of int, shape (texts, tokens)
            As :meth:`encode` returns them (right padding).
        mask : array_like of bool, shape (texts, tokens), optional
            Valid positions (default: all), a prefix of each row.
        attention : callable, optional
            The hook ``(q, k, v, *, causal, layer, key_padding_mask) -> output`` (see
            :func:`rfkit.data.estimator_attention`); None: exact softmax attention everywhere.
        layers : int or sequence of int, optional
            The layers that call ``attention`` (the others are exact). Needs ``attention``.
        start : int, default=0
            First layer to run; ``start`` > 0 needs ``x``.
        stop : int, optional
            Run layers ``start`` to ``stop - 1`` (default: to the last layer). With ``stop`` below the
            number of layers, :attr:`ModelRun.hidden` is the hidden state entering layer ``stop``
            (the ``x`` to continue from), not the last hidden states.
        x : ndarray of shape (texts, tokens, hidden), optional
            The hidden state entering layer ``start`` (from a run with ``keep_inputs=True``);
            default (``start`` = 0): the embeddings of ``ids``.
        keep_inputs : bool, default=False
            Keep the input of every layer run (:attr:`ModelRun.inputs`).

        Returns
        -------
        ModelRun
        """
        owner = f"{type(self).__name__}.run"
        ids_a = np.asarray(ids)
        if ids_a.ndim != 2 or ids_a.dtype.kind not in "iu" or 0 in ids_a.shape:
            raise ShapeError(
                f"{owner}: `ids` must be a non-empty int array (texts, tokens). Got {ids_a.dtype} {ids_a.shape}."
            )
        n, T = ids_a.shape
        if T > self.max_positions:
            raise InvalidParameterError(
                f"{owner}: {T} tokens exceed the {self.max_positions} positions of {self.name}."
            )
        m = np.ones((n, T), dtype=bool) if mask is None else np.asarray(mask)
        if m.shape != (n, T) or m.dtype != bool:
            raise ShapeError(
                f"{owner}: `mask` must be a bool array of shape {(n, T)}. Got {m.dtype} {m.shape}."
            )
        if not m[:, 0].all() or (np.diff(m.astype(np.int8), axis=1) > 0).any():
            raise InvalidParameterError(
                f"{owner}: `mask` must mark a non-empty prefix of each row (right padding)."
            )
        hook = check_attention_hook(attention, owner)
        if layers is not None and hook is None:
            raise InvalidParameterError(
                f"{owner}: `layers`={layers!r} selects layers for `attention`, which is None."
            )
        replaced = None if layers is None else check_replaced_layers(layers, self.n_layers, owner, self.name)
        if (
            isinstance(start, bool)
            or not isinstance(start, numbers.Integral)
            or not 0 <= start < self.n_layers
        ):
            raise InvalidParameterError(
                f"{owner}: `start` must be an int in [0, {self.n_layers - 1}]. Got {start!r}."
            )
        stop = self.n_layers if stop is None else stop
        if (
            isinstance(stop, bool)
            or not isinstance(stop, numbers.Integral)
            or not start < stop <= self.n_layers
        ):
            raise InvalidParameterError(
                f"{owner}: `stop` must be an int in [start + 1, {self.n_layers}] = [{start + 1}, {self.n_layers}]. "
                f"Got {stop!r}."
            )
        if x is None and start > 0:
            raise InvalidParameterError(f"{owner}: `start`={start} needs `x`, the input of layer {start}.")
        if x is not None:
            x = np.asarray(x)
            if x.shape != (n, T, self.hidden_size) or x.dtype != self.dtype:
                raise ShapeError(
                    f"{owner}: `x` must have shape {(n, T, self.hidden_size)} and dtype {self.dtype.name}. "
                    f"Got {x.dtype} {x.shape}."
                )
        inputs: list[np.ndarray] | None = [] if keep_inputs else None
        hidden = self._run(
            ids_a.astype(np.intp, copy=False), m, hook, replaced, int(start), int(stop), x, inputs
        )
        return ModelRun(hidden=hidden, mask=m, inputs=None if inputs is None else tuple(inputs))
