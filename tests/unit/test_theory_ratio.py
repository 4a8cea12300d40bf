"""Ratio-estimator helpers (docs page *Theory*, section 3): delta method, exact identity, RA MSE, propagation bound."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest

import rfkit.theory as th
from rfkit.exceptions import InvalidParameterError, NumericalOverflowError, OutOfDomainWarning, ShapeError


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


# --- large norms, nearly-exact supports, memory, and the domain of the delta method ------------


def _unit_rows(rng, n, d, norm):
    X = rng.normal(size=(n, d))
    return norm * X / np.linalg.norm(X, axis=-1, keepdims=True)


def test_rfa_delta_method_at_large_norms_raises_instead_of_nan():
    """||q|| = ||k|| = 30: the coefficients are about e^2300, beyond float64: a named error, no NaN."""
    rng = np.random.default_rng(0)
    q, K, V = _unit_rows(rng, 1, 16, 30.0)[0], _unit_rows(rng, 12, 16, 30.0), rng.normal(size=(12, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy RuntimeWarning on the way
        with pytest.raises(NumericalOverflowError, match="rfa_delta_method.*beyond the float64 range"):
            th.rfa_delta_method(q, K, V)


def test_rfa_delta_method_is_finite_where_the_huge_key_is_exact():
    """A dominant key with E[X^2] ~ e^1600 computed exactly: the answer is finite (about e^300) and
    the log-space evaluation returns it (the direct one gave inf * 0 = NaN)."""
    rng = np.random.default_rng(1)
    d = 8
    q = _unit_rows(rng, 1, d, 30.0)[0]
    K = 0.3 * rng.normal(size=(6, d))
    K[0] = q * (10.0 / 30.0)  # q.k_0 = 300: p_0 = 1 - e^-300
    V = rng.normal(size=(6, 2))
    ex = np.arange(6) == 0
    res = th.rfa_delta_method(q, K, V, exact=ex)
    # reference, in log space over the remainder only: sum_{j,l in R} p_j p_l (e^{z_j.z_l} - 1) u_j u_l
    s = K @ q
    logp = s - np.logaddexp.reduce(s)
    a = np.exp(logp) @ V
    R = ~ex
    Z = q[None, :] + K[R]
    G = Z @ Z.T  # all near ||q||^2 = 900: log(e^G - 1) = G + log1p(-e^-G)
    lg = logp[R][:, None] + logp[R][None, :] + G + np.log1p(-np.exp(-G))
    U = V[R] - a
    var = np.array([np.sum(np.exp(lg) * np.outer(U[:, c], U[:, c])) for c in range(2)])
    bias = -np.array([np.sum(np.exp(lg) * U[None, :, c]) for c in range(2)])
    assert np.all(np.isfinite(res.var_coef)) and np.all(res.var_coef > 1e100)
    np.testing.assert_allclose(res.var_coef, var, rtol=1e-10)
    np.testing.assert_allclose(res.bias_coef, bias, rtol=1e-10)


def test_hybrid_budget_split_when_the_support_holds_nearly_all_mass():
    """The remainder's mass is e^-402 (its square underflows): no ZeroDivisionError, and the budget
    goes where it helps: the window that makes the prediction (nearly) exact."""
    Q = np.array([[20.0, 0.0], [0.0, 20.0]])
    K = np.array([[0.1, -20.0], [-20.0, 0.1]])
    V = np.array([[1.0], [-1.0]])
    with pytest.warns(OutOfDomainWarning, match=r"w=-1 \(m=8\)"):
        split = th.hybrid_budget_split(Q, K, V, 8, [-1, 0], variant="plain")
    assert split.best_window == 0
    assert split.mse[1] < 1e-300 and split.mse[1] <= split.mse[0]
    assert split.in_domain.tolist() == [False, True]
    # ratio variant: the support's kernel is estimated too (w = 1); its variance is finite in log space:
    # u_S = P_R (mu_S - mu_R) = 2 e^-402, C_SS/Z^2 = p_S^2 (e^{||q + k_S||^2} - 1), ||q + k_S||^2 = 804.01
    dm = th.hybrid_delta_method(Q[0], K, V, exact=np.array([True, False]), variant="ratio")
    u_s = 2.0 * np.exp(K[1] @ Q[0] - np.logaddexp(K[0] @ Q[0], K[1] @ Q[0]))
    z = Q[0] + K[0]
    expected = np.exp(2 * np.log(u_s) + z @ z)  # the cross and remainder terms are below e^-390
    assert dm.var_coef[0] == pytest.approx(expected, rel=1e-6)


def test_rfa_delta_method_memory_is_linear_in_the_number_of_keys():
    """7,000 keys would need a 374 MiB (M, M) matrix; walked in row blocks the peak stays small."""
    rng = np.random.default_rng(2)
    M, d = 4000, 8
    q, K, V = 0.2 * rng.normal(size=d), 0.2 * rng.normal(size=(M, d)), rng.normal(size=(M, 2))
    tracemalloc.start()
    try:
        res = th.rfa_delta_method(q, K, V)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.all(np.isfinite(res.var_coef))
    assert peak < 32 * 2**20, f"peak {peak / 2**20:.1f} MiB"  # the (M, M) float64 matrix alone: 122 MiB


def test_out_of_domain_warning_and_flag():
    """Var(Z_hat)/Z^2 = (moment_ratio - 1)/m for RFA with iid features: out of domain above 0.1."""
    rng = np.random.default_rng(3)
    q, K, V = 0.8 * rng.normal(size=8), 0.8 * rng.normal(size=(20, 8)), rng.normal(size=(20, 2))
    dm = th.rfa_delta_method(q, K, V)
    c1 = dm.moment_ratio - 1.0
    assert c1 > 1.0 and dm.norm_var_coef == pytest.approx(c1, rel=1e-10)
    small, large = int(c1 / 0.1 / 4), int(np.ceil(c1 / 0.1)) + 1
    with pytest.warns(OutOfDomainWarning, match=f"m={small} features is outside its domain"):
        out = th.rfa_delta_method(q, K, V, n_features=small)
    assert out.in_domain is False and out.n_features == small
    assert "in_domain=False" in repr(out)
    with pytest.warns(OutOfDomainWarning):
        dm.mse(small)
    inside = th.rfa_delta_method(q, K, V, n_features=large)  # no warning (warnings are errors here)
    assert inside.in_domain is True and "in_domain=True" in repr(inside)
    np.testing.assert_allclose(inside.mse(large), dm.var_coef / large)
    assert dm.within_domain(np.array([small, large])).tolist() == [False, True]
