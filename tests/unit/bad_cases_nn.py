"""Bad inputs of the PyTorch modules (rfkit.nn): constructor arguments, tensors and masks.

Collected by test_bad_inputs.py; every case skips (with the reason) where PyTorch is missing.
Each names the argument and shows the value received, as everywhere in rfkit.
"""

from __future__ import annotations

from typing import Any

import pytest
from bad_input_kit import Bad

import rfkit as rk
from rfkit.exceptions import InvalidParameterError, NonFiniteInputError, ShapeError


def _nn() -> Any:
    pytest.importorskip("torch", reason="PyTorch is not installed (rfkit.nn needs it)")
    import rfkit.nn

    return rfkit.nn


def _qkv() -> tuple[Any, Any, Any]:
    import torch

    g = torch.Generator().manual_seed(20261128)
    return tuple(torch.randn(2, 5, 4, generator=g, dtype=torch.float64) for _ in range(3))


def _rfa() -> Any:
    return rk.attention.RFA(rk.features.Positive(8))


def _forward(estimator: Any, **kwargs: Any) -> Any:
    return _nn().Attention(estimator, rng=0)(*_qkv(), **kwargs)


def _mask(kind: str) -> Any:
    import torch

    if kind == "general":
        return torch.ones(5, 5, dtype=torch.bool).tril()
    if kind == "bias":
        return torch.full((1, 5), 0.5, dtype=torch.float64)
    if kind == "nan":
        return torch.tensor([0.0, float("nan"), 0.0, 0.0, 0.0])
    if kind == "int":
        return torch.ones(1, 5, dtype=torch.int64)
    if kind == "keys":
        return torch.ones(1, 5, dtype=torch.bool)
    if kind == "short":
        return torch.ones(1, 4, dtype=torch.bool)
    if kind == "rows":
        return torch.ones(3, 5, dtype=torch.bool)
    if kind == "batch":
        return torch.ones(3, 1, 5, dtype=torch.bool)
    raise AssertionError(kind)


def _plain_estimator(Q: Any, K: Any, V: Any, *, rng: Any = None, n_draws: Any = None) -> Any:
    """An estimator of one's own: a plain function (no causal field, no key padding mask)."""
    return rk.attention.softmax(Q, K, V)


def _self_attention(**kwargs: Any) -> Any:
    return _nn().SelfAttention(kwargs.pop("dim", 8), kwargs.pop("heads", 2), rk.attention.softmax, **kwargs)


def _self_forward(x: Any = None, mask: Any = None) -> Any:
    import torch

    x = torch.randn(2, 5, 8) if x is None else x
    return _self_attention()(x, mask=mask)


def _t(fn: Any) -> Any:
    return lambda t: fn()


def _tensor(kind: str) -> Any:
    import torch

    return {"ints": torch.ones(2, 5, dtype=torch.int64), "wide": torch.randn(2, 5, 7)}[kind]


CASES: list[Bad] = [
    Bad(
        "nn.Attention-estimator-not-callable",
        lambda t: _nn().Attention("RFA"),
        InvalidParameterError,
        "estimator",
        "'RFA'",
    ),
    Bad(
        "nn.Attention-scale-nan",
        lambda t: _nn().Attention(_rfa(), scale=float("nan")),
        InvalidParameterError,
        "scale",
        "nan",
    ),
    Bad(
        "nn.Attention-scale-string",
        lambda t: _nn().Attention(_rfa(), scale="0.1"),
        InvalidParameterError,
        "scale",
        "'0.1'",
    ),
    Bad(
        "nn.Attention-redraw-zero",
        lambda t: _nn().Attention(_rfa(), redraw_interval=0),
        InvalidParameterError,
        "redraw_interval",
        "0",
    ),
    Bad(
        "nn.Attention-rng-legacy",
        lambda t: _nn().Attention(_rfa(), rng=-1),
        InvalidParameterError,
        "rng",
        "-1",
    ),
    Bad(
        "nn.Attention-general-mask-rfa",
        _t(lambda: _forward(_rfa(), attn_mask=_mask("general"))),
        InvalidParameterError,
        "attn_mask",
        "shape (5, 5)",
    ),
    Bad(
        "nn.Attention-bias-mask-rfa",
        _t(lambda: _forward(_rfa(), attn_mask=_mask("bias"))),
        InvalidParameterError,
        "attn_mask",
        "float64",
    ),
    Bad(
        "nn.Attention-mask-nan",
        _t(lambda: _forward(_rfa(), attn_mask=_mask("nan"))),
        NonFiniteInputError,
        "attn_mask",
        "1 NaN",
    ),
    Bad(
        "nn.Attention-mask-int",
        _t(lambda: _forward(_rfa(), attn_mask=_mask("int"))),
        InvalidParameterError,
        "attn_mask",
        "torch.int64",
    ),
    Bad(
        "nn.Attention-mask-list",
        _t(lambda: _forward(_rfa(), attn_mask=[True] * 5)),
        InvalidParameterError,
        "attn_mask",
        "list",
    ),
    Bad(
        "nn.Attention-mask-short",
        _t(lambda: _forward(_rfa(), attn_mask=_mask("short"))),
        ShapeError,
        "attn_mask",
        "(1, 4)",
    ),
    Bad(
        "nn.Attention-mask-rows",
        _t(lambda: _forward(rk.attention.softmax, attn_mask=_mask("rows"))),
        ShapeError,
        "attn_mask",
        "(3, 5)",
    ),
    Bad(
        "nn.Attention-mask-batch",
        _t(lambda: _forward(_rfa(), attn_mask=_mask("batch"))),
        ShapeError,
        "attn_mask",
        "(3,)",
    ),
    Bad(
        "nn.Attention-causal-without-field",
        _t(lambda: _forward(_plain_estimator, is_causal=True)),
        InvalidParameterError,
        "is_causal",
        "True",
    ),
    Bad(
        "nn.Attention-padding-not-taken",
        _t(lambda: _forward(_plain_estimator, attn_mask=_mask("keys"))),
        InvalidParameterError,
        "attn_mask",
        "(1, 5)",
    ),
    Bad(
        "nn.Attention-causal-not-bool",
        _t(lambda: _forward(_rfa(), is_causal="yes")),
        InvalidParameterError,
        "is_causal",
        "'yes'",
    ),
    Bad(
        "nn.Attention-q-numpy",
        _t(lambda: _nn().Attention(_rfa())([[1.0]], *_qkv()[1:])),
        InvalidParameterError,
        "`q`",
        "list",
    ),
    Bad(
        "nn.SelfAttention-dim-heads",
        lambda t: _self_attention(dim=10, heads=3),
        InvalidParameterError,
        "dim",
        "10",
    ),
    Bad(
        "nn.SelfAttention-heads-zero", lambda t: _self_attention(heads=0), InvalidParameterError, "heads", "0"
    ),
    Bad("nn.SelfAttention-x-wide", _t(lambda: _self_forward(_tensor("wide"))), ShapeError, "x", "(2, 5, 7)"),
    Bad(
        "nn.SelfAttention-mask-ints",
        _t(lambda: _self_forward(mask=_tensor("ints"))),
        InvalidParameterError,
        "mask",
        "torch.int64",
    ),
]
