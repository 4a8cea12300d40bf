"""Hybrid attention: the equalities at both extremes, causality, padding, supports, backends."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rfkit as rk
from rfkit.attention._support import lsh_codes, lsh_support, union_support, window_support
from rfkit.exceptions import InvalidParameterError, NonPositiveNormalizerWarning

H = rk.attention.Hybrid


def _qkv(seed=0, lead=(2,), n=24, M=None, d=6, dv=3, scale=0.5):
    rng = np.random.default_rng(seed)
    M = n if M is None else M
    Q = scale * rng.normal(size=lead + (n, d))
    K = scale * rng.normal(size=lead + (M, d))
    V = rng.normal(size=lead + (M, dv))
    return Q, K, V


MAPS = [rk.features.Positive(16), rk.features.Positive(16, projection="orthogonal"), rk.features.Trig(16)]


@pytest.mark.parametrize("fm", MAPS, ids=lambda f: f.name + getattr(f, "projection", ""))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("variant", ["plain", "ratio"])
def test_empty_support_equals_rfa(fm, causal, variant):
    Q, K, V = _qkv(1, lead=(2, 2), scale=0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPositiveNormalizerWarning)  # trig: a few rows may be NaN
        r = rk.attention.RFA(fm, causal=causal)(Q, K, V, rng=3)
        h = H(fm, causal=causal, variant=variant)(Q, K, V, rng=3)
    assert h.method == "Hybrid"
    np.testing.assert_allclose(h.output, r.output, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(h.normalizer, r.normalizer, rtol=1e-12)
    assert h.n_nonpositive == r.n_nonpositive


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("variant", ["plain", "ratio"])
@pytest.mark.parametrize("kw", [{"window": 24}, {"n_global": 30}, {"window": 3, "n_global": 24}])
def test_full_support_equals_exact(causal, variant, kw):
    Q, K, V = _qkv(2, lead=(3, 2), scale=1.5)  # logits ~ 10: the exact part must not overflow
    h = H(rk.features.Positive(8), causal=causal, variant=variant, **kw)(Q, K, V, rng=0, n_draws=2)
    exact = rk.attention.softmax(Q, K, V, causal=causal)
    np.testing.assert_allclose(h.output, np.broadcast_to(exact, h.output.shape), rtol=1e-10, atol=1e-12)
    logits = Q @ np.swapaxes(K, -1, -2)
    if causal:
        logits = np.where(np.tril(np.ones((24, 24), bool)), logits, -np.inf)
    Z = np.exp(logits).sum(-1)
    np.testing.assert_allclose(h.normalizer, np.broadcast_to(Z, h.normalizer.shape), rtol=1e-10)


def test_large_logits_stay_finite():
    Q, K, V = _qkv(3, n=32, scale=4.0)  # logits ~ 100: exp overflows without the shifts
    for dt in (np.float64, np.float32):
        for variant in ("plain", "ratio"):
            h = H(rk.features.Positive(32), window=2, n_global=1, variant=variant)(
                Q.astype(dt), K.astype(dt), V.astype(dt), rng=0
            )
            assert h.output.dtype == dt
            assert np.all(np.isfinite(h.output))


@pytest.mark.parametrize("variant", ["plain", "ratio"])
@pytest.mark.parametrize("kw", [{"window": 2}, {"window": 1, "n_global": 2}, {"lsh_buckets": 4}])
def test_causal_rows_ignore_later_positions(variant, kw):
    Q, K, V = _qkv(4, lead=(2,), n=20)
    est = H(rk.features.Positive(16), causal=True, variant=variant, **kw)
    a = est(Q, K, V, rng=5)
    Q2, K2, V2 = Q.copy(), K.copy(), V.copy()
    i = 11
    rng = np.random.default_rng(9)
    Q2[..., i + 1 :, :] = rng.normal(size=Q2[..., i + 1 :, :].shape)
    K2[..., i + 1 :, :] = rng.normal(size=K2[..., i + 1 :, :].shape)
    V2[..., i + 1 :, :] = rng.normal(size=V2[..., i + 1 :, :].shape)
    b = est(Q2, K2, V2, rng=5)
    # (LSH: the buckets of the first rows do not depend on later rows either)
    np.testing.assert_allclose(b.output[..., : i + 1, :], a.output[..., : i + 1, :], rtol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("variant", ["plain", "ratio"])
def test_padding_equals_dropping_keys(causal, variant):
    n, keep = 20, 14
    M = n
    Q, K, V = _qkv(5, lead=(2,), n=n, M=M)
    mask = np.zeros((2, M), dtype=bool)
    mask[:, keep:] = True
    est = H(rk.features.Positive(16), window=3, n_global=2, lsh_buckets=4, causal=False, variant=variant)
    if causal:
        # causal: the padded trailing keys are only seen by the trailing queries, compare the first rows
        est = H(rk.features.Positive(16), window=3, n_global=2, causal=True, variant=variant)
        a = est(Q, K, V, rng=2, key_padding_mask=mask)
        b = est(Q[..., :keep, :], K[..., :keep, :], V[..., :keep, :], rng=2)
        np.testing.assert_allclose(a.output[..., :keep, :], b.output, rtol=1e-11, atol=1e-12)
        return
    a = est(Q, K, V, rng=2, key_padding_mask=mask)
    b = est(Q, K[..., :keep, :], V[..., :keep, :], rng=2)
    np.testing.assert_allclose(a.output, b.output, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(a.normalizer, b.normalizer, rtol=1e-11)


def test_per_head_draws_and_n_draws():
    Q, K, V = _qkv(6, lead=(2, 3))
    est = H(rk.features.Positive(8), window=30, shared_across_heads=False)
    h = est(Q, K, V, rng=1, n_draws=3)
    assert h.output.shape == (3, 2, 3, 24, 3)
    assert isinstance(h.draw, tuple) and len(h.draw) == 3
    np.testing.assert_allclose(h.output[0], rk.attention.softmax(Q, K, V), rtol=1e-10)
    est0 = H(rk.features.Positive(8), shared_across_heads=False)
    np.testing.assert_allclose(
        est0(Q, K, V, rng=1).output,
        rk.attention.RFA(rk.features.Positive(8), shared_across_heads=False)(Q, K, V, rng=1).output,
        rtol=1e-12,
    )


def test_ratio_and_plain_share_the_normaliser():
    Q, K, V = _qkv(7)
    fm = rk.features.Positive(16)
    p = H(fm, window=2, variant="plain")(Q, K, V, rng=4)
    r = H(fm, window=2, variant="ratio")(Q, K, V, rng=4)
    np.testing.assert_allclose(p.normalizer, r.normalizer, rtol=1e-12)
    np.testing.assert_allclose(r.numerator / r.normalizer[..., None], r.output, rtol=1e-10)
    assert not np.allclose(p.output, r.output)


def test_draw_reuse_matches_rng():
    Q, K, V = _qkv(8)
    fm = rk.features.Positive(16)
    est = H(fm, window=2, n_global=1)
    a = est(Q, K, V, rng=3)
    b = est(Q, K, V, draw=a.draw)
    np.testing.assert_allclose(a.output, b.output, rtol=1e-12)


def test_supports():
    idx, valid = window_support(6, 6, 1, causal=False)
    assert idx.shape == (1, 6, 3)
    assert sorted(idx[0, 0][valid[0, 0]].tolist()) == [0, 1]
    idx, valid = window_support(6, 6, 2, causal=True)
    assert idx[0, 4][valid[0, 4]].tolist() == [2, 3, 4]
    u, ok = union_support(
        [window_support(6, 6, 1, False), (np.array([[[0, 1]] * 6]), np.ones((1, 6, 2), bool))]
    )
    for i in range(6):
        got = u[0, i][ok[0, i]].tolist()
        assert got == sorted(set(got)) == sorted({0, 1} | {j for j in range(6) if abs(i - j) <= 1})
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2, 30, 5))
    R = rng.normal(size=(5, 3))
    h = lsh_codes(X, R)
    assert h.min() >= 0 and h.max() < 6
    li, lv = lsh_support(h[:, :10], h)
    for b in range(2):
        for i in range(10):
            got = set(li[b, i][lv[b, i]].tolist())
            assert got == {j for j in range(30) if h[b, j] == h[b, i]}


def test_bad_parameters():
    fm = rk.features.Positive(8)
    for kw in ({"window": -1}, {"n_global": -2}, {"lsh_buckets": 3}, {"variant": "best"}, {"causal": "yes"}):
        with pytest.raises(InvalidParameterError):
            H(fm, **kw)
    with pytest.raises(InvalidParameterError):
        H("positive")


def test_array_api_strict_and_torch_match_numpy():
    Q, K, V = _qkv(9, n=16)
    est = H(rk.features.Positive(16), window=2, n_global=1, variant="ratio", causal=True)
    ref = est(Q, K, V, rng=0).output
    xps = pytest.importorskip("array_api_strict")
    out = est(xps.asarray(Q), xps.asarray(K), xps.asarray(V), rng=0).output
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-10)
    torch = pytest.importorskip("torch")
    out = est(torch.as_tensor(Q), torch.as_tensor(K), torch.as_tensor(V), rng=0).output
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-10)


@pytest.mark.parametrize("variant", ["plain", "ratio"])
def test_signed_trig_features(variant):
    Q, K, V = _qkv(10, scale=0.3)
    fm = rk.features.Trig(64)
    full = H(fm, window=24, variant=variant)(Q, K, V, rng=0)
    np.testing.assert_allclose(full.output, rk.attention.softmax(Q, K, V), rtol=1e-10)
    part = H(fm, window=2, n_global=1, variant=variant)(Q, K, V, rng=0)
    assert np.all(np.isfinite(part.output))


@pytest.mark.parametrize("variant", ["plain", "ratio"])
def test_protocol_check_and_float32(variant):
    for kw in ({"window": 2, "n_global": 1}, {"lsh_buckets": 4}):
        rk.study.check_attention_estimator(H(rk.features.Positive(16), variant=variant, **kw), 8)
    Q, K, V = (a.astype(np.float32) for a in _qkv(11))
    h = H(rk.features.Positive(16), window=24, variant=variant, causal=True)(Q, K, V, rng=0)
    assert h.output.dtype == np.float32
    np.testing.assert_allclose(h.output, rk.attention.softmax(Q, K, V, causal=True), rtol=2e-5, atol=2e-6)
