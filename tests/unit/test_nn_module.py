"""rfkit.nn: attention estimators as PyTorch modules with the conventions of SDPA.

Exact attention through the module must equal ``torch.nn.functional.scaled_dot_product_attention``
(default and explicit scale, causal, key padding, general and additive masks) to rounding; a
randomized estimator through the module must equal the estimator called directly on the scaled
queries with the module's seed; the seed and the redraw counter live in the state dict (a round
trip reproduces outputs and future redraws); redraws follow performer-pytorch's
``feature_redraw_interval`` in training mode only; the modules work in ``nn.Sequential`` and
train (the loss of a toy task falls by half in 50 Adam steps, fixed seeds).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from backend_marks import needs_torch, torch

import rfkit as rk

pytestmark = needs_torch

if torch is not None:
    import torch.nn.functional as F

    from rfkit.nn import Attention, SelfAttention

ROOT = Path(__file__).resolve().parents[2]
SEED = 20261128
#: max |module - SDPA| allowed per dtype: a few ulps of the outputs (|values| <= about 4)
TOL = {"float32": 1e-5, "float64": 1e-12}
B, H, L, E, EV = 2, 3, 7, 8, 5


def _qkv(dtype, S=L, seed=SEED):
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    q = torch.randn(B, H, L, E, generator=g, dtype=dt)
    k = torch.randn(B, H, S, E, generator=g, dtype=dt)
    v = torch.randn(B, H, S, EV, generator=g, dtype=dt)
    return q, k, v


def _padding(S=L):
    """Key padding, SDPA's bool convention (True = take part): batch 0 keeps 5 keys, batch 1 all."""
    keep = torch.ones(B, 1, 1, S, dtype=torch.bool)
    keep[0, ..., 5:] = False
    return keep


def _general(S=L):
    """A mask that differs between queries (every query keeps key 0 and its own key if any)."""
    g = torch.Generator().manual_seed(SEED + 1)
    keep = torch.rand(B, H, L, S, generator=g) < 0.6
    keep[..., 0] = True
    return keep


def _cases():
    return {
        "plain": ({}, {}),
        "causal": ({"is_causal": True}, {"is_causal": True}),
        "padding": ({"attn_mask": _padding()}, {"attn_mask": _padding()}),
        "padding-1d": ({"attn_mask": _padding()[0, 0, 0]}, {"attn_mask": _padding()[0, 0]}),  # SDPA: (1, S)
        "padding-float": (
            {"attn_mask": torch.zeros(B, 1, 1, L).masked_fill(~_padding(), -torch.inf)},
            {"attn_mask": _padding()},
        ),
        "causal+padding": (
            {"attn_mask": _padding(), "is_causal": True},
            {"attn_mask": _padding() & torch.ones(L, L, dtype=torch.bool).tril()},
        ),
        "general-bool": ({"attn_mask": _general()}, {"attn_mask": _general()}),
        "additive-float": (
            {"attn_mask": torch.linspace(-2.0, 1.0, L * L).reshape(L, L)},
            {"attn_mask": torch.linspace(-2.0, 1.0, L * L).reshape(L, L)},
        ),
        "scale": ({"scale": 0.3}, {"scale": 0.3}),
    }


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", list(_cases()))
def test_exact_attention_equals_sdpa(case, dtype):
    ours, theirs = _cases()[case]
    q, k, v = _qkv(dtype)
    dt = q.dtype
    ours = {
        n: (a.to(dt) if isinstance(a, torch.Tensor) and a.is_floating_point() else a) for n, a in ours.items()
    }
    theirs = {
        n: (a.to(dt) if isinstance(a, torch.Tensor) and a.is_floating_point() else a)
        for n, a in theirs.items()
    }
    module = Attention(rk.attention.softmax, scale=ours.pop("scale", None))
    got = module(q, k, v, **ours)
    want = F.scaled_dot_product_attention(q, k, v, **theirs)
    assert got.dtype == dt and got.shape == want.shape
    assert float((got - want).abs().max()) <= TOL[dtype]


def test_core_estimators_without_the_scale_differ_from_sdpa_by_a_large_relative_error():
    """Why the module folds 1/sqrt(E) into q: rfkit's core softmax on SDPA's N(0, 1) inputs with
    d = 64 computes softmax(q.k), 8 times sharper than SDPA's."""
    g = torch.Generator().manual_seed(SEED)
    q, k, v = (torch.randn(2, 16, 64, generator=g, dtype=torch.float64) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v)
    rel = lambda a: float((a - want).norm() / want.norm())  # noqa: E731
    assert rel(rk.attention.softmax(q, k, v)) > 0.5
    assert rel(Attention(rk.attention.softmax)(q, k, v)) < 1e-12


