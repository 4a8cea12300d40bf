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


@pytest.mark.parametrize("kind", ["orthogonal", "orthogonal-fixed"])
def test_few_orthogonal_rows_in_a_large_dim_are_fast(kind):
    """d = 4096, m = 8: one QR of the d x m Gaussian block, O(d m^2), not a d x d QR (over a
    minute on a 2-core CI-class machine, 2026-11-28). Best of three, so a busy machine's hiccup
    does not count."""
    import time

    best = np.inf
    for seed in range(3):
        t0 = time.perf_counter()
        W = sample_projection(kind, 8, 4096, rng=seed)
        best = min(best, time.perf_counter() - t0)
    assert W.shape == (8, 4096)
    assert best < 0.25, f"{kind}: {best:.3f} s for 8 directions in d = 4096"


def test_small_dims_keep_the_full_block_draw_bit_for_bit():
    """Partial blocks with d <= 64 (every built-in study) still take the first rows of a d x d Haar
    matrix from the same random numbers: existing results stay bit for bit."""
    m, d, seed = 20, 16, 5  # one full block and a partial block of 4 rows
    gen = np.random.default_rng(seed)
    G = gen.standard_normal((1, 2, d, d))
    norms = np.sqrt(gen.chisquare(d, size=(1, m)))
    Q, R = np.linalg.qr(G)
    s = np.sign(np.diagonal(R, axis1=-2, axis2=-1))
    rows = np.swapaxes(Q * s[..., None, :], -1, -2).reshape(1, 2 * d, d)[:, :m]
    np.testing.assert_array_equal(
        sample_projection("orthogonal", m, d, rng=seed), (rows * norms[..., None])[0]
    )


LARGE_D = 96  # above the dims whose partial blocks keep the d x d draw: the reduced QR's path


@pytest.mark.parametrize("m", [5, LARGE_D + 5])
def test_reduced_partial_block_rows_are_orthogonal_with_chi_norms(m):
    d, T = LARGE_D, 400
    W = sample_projection("orthogonal", m, d, rng=20261128, n_draws=T)
    part = W[:, (m // d) * d :]  # the partial block's rows
    norms = np.linalg.norm(part, axis=-1)
    U = part / norms[..., None]
    np.testing.assert_allclose(
        U @ np.swapaxes(U, -1, -2), np.broadcast_to(np.eye(m % d), (T, m % d, m % d)), atol=1e-12
    )
    # seed fixed; a KS p-value below 1e-3 would mean the norms are not chi(d)
    assert stats.kstest(norms.ravel(), stats.chi(d).cdf).pvalue > 1e-3
    if m > d:  # the full block and the partial block are independent: not orthogonal to each other
        assert np.abs(W[:, 0] @ W[:, d].T).max() > 1e-6


def test_reduced_partial_block_directions_are_uniform():
    """E[w w^T] = I entry by entry (z <= 5 from each entry's MCSE over independent draws), and the
    squared coordinate of a unit direction along a fixed axis is Beta(1/2, (d-1)/2), as for a
    uniform direction on the sphere (a QR without the sign fix fails both)."""
    d, m, T = LARGE_D, 6, 3000
    W = sample_projection("orthogonal", m, d, rng=11, n_draws=T)
    per_draw = np.einsum("tri,trj->tij", W, W) / m  # one independent estimate of E[w w^T] per draw
    mean = per_draw.mean(axis=0)
    mcse = per_draw.std(axis=0, ddof=1) / np.sqrt(T)
    z = (mean - np.eye(d)) / mcse
    assert np.abs(z).max() <= 5.0, f"max |z| = {np.abs(z).max():.2f}"
    v = np.random.default_rng(0).standard_normal(d)
    v /= np.linalg.norm(v)
    for r in (0, m - 1):  # one row per draw: independent samples
        u = W[:, r] / np.linalg.norm(W[:, r], axis=-1, keepdims=True)
        for c in (u[:, 0] ** 2, (u @ v) ** 2):
            assert stats.kstest(c, stats.beta(0.5, (d - 1) / 2).cdf).pvalue > 1e-3
    s = np.sign(W[:, 0, 0])
    assert abs(s.mean()) <= 5 / np.sqrt(T)


def test_reduced_partial_block_kernel_estimate_is_unbiased():
    """Positive features with orthogonal directions, m < d = 96: the kernel estimate's mean over
    independent draws is exp(x.y) within 5 MCSE."""
    import rfkit as rk

    d, m, T = LARGE_D, 7, 4000
    rng = np.random.default_rng(3)
    X = rng.standard_normal((4, d))
    X *= 0.6 / np.linalg.norm(X, axis=1, keepdims=True)
    Y = rng.standard_normal((4, d))
    Y *= 0.6 / np.linalg.norm(Y, axis=1, keepdims=True)
    draw = rk.features.Positive(m, projection="orthogonal").sample(dim=d, rng=2026, n_draws=T)
    est = draw.pairwise(X, Y)  # (T, 4)
    truth = np.exp(np.sum(X * Y, axis=1))
    z = (est.mean(axis=0) - truth) / (est.std(axis=0, ddof=1) / np.sqrt(T))
    assert np.all(np.abs(z) <= 5.0), z
