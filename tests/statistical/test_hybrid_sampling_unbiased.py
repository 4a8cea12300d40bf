"""Hybrid's sampled remainders: the numerator and the normaliser are unbiased, and their variances
are the finite-population ones.

For query n with support S(n) and remainder R(n) (N_R keys), w_j = exp(q_n . k_j):
uniform without replacement Var(Z_R) = N_R^2 (1 - s/N_R) S_w^2 / s (S_w^2 with divisor N_R - 1);
stratified: the sum of that formula over the strata (one key per stratum: N_h^2 sigma_h^2 with the
population variance); importance with replacement: (sum_R w_j^2 / p_j - Z_R^2) / s with
p = (1 - lam) softmax_R(logits) + lam / N_R for the oracle scorer. Fixed seeds; every check is a
z-score against the Monte Carlo standard error, |z| <= 5 (4,000 draws).
"""

from __future__ import annotations

import numpy as np
import pytest

import rfkit as rk

Z_TOL = 5.0
T = 4000
H = rk.attention.Hybrid


def _problem(seed=0, n=16, d=4, dv=2, scale=0.6):
    rng = np.random.default_rng(seed)
    Q = scale * rng.normal(size=(2, n, d))
    K = scale * rng.normal(size=(2, n, d))
    V = rng.normal(size=(2, n, dv))
    return Q, K, V


def _exact(Q, K, V, causal):
    L = Q @ np.swapaxes(K, -1, -2)
    if causal:
        n = L.shape[-1]
        L = np.where(np.tril(np.ones((n, n), bool)), L, -np.inf)
    W = np.exp(L)
    return W.sum(-1), W @ V


def _z(draws, target):
    """z-scores of the mean of ``draws`` (T, ...) against ``target``; entries without spread must be exact."""
    mean, sd = draws.mean(0), draws.std(0, ddof=1)
    flat = sd < 1e-12 * np.abs(target).max()
    np.testing.assert_allclose(mean[flat], target[flat], rtol=1e-12)
    return np.abs(mean - target)[~flat] / (sd[~flat] / np.sqrt(draws.shape[0]))


SETTINGS = [
    {"remainder": "uniform", "n_samples": 3},
    {"remainder": "uniform", "n_samples": 2, "window": 1, "top_k": 2, "scorer": "oracle"},
    {"remainder": "stratified", "n_samples": 3},
    {
        "remainder": "stratified",
        "n_samples": 4,
        "n_global": 1,
        "top_k": 2,
        "scorer": "quest",
        "block_size": 4,
    },
    {"remainder": "importance", "n_samples": 3, "scorer": "oracle"},
    {"remainder": "importance", "n_samples": 2, "window": 1, "scorer": "proxy", "refresh": 4},
    {"remainder": "importance", "n_samples": 3, "top_k": 1, "scorer": "lsh", "proposal_mix": 0.5},
    {"remainder": "importance", "n_samples": 3, "window": 1, "scorer": "quest", "block_size": 4},
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kw", SETTINGS, ids=lambda k: "-".join(str(v) for v in k.values()))
def test_numerator_and_normaliser_are_unbiased(kw, causal):
    Q, K, V = _problem(1)
    r = H(causal=causal, **kw)(Q, K, V, rng=2026, n_draws=T)
    Z, N = _exact(Q, K, V, causal)
    zs = np.concatenate([_z(r.normalizer, Z), _z(r.numerator, N).ravel()])
    assert zs.size > 0
    assert zs.max() <= Z_TOL, f"max |z| = {zs.max():.2f}"


def test_padded_keys_unbiased():
    Q, K, V = _problem(2)
    mask = np.zeros((2, 16), dtype=bool)
    mask[:, 11:] = True
    mask[0, 4] = True
    r = H(remainder="stratified", n_samples=3, window=1)(Q, K, V, rng=7, n_draws=T, key_padding_mask=mask)
    W = np.exp(Q @ np.swapaxes(K, -1, -2)) * ~mask[:, None, :]
    zs = np.concatenate([_z(r.normalizer, W.sum(-1)), _z(r.numerator, W @ V).ravel()])
    assert zs.max() <= Z_TOL


def _remainder_sets(n, M, window):
    return [[j for j in range(M) if abs(i - j) > window] for i in range(n)]


def _predicted_variance(kind, w, s, p=None):
    """Var(Z_R) of one row with remainder weights ``w`` (in key order)."""
    N = len(w)
    if s >= N:
        return 0.0
    if kind == "uniform":
        return N**2 * (1 - s / N) * np.var(w, ddof=1) / s
    if kind == "stratified":
        H_, base, extra = s, N // s, N % s
        sizes = [base + (h < extra) for h in range(H_)]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        return sum(sizes[h] ** 2 * np.var(w[starts[h] : starts[h + 1]]) for h in range(H_))
    return (np.sum(w**2 / p) - w.sum() ** 2) / s


@pytest.mark.parametrize("kind", ["uniform", "stratified", "importance"])
def test_normaliser_variance_is_the_finite_population_one(kind):
    Q, K, V = _problem(3, n=14, scale=0.8)
    s, lam = 4, 0.1
    kw = {"scorer": "oracle", "proposal_mix": lam} if kind == "importance" else {}
    r = H(remainder=kind, n_samples=s, window=1, **kw)(Q, K, V, rng=11, n_draws=T)
    L = Q @ np.swapaxes(K, -1, -2)
    zs = []
    for b in range(2):
        for i, R in enumerate(_remainder_sets(14, 14, 1)):
            w = np.exp(L[b, i, R])
            p = None
            if kind == "importance":
                e = np.exp(L[b, i, R] - L[b, i, R].max())
                p = (1 - lam) * e / e.sum() + lam / len(R)
            var = _predicted_variance(kind, w, s, p)
            x = r.normalizer[:, b, i]
            dev = (x - x.mean()) ** 2
            # MCSE of the sample variance: sd of the squared deviations over sqrt(T)
            zs.append(abs(dev.mean() * T / (T - 1) - var) / (dev.std(ddof=1) / np.sqrt(T)))
    assert max(zs) <= Z_TOL, f"max |z| = {max(zs):.2f}"