@pytest.mark.parametrize("mask", ["none", "padding", "padding-float"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_randomized_module_equals_the_estimator_on_scaled_queries_with_its_seed(causal, mask):
    q, k, v = _qkv("float64")
    est = rk.attention.RFA(rk.features.Positive(16))
    module = Attention(est, rng=3)
    keep = _padding()
    attn_mask = {
        "none": None,
        "padding": keep,
        "padding-float": torch.zeros(B, 1, 1, L).masked_fill(~keep, -torch.inf),
    }
    got = module(q, k, v, attn_mask=attn_mask[mask], is_causal=causal)
    kpm = None if mask == "none" else ~keep[:, :, 0, :]
    want = rk.attention.RFA(est.feature_map, causal=causal)(
        q * (1.0 / math.sqrt(E)), k, v, rng=module.seed, key_padding_mask=kpm
    ).output
    assert torch.equal(got, want)


def test_randomized_estimators_all_run_through_the_module_with_padding():
    q, k, v = _qkv("float64")
    for est in (
        rk.attention.RFA(rk.features.Positive(16)),
        rk.attention.RA(n_samples=8),
        rk.attention.SNIS(n_samples=8),
        rk.attention.LARA(n_proposals=2, weights="balance", samples_per_proposal=4),
        rk.attention.Hybrid(rk.features.Positive(16), window=1),
    ):
        for causal in (False, True):
            out = Attention(est, rng=0)(q, k, v, attn_mask=_padding(), is_causal=causal)
            assert out.shape == (B, H, L, EV) and bool(torch.isfinite(out).all()), (est, causal)


def _outputs(module, x, n):
    return [module(*x) for _ in range(n)]


def test_redraw_every_k_training_forwards_and_never_in_eval():
    x = _qkv("float64")
    module = Attention(rk.attention.RFA(rk.features.Positive(16)), redraw_interval=3, rng=5)
    outs = _outputs(module.train(), x, 7)
    assert all(torch.equal(outs[0], o) for o in outs[1:3])  # forwards 1..3: draw 0
    assert not torch.equal(outs[2], outs[3])  # forward 4: a new draw
    assert all(torch.equal(outs[3], o) for o in outs[4:6])  # forwards 4..6: draw 1
    assert not torch.equal(outs[5], outs[6])  # forward 7: draw 2
    assert int(module.draw_index) == 2
    evals = _outputs(module.eval(), x, 5)
    assert all(torch.equal(outs[6], o) for o in evals)  # eval: the last draw, for ever
    assert int(module.draw_index) == 2 and int(module.calls_since_draw) == 1


def test_without_redraw_interval_one_draw_is_kept_and_redraw_changes_it():
    x = _qkv("float64")
    module = Attention(rk.attention.RFA(rk.features.Positive(16)), rng=5).train()
    outs = _outputs(module, x, 5)
    assert all(torch.equal(outs[0], o) for o in outs[1:])
    module.redraw()
    assert not torch.equal(outs[0], module(*x))


def test_state_dict_round_trip_reproduces_outputs_and_future_redraws():
    x = _qkv("float32")
    est = rk.attention.RFA(rk.features.Positive(16))
    trained = Attention(est, redraw_interval=2, rng=1).train()
    _outputs(trained, x, 5)  # draw_index 2, one call since
    fresh = Attention(est, redraw_interval=2, rng=2)
    assert set(fresh.state_dict()) == {"root_seed", "draw_index", "calls_since_draw"}
    assert not torch.equal(fresh.eval()(*x), trained.eval()(*x))
    fresh.load_state_dict(trained.state_dict())
    assert fresh.seed == trained.seed
    assert torch.equal(fresh.eval()(*x), trained.eval()(*x))
    fresh.train(), trained.train()
    for a, b in zip(_outputs(fresh, x, 4), _outputs(trained, x, 4)):
        assert torch.equal(a, b)


def test_without_rng_the_seed_follows_torch_manual_seed():
    est = rk.attention.RFA(rk.features.Positive(16))
    torch.manual_seed(SEED)
    a = Attention(est)
    torch.manual_seed(SEED)
    b = Attention(est)
    assert int(a.root_seed) == int(b.root_seed)
    assert int(Attention(est).root_seed) != int(a.root_seed)


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_self_attention_in_sequential_equals_multihead_sdpa_with_its_weights(causal):
    torch.manual_seed(SEED)
    dim, heads, N = 12, 3, 6
    block = SelfAttention(dim, heads, rk.attention.softmax, causal=causal).double()
    model = torch.nn.Sequential(block, torch.nn.LayerNorm(dim, dtype=torch.float64))
    x = torch.randn(4, N, dim, dtype=torch.float64)
    q, k, v = (t.reshape(4, N, heads, dim // heads).transpose(1, 2) for t in block.to_qkv(x).chunk(3, dim=-1))
    att = F.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2).reshape(4, N, dim)
    want = model[1](block.to_out(att))
    assert float((model(x) - want).abs().max().detach()) <= 1e-12


def test_self_attention_mask_is_a_key_padding_mask():
    torch.manual_seed(SEED)
    block = SelfAttention(8, 2, rk.attention.softmax).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    keep = torch.tensor([[True, True, True, False, False], [True] * 5])
    got = block(x, mask=keep)
    alone = block(x[:1, :3])  # batch 0's queries and kept keys alone
    assert float((got[:1, :3] - alone).abs().max().detach()) <= 1e-12


def _train(estimator, steps=50):
    """Adam on a toy task: every token's target is the mean of its sequence (uniform attention
    over the values solves it exactly). Returns the first and the last loss."""
    torch.manual_seed(SEED)
    model = SelfAttention(8, 2, estimator, rng=0).double()
    x = torch.randn(16, 8, 8, dtype=torch.float64)
    y = x.mean(dim=-2, keepdim=True).expand_as(x)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses[0], losses[-1]


@pytest.mark.parametrize(
    "estimator",
    [
        rk.attention.softmax,
        rk.attention.RFA(rk.features.Trig(32)),
        rk.attention.RFA(rk.features.Positive(32)),
    ],
    ids=["exact", "rfa-trig", "rfa-positive"],
)
def test_a_small_model_trains(estimator):
    first, last = _train(estimator)
    assert np.isfinite(last) and last < 0.5 * first, (first, last)


def test_import_rfkit_nn_without_torch_names_the_extra():
    code = (
        "import sys\nsys.modules['torch'] = None\n"
        "from rfkit.exceptions import BackendNotInstalledError\n"
        "try:\n    import rfkit.nn\nexcept BackendNotInstalledError as e:\n    print('refused:', e)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert out.startswith("refused:") and 'pip install "rfkit[torch]"' in out
