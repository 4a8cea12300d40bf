"""Log space holds: for norms up to 30 (float64), log_kernel is finite and equals the log of the
same draw's estimate computed with 50-digit mpmath arithmetic from the draw's own directions."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

import rfkit as rk
from rfkit.exceptions import NumericalOverflowError

mp.mp.dps = 50
D, M = 6, 16


def _points(seed, norms):
    rng = np.random.default_rng(seed)
    U = rng.normal(size=(len(norms), D))
    return U / np.linalg.norm(U, axis=1, keepdims=True) * np.asarray(norms)[:, None]


X = _points(1, [0.5, 5.0, 15.0, 30.0])
Y = np.vstack([_points(2, [1.0, 10.0, 30.0]), -X[3:4]])  # includes x = -y (tiny SM) and large norms


def _dot(w, x):
    return mp.fsum(mp.mpf(float(a)) * mp.mpf(float(b)) for a, b in zip(w, x))


def _sq(x):
    return _dot(x, x)


def _mp_estimate(draw, x, y):
    """The draw's estimate phi(x).phi(y) in mpmath, from its projection matrix (exact inputs)."""
    spec = draw.spec
    W = draw.projection
    m = W.shape[0]
    if isinstance(spec, rk.features.Trig):
        s = mp.fsum(mp.cos(_dot(w, x) - _dot(w, y)) for w in W)
        return mp.exp((_sq(x) + _sq(y)) / 2) * s / m
    xa, ya = x, y
    if draw.A is not None:
        xa = [mp.mpf(float(a)) * mp.mpf(float(b)) for a, b in zip(x, draw.A)]
        ya = [mp.mpf(float(a)) / mp.mpf(float(b)) for a, b in zip(y, draw.A)]
    a = mp.mpf(draw.a)
    b = mp.sqrt(1 - 4 * a)
    lam = mp.exp(-(mp.fsum(v * v for v in xa) + mp.fsum(v * v for v in ya)) / 2)
    tot = 0
    for w in W:
        wx = mp.fsum(mp.mpf(float(c)) * v for c, v in zip(w, xa))
        wy = mp.fsum(mp.mpf(float(c)) * v for c, v in zip(w, ya))
        wn = mp.fsum(mp.mpf(float(c)) ** 2 for c in w)
        if draw.hyperbolic:
            tot += (mp.exp(wx + wy) + mp.exp(-wx - wy)) / 2
        else:
            tot += mp.exp(2 * a * wn + b * (wx + wy))
    return (1 - 4 * a) ** (mp.mpf(D) / 2) * lam * tot / m


SPECS = [
    rk.features.Positive(M),
    rk.features.Positive(M, projection="orthogonal"),
    rk.features.Hyperbolic(M),
    rk.features.OPRF(M, A=-0.3),
    rk.features.CEXP(M, A=np.array([0.5, 2.0, 1.0, 1.5, 0.8, 1.1])),
    rk.features.HCEXP(M, A=np.array([0.5, 2.0, 1.0, 1.5, 0.8, 1.1])),
    rk.features.Trig(M),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.name}-{s.projection}")
def test_log_kernel_matches_mpmath(spec):
    draw = spec.sample(D, rng=12345)
    sign, logabs = draw.slog_kernel(X, Y)
    assert np.all(np.isfinite(logabs))
    ref_logs = np.empty_like(logabs)
    ref_sign = np.empty_like(sign)
    for i in range(X.shape[0]):
        for j in range(Y.shape[0]):
            v = _mp_estimate(draw, X[i], Y[j])
            ref_sign[i, j] = float(mp.sign(v))
            ref_logs[i, j] = float(mp.log(abs(v)))
    np.testing.assert_array_equal(sign, ref_sign)
    # absolute error in the log = relative error of the estimate; ~1e-13 * |log| from float64 exponents
    np.testing.assert_allclose(logabs, ref_logs, rtol=0, atol=1e-12 * np.maximum(1.0, np.abs(ref_logs)).max())
    if spec.is_positive:
        assert np.all(np.isfinite(draw.log_kernel(X, Y)))


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.name}-{s.projection}")
def test_log_pairwise_matches_log_kernel_diagonal(spec):
    draw = spec.sample(D, rng=7)
    Yp = Y[: X.shape[0]]
    s1, l1 = draw.slog_pairwise(X, Yp)
    s2, l2 = draw.slog_kernel(X, Yp)
    np.testing.assert_array_equal(s1, np.diag(s2))
    np.testing.assert_allclose(l1, np.diag(l2), rtol=1e-12, atol=1e-9)


def test_kernel_overflow_is_an_error_not_inf():
    draw = rk.features.Trig(M).sample(D, rng=0)
    big = X[3:4]
    with pytest.raises(NumericalOverflowError, match="log_kernel"):
        draw.kernel(big, big)  # exp(900) * mean(cos 0)
    assert np.isfinite(draw.log_kernel(big, big)).all()


def test_tiny_estimates_are_exact_in_log_space():
    """x = -y with norm 30: SM = exp(-900). The folded product underflows; the fallback is exact."""
    draw = rk.features.Positive(M).sample(D, rng=0)
    la = draw.log_kernel(X[3:4], -X[3:4])
    ref = float(mp.log(_mp_estimate(draw, X[3], -X[3])))
    assert la[0, 0] == pytest.approx(ref, abs=1e-9)
    assert draw.kernel(X[3:4], -X[3:4])[0, 0] == 0.0  # below the float64 range, as it should be


def test_float32_log_kernel_finite():
    draw = rk.features.Positive(M).sample(D, rng=0)
    la = draw.log_kernel(X.astype(np.float32), Y.astype(np.float32))
    assert la.dtype == np.float32 and np.all(np.isfinite(la))
