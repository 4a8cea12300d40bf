"""Property-based checks (hypothesis) of invariances every attention estimator must keep."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import rfkit as rk
from rfkit import attention as att

shapes = st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(1, 5), st.integers(1, 3))


def make(seed, n, M, d, dv, scale):
    rng = np.random.default_rng(seed)
    return (
        scale * rng.standard_normal((n, d)),
        scale * rng.standard_normal((M, d)),
        rng.standard_normal((M, dv)),
        rng.permutation(M),
    )


@settings(max_examples=40, deadline=None)
@given(shapes, st.integers(0, 2**32 - 1), st.floats(0.05, 3.0))
def test_softmax_key_permutation_invariance_and_convexity(shape, seed, scale):
    n, M, d, dv = shape
    Q, K, V, perm = make(seed, n, M, d, dv, scale)
    out = att.softmax(Q, K, V)
    np.testing.assert_allclose(att.softmax(Q, K[perm], V[perm]), out, rtol=1e-12, atol=1e-13)
    assert np.all(out <= V.max(0) + 1e-12) and np.all(out >= V.min(0) - 1e-12)


@settings(max_examples=30, deadline=None)
@given(shapes, st.integers(0, 2**32 - 1), st.floats(0.05, 2.0))
def test_positive_rfa_key_permutation_invariance_and_convexity(shape, seed, scale):
    n, M, d, dv = shape
    Q, K, V, perm = make(seed, n, M, d, dv, scale)
    est = att.RFA(rk.features.Positive(16), chunk_size=2)
    a = est(Q, K, V, rng=seed)
    b = est(Q, K[perm], V[perm], rng=seed)
    np.testing.assert_allclose(b.output, a.output, rtol=1e-10, atol=1e-12)
    assert np.all(a.output <= V.max(0) + 1e-10) and np.all(a.output >= V.min(0) - 1e-10)


@settings(max_examples=30, deadline=None)
@given(shapes, st.integers(0, 2**32 - 1), st.floats(0.05, 2.0))
def test_snis_and_lara_key_permutation_invariance(shape, seed, scale):
    n, M, d, dv = shape
    Q, K, V, perm = make(seed, n, M, d, dv, scale)
    for est in (att.SNIS(n_samples=8), att.LARA(weights="balance", proposal_means=np.zeros((3, d)))):
        a = est(Q, K, V, rng=seed)
        b = est(Q, K[perm], V[perm], rng=seed)
        np.testing.assert_allclose(b.output, a.output, rtol=1e-10, atol=1e-12)
        assert np.all((a.ess >= 1 - 1e-9) & (a.ess <= a.omega.shape[-2] + 1e-9))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 12), st.integers(1, 4), st.integers(0, 2**32 - 1), st.integers(1, 5))
def test_causal_rfa_last_row_is_bidirectional(n, d, seed, block):
    Q, K, V, _ = make(seed, n, n, d, 2, 0.7)
    fm = rk.features.Hyperbolic(6)
    c = att.RFA(fm, causal=True, chunk_size=block)(Q, K, V, rng=seed)
    b = att.RFA(fm)(Q, K, V, rng=seed)
    np.testing.assert_allclose(c.output[-1], b.output[-1], rtol=1e-10, atol=1e-12)
