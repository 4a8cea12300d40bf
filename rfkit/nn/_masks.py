"""SDPA's ``attn_mask`` translated to what rfkit's estimators take: a key padding mask or, for the
exact estimator only, a general (L, S) mask."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from ..exceptions import InvalidParameterError, NonFiniteInputError, ShapeError

__all__ = ["SplitMask", "split_mask", "batch_shape"]


@dataclasses.dataclass(frozen=True)
class SplitMask:
    """One ``attn_mask`` sorted by what it needs.

    Attributes
    ----------
    key_padding : torch.Tensor or None
        Bool (..., S) in rfkit's convention (True = padded key, ignored): a mask that is the same
        for every query (shape (S,), (..., 1, S), or 0/-inf floats of those shapes).
    general : torch.Tensor or None
        A mask that differs between queries, (..., L, S), or finite additive biases (float,
        (..., L, S) or (..., 1, S)), in SDPA's convention (bool: True = take part; float: added
        to the logits). Only the exact estimator takes it.
    """

    key_padding: Any = None
    general: Any = None


def batch_shape(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, owner: str) -> tuple[int, ...]:
    """The broadcast leading shape of ``q``, ``k``, ``v`` (a ShapeError naming them if none)."""
    try:
        return tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    except RuntimeError:
        raise ShapeError(
            f"The leading (batch, head) axes of `q`, `k` and `v` of {owner} must broadcast. Got "
            f"q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)}, v.shape={tuple(v.shape)} instead."
        ) from None


def split_mask(attn_mask: Any, L: int, S: int, batch: tuple[int, ...], owner: str) -> SplitMask:
    """Check ``attn_mask`` (SDPA's conventions) and sort it into a key padding or a general mask.

    Raises
    ------
    InvalidParameterError
        Not a tensor, or a dtype other than bool and float.
    NonFiniteInputError
        A float mask holding NaN or +inf.
    ShapeError
        A last axis other than S, an axis -2 other than 1 or L, or leading axes that do not
        broadcast to the batch shape of ``q``, ``k``, ``v``.
    """
    if attn_mask is None:
        return SplitMask()
    if not isinstance(attn_mask, torch.Tensor):
        raise InvalidParameterError(
            f"The `attn_mask` parameter of {owner} must be a torch.Tensor (bool: True = take part; float: "
            f"added to the logits) or None. Got {type(attn_mask).__name__} instead."
        )
    shape = tuple(attn_mask.shape)
    rows = shape[-2] if len(shape) >= 2 else 1
    if len(shape) < 1 or shape[-1] != S or rows not in (1, L):
        raise ShapeError(
            f"The `attn_mask` parameter of {owner} must have shape (..., L, S), (..., 1, S) or (S,) with "
            f"L={L} queries and S={S} keys. Got shape {shape} instead."
        )
    lead = shape[:-2]
    try:
        full = tuple(torch.broadcast_shapes(lead, batch))
    except RuntimeError:
        full = None
    if full != batch:
        raise ShapeError(
            f"The `attn_mask` parameter of {owner} has leading shape {lead}, which must broadcast to the "
            f"batch shape {batch} of q, k, v. Got shape {shape} instead."
        )
    if attn_mask.dtype == torch.bool:
        keep = attn_mask
    elif attn_mask.is_floating_point():
        bad = torch.isnan(attn_mask) | (attn_mask == math.inf)
        if bool(bad.any()):
            raise NonFiniteInputError(
                f"The `attn_mask` parameter of {owner} must hold finite values or -inf (masked out). Got "
                f"{int(bad.sum())} NaN or +inf entries instead."
            )
        masked = attn_mask == -math.inf
        if not bool(((attn_mask == 0) | masked).all()):
            return SplitMask(general=attn_mask)  # finite additive biases: the exact estimator only
        keep = ~masked
    else:
        raise InvalidParameterError(
            f"The `attn_mask` parameter of {owner} must be a bool tensor (True = take part) or a float "
            f"tensor (added to the logits). Got dtype {attn_mask.dtype} instead."
        )
    if rows == 1:
        return SplitMask(key_padding=~(keep if keep.ndim == 1 else keep.squeeze(-2)))
    return SplitMask(general=keep)
