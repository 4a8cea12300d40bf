"""RFA: dense-formula agreement, causal prefix sums, stability, heads, rng, bad input."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import rfkit as rk
from rfkit import attention as att
from rfkit.attention import _rfa
from rfkit.exceptions import InvalidParameterError, NonPositiveNormalizerWarning, ShapeError
from rfkit.features._exp import ExpDraw

FIXED_MAPS = [
    rk.features.Positive(24),
    rk.features.Positive(20, projection="orthogonal"),
    rk.features.Hyperbolic(12),
    rk.features.Trig(16),
    rk.features.OPRF(24, A=-0.05),
    rk.features.CEXP(24, A=np.array([1.2, 0.8, 1.0, 0.9, 1.1])),
    rk.features.HCEXP(12, A=np.array([1.2, 0.8, 1.0, 0.9, 1.1])),
    rk.features.Taylor(2),
]


def data(seed=20240601, shape=(2, 3), n=13, d=5, dv=4, scale=0.4):
    rng = np.random.default_rng(seed)
    Q = scale * rng.standard_normal(shape + (n, d))
    K = scale * rng.standard_normal(shape + (n, d))
    V = rng.standard_normal(shape + (n, dv))
    return Q, K, V


def dense_reference(draw, Q, K, V, causal=False):
    """out = (K_hat V) / (K_hat 1) with the draw's own kernel estimate."""
    Kh = draw.kernel(Q, K)
    if causal:
        Kh = np.where(np.tri(Kh.shape[-2], Kh.shape[-1], dtype=bool), Kh, 0.0)
    return (Kh @ V) / Kh.sum(-1)[..., None], Kh.sum(-1)


