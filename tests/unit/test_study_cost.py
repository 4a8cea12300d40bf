"""Cost per query of attention estimators (exact keys + features): the function, the Hybrid budget split
and the summary's cost column, with exact values on small synthetic designs."""

from __future__ import annotations

import math

import numpy as np
import pytest

import rfkit as rk
import rfkit.study as st
from rfkit.attention._common import check_qkv
from rfkit.exceptions import InvalidParameterError
from rfkit.study._builtin_records import hybrid_budget
from rfkit.study._cost import LSH_ROTATIONS, _codes, attention_cost, support_size


def _qkv(n=12, d=4, slices=(2,), seed=2442101192988600726):
    g = np.random.default_rng(seed)
    return tuple(0.5 * g.standard_normal((*slices, n, d)) for _ in range(3))


def _brute_support(n, M, window, n_global, causal):
    """Keys in the support of each query, counted one by one."""
    out = []
    for i in range(n):
        keys = set()
        for j in range(M):
            in_window = window is not None and (i - window <= j <= (i if causal else i + window))
            if (in_window or j < n_global) and (not causal or j <= i):
                keys.add(j)
        out.append(len(keys))
    return np.array(out)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("window", "n_global"), [(None, 0), (0, 0), (2, 0), (None, 3), (2, 3), (20, 1)])
def test_support_size_counts_each_key_once(window, n_global, causal):
    got = support_size(9, 9, window=window, n_global=n_global, causal=causal)
    np.testing.assert_array_equal(got, _brute_support(9, 9, window, n_global, causal))


def test_cost_of_each_estimator_exactly():
    Q, K, _ = _qkv(n=12, d=4)
    pos = rk.features.Positive(16)
    assert attention_cost(rk.attention.RFA(pos), Q, K) == 16
    assert attention_cost(rk.attention.RFA(rk.features.Trig(8)), Q, K) == 16  # columns: sin and cos
    assert attention_cost(rk.attention.SNIS(n_samples=24), Q, K) == 24
    assert attention_cost(rk.attention.LARA(n_proposals=3, samples_per_proposal=4), Q, K) == 12
    assert attention_cost(rk.attention.LARA(), Q, K) == 8  # default: min(8, n) proposals of 1 sample
    assert attention_cost(rk.attention.RA(5), Q, K) == 12  # every key, exactly
    assert attention_cost(rk.attention.RA(5, causal=True), Q, K) == 6.5  # (n + 1) / 2 keys
    # Hybrid: causal window 2 + 1 sink on 12 queries: supports 1, 2, 3, 4, 4, ... (query i >= 3: i-2..i + key 0)
    h = rk.attention.Hybrid(pos, window=2, n_global=1, causal=True)
    assert attention_cost(h, Q, K) == pytest.approx((1 + 2 + 3 + 9 * 4) / 12 + 16)
    hb = rk.attention.Hybrid(pos, window=2)  # bidirectional: 3, 4, 5 x 8, 4, 3
    assert attention_cost(hb, Q, K) == pytest.approx((3 + 4 + 5 * 8 + 4 + 3) / 12 + 16)
    assert attention_cost(rk.attention.Hybrid(pos), Q, K) == 16  # empty support: RFA's cost


def test_cost_of_hybrids_with_keys_by_content_and_sampled_remainders_is_measured():
    """Keys by content and sampled remainders: the keys each query actually computes (its result's
    ``cost``), not the nominal top_k + n_samples: query i of a causal sequence sees only i + 1 keys."""
    Q, K, _ = _qkv(n=12, d=4)
    H = rk.attention.Hybrid
    # causal window 2 + 1 sink + 3 samples: query i computes min(i + 1, 3 + 1 + 3) keys
    uni = H(window=2, n_global=1, causal=True, remainder="uniform", n_samples=3)
    assert attention_cost(uni, Q, K) == pytest.approx(np.minimum(np.arange(1, 13), 7).mean())
    top = H(window=2, n_global=1, causal=True, remainder="none", top_k=2, scorer="proxy")
    assert attention_cost(top, Q, K) == pytest.approx(np.minimum(np.arange(1, 13), 6).mean())
    oracle = H(rk.features.Positive(16), window=2, n_global=1, causal=True, top_k=2, scorer="oracle")
    support = np.minimum(np.arange(1, 13), 6).mean()
    assert attention_cost(oracle, Q, K) == pytest.approx(support + 16 + 6.5)  # + every visible key's score
    # Quest adds whole blocks: the measured cost is its result's, at most block_size - 1 over the nominal
    quest = H(window=1, causal=True, remainder="none", top_k=2, scorer="quest", block_size=4)
    res = quest(*_qkv(n=12, d=4), rng=0)
    assert attention_cost(quest, Q, K) == pytest.approx(float(res.cost.exact_logits.mean()))


def test_cost_of_estimators_of_your_own():
    Q, K, _ = _qkv()

    class Unknown:
        def __call__(self, Q, K, V, *, rng=None): ...

    class Known(Unknown):
        def cost_per_query(self, n_queries, n_keys, dim, causal):
            return n_keys / 2 + dim

    assert math.isnan(attention_cost(Unknown(), Q, K))
    assert attention_cost(Known(), Q, K) == 12 / 2 + 4


def test_lsh_cost_is_the_mean_support_of_the_estimator_itself():
    """The cost's LSH supports equal Hybrid's own (its support method), rotation by rotation."""
    Q, K, V = _qkv(n=20, d=6, slices=(3,))
    est = rk.attention.Hybrid(rk.features.Positive(8), window=1, lsh_buckets=4, causal=True)
    x = check_qkv(Q, K, V, "Hybrid", causal=True)
    gen_a, gen_b = np.random.default_rng(7), np.random.default_rng(7)
    sizes = []
    for _ in range(LSH_ROTATIONS):
        idx, valid = est.support(x, gen_a)  # draws its rotation from gen_a
        R = gen_b.standard_normal((6, 2))  # the same rotation
        mine = support_size(20, 20, window=1, causal=True, codes=(_codes(Q, R), _codes(K, R)))
        np.testing.assert_array_equal(mine, valid.sum(axis=-1))
        sizes.append(mine.mean())
    assert attention_cost(est, Q, K, rng=7) == pytest.approx(np.mean(sizes) + 8)


