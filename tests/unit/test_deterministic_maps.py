"""Taylor and limit maps: exact truncated kernels, dimensions, convergence, reported signs."""

from __future__ import annotations

from math import comb, factorial

import numpy as np
import pytest

import rfkit as rk
from rfkit.exceptions import NumericalOverflowError


def _taylor(t, n):
    return sum(t**j / factorial(j) for j in range(n + 1))


@pytest.mark.parametrize("form", ["symmetric", "full"])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("d", [1, 3, 5])
def test_taylor_features_equal_truncated_kernel(form, n, d, rng):
    X, Y = 0.8 * rng.normal(size=(2, 6, d))
    X[0, 0] = 0.0  # zero coordinates are handled exactly
    draw = rk.features.Taylor(n, form=form).sample(d)
    t = X @ Y.T
    np.testing.assert_allclose(draw.kernel(X, Y), _taylor(t, n), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        rk.features.Taylor(n).exact_kernel(X, Y), _taylor(t, n), rtol=1e-12, atol=1e-14
    )


@pytest.mark.parametrize("form", ["symmetric", "full"])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("d", [1, 3, 4])
def test_limit_features_equal_truncated_kernel(form, n, d, rng):
    X, Y = 0.8 * rng.normal(size=(2, 6, d))
    draw = rk.features.Limit(n, form=form).sample(d)
    t = X @ Y.T
    np.testing.assert_allclose(draw.kernel(X, Y), (1 + t / n) ** n, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        rk.features.Limit(n).exact_kernel(X, Y), (1 + t / n) ** n, rtol=1e-12, atol=1e-14
    )


@pytest.mark.parametrize("d, n", [(3, 1), (3, 2), (3, 3), (3, 4), (64, 2)])
def test_dimensions(d, n):
    assert rk.features.Taylor(n).feature_dim(d) == comb(d + n, n)
    assert rk.features.Taylor(n, form="full").feature_dim(d) == sum(d**j for j in range(n + 1))
    assert rk.features.Limit(n).feature_dim(d) == comb(d + n, n)
    assert rk.features.Limit(n, form="full").feature_dim(d) == (d + 1) ** n
    if d <= 4:
        assert rk.features.Taylor(n, form="full").sample(d).queries(np.ones((1, d))).n_columns == sum(
            d**j for j in range(n + 1)
        )


def test_theory_md_dimension_example():
    assert rk.features.Taylor(2, form="full").feature_dim(64) == 4161
    assert rk.features.Limit(2, form="full").feature_dim(64) == 4225
    assert rk.features.Taylor(2).feature_dim(64) == rk.features.Limit(2).feature_dim(64) == 2145


def test_converge_to_exp_as_degree_grows(rng):
    X, Y = 0.5 * rng.normal(size=(2, 8, 4))
    exact = np.exp(X @ Y.T)
    err_t = [np.max(np.abs(rk.features.Taylor(n).sample(4).kernel(X, Y) / exact - 1)) for n in range(1, 9)]
    err_l = [np.max(np.abs(rk.features.Limit(n).sample(4).kernel(X, Y) / exact - 1)) for n in range(1, 9)]
    assert all(b < a for a, b in zip(err_t, err_t[1:]))
    assert all(b < a for a, b in zip(err_l, err_l[1:]))
    t = X @ Y.T
    for n in (4, 8):  # Lagrange remainder bound (docs page *Theory*, section 2)
        rel = np.abs(rk.features.Taylor(n).sample(4).kernel(X, Y) / exact - 1)
        assert np.all(rel <= np.abs(t) ** (n + 1) / factorial(n + 1) * np.exp(np.maximum(-t, 0)) + 1e-12)


@pytest.mark.parametrize("n, root", [(1, -1.0), (3, -1.5961), (5, -2.1806), (7, -2.7590)])
def test_odd_taylor_sign_change_reported(n, root):
    fm = rk.features.Taylor(n)
    assert fm.is_positive is False
    draw = fm.sample(1)
    t = np.array([[root - 0.05], [root + 0.05]])
    K = draw.kernel(t, np.ones((1, 1)))
    assert K[0, 0] < 0 < K[1, 0]
    sign, _ = draw.slog_kernel(t, np.ones((1, 1)))
    assert sign[0, 0] == -1
    assert np.isnan(draw.log_kernel(t, np.ones((1, 1)))[0, 0])


@pytest.mark.parametrize("n", [2, 4, 6])
def test_even_taylor_positive_everywhere(n):
    fm = rk.features.Taylor(n)
    assert fm.is_positive
    t = np.linspace(-20, 5, 200)[:, None]
    assert np.all(fm.sample(1).kernel(t, np.ones((1, 1))) > 0)


def test_limit_negative_iff_odd_and_below_minus_n():
    t = np.array([[-3.5], [-2.5]])
    K3 = rk.features.Limit(3).sample(1).kernel(t, np.ones((1, 1)))
    assert K3[0, 0] < 0 < K3[1, 0]
    K2 = rk.features.Limit(2).sample(1).kernel(np.array([[-3.0]]), np.ones((1, 1)))
    assert K2[0, 0] > 0


def test_exact_kernel_log_space_and_overflow():
    X = np.full((1, 4), 30.0)
    fm = rk.features.Taylor(200)
    sign, la = fm.slog_exact_kernel(X, X)  # t = 3600: T_200(3600) ~ 3600^200/200! overflows
    assert sign[0, 0] == 1 and np.isfinite(la[0, 0])
    with pytest.raises(NumericalOverflowError, match="slog_exact_kernel"):
        fm.exact_kernel(X, X)
