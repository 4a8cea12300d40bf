"""Property tests (hypothesis): invariants of every feature map over random inputs and scales."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import rfkit as rk

MAPS = [
    rk.features.Positive(8),
    rk.features.Hyperbolic(4, projection="orthogonal"),
    rk.features.Trig(4),
    rk.features.OPRF(8, A=-0.1),
    rk.features.CEXP(8, A=np.array([2.0, 0.5, 1.0])),
    rk.features.Taylor(3),
    rk.features.Limit(2),
]


@st.composite
def points(draw):
    n = draw(st.integers(1, 5))
    scale = draw(st.sampled_from([1e-3, 0.3, 1.0, 5.0, 20.0]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    return scale * rng.normal(size=(n, 3)), scale * rng.normal(size=(n, 3))


@settings(max_examples=40, deadline=None)
@given(xy=points(), which=st.integers(0, len(MAPS) - 1), seed=st.integers(0, 1000))
def test_slog_kernel_is_consistent(xy, which, seed):
    X, Y = xy
    draw = MAPS[which].sample(3, rng=seed)
    sign, logabs = draw.slog_kernel(X, Y)
    assert sign.shape == logabs.shape == (X.shape[0], Y.shape[0])
    assert not np.any(np.isnan(logabs))
    if MAPS[which].is_positive:
        assert np.all(sign == 1) and np.all(
            np.isfinite(logabs)
        )  # positive maps never underflow to 0 in log space
    # pairwise equals the kernel diagonal, also in log space
    ps, pl = draw.slog_pairwise(X, Y)
    np.testing.assert_array_equal(ps, np.diag(sign))
    fin = np.isfinite(pl)
    if MAPS[which].is_positive:
        np.testing.assert_allclose(pl[fin], np.diag(logabs)[fin], rtol=1e-9, atol=1e-9)
    else:
        # Signed maps sum terms of both signs, and the two paths round differently: compare the
        # values, within the rounding error of the feature dot product, sum_i |phi(x)_i phi(y)_i|
        # times a few eps (Higham, Accuracy and Stability, sec. 3.1), plus 1e-9 relative.
        fq, fk = draw.queries(X), draw.keys(Y)
        with np.errstate(divide="ignore"):  # log 0 = -inf where every product vanishes
            lmag = np.log(np.sum(np.abs(fq.values * fk.values), axis=-1)) + fq.log_scale + fk.log_scale
        lk = np.diag(logabs)
        M = np.maximum(lmag, np.maximum(np.where(fin, pl, -np.inf), np.where(np.isfinite(lk), lk, -np.inf)))
        ok = np.isfinite(M)  # every value below is scaled by exp(-M) <= 1: no overflow
        diff = np.abs(ps[ok] * np.exp(pl[ok] - M[ok]) - np.diag(sign)[ok] * np.exp(lk[ok] - M[ok]))
        tol = 64 * np.finfo(float).eps * np.exp(lmag[ok] - M[ok]) + 1e-9 * np.exp(lk[ok] - M[ok])
        assert np.all(diff <= tol), (diff, tol)
        mag_ok = np.isfinite(lk) & (lmag < lk + np.log(1e4))  # well conditioned: compare the logs
        small = fin & mag_ok
        np.testing.assert_allclose(pl[small], np.diag(logabs)[small], rtol=1e-9, atol=1e-9)


@settings(max_examples=30, deadline=None)
@given(xy=points(), seed=st.integers(0, 1000))
def test_kernel_matches_log_kernel_where_representable(xy, seed):
    X, Y = xy
    draw = rk.features.Positive(8).sample(3, rng=seed)
    la = draw.log_kernel(X, Y)
    if np.max(la) < 700:
        np.testing.assert_allclose(draw.kernel(X, Y), np.exp(la), rtol=1e-10, atol=0)


@settings(max_examples=30, deadline=None)
@given(xy=points())
def test_exact_kernel_is_symmetric_and_broadcasts(xy):
    X, _ = xy
    L = rk.log_softmax_kernel(X[None], X[None, None])  # never overflows
    n = X.shape[0]
    assert L.shape == (1, 1, n, n)
    np.testing.assert_allclose(L[0, 0], L[0, 0].T, rtol=1e-12, atol=1e-12)
