"""Hybrid with keys chosen by content (top_k by a scorer) and sampled remainders: the extremes,
causality, padding, batching, each scorer's support, refused options and the cost counts."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rfkit as rk
from rfkit.exceptions import InvalidParameterError, NonPositiveNormalizerWarning

H = rk.attention.Hybrid
SCORERS = ["oracle", "proxy", "quest", "lsh"]
SAMPLED = ["uniform", "stratified", "importance"]


def _qkv(seed=0, lead=(2,), n=20, M=None, d=5, dv=3, scale=0.6):
    rng = np.random.default_rng(seed)
    M = n if M is None else M
    return (
        scale * rng.normal(size=lead + (n, d)),
        scale * rng.normal(size=lead + (M, d)),
        rng.normal(size=lead + (M, dv)),
    )


def _sampled(rem, s=3, **kw):
    if rem == "importance":
        kw.setdefault("scorer", "proxy")
    return H(remainder=rem, n_samples=s, **kw)


def _logits(Q, K, causal):
    L = Q @ np.swapaxes(K, -1, -2)
    if causal:
        n = L.shape[-1]
        L = np.where(np.tril(np.ones((n, n), bool)), L, -np.inf)
    return L


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scorer", SCORERS)
def test_top_k_of_every_key_is_exact(scorer, causal):
    Q, K, V = _qkv(1, lead=(2, 2), scale=1.2)
    exact = rk.attention.softmax(Q, K, V, causal=causal)
    Z = np.exp(_logits(Q, K, causal)).sum(-1)
    for est in (
        H(remainder="none", top_k=20, scorer=scorer, causal=causal, block_size=4),
        H(rk.features.Positive(8), top_k=20, scorer=scorer, causal=causal),
        _sampled("uniform", top_k=20, scorer=scorer, causal=causal),
    ):
        r = est(Q, K, V, rng=0, n_draws=2)
        np.testing.assert_allclose(r.output, np.broadcast_to(exact, r.output.shape), rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(r.normalizer, np.broadcast_to(Z, r.normalizer.shape), rtol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("rem", SAMPLED)
def test_remainder_alone_with_enough_samples_is_exact(rem, causal):
    Q, K, V = _qkv(2, lead=(3,), n=16)
    r = _sampled(rem, s=16, causal=causal)(Q, K, V, rng=0)
    np.testing.assert_allclose(r.output, rk.attention.softmax(Q, K, V, causal=causal), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(r.normalizer, np.exp(_logits(Q, K, causal)).sum(-1), rtol=1e-12)
    # fewer samples than remainder keys: an estimate, not the exact value
    r = _sampled(rem, s=4, causal=False)(Q, K, V, rng=0)
    assert not np.allclose(r.output, rk.attention.softmax(Q, K, V))


def test_none_needs_a_support():
    with pytest.raises(InvalidParameterError, match="needs one: a window, n_global, lsh_buckets or top_k"):
        H(remainder="none")
    # an empty support row (a causal LSH bucket holding no earlier key) is NaN and counted
    Q, K, V = _qkv(3, n=24)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPositiveNormalizerWarning)
        r = H(remainder="none", lsh_buckets=8, causal=True)(Q, K, V, rng=0)
    assert r.n_nonpositive == int(np.isnan(r.output[..., 0]).sum())


def test_unknown_names_are_refused_with_the_valid_ones():
    with pytest.raises(
        InvalidParameterError, match=r"`scorer`.*\['lsh', 'oracle', 'proxy', 'quest'\].*'best'"
    ):
        H(remainder="none", top_k=2, scorer="best")
    with pytest.raises(
        InvalidParameterError,
        match=r"`remainder`.*\['features', 'importance', 'none', 'stratified', 'uniform'\].*'random'",
    ):
        H(remainder="random", window=1)


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"remainder": "features"}, "`feature_map` parameter of Hybrid is required"),
        ({}, "needs a `feature_map`"),
        ({"remainder": "uniform"}, "`n_samples`.*Got None"),
        ({"remainder": "uniform", "n_samples": 0}, "n_samples"),
        ({"remainder": "importance", "n_samples": 2}, "`scorer`.*Got None"),
        ({"remainder": "none", "window": 1, "top_k": 2}, "`scorer`.*Got None"),
        ({"remainder": "none", "window": 1, "scorer": "oracle"}, "`scorer`.*must be None"),
        ({"remainder": "none", "window": 1, "top_k": 0, "scorer": "oracle"}, "top_k"),
        ({"remainder": "none", "window": 1, "n_samples": 3}, "`n_samples`.*must be None"),
        ({"remainder": "importance", "n_samples": 2, "scorer": "proxy", "proposal_mix": 0.0}, "proposal_mix"),
        ({"remainder": "importance", "n_samples": 2, "scorer": "proxy", "proposal_mix": 1.5}, "proposal_mix"),
        ({"remainder": "uniform", "n_samples": 2, "variant": "ratio"}, "`variant`.*only used"),
        ({"remainder": "none", "top_k": 2, "scorer": "quest", "block_size": 0}, "block_size"),
        ({"remainder": "none", "top_k": 2, "scorer": "proxy", "refresh": 0}, "refresh"),
    ],
)
def test_bad_content_options(kw, words):
    with pytest.raises(InvalidParameterError, match=words):
        H(**kw)


def test_feature_map_with_a_sampled_remainder_is_refused():
    with pytest.raises(InvalidParameterError, match="`feature_map`.*only used with remainder='features'"):
        H(rk.features.Positive(8), remainder="uniform", n_samples=2)


def _rows(est, Q, K, rng=0):
    """Support of every query as sets, (B, n)."""
    x = rk.attention._common.check_qkv(Q, K, K, "t", causal=est.causal)
    idx, valid = est.support(x, np.random.default_rng(rng))
    idx, valid = np.broadcast_arrays(idx, valid)
    return [[set(idx[b, i][valid[b, i]].tolist()) for i in range(idx.shape[1])] for b in range(idx.shape[0])]


@pytest.mark.parametrize("causal", [False, True])
def test_oracle_support_is_the_true_top_k_outside_the_window(causal):
    Q, K, _ = _qkv(4, lead=(2,), n=24, scale=1.0)
    est = H(remainder="none", window=1, top_k=5, scorer="oracle", causal=causal)
    got = _rows(est, Q, K)
    L = _logits(Q, K, causal)
    for b in range(2):
        for i in range(24):
            win = {j for j in range(24) if abs(i - j) <= 1 and (not causal or j <= i)}
            rest = [
                j for j in np.argsort(-L[b, i], kind="stable") if j not in win and np.isfinite(L[b, i, j])
            ]
            assert got[b][i] == win | set(rest[:5])


def test_quest_picks_the_block_of_the_max_logit_key():
    rng = np.random.default_rng(5)
    n, d, bs = 32, 4, 4
    K = 0.1 * rng.normal(size=(n, d))
    K[13] = [3.0, 0.0, 0.0, 0.0]  # block 3 (keys 12..15) holds the largest logit by far
    Q = np.tile([1.0, 0.0, 0.0, 0.0], (n, 1)) + 0.05 * rng.normal(size=(n, d))
    est = H(remainder="none", top_k=3, scorer="quest", block_size=bs)
    sup = _rows(est, Q[None], K[None])[0]
    for i in range(n):
        assert sup[i] == {12, 13, 14, 15}  # the whole block, though top_k is 3
    causal = H(remainder="none", top_k=3, scorer="quest", block_size=bs, causal=True)
    sup = _rows(causal, Q[None], K[None])[0]
    for i in range(13, n):
        assert 13 in sup[i] and all(j <= i for j in sup[i])


def test_proxy_scorer_is_causal_safe():
    Q, K, V = _qkv(6, lead=(2,), n=40)
    est = H(remainder="none", window=1, top_k=4, scorer="proxy", refresh=8, causal=True)
    a = _rows(est, Q, K)
    i = 21
    Q2, K2 = Q.copy(), K.copy()
    rng = np.random.default_rng(1)
    Q2[:, i + 1 :] = rng.normal(size=Q2[:, i + 1 :].shape)
    K2[:, i + 1 :] = rng.normal(size=K2[:, i + 1 :].shape)
    b = _rows(est, Q2, K2)
    for s in range(2):
        assert a[s][: i + 1] == b[s][: i + 1]
        assert all(max(a[s][t]) <= t for t in range(40))
    # queries of a period score with the mean of the queries before the period, not their own
    x = rk.attention._common.check_qkv(Q, K, V, "t", causal=True)
    from rfkit.attention._scorers import Scorer

    summ = Scorer(est, x, np.random.default_rng(0)).summary
    np.testing.assert_allclose(summ[:, :8], 0.0)
    np.testing.assert_allclose(
        summ[:, 16:24], np.broadcast_to(Q[:, :16].mean(1)[:, None], (2, 8, 5)), rtol=1e-13
    )


CASES = [
    {"remainder": "none", "window": 1, "top_k": 3, "scorer": "oracle"},
    {"remainder": "uniform", "n_samples": 3, "window": 1},
    {
        "remainder": "stratified",
        "n_samples": 3,
        "n_global": 1,
        "top_k": 2,
        "scorer": "quest",
        "block_size": 4,
    },
    {"remainder": "importance", "n_samples": 3, "window": 1, "scorer": "proxy", "refresh": 4},
    {"remainder": "importance", "n_samples": 4, "top_k": 2, "scorer": "lsh"},
    {"remainder": "uniform", "n_samples": 2, "top_k": 2, "scorer": "oracle"},
]


@pytest.mark.parametrize("kw", CASES, ids=lambda k: "-".join(str(v) for v in k.values()))
def test_causal_outputs_ignore_later_positions(kw):
    Q, K, V = _qkv(7, lead=(2,), n=24)
    est = H(causal=True, **kw)
    a = est(Q, K, V, rng=5, n_draws=3)
    i = 13
    rng = np.random.default_rng(9)
    Q2, K2, V2 = Q.copy(), K.copy(), V.copy()
    for A in (Q2, K2, V2):
        A[..., i + 1 :, :] = 3 * rng.normal(size=A[..., i + 1 :, :].shape)
    b = est(Q2, K2, V2, rng=5, n_draws=3)
    np.testing.assert_allclose(b.output[..., : i + 1, :], a.output[..., : i + 1, :], rtol=1e-12, atol=1e-14)
    assert not np.allclose(b.output[..., i + 1 :, :], a.output[..., i + 1 :, :])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kw", CASES, ids=lambda k: "-".join(str(v) for v in k.values()))
def test_padded_keys_are_never_used(kw, causal):
    n = 20
    Q, K, V = _qkv(8, lead=(2,), n=n)
    mask = np.zeros((2, n), dtype=bool)
    mask[:, 14:] = True
    mask[0, 5] = True
    est = H(causal=causal, **kw)
    a = est(Q, K, V, rng=2, key_padding_mask=mask)
    K2, V2 = K.copy(), V.copy()
    K2[mask] = 5.0  # a padded key that entered the support or a sample would change every output
    V2[mask] = 100.0
    b = est(Q, K2, V2, rng=2, key_padding_mask=mask)
    np.testing.assert_allclose(b.output, a.output, rtol=1e-12, atol=1e-14)
    assert np.all(np.abs(a.output) < 50)


@pytest.mark.parametrize("rem", SAMPLED)
def test_padding_with_enough_samples_equals_dropping_keys(rem):
    Q, K, V = _qkv(9, lead=(2,), n=20)
    mask = np.zeros((2, 20), dtype=bool)
    mask[:, 14:] = True
    a = _sampled(rem, s=20, window=1)(Q, K, V, rng=2, key_padding_mask=mask)
    b = rk.attention.softmax(Q, K[:, :14], V[:, :14])
    np.testing.assert_allclose(a.output, b, rtol=1e-12, atol=1e-13)


def test_batches_draws_and_seeds():
    Q, K, V = _qkv(10, lead=(2, 3), n=16)
    for kw in CASES:
        est = H(**kw)
        r = est(Q, K, V, rng=4, n_draws=5)
        assert r.output.shape == (5, 2, 3, 16, 3)
        assert r.log_scale.shape == r.denominator_values.shape == (5, 2, 3, 16)
        assert r.cost.exact_logits.shape == (2, 3, 16)
        same = est(Q, K, V, rng=4, n_draws=5)
        np.testing.assert_array_equal(same.output, r.output)
        one = est(Q, K, V, rng=4)
        assert one.output.shape == (2, 3, 16, 3)
        # a batch element alone: the same support (and, with enough samples, the same numbers)
        big = dict(kw, n_samples=16) if "n_samples" in kw else kw
        whole = H(**big)(Q, K, V, rng=4)
        part = H(**big)(Q[1, 2], K[1, 2], V[1, 2], rng=4)
        if kw.get("scorer") != "lsh" and kw["remainder"] != "none":
            np.testing.assert_allclose(whole.output[1, 2], part.output, rtol=1e-12, atol=1e-14)
    # draws differ from one another
    r = H(**CASES[1])(Q, K, V, rng=4, n_draws=2)
    assert not np.allclose(r.output[0], r.output[1])


def test_cost_counts():
    n, s = 12, 3
    Q, K, V = _qkv(11, lead=(2,), n=n)
    vis = np.arange(1, n + 1, dtype=float)
    # causal window 1 and one sink: |S(n)| = keys of {0, n-1, n} that n may see
    sup = np.array([len({0, i - 1, i} & set(range(i + 1))) for i in range(n)], dtype=float)
    samp = np.minimum(s, vis - sup)
    r = H(remainder="uniform", n_samples=s, window=1, n_global=1, causal=True)(Q, K, V, rng=0)
    np.testing.assert_array_equal(r.cost.exact_logits, np.broadcast_to(sup + samp, (2, n)))
    np.testing.assert_array_equal(r.cost.values_read, np.broadcast_to(sup + samp, (2, n)))
    np.testing.assert_array_equal(r.cost.random_features, 0.0)
    np.testing.assert_array_equal(r.cost.scoring_products, 0.0)
    # the oracle scorer's scores are every visible key's exact logit
    r = H(remainder="importance", n_samples=s, window=1, n_global=1, causal=True, scorer="oracle")(
        Q, K, V, rng=0
    )
    np.testing.assert_array_equal(r.cost.exact_logits, np.broadcast_to(sup + samp + vis, (2, n)))
    r = H(remainder="none", top_k=2, scorer="proxy", refresh=4, causal=True)(Q, K, V, rng=0)
    np.testing.assert_array_equal(r.cost.exact_logits, np.broadcast_to(np.minimum(2, vis), (2, n)))
    np.testing.assert_allclose(r.cost.scoring_products, np.broadcast_to(vis / 4, (2, n)))
    r = H(remainder="none", top_k=2, scorer="quest", block_size=4, causal=True)(Q, K, V, rng=0)
    np.testing.assert_array_equal(r.cost.scoring_products, np.broadcast_to(2 * np.ceil(vis / 4), (2, n)))
    # random features: m per query with the feature remainder; today's Hybrid counts its support
    r = H(rk.features.Positive(16), window=1, causal=True)(Q, K, V, rng=0)
    np.testing.assert_array_equal(r.cost.random_features, 16.0)
    np.testing.assert_array_equal(r.cost.exact_logits, np.broadcast_to(np.minimum(2, vis), (2, n)))


def test_feature_remainder_with_top_k_adds_the_scored_keys():
    Q, K, V = _qkv(12, lead=(2,), n=24, scale=1.0)
    fm = rk.features.Positive(16)
    base = H(fm, window=1)(Q, K, V, rng=3)
    top = H(fm, window=1, top_k=4, scorer="oracle")(Q, K, V, rng=3)
    exact = rk.attention.softmax(Q, K, V)
    assert np.mean((top.output - exact) ** 2) < np.mean((base.output - exact) ** 2)
    np.testing.assert_array_equal(top.cost.exact_logits - base.cost.exact_logits, 4 + 24)


def test_other_backends():
    torch = pytest.importorskip("torch")
    Q, K, V = _qkv(13, n=16)
    t = [torch.as_tensor(a) for a in (Q, K, V)]
    budget = H(remainder="uniform", epsilon=0.2, delta=0.1, base_samples=3, window=1)
    ref = budget(Q, K, V, rng=0)
    got = budget(*t, rng=0)
    np.testing.assert_array_equal(got.cost.exact_logits.numpy(), ref.cost.exact_logits)
    np.testing.assert_allclose(got.output.numpy(), ref.output, rtol=1e-10, atol=1e-13)
    for rem in ("none", "uniform", "stratified", "importance"):  # the same draws and numbers as NumPy's
        kw = {} if rem == "none" else {"n_samples": 3}
        est = H(remainder=rem, window=1, top_k=3, scorer="quest", causal=True, block_size=4, **kw)
        ref = est(Q, K, V, rng=0).output
        np.testing.assert_allclose(est(*t, rng=0).output.numpy(), ref, rtol=1e-10, atol=1e-13)
    for sc in SCORERS:
        est = H(rk.features.Positive(8), window=1, top_k=3, scorer=sc, causal=True, block_size=4)
        ref = est(Q, K, V, rng=0).output
        np.testing.assert_allclose(est(*t, rng=0).output.numpy(), ref, rtol=1e-10, atol=1e-13)


def test_draw_is_refused_without_features():
    Q, K, V = _qkv(14, n=8)
    d = rk.features.Positive(4).sample(5, rng=0)
    with pytest.raises(InvalidParameterError, match="`draw`"):
        H(remainder="uniform", n_samples=2)(Q, K, V, draw=d)


@pytest.mark.parametrize(
    "kw",
    [
        dict(remainder="uniform", n_samples=6),
        dict(remainder="stratified", n_samples=6, scorer="quest", block_size=4, top_k=5),
        dict(remainder="importance", n_samples=6, scorer="quest", block_size=4, top_k=5),
        dict(remainder="importance", n_samples=6, scorer="proxy", top_k=5),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sampled_numbers_do_not_depend_on_the_compute_blocks(monkeypatch, kw, dtype):
    """Draw blocks computed together give the numbers of each draw block computed alone."""
    from rfkit.attention import _remainder

    Q, K, V = (a.astype(dtype) for a in _qkv(seed=4, lead=(3,), n=96, d=16, dv=4, scale=0.8))
    est = H(window=3, n_global=2, causal=True, **kw)
    runs = []
    for group in (1, 1 << 30):  # one draw block per compute block; all of them in one
        monkeypatch.setattr(_remainder, "_GROUP_ELEMS", group)
        res = est(Q, K, V, rng=5, n_draws=2)
        runs.append((res.output, res.log_scale, res.denominator_values, res.cost.exact_logits))
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_dense_members_matches_a_loop():
    """The support's dense membership mask (NumPy's scatter) against a loop over its entries."""
    from rfkit._backend_ops import dense_members

    rng = np.random.default_rng(3)
    idx = rng.integers(0, 12, size=(2, 7, 5))
    valid = rng.random((2, 7, 5)) < 0.7
    want = np.zeros((2, 7, 12), bool)
    for b, i, j in zip(*np.nonzero(valid)):
        want[b, i, idx[b, i, j]] = True
    np.testing.assert_array_equal(dense_members(idx, valid, 12, np), want)


def test_scatter_inverse_puts_values_back_where_the_permutation_took_them():
    """NumPy's scatter and the namespace path (a stable argsort of the permutation) against a loop."""
    from rfkit._backend_ops import scatter_inverse

    rng = np.random.default_rng(4)
    order = np.argsort(rng.random((3, 4, 10)), axis=-1)
    values = rng.random((3, 4, 10)) < 0.5
    want = np.empty_like(values)
    for b, i in np.ndindex(3, 4):
        want[b, i, order[b, i]] = values[b, i]
    np.testing.assert_array_equal(scatter_inverse(values, order, np), want)
    torch = pytest.importorskip("torch")
    got = scatter_inverse(torch.as_tensor(values), torch.as_tensor(order), _torch_namespace())
    np.testing.assert_array_equal(got.numpy(), want)


def _torch_namespace():
    import torch

    from rfkit._backend import get_backend

    return get_backend(("x", torch.zeros(1))).xp


@pytest.mark.parametrize("w", [1, 4, 9, 16])
def test_top_order_is_the_stable_sorts_first_keys(w):
    """The top-k order (NumPy's partition) is the stable full sort's first ``w``: ties, -inf, -0.0, NaN."""
    from rfkit._backend_ops import top_order

    rng = np.random.default_rng(8)
    key = rng.integers(-3, 3, size=(3, 5, 16)).astype(np.float32)  # many ties
    key[0, :, ::3] = -np.inf
    key[1, :, 5:] = np.inf
    key[1, 2, ::2] = -0.0
    key[2, 1, 3] = np.nan
    key[2, 3, :14] = np.nan
    want = np.argsort(key, axis=-1, kind="stable")[..., :w]
    np.testing.assert_array_equal(top_order(key, w, np), want)
    f = rng.normal(size=(4, 9, 16))
    np.testing.assert_array_equal(top_order(f, w, np), np.argsort(f, axis=-1, kind="stable")[..., :w])
