"""Gradients through rfkit's estimators on PyTorch tensors (docs page *Backends and scaling*,
section "Gradients and half precision").

Every differentiable estimator must let autograd through: exact softmax attention, RFA with
every registered feature map (bidirectional and causal), Hybrid (window, sinks, LSH buckets
and a random-feature remainder; top-k keys by each content scorer with every remainder, the
sampled ones for a fixed draw), a draw's ``kernel``/``queries``/``keys``, SNIS and LARA
(their samples are a fixed noise plus data means: a reparameterisation), and RA in ``V``. A
fixed ``rng`` makes each call a deterministic function of its inputs, so
``torch.autograd.gradcheck`` (float64, small sizes) compares the analytic gradients with
finite differences. Data-dependent maps are fitted once beforehand: the gradient is taken
with the fitted parameters held fixed (a fit inside the call runs on the host and is
likewise a constant for autograd).
"""

from __future__ import annotations

import numpy as np
import pytest
from backend_marks import needs_torch, torch

import rfkit as rk
from rfkit import attention as att
from rfkit import study as st
from rfkit.exceptions import InvalidParameterError

pytestmark = needs_torch

#: parameters besides the budget that a map needs to be built
_EXTRA = {"Taylor": {"degree": 2}, "Limit": {"n": 2}, "TensorSketch": {"degree": 2}}
MAP_NAMES = list(st.FEATURE_MAPS)


def _inputs(n=5, d=3, dv=2, seed=20261128, scale=0.4):
    rng = np.random.default_rng(seed)
    Q, K = (scale * rng.standard_normal((n, d)) for _ in range(2))
    V = rng.standard_normal((n, dv))
    return tuple(torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (Q, K, V))


def _fitted_map(name, Q, K):
    """The registry's map at a small budget; data-dependent maps fitted once (parameters held fixed)."""
    rec = st.feature_map_record(name)
    params = {**(rec.from_budget(4) if "n_features" in rec.params else {}), **_EXTRA.get(name, {})}
    fm = rec.build(params)
    if rec.capabilities.data_dependent:
        fm = fm.fit(Q.detach().numpy(), K.detach().numpy())
    return fm


def _check(fn, inputs):
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_exact_softmax_attention_passes_gradcheck(causal):
    _check(lambda q, k, v: att.softmax(q, k, v, causal=causal), _inputs())


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("name", MAP_NAMES)
def test_rfa_with_every_registered_map_passes_gradcheck(name, causal):
    Q, K, V = _inputs()
    est = att.RFA(_fitted_map(name, Q, K), causal=causal)
    _check(lambda q, k, v: est(q, k, v, rng=0).output, (Q, K, V))


@pytest.mark.parametrize("name", MAP_NAMES)
def test_draw_kernel_queries_and_keys_pass_gradcheck(name):
    Q, K, _ = _inputs()
    draw = _fitted_map(name, Q, K).sample(3, rng=0)
    _check(lambda x, y: draw.kernel(x, y), (Q, K))

    def features(x, y):
        fq, fk = draw.queries(x), draw.keys(y)
        return fq.values, fq.log_scale, fk.values, fk.log_scale

    _check(features, (Q, K))


def test_rfa_fits_a_data_dependent_map_inside_the_call_and_still_backpropagates():
    """A map fitted inside the call: its parameters are constants for autograd (fitted on the host)."""
    Q, K, V = _inputs()
    att.RFA(rk.features.OPRF(4))(Q, K, V, rng=0).output.sum().backward()
    assert all(t.grad is not None and bool(torch.all(torch.isfinite(t.grad))) for t in (Q, K, V))


HYBRIDS = {
    "window+sinks": dict(window=2, n_global=1),
    "window-causal": dict(window=2, causal=True),
    "lsh": dict(lsh_buckets=2),
    "window+trig": dict(window=1, feature_map=rk.features.Trig(4)),
}


@pytest.mark.parametrize("name", list(HYBRIDS))
def test_hybrid_passes_gradcheck(name):
    """The support (window, sinks, LSH buckets) is piecewise constant in Q, K: gradients given it."""
    kw = {"feature_map": rk.features.Positive(4), **HYBRIDS[name]}
    est = att.Hybrid(**kw)
    _check(lambda q, k, v: est(q, k, v, rng=0).output, _inputs(n=6))


