"""Randomised Sobol' directions (``projection="qmc"``): construction, unbiasedness, variance.

The construction (LMS + digital shift, vectorised over draws) is checked against scipy's
unscrambled Sobol' points and for the digital-net property of every draw; unbiasedness of the
Positive and Trig estimators and Gaussian marginals of every row are checked within 5 Monte
Carlo standard errors (fixed seeds); the variance reduction against iid directions is measured.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import ndtri
from scipy.stats import qmc

import rfkit as rk
from rfkit.projections import (
    _SOBOL_DIGITS,
    _net_digits,
    _scrambled_columns,
    _scrambled_sobol_normal,
    _sobol_columns,
    _sobol_log2,
    sample_projection,
    sample_projection_streams,
)

SEED = 5380212446601902317
Z = 5.0
B = _SOBOL_DIGITS


def _random_R(T, k, d, seed):
    return np.random.default_rng(seed).integers(0, 1 << B, size=(T, k + 1, d), dtype=np.int64)


@pytest.mark.parametrize("k, d", [(0, 3), (1, 1), (4, 7), (8, 40), (12, 300), (3, 21201)])
def test_unscrambled_points_are_scipys(k, d):
    """With L = I and no shift the construction gives scipy's Sobol' points (scipy: Gray-code order);
    rfkit computes the direction numbers itself (Bratley & Fox's recurrence on Joe & Kuo's table)."""
    C = _sobol_columns(k, d)
    Y = _net_digits(C[None], np.zeros((1, d), dtype=np.int64), 1 << k)[0]
    ref = np.ldexp(qmc.Sobol(d, scramble=False, bits=30).random_base2(k), B).astype(np.int64)
    np.testing.assert_array_equal(Y[np.lexsort(Y.T)], ref[np.lexsort(ref.T)])


@pytest.mark.parametrize("scramble", ["lms", "shift"])
def test_every_draw_is_a_digital_net(scramble):
    """1-D projections are stratified (one point per 2^-k cell); Sobol' dims 1-2 stay a (0, k, 2)-net."""
    T, k, d = 40, 6, 5
    R = _random_R(T, k, d, SEED)
    Y = _net_digits(_scrambled_columns(R, scramble=scramble), R[:, k], 1 << k)
    top = Y >> (B - k)
    np.testing.assert_array_equal(
        np.sort(top, axis=1), np.broadcast_to(np.arange(1 << k)[None, :, None], top.shape)
    )
    for a in range(k + 1):  # every box of size 2^-a x 2^-(k-a) holds exactly one point
        box = (Y[..., 0] >> (B - a)) * (1 << (k - a)) + (Y[..., 1] >> (B - (k - a)))
        np.testing.assert_array_equal(np.sort(box, axis=1), np.broadcast_to(np.arange(1 << k), box.shape))


def test_scramble_randomises_lower_digits():
    """LMS makes digits below the k-th depend on the point; a digital shift alone does not."""
    T, k, d = 8, 4, 3
    R = _random_R(T, k, d, SEED + 1)
    low = (1 << (B - k)) - 1
    for scramble, varies in (("lms", True), ("shift", False)):
        Y = _net_digits(_scrambled_columns(R, scramble=scramble), R[:, k], 1 << k)
        n_distinct = np.array([[len(np.unique(Y[t, :, j] & low)) for j in range(d)] for t in range(T)])
        assert np.all(n_distinct > 1) if varies else np.all(n_distinct == 1)


@pytest.mark.parametrize("m, d", [(1, 3), (16, 4), (13, 5), (64, 33)])
def test_sample_projection_is_the_quantile_of_cell_midpoints(m, d):
    """Pins the construction and the random numbers it consumes: one (k + 1, d) block per draw."""
    k = _sobol_log2(m)
    R = _random_R(3, k, d, 77)
    Y = _net_digits(_scrambled_columns(R), R[:, k], m)
    expected = ndtri((Y.astype(np.float64) + 0.5) * 2.0**-B)
    np.testing.assert_array_equal(sample_projection("qmc", m, d, rng=77, n_draws=3), expected)
    np.testing.assert_array_equal(sample_projection("qmc", m, d, rng=77), expected[0])