@pytest.mark.parametrize("fm", FIXED_MAPS, ids=lambda f: f.name)
@pytest.mark.parametrize("causal", [False, True])
def test_matches_dense_kernel_formula(fm, causal):
    Q, K, V = data()
    res = att.RFA(fm, causal=causal, chunk_size=4)(Q, K, V, rng=7)
    ref, Z = dense_reference(res.draw, Q, K, V, causal)
    np.testing.assert_allclose(res.output, ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(res.normalizer, Z, rtol=1e-10)
    assert res.n_nonpositive == 0
    assert res.method == "RFA" and res.feature_map == fm


@pytest.mark.parametrize("fm", FIXED_MAPS, ids=lambda f: f.name)
def test_causal_equals_bidirectional_on_every_prefix(fm):
    Q, K, V = data(seed=99, shape=(2,), n=21)
    causal = att.RFA(fm, causal=True, chunk_size=5)(Q, K, V, rng=3)
    for i in range(Q.shape[-2]):
        pre = att.RFA(fm)(Q[..., : i + 1, :], K[..., : i + 1, :], V[..., : i + 1, :], rng=3)
        np.testing.assert_allclose(causal.output[..., i, :], pre.output[..., i, :], rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(
            causal.log_normalizer[..., i], pre.log_normalizer[..., i], rtol=1e-10, atol=1e-10
        )


@pytest.mark.parametrize("block", [None, 1, 3, 64])
def test_block_size_does_not_change_result(block):
    Q, K, V = data(n=30)
    fm = rk.features.Positive(16)
    for causal in (False, True):
        a = att.RFA(fm, causal=causal)(Q, K, V, rng=1)
        b = att.RFA(fm, causal=causal, chunk_size=block)(Q, K, V, rng=1)
        np.testing.assert_allclose(a.output, b.output, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(a.log_normalizer, b.log_normalizer, rtol=1e-12, atol=1e-12)


def test_causal_output_never_depends_on_the_future():
    Q, K, V = data(shape=(), n=40, scale=1.5)
    fm = rk.features.Positive(16)
    a = att.RFA(fm, causal=True, chunk_size=8)(Q, K, V, rng=2).output
    K2, V2 = K.copy(), V.copy()
    K2[25:] *= 4.0  # much larger key scales in the future
    V2[25:] = 1e6
    b = att.RFA(fm, causal=True, chunk_size=8)(Q, K2, V2, rng=2).output
    np.testing.assert_array_equal(a[:25], b[:25])


@pytest.mark.parametrize("fm", FIXED_MAPS[:6], ids=lambda f: f.name)
def test_fast_path_equals_generic_path(fm, monkeypatch):
    Q, K, V = data()
    for causal, n_draws in [(False, None), (True, None), (False, 3), (True, 3)]:
        fast = att.RFA(fm, causal=causal, chunk_size=4)(Q, K, V, rng=5, n_draws=n_draws)
        with monkeypatch.context() as mp:
            mp.setattr(rk.features.FeatureDraw, "exp_form", lambda self: None)
            mp.setattr(ExpDraw, "exp_form", lambda self: None)
            assert not _rfa._Featurizer(fast.draw, np.dtype(np.float64)).fast  # the generic path
            slow = att.RFA(fm, causal=causal, chunk_size=4)(Q, K, V, rng=5, n_draws=n_draws)
        np.testing.assert_allclose(fast.output, slow.output, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(fast.log_normalizer, slow.log_normalizer, rtol=1e-12, atol=1e-12)


def test_key_shift_is_common_not_per_key():
    # Keys with very different scales: a per-key shift would weight them equally.
    rng = np.random.default_rng(8)
    Q = 0.3 * rng.standard_normal((4, 3))
    K = np.concatenate([0.3 * rng.standard_normal((3, 3)), 6.0 * rng.standard_normal((3, 3))])
    V = rng.standard_normal((6, 2))
    res = att.RFA(rk.features.Positive(32))(Q, K, V, rng=4)
    ref, _ = dense_reference(res.draw, Q, K, V)
    np.testing.assert_allclose(res.output, ref, rtol=1e-10)


def test_many_features_approach_exact():
    Q, K, V = data(scale=0.3)
    res = att.RFA(rk.features.Positive(20000, projection="orthogonal"))(Q, K, V, rng=1)
    np.testing.assert_allclose(res.output, att.softmax(Q, K, V), atol=0.03)


def test_taylor_degree_two_is_exact_polynomial_attention():
    Q, K, V = data(scale=0.3)
    res = att.RFA(rk.features.Taylor(2))(Q, K, V, rng=None)
    t = Q @ np.swapaxes(K, -1, -2)
    W = 1 + t + t**2 / 2
    np.testing.assert_allclose(res.output, (W @ V) / W.sum(-1)[..., None], rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "fm", [rk.features.Positive(64), rk.features.Hyperbolic(32), rk.features.OPRF(64)], ids=lambda f: f.name
)
def test_logits_up_to_50_finite_no_warning(dtype, causal, fm):
    rng = np.random.default_rng(4242)
    d, n = 32, 96
    U = rng.standard_normal((2, n, d))
    U /= np.linalg.norm(U, axis=-1, keepdims=True)
    Q = (np.sqrt(50.0) * U[0]).astype(dtype)
    K = (np.sqrt(50.0) * (0.8 * U[0] + 0.6 * U[1])).astype(dtype)  # q.k up to ~40-50
    K[::7] = (np.sqrt(50.0) * U[0][::7]).astype(dtype)  # some logits exactly ~50
    V = rng.standard_normal((n, 4)).astype(dtype)
    assert (Q.astype(float) @ K.astype(float).T).max() > 49
    res = att.RFA(fm, causal=causal)(Q, K, V, rng=0)  # filterwarnings=error: any warning fails
    assert res.output.dtype == dtype
    assert np.all(np.isfinite(res.output)) and res.n_nonpositive == 0
    assert np.all(np.isfinite(res.log_normalizer))
    # outputs are convex combinations of the values for positive maps
    assert np.all(res.output <= V.max(0) + 1e-3) and np.all(res.output >= V.min(0) - 1e-3)


def test_nonpositive_normalizer_trig_reported_not_clipped():
    rng = np.random.default_rng(123)
    Q = 2.0 * rng.standard_normal((40, 6))
    K = 2.0 * rng.standard_normal((40, 6))
    V = rng.standard_normal((40, 3))
    est = att.RFA(rk.features.Trig(2))
    with pytest.warns(NonPositiveNormalizerWarning, match="normaliser <= 0") as rec:
        res = est(Q, K, V, rng=1)
    assert len(rec) == 1
    assert rec[0].filename == __file__  # stacklevel points at the caller
    _, Z = dense_reference(res.draw, Q, K, V)
    bad = Z <= 0
    assert 0 < bad.sum() < 40
    assert res.n_nonpositive == bad.sum()
    assert np.all(np.isnan(res.output[bad])) and np.all(np.isfinite(res.output[~bad]))
    np.testing.assert_allclose(res.normalizer, Z, rtol=1e-9, atol=1e-12)
    assert np.all(res.normalizer_sign[bad] <= 0)


def test_odd_taylor_nonpositive_rows():
    rng = np.random.default_rng(3)
    K = rng.standard_normal((10, 3)) + 2.0
    Q = np.stack([-K.mean(0), K.mean(0) * 0.1])  # first query: sum_m (1 + q.k_m) < 0
    V = rng.standard_normal((10, 2))
    with pytest.warns(NonPositiveNormalizerWarning):
        res = att.RFA(rk.features.Taylor(1))(Q, K, V)
    assert res.n_nonpositive == 1
    assert np.all(np.isnan(res.output[0])) and np.all(np.isfinite(res.output[1]))


def test_multi_head_shared_and_per_head_draws():
    Q, K, V = data(shape=(2, 3))
    # identical heads: a shared draw gives identical outputs, per-head draws do not
    Qh, Kh, Vh = (np.broadcast_to(a[:, :1], a.shape) for a in (Q, K, V))
    fm = rk.features.Positive(8)
    shared = att.RFA(fm)(Qh, Kh, Vh, rng=0)
    per = att.RFA(fm, shared_across_heads=False)(Qh, Kh, Vh, rng=0)
    assert shared.output.shape == per.output.shape == (2, 3, 13, 4)
    np.testing.assert_array_equal(shared.output[:, 0], shared.output[:, 2])
    assert not np.allclose(per.output[:, 0], per.output[:, 1])
    assert isinstance(per.draw, tuple) and len(per.draw) == 3
    # per-head draws are shared along the batch axis and match running each head alone
    for j, draw in enumerate(per.draw):
        ref, _ = dense_reference(draw, Q[:, j], K[:, j], V[:, j])
        res = att.RFA(fm, shared_across_heads=False)(Q, K, V, rng=0)
        np.testing.assert_allclose(res.output[:, j], ref, rtol=1e-10)


def test_data_dependent_maps_are_fitted_inside_the_call():
    Q, K, V = data(shape=(3,))
    res = att.RFA(rk.features.OPRF(16))(Q, K, V, rng=0)
    assert res.feature_map.A == pytest.approx(rk.features.oprf_optimal_A(Q.reshape(-1, 5), K.reshape(-1, 5)))
    res = att.RFA(rk.features.CEXP(16, A="mean"), shared_across_heads=False)(Q, K, V, rng=0)
    assert isinstance(res.feature_map, tuple) and len(res.feature_map) == 3
    np.testing.assert_allclose(
        res.feature_map[1].A, rk.features.adaptive_A(Q[1], K[1], rule="mean"), rtol=1e-12
    )


def test_n_draws_vectorises_trials():
    Q, K, V = data(shape=(2,))
    fm = rk.features.Positive(8)
    for causal in (False, True):
        res = att.RFA(fm, causal=causal)(Q, K, V, rng=9, n_draws=5)
        assert res.output.shape == (5, 2, 13, 4) and res.log_normalizer.shape == (5, 2, 13)
        W = res.draw.projection
        for t in range(5):
            single = rk.features.Positive(8).sample(5, rng=0)
            single.projection[...] = W[t]
            ref, _ = dense_reference(single, Q, K, V, causal)
            np.testing.assert_allclose(res.output[t], ref, rtol=1e-10)


def test_rng_reproducibility():
    Q, K, V = data()
    fm = rk.features.Positive(8)
    a = att.RFA(fm)(Q, K, V, rng=12345).output
    b = att.RFA(fm)(Q, K, V, rng=12345).output
    np.testing.assert_array_equal(a, b)
    gen = np.random.default_rng(1)
    c = att.RFA(fm)(Q, K, V, rng=gen).output
    d = att.RFA(fm)(Q, K, V, rng=gen).output
    assert not np.allclose(c, d)
    e = att.RFA(fm)(Q, K, V, rng=np.random.SeedSequence(12345)).output
    np.testing.assert_array_equal(a, e)
    with pytest.raises(InvalidParameterError, match="RandomState"):
        att.RFA(fm)(Q, K, V, rng=np.random.RandomState(0))
    with pytest.raises(TypeError):
        att.RFA(fm)(Q, K, V, 0)  # rng is keyword-only


def test_causal_memory_has_no_n_by_n_array():
    rng = np.random.default_rng(0)
    n, d = 4096, 16
    Q, K, V = 0.3 * rng.standard_normal((3, n, d))
    fm = rk.features.Positive(32)
    for causal in (False, True):
        tracemalloc.start()
        att.RFA(fm, causal=causal)(Q, K, V, rng=0)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < 0.1 * n * n * 8, (causal, peak)


def test_bad_input():
    Q, K, V = data()
    fm = rk.features.Positive(8)
    with pytest.raises(InvalidParameterError, match="`feature_map` parameter of RFA"):
        att.RFA("positive")
    with pytest.raises(InvalidParameterError, match="`causal` parameter of RFA must be a bool"):
        att.RFA(fm, causal=1)
    with pytest.raises(InvalidParameterError, match="`shared_across_heads`"):
        att.RFA(fm, shared_across_heads="no")
    with pytest.raises(InvalidParameterError, match="`chunk_size`"):
        att.RFA(fm, chunk_size=0)
    with pytest.raises(ShapeError, match="`K` and `V` must have the same number of rows"):
        att.RFA(fm)(Q, K, V[..., :-1, :], rng=0)
    with pytest.raises(ShapeError, match="same feature dimension"):
        att.RFA(fm)(Q, K[..., :-1], V, rng=0)
    with pytest.raises(ShapeError, match="causal=True"):
        att.RFA(fm, causal=True)(Q[..., :-1, :], K, V, rng=0)
    with pytest.raises(InvalidParameterError, match="`n_draws`"):
        att.RFA(fm)(Q, K, V, rng=0, n_draws=0)
    Qn = Q.copy()
    Qn[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="`Q` contains NaN"):
        att.RFA(fm)(Qn, K, V, rng=0)


def test_result_is_frozen():
    Q, K, V = data()
    res = att.RFA(rk.features.Positive(8))(Q, K, V, rng=0)
    with pytest.raises(AttributeError):
        res.output = None  # type: ignore[misc]
    np.testing.assert_allclose(res.numerator, res.output * res.normalizer[..., None], rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("q_norm", "k_norm"), [(1.0, 50.0), (50.0, 1.0), (0.2, 250.0)])
def test_unbalanced_norms_logits_50_finite(dtype, q_norm, k_norm):
    """Logits ~50 from very different query and key norms: key scales span far more than the
    float32 range, which a single global key shift would underflow for some feature columns."""
    rng = np.random.default_rng(2718)
    d, n = 32, 120
    U = rng.standard_normal((2, n, d))
    U /= np.linalg.norm(U, axis=-1, keepdims=True)
    Q = (q_norm * U[0]).astype(dtype)
    K = (k_norm * (0.8 * U[0] + 0.6 * U[1])).astype(dtype)
    V = rng.standard_normal((n, 3)).astype(dtype)
    assert (Q.astype(float) @ K.astype(float).T).max() > 49
    maps = [
        rk.features.Positive(64),
        rk.features.Hyperbolic(32),
        rk.features.OPRF(64),
        rk.features.CEXP(64, A="mean"),
    ]
    for fm in maps:
        res = att.RFA(fm)(Q, K, V, rng=0)
        assert np.all(np.isfinite(res.output)) and res.n_nonpositive == 0, fm
    for fm in maps[:2] + maps[3:]:
        res = att.RFA(fm, causal=True)(Q, K, V, rng=0)
        assert np.all(np.isfinite(res.output)) and res.n_nonpositive == 0, fm
