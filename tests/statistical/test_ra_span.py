"""RA's noise drawn in the span of the keys a query sees: the distribution of the full draw.

f_n (RA docstring) uses omega only through the logits omega.k_j of the keys query n sees, so
eps = B z, with B an orthonormal basis of those keys' span and z ~ N(0, I_r), r = min(#keys, d),
gives f_n exactly the distribution that eps ~ N(0, I_d) gives (docs page *Attention*, RA).
rfkit's RA with one sample per query, on T = 4000 independent copies of a head (a leading axis
of length T), is compared entry by entry with T full-dimensional draws of an independent
reference: the means agree with each other and with exact attention, and the variances agree,
within 5 Monte Carlo standard errors (fixed seeds). Keys span fewer than d dimensions (n < d)
or all d (n > d), bidirectional and causal, with and without a key padding mask.
"""

from __future__ import annotations

import numpy as np
import pytest

from rfkit import attention as att

Z_TOL = 5.0
T = 4000

SETTINGS = {
    # name: (n = M, d, dv, scale, causal, masked keys)
    "n<d bidirectional": (5, 12, 3, 0.6, False, ()),
    "n<d causal": (6, 12, 3, 0.6, True, ()),
    "n<d bidirectional, padding mask": (7, 12, 2, 0.6, False, (1, 4)),
    "n>d bidirectional": (9, 3, 2, 0.9, False, ()),
    "n>d causal": (9, 3, 2, 0.9, True, ()),
}


def _softmax(L):
    P = np.exp(L - L.max(axis=-1, keepdims=True))
    return P / P.sum(axis=-1, keepdims=True)


def full_draw_samples(Q, K, V, causal, mask, rng):
    """T samples of f_n(omega) per query with omega = q_n + k_m* + eps, eps ~ N(0, I_d): (T, n, dv)."""
    n, d = Q.shape
    out = np.empty((T, n, V.shape[1]))
    for i in range(n):
        keys = np.flatnonzero(~mask & ((np.arange(K.shape[0]) <= i) if causal else True))
        comp = rng.choice(keys, size=T, p=_softmax(K[keys] @ Q[i]))
        omega = Q[i] + K[comp] + rng.standard_normal((T, d))
        out[:, i] = _softmax(omega @ K[keys].T - 0.5 * np.sum(K[keys] ** 2, axis=-1)) @ V[keys]
    return out


def _moments(F):
    """Mean, variance (ddof 1) and the standard errors of both, per entry, from samples on axis 0."""
    mean = F.mean(axis=0)
    var = F.var(axis=0, ddof=1)
    m4 = np.mean((F - mean) ** 4, axis=0)
    return mean, var, np.sqrt(var / len(F)), np.sqrt(np.maximum(m4 - var**2, 0.0) / len(F))


@pytest.mark.parametrize("setting", list(SETTINGS), ids=list(SETTINGS))
def test_span_draws_give_f_n_the_full_draws_distribution(setting):
    n, d, dv, scale, causal, masked = SETTINGS[setting]
    rng = np.random.default_rng(61_728_394)
    Q, K = scale * rng.standard_normal((2, n, d))
    V = rng.standard_normal((n, dv))
    mask = np.zeros(n, dtype=bool)
    mask[list(masked)] = True
    kw = {"key_padding_mask": np.broadcast_to(mask, (T, n))} if masked else {}
    stack = [np.broadcast_to(a, (T, *a.shape)) for a in (Q, K, V)]
    F_span = att.RA(n_samples=1, causal=causal)(*stack, rng=90_210, **kw).output  # (T, n, dv)
    F_full = full_draw_samples(Q, K, V, causal, mask, np.random.default_rng(31_415))
    m_s, v_s, se_ms, se_vs = _moments(F_span)
    m_f, v_f, se_mf, se_vf = _moments(F_full)
    # (+1e-12: rows that see one key are deterministic, with a spread of pure round-off)
    assert np.all(np.abs(m_s - m_f) <= Z_TOL * np.hypot(se_ms, se_mf) + 1e-12), (m_s - m_f) / np.hypot(
        se_ms, se_mf
    )
    ref = att.softmax(Q, K, V, causal=causal, **({"key_padding_mask": mask} if masked else {}))
    assert np.all(np.abs(m_s - ref) <= Z_TOL * se_ms + 1e-12), (m_s - ref) / se_ms
    assert np.all(np.abs(v_s - v_f) <= Z_TOL * np.hypot(se_vs, se_vf) + 1e-12), (v_s - v_f) / np.hypot(
        se_vs, se_vf
    )
    # the comparison has power: f_n varies (its spread is not round-off) on most rows
    assert np.sum(v_f > 1e-6) >= n - 2
