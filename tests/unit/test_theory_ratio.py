"""Ratio-estimator helpers (docs page *Theory*, section 3): delta method, exact identity, RA MSE, propagation bound."""

from __future__ import annotations

import numpy as np
import pytest

import rfkit.theory as th
from rfkit.exceptions import InvalidParameterError, ShapeError


def test_delta_method_scalar_and_vector_values():
    rng = np.random.default_rng(0)
    q, K, v = 0.35 * rng.normal(size=4), 0.35 * rng.normal(size=(8, 4)), rng.normal(size=8)
    res = th.rfa_delta_method(q, K, v)
    e = np.exp(K @ q)
    assert res.attention[0] == pytest.approx(e @ v / e.sum(), rel=1e-14)
    vec = th.rfa_delta_method(q, K, np.stack([v, 2 * v], 1))
    assert vec.bias_coef[1] == pytest.approx(2 * res.bias_coef[0], rel=1e-12)
    assert vec.var_coef[1] == pytest.approx(4 * res.var_coef[0], rel=1e-12)
    np.testing.assert_allclose(res.bias(np.array([8, 32])), res.bias_coef[None] / np.array([[8], [32]]))
    assert res.variance(16)[0] == pytest.approx(res.var_coef[0] / 16)
    assert res.moment_ratio >= 1.0  # E[X^2] >= E[X]^2
    assert res.is_asymptotic(1000) and not res.is_asymptotic(2)
    # constant values: the ratio estimator is exact, bias and variance vanish
    const = th.rfa_delta_method(q, K, np.full(8, 3.0))
    assert abs(const.bias_coef[0]) < 1e-12 and abs(const.var_coef[0]) < 1e-12


def test_delta_method_reference_values():
    """Reference values computed once with an independent script (d=4, M=8, S=32): bias pred 7.3277e-4,
    var pred 7.7096e-4."""
    rng = np.random.default_rng(0)
    d, M, S = 4, 8, 32
    q, K, v = 0.35 * rng.normal(size=d), 0.35 * rng.normal(size=(M, d)), rng.normal(size=M)
    res = th.rfa_delta_method(q, K, v)
    assert res.bias(S)[0] == pytest.approx(0.0007327678130580819, rel=1e-10)
    assert res.variance(S)[0] == pytest.approx(0.0007709649760888895, rel=1e-10)


def test_ratio_bias_identity_exact_on_finite_population():
    rng = np.random.default_rng(1)
    Xb = rng.uniform(0.5, 1.5, size=1000)
    R = 2.0 / Xb
    got = th.ratio_bias_identity(R, Xb, float(Xb.mean()))
    assert got == pytest.approx(-np.cov(R, Xb)[0, 1] / Xb.mean(), rel=1e-12)
    two = th.ratio_bias_identity(np.stack([R, 3 * R], 1), Xb, float(Xb.mean()))
    assert two.shape == (2,) and two[1] == pytest.approx(3 * two[0])


def test_ra_mse_and_attention_bound():
    np.testing.assert_allclose(th.ra_mse(np.array([0.15, 0.3]), 4), [0.0375, 0.075])
    assert th.attention_error_bound(0.1, 2.0) == pytest.approx(2 * 0.1 / 0.9 * 2.0)
    assert th.attention_error_bound(0.0) == 0.0


def test_bad_inputs():
    with pytest.raises(InvalidParameterError, match="eps"):
        th.attention_error_bound(1.0)
    with pytest.raises(InvalidParameterError, match="eps"):
        th.attention_error_bound(-0.1)
    with pytest.raises(InvalidParameterError, match="v_max"):
        th.attention_error_bound(0.1, -1.0)
    with pytest.raises(InvalidParameterError, match="n_samples"):
        th.ra_mse(0.1, 0)
    with pytest.raises(InvalidParameterError, match="mu_X"):
        th.ratio_bias_identity(np.ones(3), np.ones(3), 0.0)
    with pytest.raises(ShapeError, match="replicates"):
        th.ratio_bias_identity(np.ones(3), np.ones(4), 1.0)
    with pytest.raises(ShapeError, match="V must be"):
        th.rfa_delta_method(np.zeros(2), np.zeros((3, 2)), np.zeros(4))
    with pytest.raises(ShapeError, match="q \\(d,\\)"):
        th.rfa_delta_method(np.zeros(3), np.zeros((3, 2)), np.zeros(3))
