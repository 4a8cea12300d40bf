"""The anisotropic offset-mean pairs of Blackwelder (2024), Sec. 4: the paper's regime (unchanged) and the
regime of its companion notebook (Wishart covariances)."""

from __future__ import annotations

import numpy as np
import pytest

import rfkit as rk
from rfkit.exceptions import InvalidParameterError


def test_writeup_regime_is_the_default_and_its_parameters():
    a = rk.data.hard_qk(40, 6, rng=3)
    b = rk.data.hard_qk(
        40,
        6,
        regime="writeup",
        mean_scale=50.0,
        var_shape_q=0.02,
        var_shape_k=0.01,
        norm_q=5.0,
        norm_k=0.5,
        rng=3,
    )
    np.testing.assert_array_equal(a.q, b.q)
    np.testing.assert_array_equal(a.k, b.k)
    np.testing.assert_allclose(np.mean(np.linalg.norm(a.q, axis=1)), 5.0)
    np.testing.assert_allclose(np.mean(np.linalg.norm(a.k, axis=1)), 0.5)
    assert np.count_nonzero(a.cov_q - np.diag(np.diag(a.cov_q))) == 0  # diagonal


def test_notebook_regime_moments():
    """Sample moments of a large draw match the returned (full) covariance within 5 standard errors."""
    n, d = 20000, 5
    s = rk.data.hard_qk(n, d, regime="notebook", var_shape_q=2.0, var_shape_k=2.0, rng=4)
    for X, mu, C in ((s.q, s.mean_q, s.cov_q), (s.k, s.mean_k, s.cov_k)):
        assert np.all(np.abs(mu) < 1.0)  # Laplace(0, 0.01)
        np.testing.assert_allclose(C, C.T)
        assert np.count_nonzero(np.abs(C - np.diag(np.diag(C))) > 1e-12) > 0  # full, not diagonal
        se_mean = np.sqrt(np.diag(C) / n)
        assert np.all(np.abs(X.mean(0) - mu) < 5 * se_mean)
        S = np.cov(X, rowvar=False)
        se_cov = np.sqrt((np.outer(np.diag(C), np.diag(C)) + C**2) / n)
        assert np.all(np.abs(S - C) < 5 * se_cov)


def test_notebook_wishart_scale():
    """E[Sigma] = 0.05 d diag(v): averaged over many sets, diag(Sigma) / (0.05 d) estimates E[v] = shape."""
    d, sets = 8, 4000
    s = rk.data.hard_qk(2, d, regime="notebook", var_shape_q=0.5, n_sets=sets, rng=5)
    diag = np.diagonal(s.cov_q, axis1=1, axis2=2) / (0.05 * d)  # E = E[v] = 0.5
    z = (diag.mean() - 0.5) / (diag.std(ddof=1) / np.sqrt(diag.size))
    assert abs(z) < 5


def test_regime_overrides_and_errors():
    s = rk.data.hard_qk(30, 4, regime="notebook", norm_q=2.0, rng=6)
    np.testing.assert_allclose(np.mean(np.linalg.norm(s.q, axis=1)), 2.0)
    with pytest.raises(InvalidParameterError, match="`regime` parameter of hard_qk"):
        rk.data.hard_qk(10, 4, regime="paper")
    assert set(rk.data.HARD_REGIMES) == {"writeup", "notebook"}


def test_benchmark_set_anisotropic_is_hard_qk_and_keeps_its_former_name():
    """The benchmark set "anisotropic" is hard_qk's paper regime; its alias "seed004" selects it too."""
    assert "anisotropic" in rk.data.BENCHMARK_SETS and "seed004" not in rk.data.BENCHMARK_SETS
    q, k = rk.data.kernel_benchmark_pairs("anisotropic", 12, 5, rng=7)
    s = rk.data.hard_qk(12, 5, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(q, s.q)
    np.testing.assert_array_equal(k, s.k)
    q_old, k_old = rk.data.kernel_benchmark_pairs("seed004", 12, 5, rng=7)
    np.testing.assert_array_equal(q_old, q)
    np.testing.assert_array_equal(k_old, k)
    with pytest.raises(InvalidParameterError, match="`set` parameter of kernel_benchmark_pairs"):
        rk.data.kernel_benchmark_pairs(["anisotropic"], 4)
