"""``rfkit.nn.SelfAttention``: multi-head self-attention on one tensor, for ``nn.Sequential``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .._params import check_int
from ..exceptions import InvalidParameterError, ShapeError
from ._attention import Attention

__all__ = ["SelfAttention"]

_OWNER = "rfkit.nn.SelfAttention"


class SelfAttention(nn.Module):
    r"""Multi-head self-attention whose attention is an estimator of rfkit.

    ``forward(x, mask=None)`` projects ``x`` (..., N, dim) to ``heads`` queries, keys and values of
    ``dim_head`` features each (one ``nn.Linear``), runs :class:`Attention` on every head and
    projects the heads back to ``dim`` (a second ``nn.Linear``). It takes one tensor, so it fits in
    ``nn.Sequential``.

    Parameters
    ----------
    dim : int
        Features of ``x`` (its last axis) and of the output.
    heads : int
        Number of attention heads.
    estimator : callable
        As for :class:`Attention`: :func:`rfkit.attention.softmax` or an estimator such as
        ``rk.attention.RFA(rk.features.Trig(64))``.
    dim_head : int, optional
        Features per head; default ``dim // heads`` (then ``dim`` must be a multiple of ``heads``).
    causal : bool, default=False
        Token i attends to tokens 0..i only.
    scale : float, optional
        Factor of the logits; default ``1/sqrt(dim_head)`` (SDPA's).
    redraw_interval : int, optional
        Redraw the random features every this many training forwards (see :class:`Attention`).
    bias : bool, default=False
        Whether the q/k/v projection has a bias (the output projection always has one).
    rng : {None, int, SeedSequence, Generator}, keyword-only
        Seed source of the random features (see :class:`Attention`); the weights are initialised
        by PyTorch's default generator, as every ``nn.Linear``.
    device, dtype : optional
        Of the projections' parameters (``nn.Linear``'s factory arguments).

    Raises
    ------
    InvalidParameterError
        A ``dim``, ``heads`` or ``dim_head`` that is not an int >= 1, ``dim`` not a multiple of
        ``heads`` without ``dim_head``, or a bad argument of :class:`Attention`.

    Examples
    --------
    >>> import torch, rfkit as rk
    >>> from rfkit.nn import SelfAttention
    >>> _ = torch.manual_seed(0)
    >>> model = torch.nn.Sequential(SelfAttention(16, 2, rk.attention.softmax, causal=True), torch.nn.LayerNorm(16))
    >>> model(torch.randn(3, 10, 16)).shape
    torch.Size([3, 10, 16])
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        estimator: Any,
        *,
        dim_head: int | None = None,
        causal: bool = False,
        scale: float | None = None,
        redraw_interval: int | None = None,
        bias: bool = False,
        rng: Any = None,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        dim = check_int(dim, "dim", _OWNER, low=1)
        heads = check_int(heads, "heads", _OWNER, low=1)
        if dim_head is None:
            if dim % heads:
                raise InvalidParameterError(
                    f"The `dim` parameter of {_OWNER} must be a multiple of heads={heads} when dim_head is not "
                    f"given. Got {dim} instead."
                )
            dim_head = dim // heads
        dim_head = check_int(dim_head, "dim_head", _OWNER, low=1)
        if not isinstance(causal, bool):
            raise InvalidParameterError(
                f"The `causal` parameter of {_OWNER} must be a bool. Got {causal!r} instead."
            )
        self.dim, self.heads, self.dim_head, self.causal = dim, heads, dim_head, causal
        inner = heads * dim_head
        self.to_qkv = nn.Linear(dim, 3 * inner, bias=bias, device=device, dtype=dtype)
        self.attention = Attention(estimator, scale=scale, redraw_interval=redraw_interval, rng=rng)
        self.to_out = nn.Linear(inner, dim, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, mask: Any = None) -> torch.Tensor:
        """Self-attention of the tokens of ``x`` (..., N, dim).

        Parameters
        ----------
        x : torch.Tensor
            Tokens, (..., N, dim).
        mask : torch.Tensor of bool, optional
            (..., N), True = the token takes part as a key (padding: False), as SDPA's masks.

        Returns
        -------
        torch.Tensor
            (..., N, dim).
        """
        if not isinstance(x, torch.Tensor) or x.ndim < 2 or int(x.shape[-1]) != self.dim:
            got = f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise ShapeError(
                f"The `x` parameter of {_OWNER}.forward must be a tensor of shape (..., N, {self.dim}). "
                f"Got {got} instead."
            )
        attn_mask = None
        if mask is not None:
            if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
                got = f"dtype {mask.dtype}" if isinstance(mask, torch.Tensor) else type(mask).__name__
                raise InvalidParameterError(
                    f"The `mask` parameter of {_OWNER}.forward must be a bool tensor (..., N), True = take "
                    f"part. Got {got} instead."
                )
            if mask.ndim < 1 or int(mask.shape[-1]) != int(x.shape[-2]):
                raise ShapeError(
                    f"The `mask` parameter of {_OWNER}.forward must have shape (..., N) with N={int(x.shape[-2])} "
                    f"tokens. Got shape {tuple(mask.shape)} instead."
                )
            attn_mask = mask[..., None, None, :]  # (..., 1 head, 1 query, N keys)
        qkv = self.to_qkv(x).unflatten(-1, (3, self.heads, self.dim_head))  # (..., N, 3, h, dh)
        q, k, v = (t.transpose(-3, -2) for t in qkv.unbind(-3))  # each (..., h, N, dh)
        out = self.attention(q, k, v, attn_mask=attn_mask, is_causal=self.causal)
        return self.to_out(out.transpose(-3, -2).flatten(-2))
