"""The drop-in measures against hand-computed values: next-token KL, top-1, NLL, perplexity, cosine,
the study's one-pass KL, and the rank correlation of proxy and damage."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

import rfkit.data as rd
from rfkit.exceptions import InvalidParameterError, ShapeError
from rfkit.study._dropin_tables import dropin_points, proxy_correlation, spearman
from rfkit.study._eval_dropin import _DecoderRef, _EncoderRef

LN2 = math.log(2.0)


def test_kl_hand_computed() -> None:
    p = np.log([0.5, 0.25, 0.25])
    q = np.log([0.25, 0.5, 0.25])
    # 0.5 ln(0.5/0.25) + 0.25 ln(0.25/0.5) + 0.25 ln 1 = 0.5 ln2 - 0.25 ln2
    assert rd.next_token_kl(p, q) == pytest.approx(0.25 * LN2, abs=1e-15)
    # KL(q || p) = 0.25 ln(0.25/0.5) + 0.5 ln(0.5/0.25) = -0.25 ln2 + 0.5 ln2
    assert rd.next_token_kl(q, p) == pytest.approx(0.25 * LN2, abs=1e-15)
    # logits are defined up to a constant per position; equal distributions give 0
    assert rd.next_token_kl(p + 7.0, q - 3.0) == pytest.approx(0.25 * LN2, abs=1e-14)
    assert rd.next_token_kl(p, p + 100.0) == pytest.approx(0.0, abs=1e-14)
    two = rd.next_token_kl(np.stack([p, p]), np.stack([q, p]))
    np.testing.assert_allclose(two, [0.25 * LN2, 0.0], atol=1e-14)


def test_kl_of_extreme_logits_is_finite_and_nan_propagates() -> None:
    z = np.array([[1000.0, -1000.0, 0.0]])
    w = np.array([[-1000.0, 1000.0, 0.0]])
    assert rd.next_token_kl(z, w)[0] == pytest.approx(2000.0, rel=1e-12)  # p ~ one-hot on token 0
    assert np.isnan(rd.next_token_kl(z, np.array([[np.nan, 0.0, 0.0]]))[0])


def test_top1_agreement_hand_computed() -> None:
    z = np.array([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    w = np.array([[0.0, 5.0, 1.0], [0.0, 4.0, 0.0], [0.0, 1.0, 1.0]])
    np.testing.assert_array_equal(rd.top1_agreement(z, w), [True, False, False])  # ties: the first index


def test_token_nll_next_token_nll_and_perplexity_hand_computed() -> None:
    probs = np.array([[[0.5, 0.25, 0.25], [0.1, 0.2, 0.7], [0.3, 0.3, 0.4]]])
    logits = np.log(probs)
    ids = np.array(
        [[2, 0, 2]]
    )  # position 0 predicts ids[1] = 0 (p 0.5), position 1 predicts ids[2] = 2 (p 0.7)
    np.testing.assert_allclose(
        rd.token_nll(logits[0, :2], np.array([0, 2])), [LN2, -math.log(0.7)], rtol=1e-14
    )
    nll = rd.next_token_nll(logits, ids)
    np.testing.assert_allclose(nll[0, :2], [LN2, -math.log(0.7)], rtol=1e-14)
    assert np.isnan(nll[0, 2])  # the last position has no next token
    assert rd.perplexity(logits, ids) == pytest.approx(math.exp((LN2 - math.log(0.7)) / 2), rel=1e-14)
    # a padded last token: position 1 has no target either
    nll = rd.next_token_nll(logits, ids, np.array([[True, True, False]]))
    assert np.isnan(nll[0, 1]) and nll[0, 0] == pytest.approx(LN2)
    assert rd.perplexity(logits, ids, np.array([[True, True, False]])) == pytest.approx(2.0, rel=1e-14)


def test_cosine_similarity_hand_computed() -> None:
    a = np.array([[1.0, 0.0], [3.0, 4.0], [0.0, 0.0]])
    b = np.array([[1.0, 1.0], [-3.0, -4.0], [1.0, 2.0]])
    c = rd.cosine_similarity(a, b)
    np.testing.assert_allclose(c[:2], [1 / math.sqrt(2), -1.0], rtol=1e-15)
    assert np.isnan(c[2])  # a zero vector has no direction


def test_measures_refuse_bad_input() -> None:
    with pytest.raises(ShapeError, match="same shape"):
        rd.next_token_kl(np.zeros((2, 3)), np.zeros((2, 4)))
    with pytest.raises(InvalidParameterError, match="floating"):
        rd.top1_agreement(np.zeros((2, 3), dtype=int), np.zeros((2, 3)))
    with pytest.raises(InvalidParameterError, match="vocabulary"):
        rd.token_nll(np.zeros((2, 3)), np.array([0, 3]))
    with pytest.raises(ShapeError, match="ids"):
        rd.next_token_nll(np.zeros((1, 3, 4)), np.zeros((1, 2), dtype=int))
    with pytest.raises(InvalidParameterError, match="next token"):
        rd.perplexity(np.zeros((2, 1, 4)), np.zeros((2, 1), dtype=int))


# --------------------------------------------------------------------------- the study's one-pass measures


class _FakeLM:
    """A 'model' whose logits are hidden @ W (the study's reference only calls .logits)."""

    def __init__(self, W: np.ndarray) -> None:
        self.W = W

    def logits(self, h: np.ndarray) -> np.ndarray:
        return h @ self.W


def test_study_decoder_measures_equal_the_public_functions() -> None:
    rng = np.random.default_rng(4)
    n, T, H, V = 2, 300, 8, 50  # T > the study's chunk of 128 positions
    lm = _FakeLM(rng.standard_normal((H, V)))
    h_e = rng.standard_normal((n, T, H))
    h_a = h_e + 0.3 * rng.standard_normal((n, T, H))
    ids = rng.integers(0, V, (n, T))
    ref = _DecoderRef(lm, h_e, ids)
    got = ref.damage(h_a, n)
    z_e, z_a = lm.logits(h_e), lm.logits(h_a)
    assert got["kl"] == pytest.approx(float(np.mean(rd.next_token_kl(z_e, z_a))), rel=1e-12)
    assert got["top1_agree"] == pytest.approx(float(np.mean(rd.top1_agreement(z_e, z_a))), abs=1e-15)
    ratio = rd.perplexity(z_a, ids) / rd.perplexity(z_e, ids)
    assert got["ppl_ratio"] == pytest.approx(ratio, rel=1e-12)
    assert ref.perplexity() == pytest.approx(rd.perplexity(z_e, ids), rel=1e-12)
    one = ref.damage(h_a, 1)  # the first text only (the one-layer mode's subset)
    assert one["kl"] == pytest.approx(float(np.mean(rd.next_token_kl(z_e[:1], z_a[:1]))), rel=1e-12)
    assert ref.damage(h_e, n)["kl"] == pytest.approx(0.0, abs=1e-12)


def test_study_encoder_measures_equal_the_public_functions() -> None:
    rng = np.random.default_rng(5)
    model = type("M", (), {"embedding": staticmethod(lambda h, m: h.mean(axis=1))})()
    h_e = rng.standard_normal((3, 6, 4))
    h_a = h_e + 0.2 * rng.standard_normal((3, 6, 4))
    mask = np.ones((3, 6), dtype=bool)
    got = _EncoderRef(model, h_e, mask).damage(h_a, 3)
    assert got["hidden_cos"] == pytest.approx(float(np.mean(rd.cosine_similarity(h_e, h_a))), rel=1e-14)
    emb = rd.cosine_similarity(h_e.mean(axis=1), h_a.mean(axis=1))
    assert got["emb_cos"] == pytest.approx(float(np.mean(emb)), rel=1e-14)


# --------------------------------------------------------------------------- does the proxy predict the damage?


def _trials(proxy: np.ndarray, damage: np.ndarray, draws: int = 4, noise: float = 0.0) -> pd.DataFrame:
    rng = np.random.default_rng(9)
    rows = []
    for i, (x, y) in enumerate(zip(proxy, damage)):
        for t in range(draws):
            rows.append(
                {
                    "n_tokens": 64,
                    "feature_dim": 32 * (1 + i % 2),
                    "estimator": f"e{i // 2}",
                    "trial": t,
                    "status": "ok",
                    "dec_head_mse": x * (1 + noise * rng.standard_normal()),
                    "kl": y * (1 + noise * rng.standard_normal()),
                    "enc_head_mse": np.nan,
                    "emb_cos": np.nan,
                }
            )
    return pd.DataFrame(rows)


def test_spearman_equals_scipy() -> None:
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal(12), rng.standard_normal(12)
    y[3] = y[4]  # a tie: mid-ranks
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-14)
    assert np.isnan(spearman(x, np.ones(12)))


