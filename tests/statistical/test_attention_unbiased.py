"""Unbiasedness of RA (and detection of a wrong noise scale) and of LARA's numerator/denominator.

Every comparison uses 5 Monte Carlo standard errors with fixed seeds; tolerances are
never tuned to the observed values (Zheng, Wang & Kong (ICML 2022)).
"""

from __future__ import annotations

import numpy as np
import pytest

from rfkit import attention as att

Z_TOL = 5.0


def exact(Q, K, V, causal=False):
    return att.softmax(Q, K, V, causal=causal)


def exact_Z(Q, K, causal=False):
    L = Q @ np.swapaxes(K, -1, -2)
    if causal:
        L = np.where(np.tri(L.shape[-2], L.shape[-1], dtype=bool), L, -np.inf)
    return np.exp(L).sum(-1)


# ----------------------------------------------------------------------------- RA
RA_SETTINGS = {
    # name: (shape, n, M, d, dv, scale, causal)
    "bidirectional d=4": ((), 5, 8, 4, 2, 0.5, False),
    "causal d=8": ((), 6, 6, 8, 3, 0.6, True),
    "two heads, rectangular, logits up to ~5": ((2,), 3, 10, 3, 2, 1.3, False),
    "peaked, d=16": ((), 4, 12, 16, 2, 0.45, False),
}


@pytest.mark.parametrize("setting", list(RA_SETTINGS), ids=list(RA_SETTINGS))
def test_ra_mean_is_exact_attention(setting):
    shape, n, M, d, dv, scale, causal = RA_SETTINGS[setting]
    rng = np.random.default_rng(918_273_645)
    Q = scale * rng.standard_normal(shape + (n, d))
    K = scale * rng.standard_normal(shape + (M, d))
    V = rng.standard_normal(shape + (M, dv))
    res = att.RA(n_samples=40_000, causal=causal)(Q, K, V, rng=5_550_123)
    ref = exact(Q, K, V, causal)
    # (+1e-12: rows that see a single key are deterministic, with an MCSE of pure round-off)
    assert np.all(np.abs(res.output - ref) < Z_TOL * res.mcse + 1e-12), (res.output - ref) / res.mcse
    # the reported MCSE is the spread of independent replicates (not an overestimate)
    reps = np.stack(
        [att.RA(n_samples=1000, causal=causal)(Q, K, V, rng=70_000 + r).output for r in range(40)]
    )
    mcse_1000 = att.RA(n_samples=1000, causal=causal)(Q, K, V, rng=1).mcse
    random = mcse_1000 > 1e-12
    ratio = reps.std(0, ddof=1)[random] / mcse_1000[random]
    assert np.all((ratio > 0.5) & (ratio < 2.0)), ratio


def ra_reference(Q, K, V, S, noise_scale, rng):
    """Independent RA implementation with a configurable noise scale (for the negative test).

    ``noise_scale = d**-0.25`` mimics adding N(0, I) noise to q + k *before* scaling
    q and k by d**-0.25 (the public reference code's 1/sqrt(d) logit scaling): in
    the coordinates where q.k is the logit, the noise is then too small.
    """
    n, d = Q.shape
    out = np.empty((n, V.shape[1]))
    se = np.empty_like(out)
    half_k = 0.5 * np.sum(K * K, axis=1)
    for i in range(n):
        L = K @ Q[i]
        pi = np.exp(L - L.max())
        pi /= pi.sum()
        comp = rng.choice(K.shape[0], size=S, p=pi)
        W = Q[i] + K[comp] + noise_scale * rng.standard_normal((S, d))
        Lf = W @ K.T - half_k
        P = np.exp(Lf - Lf.max(1, keepdims=True))
        F = (P / P.sum(1, keepdims=True)) @ V
        out[i], se[i] = F.mean(0), F.std(0, ddof=1) / np.sqrt(S)
    return out, se


def test_ra_wrong_noise_scale_is_detected_as_biased():
    rng = np.random.default_rng(246_813_579)
    d = 16
    Q = 0.4 * rng.standard_normal((3, d))
    K = 0.4 * rng.standard_normal((10, d))
    V = rng.standard_normal((10, 2))
    ref = exact(Q, K, V)
    # the detector itself: the correct scale passes ...
    good, good_se = ra_reference(Q, K, V, 40_000, 1.0, np.random.default_rng(1_111))
    assert np.all(np.abs(good - ref) < Z_TOL * good_se)
    # ... the reference-code scale is biased by far more than 5 MCSE ...
    bad, bad_se = ra_reference(Q, K, V, 40_000, d**-0.25, np.random.default_rng(2_222))
    assert np.max(np.abs(bad - ref) / bad_se) > Z_TOL
    # ... and rfkit's RA agrees with the correct one, not the wrong one
    res = att.RA(n_samples=40_000)(Q, K, V, rng=3_333)
    assert np.all(np.abs(res.output - ref) < Z_TOL * res.mcse)
    assert np.max(np.abs(res.output - bad) / np.hypot(res.mcse, bad_se)) > Z_TOL


# ----------------------------------------------------------------------------- LARA / SNIS
def lara_problem(seed=135_792_468, n=16, d=4, dv=2, scale=0.5):
    rng = np.random.default_rng(seed)
    Q = scale * rng.standard_normal((n, d))
    K = scale * rng.standard_normal((n, d))
    V = rng.standard_normal((n, dv))
    return Q, K, V


