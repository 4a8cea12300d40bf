"""float16 and bfloat16 PyTorch inputs (docs page *Backends and scaling*, section "Gradients and
half precision"): accepted by the public estimate functions, computed in float32, returned in the
input's dtype (log-space fields stay float32). The numbers are exactly those of the float32 call
on the upcast inputs, rounded once to the input's dtype. NumPy float16 stays refused.
"""

from __future__ import annotations

import numpy as np
import pytest
from backend_marks import needs_torch, torch

import rfkit as rk
from rfkit import attention as att
from rfkit.exceptions import InvalidParameterError

pytestmark = needs_torch

HALF = ["float16", "bfloat16"]


def _qkv(dtype, n=12, d=4, dv=3):
    rng = np.random.default_rng(7)
    Q, K = (0.5 * rng.standard_normal((2, n, d)) for _ in range(2))
    V = rng.standard_normal((2, n, dv))
    return tuple(torch.tensor(a, dtype=getattr(torch, dtype)) for a in (Q, K, V))


CALLS = {
    "exact": lambda Q, K, V: att.softmax(Q, K, V),
    "exact-causal": lambda Q, K, V: att.softmax(Q, K, V, causal=True),
    "rfa-positive": lambda Q, K, V: (
        att.RFA(rk.features.Positive(8, projection="orthogonal"))(Q, K, V, rng=0).output
    ),
    "rfa-trig-causal": lambda Q, K, V: att.RFA(rk.features.Trig(8), causal=True)(Q, K, V, rng=0).output,
    "rfa-oprf": lambda Q, K, V: att.RFA(rk.features.OPRF(8))(Q, K, V, rng=0).output,
    "snis": lambda Q, K, V: att.SNIS(n_samples=6)(Q, K, V, rng=0).output,
    "lara": lambda Q, K, V: att.LARA(n_proposals=2, samples_per_proposal=2)(Q, K, V, rng=0).output,
    "ra": lambda Q, K, V: att.RA(n_samples=2)(Q, K, V, rng=0).output,
    "hybrid": lambda Q, K, V: (
        att.Hybrid(rk.features.Positive(8), window=2, n_global=1)(Q, K, V, rng=0).output
    ),
    "draw-kernel": lambda Q, K, V: rk.features.Positive(8).sample(4, rng=0).kernel(Q, K),
    "draw-pairwise": lambda Q, K, V: rk.features.Trig(8).sample(4, rng=0).pairwise(Q, K),
    "softmax-kernel": lambda Q, K, V: rk.softmax_kernel(Q, K),
}


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("name", list(CALLS))
def test_half_inputs_compute_in_float32_and_return_their_dtype(name, dtype):
    fn = CALLS[name]
    half = _qkv(dtype)
    out = fn(*half)
    assert out.dtype == getattr(torch, dtype), out.dtype
    ref = fn(*(t.float() for t in half))  # the float32 call on the same (upcast) numbers
    assert ref.dtype == torch.float32
    torch.testing.assert_close(out, ref.to(out.dtype), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", HALF)
def test_half_log_space_results_and_fields_stay_float32(dtype):
    Q, K, V = _qkv(dtype)
    draw = rk.features.Positive(8).sample(4, rng=0)
    f = draw.queries(Q)
    assert f.values.dtype == getattr(torch, dtype) and f.log_scale.dtype == torch.float32
    assert draw.log_kernel(Q, K).dtype == torch.float32
    assert rk.log_softmax_kernel(Q, K).dtype == torch.float32
    res = att.RFA(rk.features.Positive(8))(Q, K, V, rng=0)
    assert res.output.dtype == getattr(torch, dtype) and res.log_scale.dtype == torch.float32


def test_mixed_half_and_float32_inputs_give_float32_as_pytorch_promotes():
    Q, K, V = _qkv("float16")
    out = att.softmax(Q, K.float(), V)
    assert out.dtype == torch.float32


@pytest.mark.parametrize("dtype", HALF)
def test_gradients_flow_back_to_half_inputs(dtype):
    Q, K, V = (t.requires_grad_() for t in _qkv(dtype))
    att.RFA(rk.features.Positive(8))(Q, K, V, rng=0).output.float().sum().backward()
    assert all(t.grad is not None and t.grad.dtype == getattr(torch, dtype) for t in (Q, K, V))


def test_numpy_float16_stays_refused_with_the_rule():
    Q = np.zeros((3, 2), dtype=np.float16)
    with pytest.raises(InvalidParameterError, match=r"`Q` must be a floating-point array.*float16"):
        att.softmax(Q, Q, Q)
