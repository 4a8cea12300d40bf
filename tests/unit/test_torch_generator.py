"""A ``torch.Generator`` as the source of randomness (docs page *Backends and scaling*, section
"Gradients and half precision"): refused where the draws are NumPy's (the default), with a message
saying how to draw on the device; accepted where the draws are made on the backend.
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
        lambda Q, K, V, g: att.SNIS(n_samples=4)(Q, K, V, rng=g),
        lambda Q, K, V, g: rk.features.Positive(8).sample(4, rng=g),
    ],
    ids=["RFA", "SNIS", "sample"],
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