@pytest.mark.slow
@pytest.mark.parametrize(
    "est",
    [
        att.LARA(n_proposals=4, weights="optimal", alpha_floor=None),
        att.LARA(n_proposals=4, weights="balance"),
        att.LARA(n_proposals=4, weights="optimal", alpha_floor=None, samples_per_proposal=3),
        att.SNIS("chunk-mean", n_samples=6, n_chunks=4),
        att.SNIS("standard", n_samples=4),
    ],
    ids=["lara-optimal", "lara-balance", "lara-optimal-k3", "snis-chunk-mean", "snis-standard"],
)
def test_numerator_and_denominator_unbiased(est):
    """E[D_n] = Z_n and E[N_n] = Z_n Attn(q_n) for every query (Zheng, Wang & Kong (ICML 2022): MIS with sum_c alpha = 1)."""
    Q, K, V = lara_problem()
    T = 6000
    # T independent trials as T 'heads' with independent noise per head
    Qt, Kt, Vt = (np.broadcast_to(a, (T,) + a.shape) for a in (Q, K, V))
    res = type(est)(**{**est.__dict__, "shared_across_heads": False})(Qt, Kt, Vt, rng=97_531)
    den = res.normalizer  # (T, n)
    num = res.numerator  # (T, n, dv)
    Z = exact_Z(Q, K)
    ZA = Z[:, None] * exact(Q, K, V)
    z_den = (den.mean(0) - Z) / (den.std(0, ddof=1) / np.sqrt(T))
    z_num = (num.mean(0) - ZA) / (num.std(0, ddof=1) / np.sqrt(T))
    assert np.all(np.abs(z_den) < Z_TOL), z_den
    assert np.all(np.abs(z_num) < Z_TOL), z_num
    # the check has power: a 5% scale error in the weights would be caught
    assert np.max(np.abs(den.mean(0) * 1.05 - Z) / (den.std(0, ddof=1) / np.sqrt(T))) > Z_TOL


# ----------------------------------------------------------------------------- causal SNIS / LARA, masks
def exact_masked(Q, K, V, causal, mask):
    """Exact Z_n and Z_n Attn(q_n) over the keys query n may see (causal: m <= n; unmasked)."""
    L = Q @ K.T
    see = np.broadcast_to(~mask[None, :], L.shape) if mask is not None else np.ones(L.shape, bool)
    if causal:
        see = see & np.tri(*L.shape, dtype=bool)
    E = np.where(see, np.exp(L), 0.0)
    return E.sum(-1), E @ V


MASK = np.zeros(16, dtype=bool)
MASK[[4, 5, 6, 7, 11, 15]] = True  # a whole chunk of the C = 4 partition and two more keys


@pytest.mark.slow
@pytest.mark.parametrize(
    ("est", "masked"),
    [
        (att.SNIS("standard", n_samples=4, causal=True), False),
        (att.SNIS("chunk-mean", n_samples=6, n_chunks=4, causal=True), False),
        (att.LARA(n_proposals=4, weights="balance", causal=True), False),
        (att.LARA(n_proposals=4, weights="balance", samples_per_proposal=3, causal=True), False),
        (att.LARA(n_proposals=4, weights="balance", samples_per_proposal=2, causal=True), True),
        (att.SNIS("chunk-mean", n_samples=6, n_chunks=4, causal=True), True),
        (att.LARA(n_proposals=4, weights="optimal", alpha_floor=None), True),
        (att.SNIS("chunk-mean", n_samples=6, n_chunks=4), True),
    ],
    ids=[
        "snis-standard-causal",
        "snis-chunk-mean-causal",
        "lara-balance-causal",
        "lara-balance-causal-k3",
        "lara-balance-causal-masked",
        "snis-chunk-mean-causal-masked",
        "lara-optimal-masked",
        "snis-chunk-mean-masked",
    ],
)
def test_causal_and_masked_numerator_and_denominator_unbiased(est, masked):
    """E[D_n] = Z_n and E[N_n] = Z_n Attn(q_n) with the causal prefix and/or a key padding mask.

    Causal chunk-mean proposals use only chunks before the query's (LARA docstring): the MIS
    weights of each query sum to one over the proposals it uses, so both stay unbiased.
    """
    Q, K, V = lara_problem()
    mask = MASK if masked else None
    T = 6000
    Qt, Kt, Vt = (np.broadcast_to(a, (T,) + a.shape) for a in (Q, K, V))
    res = type(est)(**{**est.__dict__, "shared_across_heads": False})(
        Qt, Kt, Vt, rng=86_420_135, key_padding_mask=mask
    )
    den = res.normalizer  # (T, n)
    num = res.numerator  # (T, n, dv)
    Z, ZA = exact_masked(Q, K, V, est.causal, mask)
    se_den = den.std(0, ddof=1) / np.sqrt(T)
    se_num = num.std(0, ddof=1) / np.sqrt(T)
    z_den = (den.mean(0) - Z) / se_den
    z_num = (num.mean(0) - ZA) / se_num
    assert np.all(np.abs(z_den) < Z_TOL), z_den
    assert np.all(np.abs(z_num) < Z_TOL), z_num
    # the check has power: a 5% scale error in the weights would be caught
    assert np.max(np.abs(den.mean(0) * 1.05 - Z) / se_den) > Z_TOL
    # ... and so would ignoring the mask or the causal prefix (the estimate targets the right sums)
    Z_full, _ = exact_masked(Q, K, V, False, None)
    assert np.max(np.abs(den.mean(0) - Z_full) / se_den) > Z_TOL