def test_hybrid_budget_split():
    assert hybrid_budget(64, {"window": 16, "n_global": 4, "causal": True}) == {"map_budget": 43}
    assert hybrid_budget(64, {"window": 16, "n_global": 4}) == {"map_budget": 27}
    assert hybrid_budget(64, {}) == {"map_budget": 64}
    with pytest.raises(InvalidParameterError, match="leaves no random features after the support's 61"):
        hybrid_budget(61, {"window": 28, "n_global": 4})
    with pytest.raises(InvalidParameterError, match="give the map's `n_features`"):
        hybrid_budget(64, {"lsh_buckets": 8})
    assert hybrid_budget(64, {"window": "wide"}) == {"map_budget": 64}  # Hybrid itself refuses it


def test_hybrid_budget_split_without_features():
    """Sampled or dropped remainders: the budget after window and sinks goes to top_k and n_samples."""
    base = {"window": 4, "n_global": 4, "causal": True}  # 5 + 4 exact keys
    sampled = {**base, "scorer": "quest", "remainder": "uniform"}
    assert hybrid_budget(64, sampled) == {"top_k": 27, "n_samples": 28}
    assert hybrid_budget(64, {**sampled, "top_k": 16}) == {"n_samples": 39}
    assert hybrid_budget(64, {**sampled, "n_samples": 5}) == {"top_k": 50}
    assert hybrid_budget(32, {**base, "scorer": "proxy", "remainder": "none"}) == {"top_k": 23}
    assert hybrid_budget(32, {**base, "remainder": "importance", "scorer": "proxy"}) == {
        "top_k": 11,
        "n_samples": 12,
    }
    assert hybrid_budget(32, {"window": 4, "remainder": "stratified"}) == {"n_samples": 23}
    with pytest.raises(InvalidParameterError, match="leaves 1 keys after the support's 9"):
        hybrid_budget(10, sampled)


def _design(**kw):
    args = dict(
        name="cost",
        kind="attention",
        trials=2,
        seed=11,
        data={"source": "sequence", "n_tokens": 16, "dim": 4},
        grid={"feature_dim": [16]},
        estimators=[
            {"label": "favor+", "estimator": "RFA", "projection": "orthogonal"},
            {"label": "hyperbolic", "estimator": "RFA", "map": "Hyperbolic"},
            {"label": "hybrid", "estimator": "Hybrid", "window": 2, "n_global": 1},
            {"label": "hybrid-ratio", "estimator": "Hybrid", "window": 2, "variant": "ratio"},
            {"label": "snis", "estimator": "SNIS"},
            {"label": "lara", "estimator": "LARA", "samples_per_proposal": 4},
            {"label": "ra", "estimator": "RA"},
        ],
    )
    return st.Design(**{**args, **kw})


def test_summary_cost_column_exact_values():
    d = _design()
    # the budget of 16 columns: Hybrid's support first (5 + 1 nominal keys), the rest to its map
    assert d.estimator_params(d.estimators[2], d.cells()[0])["samples"] == 10
    assert d.estimator_params(d.estimators[3], d.cells()[0])["samples"] == 11
    s = st.run(d).summary()
    cost = s[s.metric == "mse"].set_index("estimator")["cost"]
    # window 2 + sink 0 on 16 tokens (bidirectional): supports 3, 4, 5 x 12, 4, 3; the sink adds a key
    # to the queries i >= 3 (their window does not reach key 0)
    window = np.array([3, 4] + [5] * 12 + [4, 3])
    sink = (np.arange(16) >= 3).astype(int)
    assert cost["favor+"] == 16 and cost["hyperbolic"] == 16 and cost["snis"] == 16 and cost["lara"] == 16
    assert cost["hybrid"] == pytest.approx((window + sink).mean() + 10)
    assert cost["hybrid-ratio"] == pytest.approx(window.mean() + 11)
    assert cost["ra"] == 16
    assert (cost <= 16).all()  # equal budgets: a Hybrid never costs more than its budget
    per_trial = st.run(d).trials
    assert (per_trial.groupby("estimator")["cost"].nunique() == 1).all()


def test_cost_column_on_a_decoder_like_design():
    """Causal data: the split uses the causal window (w + 1 keys) and RA sees (n + 1) / 2 keys."""
    d = st.Design(
        name="causal-cost",
        kind="attention",
        trials=2,
        seed=3,
        data={"source": "sequence", "n_tokens": 10, "dim": 4},
        grid={"feature_dim": [12]},
        estimators=[
            {"label": "hybrid", "estimator": "Hybrid", "window": 3, "n_global": 2, "causal": True},
            {"label": "ra", "estimator": "RA", "causal": True},
        ],
    )
    assert d.estimator_params(d.estimators[0], d.cells()[0])["samples"] == 12 - 4 - 2
    s = st.run(d).summary()
    cost = s[s.metric == "mse"].set_index("estimator")["cost"]
    expect = _brute_support(10, 10, 3, 2, True).mean() + 6
    assert cost["hybrid"] == pytest.approx(expect) and cost["ra"] == 5.5


def test_budget_too_small_for_the_support_is_refused_when_built():
    with pytest.raises(InvalidParameterError, match=r"estimators\[2\].*leaves no random features"):
        _design(grid={"feature_dim": [5]})