def test_mid_ranks_equal_scipy_rankdata() -> None:
    """NumPy mid-ranks (no SciPy import) are rankdata's average ranks: ties, infinities, rows, one point."""
    from scipy.stats import rankdata

    from rfkit.study._dropin_tables import mid_ranks

    rng = np.random.default_rng(4)
    a = rng.integers(0, 6, size=(50, 17)).astype(float)  # many ties
    a[0, :3] = [np.inf, -np.inf, np.inf]
    a[1] = 2.0  # all tied
    np.testing.assert_array_equal(mid_ranks(a), rankdata(a, axis=1))
    b = rng.standard_normal(31)
    np.testing.assert_array_equal(mid_ranks(b), rankdata(b))
    np.testing.assert_array_equal(mid_ranks(np.array([3.0])), [1.0])


def test_spearman_leaves_out_nan_pairs_as_pandas_does() -> None:
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal(20), rng.standard_normal(20)
    x[2], y[7], y[9] = np.nan, np.nan, np.inf
    want = pd.Series(x).corr(pd.Series(y), method="spearman")
    assert spearman(x, y) == pytest.approx(want, abs=1e-14)
    assert np.isnan(spearman([1.0, np.nan], [np.nan, 2.0]))


def test_proxy_correlation_of_a_monotone_relation() -> None:
    proxy = np.array([1.0, 2, 3, 4, 5, 6, 7, 8])
    trials = _trials(proxy, proxy**2, noise=0.01)
    pts = dropin_points(trials, ["n_tokens", "feature_dim"])
    assert len(pts) == 8 and set(pts["model"]) == {"smollm2"}
    np.testing.assert_allclose(np.sort(pts["proxy"]), proxy, rtol=0.05)
    c = proxy_correlation(trials, ["n_tokens", "feature_dim"])
    assert len(c) == 1
    r = c.iloc[0]
    assert r["rho"] == pytest.approx(1.0) and r["n_points"] == 8
    # exact permutation p of rho = 1 with 8 points: 2 / 8! = 5e-5, below the resolution 1/10000
    assert r["p_value"] == pytest.approx(1 / 10000, abs=2e-4)
    assert r["ci_low"] <= 1.0 <= r["ci_high"] + 1e-12


