"""A ``torch.Generator`` as the source of randomness (docs page *Backends and scaling*, section
"Gradients and half precision"): refused where the draws are NumPy's (the default), with a message
saying how to draw on the device; accepted where the draws are made on the backend: the projections,
and the trial streams of the sampled estimators RA, SNIS and LARA on torch inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from backend_marks import needs_torch, torch

import rfkit as rk
from rfkit import attention as att
from rfkit.exceptions import InvalidParameterError
from rfkit.projections import sample_projection_on

pytestmark = needs_torch


def _qkv(n=10, d=4):
    rng = np.random.default_rng(3)
    return tuple(torch.tensor(0.5 * rng.standard_normal((n, d))) for _ in range(3))


@pytest.mark.parametrize(
    "call",
    [
        lambda Q, K, V, g: att.RFA(rk.features.Positive(8))(Q, K, V, rng=g),
        lambda Q, K, V, g: rk.features.Positive(8).sample(4, rng=g),
    ],
    ids=["RFA", "sample"],
)
def test_a_torch_generator_is_refused_where_the_draws_are_numpys(call):
    with pytest.raises(
        InvalidParameterError, match=r"`rng` is a torch.Generator, but these draws are NumPy's.*projection_on"
    ):
        call(*_qkv(), torch.Generator().manual_seed(0))


def test_a_torch_generator_draws_on_the_backend_reproducibly():
    fm = rk.features.Positive(8, projection="orthogonal")
    W1 = fm.projection_on(4, None, torch.Generator().manual_seed(5))
    W2 = fm.projection_on(4, None, torch.Generator().manual_seed(5))
    assert isinstance(W1, torch.Tensor) and tuple(W1.shape) == (8, 4)
    torch.testing.assert_close(W1, W2, rtol=0, atol=0)  # same seed, same directions
    g = torch.Generator().manual_seed(5)
    first, second = (sample_projection_on("iid", 8, 4, g) for _ in range(2))
    assert not torch.equal(first, second)  # the user's generator advances
    Q, K, V = _qkv()
    draw = fm.from_projection(4, None, W1)
    out = att.RFA(fm)(Q, K, V, draw=draw).output
    assert out.shape == (10, 4) and bool(torch.all(torch.isfinite(out)))


def test_sample_projection_on_names_both_accepted_generators():
    with pytest.raises(InvalidParameterError, match="BackendGenerator or a torch.Generator"):
        sample_projection_on("iid", 8, 4, np.random.default_rng(0))


SAMPLERS = {
    "RA": lambda causal: att.RA(n_samples=4, causal=causal),
    "SNIS": lambda causal: att.SNIS(n_samples=8, causal=causal),
    "LARA": lambda causal: att.LARA(n_proposals=2, samples_per_proposal=3, causal=causal, weights="balance"),
}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_sampled_estimators_draw_their_trial_from_a_torch_generator(name, causal):
    """Same generator state, same numbers; the generator advances; the draws are made on the device."""
    est = SAMPLERS[name](causal)
    Q, K, V = (t.reshape(2, 5, 4) for t in _qkv())
    g = torch.Generator().manual_seed(11)
    first = est(Q, K, V, rng=g).output
    second = est(Q, K, V, rng=g).output
    again = est(Q, K, V, rng=torch.Generator().manual_seed(11)).output
    assert isinstance(first, torch.Tensor) and first.shape == (2, 5, 4)
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    assert not torch.equal(first, second)
    assert bool(torch.all(torch.isfinite(first)))


def test_ra_with_a_torch_generator_is_unbiased():
    """RA is unbiased: the mean of 400 draws from one torch.Generator is within 5 MCSE of exact attention."""
    Q, K, V = _qkv(n=6, d=3)
    g = torch.Generator().manual_seed(2)
    draws = torch.stack([att.RA(n_samples=2)(Q, K, V, rng=g).output for _ in range(400)])
    exact = att.softmax(Q, K, V)
    se = draws.std(dim=0) / 20.0
    assert bool(torch.all((draws.mean(dim=0) - exact).abs() <= 5 * se))


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_a_torch_generator_with_numpy_inputs_is_refused_by_name(name):
    Q, K, V = (t.numpy() for t in _qkv())
    with pytest.raises(
        InvalidParameterError, match=r"`rng` parameter of (RA|SNIS|LARA) is a torch.Generator"
    ):
        SAMPLERS[name](False)(Q, K, V, rng=torch.Generator().manual_seed(0))