def test_streams_each_draw_depends_only_on_its_stream():
    root = np.random.SeedSequence(SEED)
    ss = [np.random.SeedSequence(root.entropy, spawn_key=(2, t)) for t in range(5)]
    W = sample_projection_streams("qmc", 24, 6, ss)
    for t in range(5):
        np.testing.assert_array_equal(W[t], sample_projection("qmc", 24, 6, rng=ss[t]))
    np.testing.assert_array_equal(sample_projection_streams("qmc", 24, 6, ss[::-1]), W[::-1])


def test_extreme_digits_stay_finite():
    """Cell midpoints are never 0 or 1, so no draw can produce an infinite direction."""
    k, d = 3, 4
    for fill in (0, (1 << B) - 1):
        R = np.full((2, k + 1, d), fill, dtype=np.int64)
        assert np.all(np.isfinite(_scrambled_sobol_normal(R, 1 << k, d)))
    R = np.zeros((1, 1, 2), dtype=np.int64)  # m = 1: the point is the shift alone
    np.testing.assert_allclose(_scrambled_sobol_normal(R, 1, 2), ndtri(2.0 ** -(B + 1)))


def test_every_row_is_marginally_standard_normal():
    """E exp(w.z) = exp(|z|^2 / 2) (the Gaussian MGF), E w = 0 and E w^2 = 1 for every row, within 5 SE."""
    T, m, d = 20000, 16, 6
    W = sample_projection("qmc", m, d, rng=SEED, n_draws=T)
    z = np.linspace(-0.6, 0.5, d)
    for vals, truth in (
        (np.exp(W @ z), np.exp(z @ z / 2)),
        (W, 0.0),
        (W**2, 1.0),
    ):
        se = vals.std(axis=0, ddof=1) / np.sqrt(T)
        assert np.all(np.abs(vals.mean(axis=0) - truth) <= Z * se)


def _pairs(d, radius, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(6, d))
    Y = rng.normal(size=(6, d))
    X *= radius / np.linalg.norm(X, axis=1, keepdims=True)
    Y *= radius / np.linalg.norm(Y, axis=1, keepdims=True)
    return X, Y


@pytest.mark.parametrize("cls", [rk.features.Positive, rk.features.Trig], ids=["positive", "trig"])
@pytest.mark.parametrize("d, m, radius", [(4, 64, 0.5), (32, 128, 1.0), (9, 100, 0.8)])
def test_estimators_unbiased_with_qmc(cls, d, m, radius):
    T = 3000
    X, Y = _pairs(d, radius, d + m)
    est = cls(m, projection="qmc").sample(d, rng=SEED + m, n_draws=T).pairwise(X, Y)
    se = est.std(axis=0, ddof=1) / np.sqrt(T)
    assert np.all(np.abs(est.mean(axis=0) - np.exp(np.sum(X * Y, axis=1))) <= Z * se)


@pytest.mark.parametrize(
    "cls, d, m, radius",
    [
        (rk.features.Positive, 4, 64, 0.5),
        (rk.features.Trig, 4, 64, 0.5),
        (rk.features.Positive, 32, 128, 0.5),
    ],
)
def test_qmc_variance_below_iid(cls, d, m, radius):
    """Measured qmc/iid variance ratios 0.04, 0.04 and about 0.1 (seeded); asserted < 0.25.

    With T = 3000 draws per arm the log of a variance ratio has a standard error of about
    sqrt(2 (1 + kurtosis / 2) / T) < 0.1 for these estimators, so 0.25 is many standard errors
    above the measured ratios and far below 1 (iid-quality points would fail).
    """
    T = 3000
    X, Y = _pairs(d, radius, 11)
    v = {}
    for proj in ("iid", "qmc"):
        v[proj] = cls(m, projection=proj).sample(d, rng=SEED, n_draws=T).pairwise(X, Y).var(axis=0, ddof=1)
    assert np.all(v["qmc"] / v["iid"] < 0.25), v["qmc"] / v["iid"]