CONTENT_HYBRIDS = {
    f"{scorer}-top2-{remainder}": dict(
        scorer=scorer,
        top_k=2,
        remainder=remainder,
        **({"feature_map": rk.features.Positive(4)} if remainder == "features" else {}),
        **({} if remainder in ("features", "none") else {"n_samples": 2}),
        **({"block_size": 2} if scorer == "quest" else {}),
    )
    for scorer in ("oracle", "proxy", "quest", "lsh")
    for remainder in ("features", "none", "uniform", "stratified", "importance")
}


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("name", list(CONTENT_HYBRIDS))
def test_hybrid_with_a_content_scorer_and_any_remainder_passes_gradcheck(name, causal):
    """Top-k by content and the sampled keys are piecewise constant in Q, K: for a fixed draw the
    gradient flows through the kept keys' logits and values (and, for "importance", the proposal
    probabilities that weight the sampled keys)."""
    est = att.Hybrid(**CONTENT_HYBRIDS[name], causal=causal)
    _check(lambda q, k, v: est(q, k, v, rng=0).output, _inputs(n=8))


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_hybrid_with_an_epsilon_delta_budget_passes_gradcheck(causal):
    """The per-query counts are piecewise constant in Q, K: for a fixed draw the gradient is the one
    given those counts (through the kept keys' logits and values, as the fixed-count remainder)."""
    est = att.Hybrid(window=1, remainder="uniform", epsilon=0.2, delta=0.1, base_samples=3, causal=causal)
    inputs = _inputs(n=8)
    _check(lambda q, k, v: est(q, k, v, rng=0).output, inputs)
    ref = est(*(t.detach().numpy() for t in inputs), rng=0)
    got = est(*inputs, rng=0)
    np.testing.assert_array_equal(got.cost.exact_logits.detach().numpy(), ref.cost.exact_logits)


SAMPLED = {
    "snis": att.SNIS(n_samples=4),
    "snis-chunk-mean": att.SNIS("chunk-mean", n_samples=4, n_chunks=2),
    "snis-causal": att.SNIS(n_samples=4, causal=True),
    "lara": att.LARA(n_proposals=2, samples_per_proposal=2),
    "lara-balance-causal": att.LARA(n_proposals=2, weights="balance", causal=True),
}


@pytest.mark.parametrize("name", list(SAMPLED))
def test_snis_and_lara_pass_gradcheck_given_their_noise(name):
    est = SAMPLED[name]
    _check(lambda q, k, v: est(q, k, v, rng=0).output, _inputs(n=6))


def test_ra_is_differentiable_in_v_and_refuses_gradients_in_q_and_k():
    Q, K, V = _inputs()
    q, k = Q.detach(), K.detach()
    _check(lambda v: att.RA(n_samples=3)(q, k, v, rng=0).output, (V,))
    with pytest.raises(
        InvalidParameterError, match=r"RA does not support gradients with respect to `Q` or `K`"
    ):
        att.RA(n_samples=3)(Q, K, V, rng=0)
    with torch.no_grad():  # no graph recorded: nothing to refuse
        assert att.RA(n_samples=3)(Q, K, V, rng=0).output.shape == (5, 2)


def test_inference_keeps_the_in_place_path_and_the_same_numbers():
    """Under autograd the shims compute out of place; the numbers equal the in-place path's."""
    Q, K, V = _inputs(n=40, d=6, dv=3)
    est = att.RFA(rk.features.Positive(16, projection="orthogonal"))
    with_grad = est(Q, K, V, rng=1).output
    with torch.no_grad():
        without = est(Q, K, V, rng=1).output
    assert not without.requires_grad and with_grad.requires_grad
    torch.testing.assert_close(with_grad.detach(), without, rtol=1e-13, atol=1e-13)
    bk = rk._backend.get_backend(("Q", Q))
    assert not bk.inplace_ok and rk._backend.get_backend(("Q", Q.detach())).inplace_ok
    with torch.no_grad():
        assert rk._backend.get_backend(("Q", Q)).inplace_ok
