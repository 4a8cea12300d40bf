"""Distributional claims of every projection kind."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from rfkit.projections import PROJECTIONS, block_sizes, sample_projection


@pytest.mark.parametrize("kind", PROJECTIONS)
@pytest.mark.parametrize("m, d", [(3, 5), (5, 5), (13, 5), (8, 16), (40, 6)])
def test_shapes(kind, m, d):
    assert sample_projection(kind, m, d, rng=0).shape == (m, d)
    assert sample_projection(kind, m, d, rng=0, n_draws=3).shape == (3, m, d)
    np.testing.assert_array_equal(sample_projection(kind, m, d, rng=4), sample_projection(kind, m, d, rng=4))


def test_block_sizes():
    assert block_sizes(13, 5) == [5, 5, 3]
    assert block_sizes(10, 5) == [5, 5]
    assert block_sizes(3, 5) == [3]


@pytest.mark.parametrize("kind", ["orthogonal", "orthogonal-fixed"])
def test_orthogonal_inside_blocks_independent_across(kind):
    d, m = 6, 15
    W = sample_projection(kind, m, d, rng=1)
    G = W @ W.T
    for start in range(0, m, d):
        blk = G[start : start + d, start : start + d]
        np.testing.assert_allclose(blk - np.diag(np.diag(blk)), 0.0, atol=1e-12)
    assert abs(G[0, d]) > 1e-6  # rows of different blocks are not orthogonal


def test_orthogonal_fixed_norms():
    W = sample_projection("orthogonal-fixed", 20, 7, rng=2)
    np.testing.assert_allclose(np.linalg.norm(W, axis=1), np.sqrt(7), rtol=1e-13)


@pytest.mark.parametrize("kind", ["orthogonal", "structured"])
def test_chi_norms_ks(kind):
    d = 6
    W = sample_projection(kind, 12, d, rng=20261122, n_draws=2000)
    norms = np.linalg.norm(W, axis=-1).ravel()
    # seed fixed; a KS p-value below 1e-3 would mean the norms are not chi(d)
    assert stats.kstest(norms, stats.chi(d).cdf).pvalue > 1e-3


def test_orthogonal_directions_uniform_haar_sign_fix():
    """Without the sign(diag R) fix NumPy's QR gives a first row with negative first coordinate."""
    d, T = 5, 20000
    W = sample_projection("orthogonal", d, d, rng=77, n_draws=T)
    s = np.sign(W[:, 0, 0])
    assert abs(s.mean()) <= 5 * s.std() / np.sqrt(T)
    # E[w w^T] = I for N(0, I) marginals: check the first row's second moments
    M = np.einsum("ti,tj->ij", W[:, 0], W[:, 0]) / T
    se = np.sqrt(2.0 / T) * 1.5  # Var(w_i^2)=2 for gaussians; loose factor for chi-norm rows
    assert np.all(np.abs(M - np.eye(d)) <= 5 * se)


def test_without_sign_fix_qr_is_not_uniform():
    """Documents the pitfall the Haar fix avoids (docs page *Theory*, section 5: QR without the sign correction)."""
    G = np.random.default_rng(3).standard_normal((2000, 5, 5))
    Q, _ = np.linalg.qr(G)
    assert np.all(Q[:, 0, 0] < 0)


def test_qmc_marginals_gaussian():
    W = sample_projection("qmc", 16, 4, rng=5, n_draws=500)
    for j in range(4):
        assert stats.kstest(W[:, :, j].ravel(), "norm").pvalue > 1e-3


def test_iid_moments():
    W = sample_projection("iid", 50, 3, rng=6, n_draws=200).reshape(-1, 3)
    n = W.shape[0]
    assert np.all(np.abs(W.mean(0)) <= 5 / np.sqrt(n))


@pytest.mark.parametrize("kind", PROJECTIONS)
def test_streams_in_blocks_equal_one_draw_per_stream_for_any_thread_count(kind, monkeypatch):
    """``sample_projection_streams`` takes the streams in blocks spread over threads: draw ``t`` is
    still exactly ``sample_projection`` with stream ``t``, with one thread or two, whatever the
    block size (1 stream, 3 streams, all in one block)."""
    import rfkit as rk
    import rfkit.projections as proj

    m, d = 10, 4
    seeds = np.random.SeedSequence(11).spawn(7)
    one = np.stack([sample_projection(kind, m, d, rng=np.random.default_rng(s)) for s in seeds])
    for per in (1, 3, 7):
        monkeypatch.setattr(proj, "_streams_per_block", lambda kind, m, d, per=per: per)
        for n in (1, 2):
            with rk.threads(n):
                W = proj.sample_projection_streams(kind, m, d, seeds)
            np.testing.assert_array_equal(W, one, err_msg=f"{kind}: {per} streams per block, {n} threads")
