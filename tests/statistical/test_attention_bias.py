"""RFA is a ratio (SNIS) estimator: its bias is O(1/S), so S * bias is constant across S.

Docs page *Theory*, section 3: Bias(RFA_S) = -1^T G (v - a 1) / (S Z^2) + O(S^-2), with
G_mm' = exp(|q|^2 + 2 q.k_m + 2 q.k_m' + k_m.k_m'). Verified regime: d = 4, M = 8,
scale 0.35 (E[X^2]/E[X]^2 = 1.31). Tolerances are 5 combined Monte Carlo standard
errors with fixed seeds.
"""

from __future__ import annotations

import numpy as np
import pytest

import rfkit as rk
from rfkit import attention as att

Z_TOL = 5.0


def problem():
    rng = np.random.default_rng(0)  # the data of the verified regime below
    d, M = 4, 8
    q = 0.35 * rng.normal(size=d)
    K = 0.35 * rng.normal(size=(M, d))
    v = rng.normal(size=M)
    return q, K, v


def predicted_S_bias(q, K, v):
    e = np.exp(K @ q)
    Z = e.sum()
    a = e @ v / Z
    G = np.exp(q @ q + 2 * ((K @ q)[:, None] + (K @ q)[None]) + K @ K.T)
    return -(G @ (v - a)).sum() / Z**2, a


def rfa_trials(q, K, v, S, T, seed, block=5_000):
    """T independent RFA(Positive(S)) estimates of Attn(q) (vectorised with n_draws)."""
    est = att.RFA(rk.features.Positive(S))
    ss = np.random.SeedSequence(seed)
    outs = []
    for child in ss.spawn(-(-T // block)):
        res = est(q[None, :], K, v[:, None], rng=child, n_draws=block)
        outs.append(res.output[:, 0, 0])
    return np.concatenate(outs)[:T]


@pytest.mark.slow
def test_rfa_bias_times_S_is_constant():
    q, K, v = problem()
    pred, a = predicted_S_bias(q, K, v)
    T = 160_000
    b, se = {}, {}
    for S, seed in [(16, 31_415_926), (64, 27_182_818), (256, 14_142_135)]:
        est = rfa_trials(q, K, v, S, T, seed)
        b[S] = est.mean() - a
        se[S] = est.std(ddof=1) / np.sqrt(T)
    # the bias is really there (so constancy is a real statement) ...
    assert abs(b[16]) > Z_TOL * se[16]
    # ... S * bias agrees across S ...
    for s1, s2 in [(16, 64), (64, 256), (16, 256)]:
        diff = s1 * b[s1] - s2 * b[s2]
        assert abs(diff) < Z_TOL * np.hypot(s1 * se[s1], s2 * se[s2]), (s1, s2, b, se)
    # ... and equals the first-order delta-method constant (exact up to O(1/S^2)) ...
    for S in (64, 256):
        assert abs(S * b[S] - pred) < Z_TOL * S * se[S], (S, S * b[S], pred, S * se[S])
    # ... while a bias of order 1/sqrt(S) (sqrt(S) * bias constant) is rejected by these data:
    # the check has power.
    assert abs(4 * b[16] - 16 * b[256]) > Z_TOL * np.hypot(4 * se[16], 16 * se[256])
