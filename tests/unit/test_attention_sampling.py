"""RA, SNIS and LARA: exact identities, shapes, diagnostics, stability, rng, bad input."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import logsumexp

import rfkit as rk
from rfkit import attention as att
from rfkit.exceptions import InvalidParameterError, NonPositiveNormalizerWarning, ShapeError


def data(seed=20240601, shape=(2, 3), n=16, d=5, dv=4, scale=0.4, M=None):
    rng = np.random.default_rng(seed)
    M = n if M is None else M
    Q = scale * rng.standard_normal(shape + (n, d))
    K = scale * rng.standard_normal(shape + (M, d))
    V = rng.standard_normal(shape + (M, dv))
    return Q, K, V


def large_logits(dtype=np.float64, n=64, d=32, seed=4242):
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((2, n, d))
    U /= np.linalg.norm(U, axis=-1, keepdims=True)
    Q = np.sqrt(50.0) * U[0]
    K = np.sqrt(50.0) * (0.8 * U[0] + 0.6 * U[1])
    K[::5] = np.sqrt(50.0) * U[0][::5]
    V = rng.standard_normal((n, 3))
    assert (Q @ K.T).max() > 49
    return Q.astype(dtype), K.astype(dtype), V.astype(dtype)


# ----------------------------------------------------------------------------- identities
@pytest.mark.parametrize("projection", ["iid", "orthogonal"])
def test_snis_standard_equals_positive_rfa_with_same_omega(projection):
    Q, K, V = data()
    S = 32
    rfa = att.RFA(rk.features.Positive(S, projection=projection))(Q, K, V, rng=777)
    snis = att.SNIS("standard", n_samples=S, projection=projection)(Q, K, V, rng=777)
    np.testing.assert_array_equal(snis.omega, rfa.draw.projection)  # same omega
    np.testing.assert_allclose(snis.output, rfa.output, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(snis.log_normalizer, rfa.log_normalizer, rtol=1e-12, atol=1e-12)


def test_snis_standard_equals_rfa_per_head():
    Q, K, V = data()
    rfa = att.RFA(rk.features.Positive(16), shared_across_heads=False)(Q, K, V, rng=3)
    snis = att.SNIS(n_samples=16, shared_across_heads=False)(Q, K, V, rng=3)
    np.testing.assert_allclose(snis.output, rfa.output, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("C", [1, 4, 16])
def test_lara_standard_proposals_balance_equals_rfa(C):
    Q, K, V = data()
    lara = att.LARA(weights="balance", proposal_means=np.zeros((C, 5)))(Q, K, V, rng=2024)
    rfa = att.RFA(rk.features.Positive(C))(Q, K, V, rng=2024)
    np.testing.assert_array_equal(lara.omega[0, 0], rfa.draw.projection)
    np.testing.assert_allclose(lara.output, rfa.output, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lara.log_normalizer, rfa.log_normalizer, rtol=1e-12, atol=1e-12)
    assert lara.n_floored is None


def test_snis_chunk_mean_equals_lara_balance():
    # SNIS with the chunk-mean mixture, one sample per component, is LARA with balance weights
    Q, K, V = data()
    snis = att.SNIS("chunk-mean", n_samples=6, n_chunks=6)(Q, K, V, rng=5)
    lara = att.LARA(n_proposals=6, weights="balance")(Q, K, V, rng=5)
    np.testing.assert_allclose(lara.proposal_means, snis.proposal_means, rtol=1e-14)
    np.testing.assert_array_equal(lara.omega, snis.omega)
    np.testing.assert_allclose(lara.output, snis.output, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lara.log_normalizer, snis.log_normalizer, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lara.ess, snis.ess, rtol=1e-10)


def test_lara_matches_direct_formula():
    """LARA's weights alpha_nc (Zheng, Wang & Kong (ICML 2022); docs page *Attention*), recomputed densely."""
    rng = np.random.default_rng(77)
    n, d, C, k = 12, 3, 3, 2
    Q, K = 0.5 * rng.standard_normal((2, n, d))
    V = rng.standard_normal((n, 2))
    for weights in ("optimal", "balance"):
        res = att.LARA(n_proposals=C, weights=weights, samples_per_proposal=k, alpha_floor=None)(
            Q, K, V, rng=11
        )
        om = res.omega  # (C*k, d)
        qt = Q.reshape(C, -1, d).mean(1)
        mu = qt + K.reshape(C, -1, d).mean(1)
        np.testing.assert_allclose(res.proposal_means, mu, rtol=1e-14)
        comp = np.repeat(np.arange(C), k)
        lq = -0.5 * ((om[:, None, :] - mu[None]) ** 2).sum(-1) - d / 2 * np.log(2 * np.pi)  # log q_c'(w)
        own = lq[np.arange(C * k), comp]
        bh = np.exp(own - logsumexp(lq, axis=1))
        r = np.exp(Q @ qt.T)
        r /= r.sum(0)  # softmax over the query index n
        alpha = bh[None, :] + (r - r.mean(1, keepdims=True))[:, comp] if weights == "optimal" else bh[None, :]
        logN0 = -0.5 * (om**2).sum(-1) - d / 2 * np.log(2 * np.pi)
        ptilde = np.exp(logN0[None, :] + Q @ om.T - 0.5 * (Q**2).sum(-1)[:, None]) * np.exp(
            om @ K.T - 0.5 * (K**2).sum(-1)
        ).sum(-1)
        w = alpha * ptilde / np.exp(own)[None, :] / k
        L = om @ K.T - 0.5 * (K**2).sum(-1)
        f = np.exp(L - L.max(1, keepdims=True))
        f = (f / f.sum(1, keepdims=True)) @ V
        np.testing.assert_allclose(res.normalizer, w.sum(1), rtol=1e-11)
        np.testing.assert_allclose(res.numerator, w @ f, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(res.output, (w @ f) / w.sum(1)[:, None], rtol=1e-10)


def test_snis_matches_direct_formula_mixture():
    rng = np.random.default_rng(78)
    n, d, S = 10, 3, 7
    Q, K = 0.5 * rng.standard_normal((2, n, d))
    V = rng.standard_normal((n, 2))
    mu = rng.standard_normal((3, d))
    res = att.SNIS(proposal=mu, n_samples=S)(Q, K, V, rng=1)
    om = res.omega
    comp = np.arange(S) % 3
    lam = np.bincount(comp, minlength=3) / S
    qmix = (lam * np.exp(-0.5 * ((om[:, None] - mu[None]) ** 2).sum(-1))).sum(1)
    w = np.exp(-0.5 * (om**2).sum(-1))[None] / qmix[None] / S
    w = w * np.exp(Q @ om.T - 0.5 * (Q**2).sum(-1)[:, None]) * np.exp(om @ K.T - 0.5 * (K**2).sum(-1)).sum(-1)
    np.testing.assert_allclose(res.normalizer, w.sum(1), rtol=1e-11)
    ess = w.sum(1) ** 2 / (w**2).sum(1)
    np.testing.assert_allclose(res.ess, ess, rtol=1e-10)


# ----------------------------------------------------------------------------- RA
def test_ra_shapes_mcse_and_trivial_cases():
    Q, K, V = data()
    res = att.RA(n_samples=4)(Q, K, V, rng=0)
    assert res.output.shape == res.mcse.shape == (2, 3, 16, 4)
    assert np.all(res.mcse >= 0)
    one = att.RA(n_samples=1)(Q, K, V, rng=0)
    assert np.all(np.isnan(one.mcse))
    # a single key: attention is that value, exactly
    r1 = att.RA(n_samples=3)(Q, K[..., :1, :], V[..., :1, :], rng=0)
    np.testing.assert_allclose(r1.output, np.broadcast_to(V[..., :1, :], r1.output.shape), rtol=1e-14)
    # causal: first row sees only the first key
    rc = att.RA(n_samples=3, causal=True)(Q, K, V, rng=0)
    np.testing.assert_allclose(rc.output[..., 0, :], V[..., 0, :], rtol=1e-14)
    with pytest.raises(AttributeError, match="does not estimate a normaliser"):
        _ = res.normalizer


def test_ra_outputs_are_convex_combinations():
    Q, K, V = data(scale=1.0)
    res = att.RA(n_samples=2)(Q, K, V, rng=0)
    assert np.all(res.output <= V.max(-2, keepdims=True) + 1e-12)
    assert np.all(res.output >= V.min(-2, keepdims=True) - 1e-12)


def test_ra_chunking_same_distribution_and_reproducible():
    Q, K, V = data()
    a = att.RA(n_samples=5)(Q, K, V, rng=1).output
    b = att.RA(n_samples=5)(Q, K, V, rng=1).output
    np.testing.assert_array_equal(a, b)
    gen = np.random.default_rng(1)
    assert not np.allclose(
        att.RA(n_samples=5)(Q, K, V, rng=gen).output, att.RA(n_samples=5)(Q, K, V, rng=gen).output
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_ra_equals_a_dense_reference_with_the_same_draws(causal, masked):
    """RA's output and MCSE, recomputed query by query from the same uniforms and normals with the
    formulas of its docstring: pi_n, the inverse-CDF component, omega = q + k_m* + B z, f_n(omega),
    with B the first r = min(#keys, d) columns of the QR basis of the keys the query sees (diagonal
    of R positive) and z its r normals per sample; the generator is left just after those draws."""
    rng = np.random.default_rng(11)
    B, n, d, dv, S = 3, 9, 4, 3, 5
    Q, K = 0.7 * rng.standard_normal((2, B, n, d))
    V = rng.standard_normal((B, n, dv))
    mask = np.zeros((B, n), dtype=bool)
    if masked:
        mask[0, 2] = mask[2, -3:] = True
    est = att.RA(n_samples=S, causal=causal)  # one chunk per slice: draws (n, S), S * sum(r) per slice
    gen = np.random.default_rng(4)
    res = est(Q, K, V, rng=gen, key_padding_mask=mask if masked else None)
    g = np.random.default_rng(4)
    out, mcse = np.empty((B, n, dv)), np.empty((B, n, dv))
    for b in range(B):
        seen_keys = np.cumsum(~mask[b]) if causal else np.full(n, np.sum(~mask[b]))
        r = np.minimum(seen_keys, d)  # normals per sample, query by query
        u, z = g.random((n, S)), g.standard_normal(S * int(r.sum()))
        ends = S * np.cumsum(r)
        for i in range(n):
            seen = ~mask[b] & ((np.arange(n) <= i) if causal else True)
            keys = np.flatnonzero(seen)
            logit = Q[b, i] @ K[b, keys].T
            pi = np.exp(logit - logsumexp(logit))
            cum = np.cumsum(pi) / pi.sum()
            comp = keys[np.searchsorted(cum[:-1], u[i], side="right")]
            basis, R = np.linalg.qr(K[b, keys].T)
            basis = basis[:, : r[i]] * np.where(np.diag(R) < 0, -1.0, 1.0)[: r[i]]
            eps = z[ends[i] - S * r[i] : ends[i]].reshape(S, r[i]) @ basis.T
            omega = Q[b, i] + K[b, comp] + eps  # (S, d)
            lf = omega @ K[b, keys].T - 0.5 * np.sum(K[b, keys] ** 2, axis=-1)
            f = np.exp(lf - logsumexp(lf, axis=-1, keepdims=True)) @ V[b, keys]  # (S, dv)
            out[b, i] = f.mean(axis=0)
            mcse[b, i] = f.std(axis=0, ddof=1) / np.sqrt(S)
    np.testing.assert_allclose(res.output, out, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res.mcse, mcse, rtol=1e-10, atol=1e-14)
    assert gen.random() == g.random()


@pytest.mark.parametrize(("n", "d"), [(5, 8), (9, 4)])
def test_ra_key_span_coordinates_are_exact(n, d):
    """RA's noise enters f_n only through eps.k_j of the keys a query sees. In the span coordinates
    c_j = B^T k_j (B orthonormal, d x r, r = min(#keys, d)) k_j = B c_j exactly, so eps = B z with
    z ~ N(0, I_r) gives eps.k_j = z.c_j, of covariance k_j.k_l as the full draw; the first j keys
    have coordinates in the first min(j, d) columns only (a causal query's prefix); others are 0."""
    from rfkit.attention import _ra
    from rfkit.attention._common import check_qkv

    rng = np.random.default_rng(12)
    Q, K = rng.standard_normal((2, n, d))
    x = check_qkv(Q, K, rng.standard_normal((n, 2)), "RA")
    for idx in (np.arange(n), np.arange(3), np.array([0, 2, 3]), np.array([1, 3, 4])):
        basis, coords = _ra._key_span(x, K, idx)
        r = min(idx.size, d)
        assert basis.shape == (d, r) and coords.shape == (n, r)
        np.testing.assert_allclose(basis.T @ basis, np.eye(r), atol=1e-13)
        np.testing.assert_allclose(coords[idx] @ basis.T, K[idx], atol=1e-13)
        assert np.all(coords[np.setdiff1d(np.arange(n), idx)] == 0.0)
        for j in range(1, idx.size + 1):
            assert np.all(coords[idx[:j], min(j, d) :] == 0.0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("S", [1, 6])
def test_ra_cache_sized_sub_blocks_equal_one_block(monkeypatch, causal, masked, S):
    """RA computes a chunk's queries in cache-sized sub-blocks: the same result, to round-off, as one block."""
    from rfkit.attention import _ra

    rng = np.random.default_rng(3)
    Q, K = 0.5 * rng.standard_normal((2, 2, 23, 5))
    V = rng.standard_normal((2, 23, 4))
    mask = np.zeros((2, 23), dtype=bool)
    mask[0, -4:] = mask[1, 1:3] = True
    kw = {"key_padding_mask": mask} if masked else {}
    est = att.RA(n_samples=S, causal=causal, chunk_size=10)  # chunks of 10, 10 and 3 queries
    monkeypatch.setattr(_ra, "_CACHE_ELEMS", S * 23 * 4)  # sub-blocks of 4 queries
    blocked = est(Q, K, V, rng=8, **kw)
    monkeypatch.setattr(_ra, "_CACHE_ELEMS", 1 << 40)  # one block per chunk
    whole = est(Q, K, V, rng=8, **kw)
    np.testing.assert_allclose(blocked.output, whole.output, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(blocked.mcse, whole.mcse, rtol=1e-12, atol=1e-15, equal_nan=True)
    assert np.all(np.isnan(blocked.mcse)) == (S == 1)


@pytest.mark.parametrize("masked", [False, True])
def test_causal_ra_restricts_each_block_to_its_visible_keys(monkeypatch, masked):
    """Causal RA evaluates f_n of a block of queries on the keys up to its last query only: the same
    result, to round-off, as on all keys with the later ones masked (weight exactly 0)."""
    from rfkit.attention import _ra

    rng = np.random.default_rng(6)
    Q, K = 0.6 * rng.standard_normal((2, 3, 30, 4))
    V = rng.standard_normal((3, 30, 5))
    mask = np.zeros((3, 30), dtype=bool)
    mask[1, 3:6] = True
    kw = {"key_padding_mask": mask} if masked else {}
    est = att.RA(n_samples=5, causal=True, chunk_size=12)
    monkeypatch.setattr(_ra, "_CACHE_ELEMS", 5 * 30 * 4)  # sub-blocks of 4 queries
    restricted = est(Q, K, V, rng=2, **kw)
    samples = _ra._samples
    monkeypatch.setattr(_ra, "_samples", lambda x, *a: samples(x, *a[:-1], x.n_keys))  # every key
    full = est(Q, K, V, rng=2, **kw)
    np.testing.assert_allclose(restricted.output, full.output, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(restricted.mcse, full.mcse, rtol=1e-10, atol=1e-14)


def test_ra_component_sampling_is_the_softmax_distribution():
    """With S samples, the chosen components of a query follow pi_n (checked via a one-hot V)."""
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 3))
    K = rng.standard_normal((4, 3))
    # f_n(omega) with K huge-norm separated keys ~ picks the nearest component; use softmax check instead
    V = np.eye(4)
    res = att.RA(n_samples=40000)(q, K, V, rng=9)
    pi = np.exp(q @ K.T)
    pi /= pi.sum()
    assert np.all(np.abs(res.output - pi) <= 5 * res.mcse)


@pytest.mark.parametrize("causal", [False, True])
def test_ra_large_logits_finite(causal):
    Q, K, V = large_logits()
    res = att.RA(n_samples=4, causal=causal)(Q, K, V, rng=0)
    assert np.all(np.isfinite(res.output))


# ----------------------------------------------------------------------------- SNIS / LARA
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "est",
    [
        att.SNIS(n_samples=64),
        att.SNIS("chunk-mean", n_samples=64, n_chunks=8),
        att.LARA(n_proposals=8, samples_per_proposal=4),
        att.LARA(n_proposals=8, weights="balance", samples_per_proposal=4),
    ],
    ids=["snis", "snis-chunk", "lara-opt", "lara-bal"],
)
def test_linear_methods_large_logits_finite(dtype, est):
    Q, K, V = large_logits(dtype)
    res = est(Q, K, V, rng=0)
    assert res.output.dtype == dtype
    assert np.all(np.isfinite(res.output)) and res.n_nonpositive == 0
    assert np.all(np.isfinite(res.log_normalizer))
    assert np.all((res.ess >= 1 - 1e-4) & (res.ess <= 64 * (1 + 1e-4)))


def test_snis_chunk_mean_means_and_diagnostics():
    Q, K, V = data(n=12)
    res = att.SNIS("chunk-mean", n_samples=10, n_chunks=3)(Q, K, V, rng=0)
    mu = Q.reshape(2, 3, 3, 4, 5).mean(-2) + K.reshape(2, 3, 3, 4, 5).mean(-2)
    np.testing.assert_allclose(res.proposal_means, mu, rtol=1e-13)
    assert res.omega.shape == (2, 3, 10, 5)
    assert res.ess.shape == (2, 3, 12)


def test_snis_explicit_means_broadcast():
    Q, K, V = data()
    mu = np.zeros((3, 2, 5))  # per head, broadcast over batch
    res = att.SNIS(proposal=mu, n_samples=6)(Q, K, V, rng=0)
    assert res.proposal_means.shape == (2, 3, 2, 5)
    with pytest.raises(ShapeError, match="d=5"):
        att.SNIS(proposal=np.zeros((2, 4)), n_samples=6)(Q, K, V, rng=0)
    with pytest.raises(ShapeError, match="does not broadcast"):
        att.SNIS(proposal=np.zeros((4, 2, 5)), n_samples=6)(Q, K, V, rng=0)


def test_lara_floor_is_recorded():
    # overlapping proposals and peaked r' make some raw "optimal" weights negative
    rng = np.random.default_rng(1)
    Q = 1.0 * rng.standard_normal((16, 3))
    K = 0.1 * rng.standard_normal((16, 3))
    V = rng.standard_normal((16, 2))
    seed = next(s for s in range(50) if att.LARA(n_proposals=8)(Q, K, V, rng=s).n_negative_alpha > 0)
    res = att.LARA(n_proposals=8)(Q, K, V, rng=seed)
    assert res.n_floored >= res.n_negative_alpha > 0
    assert res.n_nonpositive == 0 and np.all(np.isfinite(res.output))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPositiveNormalizerWarning)
        raw = att.LARA(n_proposals=8, alpha_floor=None)(Q, K, V, rng=seed)
    assert raw.n_floored == 0 and raw.n_negative_alpha == res.n_negative_alpha
    # signed weights: numerator/denominator still defined; rows with denominator <= 0 are NaN
    assert raw.n_nonpositive == np.count_nonzero(~(raw.denominator_values > 0))
    assert np.all(np.isfinite(raw.numerator))
    bal = att.LARA(n_proposals=8, weights="balance")(Q, K, V, rng=seed)
    assert bal.n_floored is None and bal.n_negative_alpha is None


def test_lara_nonpositive_warning_points_at_caller():
    rng = np.random.default_rng(1)
    for seed in range(200):
        Q = 3.0 * rng.standard_normal((16, 3))
        K = 0.1 * rng.standard_normal((16, 3))
        V = rng.standard_normal((16, 2))
        est = att.LARA(n_proposals=8, alpha_floor=None)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            res = est(Q, K, V, rng=seed)
        if res.n_nonpositive:
            assert len(rec) == 1 and issubclass(rec[0].category, NonPositiveNormalizerWarning)
            assert rec[0].filename == __file__
            bad = ~(res.denominator_values > 0)
            assert np.all(np.isnan(res.output[bad]))
            return
    pytest.fail("no non-positive LARA normaliser found in 200 tries")


def test_shared_vs_per_head_noise():
    Q, K, V = data()
    Qh, Kh, Vh = (np.broadcast_to(a[:1, :1], a.shape) for a in (Q, K, V))  # all slices identical
    for est in (att.SNIS, att.LARA):
        kw = {"n_samples": 8} if est is att.SNIS else {"n_proposals": 4}
        shared = est(**kw)(Qh, Kh, Vh, rng=0)
        per = est(**kw, shared_across_heads=False)(Qh, Kh, Vh, rng=0)
        np.testing.assert_array_equal(shared.output[:, 0], shared.output[:, 1])
        assert not np.allclose(per.output[:, 0], per.output[:, 1])
        np.testing.assert_array_equal(per.output[0, 1], per.output[1, 1])  # shared along batch


@pytest.mark.parametrize("est", [att.RA(n_samples=2), att.SNIS(n_samples=8), att.LARA(n_proposals=4)])
def test_rng_reproducibility(est):
    Q, K, V = data()
    np.testing.assert_array_equal(est(Q, K, V, rng=99).output, est(Q, K, V, rng=99).output)
    gen = np.random.default_rng(0)
    assert not np.allclose(est(Q, K, V, rng=gen).output, est(Q, K, V, rng=gen).output)
    with pytest.raises(InvalidParameterError, match="RandomState"):
        est(Q, K, V, rng=np.random.RandomState(0))


def test_rectangular_inputs():
    Q, K, V = data(n=7, M=20)
    for est in (att.RA(n_samples=2), att.SNIS(n_samples=8), att.LARA(n_proposals=7)):
        assert est(Q, K, V, rng=0).output.shape == (2, 3, 7, 4)


@pytest.mark.parametrize(
    ("make", "exc", "match"),
    [
        (
            lambda: att.RA(n_samples=0),
            InvalidParameterError,
            "`n_samples` parameter of RA must be an int in the range \\[1, inf\\)",
        ),
        (lambda: att.RA(n_samples=2.5), InvalidParameterError, "`n_samples`"),
        (lambda: att.SNIS(n_samples=0), InvalidParameterError, "`n_samples` parameter of SNIS"),
        (lambda: att.SNIS(proposal="uniform"), InvalidParameterError, "`proposal` parameter of SNIS"),
        (lambda: att.SNIS(n_chunks=3), InvalidParameterError, "only to proposal='chunk-mean'"),
        (lambda: att.SNIS(projection="sobol"), InvalidParameterError, "`projection`"),
        (
            lambda: att.LARA(n_proposals=0),
            InvalidParameterError,
            "`n_proposals` parameter of LARA must be an int in the range \\[1, inf\\)",
        ),
        (lambda: att.LARA(weights="best"), InvalidParameterError, "`weights` parameter of LARA"),
        (lambda: att.LARA(samples_per_proposal=0), InvalidParameterError, "`samples_per_proposal`"),
        (lambda: att.LARA(alpha_floor=-1.0), InvalidParameterError, "`alpha_floor`"),
    ],
)
def test_bad_parameters(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_bad_call_time_input():
    Q, K, V = data(n=6)
    with pytest.raises(InvalidParameterError, match=r"`n_proposals` parameter of LARA .* \[1, 6\]"):
        att.LARA(n_proposals=7)(Q, K, V, rng=0)
    with pytest.raises(InvalidParameterError, match=r"`n_chunks` parameter of SNIS"):
        att.SNIS("chunk-mean", n_samples=8, n_chunks=7)(Q, K, V, rng=0)
    with pytest.raises(InvalidParameterError, match="disagrees with `proposal_means`"):
        att.LARA(n_proposals=3, proposal_means=np.zeros((2, 5)))(Q, K, V, rng=0)
    for est in (att.RA(n_samples=2), att.SNIS(n_samples=4), att.LARA(n_proposals=2)):
        with pytest.raises(ShapeError, match="`K` and `V` must have the same number of rows"):
            est(Q, K, V[..., :-1, :], rng=0)
        with pytest.raises(ShapeError, match="same feature dimension"):
            est(Q[..., :-1], K, V, rng=0)
        Kn = K.copy()
        Kn[0, 0, 0, 0] = np.inf
        with pytest.raises(ValueError, match="`K` contains infinity"):
            est(Q, Kn, V, rng=0)