def test_proxy_correlation_of_unrelated_points_is_not_significant() -> None:
    proxy = np.array([1.0, 2, 3, 4, 5, 6, 7, 8])
    damage = np.array([3.0, 8, 1, 6, 2, 7, 5, 4])  # rank differences -2 -6 2 -2 3 -1 2 4: sum d^2 = 78
    c = proxy_correlation(_trials(proxy, damage), ["n_tokens", "feature_dim"]).iloc[0]
    assert c["rho"] == pytest.approx(1 - 6 * 78 / (8 * 63))
    assert c["p_value"] > 0.5


def test_proxy_correlation_is_reproducible_and_checks_arguments() -> None:
    t = _trials(np.arange(1.0, 7.0), np.arange(1.0, 7.0) ** 0.5, noise=0.2)
    a = proxy_correlation(t, ["n_tokens", "feature_dim"])
    b = proxy_correlation(t, ["n_tokens", "feature_dim"])
    pd.testing.assert_frame_equal(a, b)
    with pytest.raises(InvalidParameterError, match="n_boot"):
        proxy_correlation(t, ["n_tokens", "feature_dim"], n_boot=0)
    with pytest.raises(InvalidParameterError, match="confidence"):
        proxy_correlation(t, ["n_tokens", "feature_dim"], confidence=1.0)
