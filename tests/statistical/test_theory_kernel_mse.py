"""Closed-form MSE and bias of every kernel estimator against simulation through rfkit's own draws.

Each case runs ``rfkit.theory.check`` (one vectorised ``pairwise`` call per chunk of draws) and
requires |measured - predicted| <= 5 MCSE for every pair, for the MSE and for the bias. Orthogonal
cases must also *reject* the iid formula: |measured - iid prediction| > 10 MCSE for at least one pair
of the setting (the pair with the largest orthogonality effect; pairs with tiny norms are included to
check the formula there, not to discriminate), so the test could not pass if the block-orthogonal term
were missing. Seeds are fixed literals.

Pairs are built with controlled ||x+y||^2 and ||x-y||^2: x = a e1 + b e2, y = a e1 - b e2 (random
orthonormal e1, e2), so x + y = 2a e1 and x - y = 2b e2.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import rfkit.features as F
import rfkit.theory as th
from rfkit.exceptions import RFKitWarning

Z_OK = 5.0
Z_REJECT = 10.0


def make_pairs(d, z2s, D2s, seed):
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for z2, D2 in zip(z2s, D2s):
        Q, _ = np.linalg.qr(rng.normal(size=(d, 2)))
        a, b = np.sqrt(z2) / 2, np.sqrt(D2) / 2
        X.append(a * Q[:, 0] + b * Q[:, 1])
        Y.append(a * Q[:, 0] - b * Q[:, 1])
    return np.array(X), np.array(Y)


def assert_conforms(fm, X, Y, T, seed, reject_iid):
    res = th.check(fm, X, Y, n_trials=T, rng=seed)
    assert np.all(np.abs(res.z) <= Z_OK), (res.z, res.predicted_mse, res.measured_mse)
    assert np.all(np.abs(res.bias_z) <= Z_OK), (res.bias_z, res.predicted_bias, res.measured_bias)
    if reject_iid:
        iid = th.mse(dataclasses.replace(fm, projection="iid"), X, Y)
        dist = np.abs(res.measured_mse - iid) / res.mse_mcse
        assert np.max(dist) > Z_REJECT, dist
    return res


# (d, m, z2s, D2s, T): small/moderate d and m, m > d (stacked blocks), small and larger norms.
EXP_SETTINGS = [
    pytest.param(4, 4, [0.3, 0.8, 1.2], [0.5, 0.2, 1.0], 200_000, id="d4-m4"),
    pytest.param(8, 19, [0.5, 1.0, 1.4], [0.3, 1.0, 2.0], 150_000, id="d8-m19-stacked"),
    pytest.param(16, 16, [0.2, 0.6, 1.0], [1.0, 0.1, 3.0], 150_000, id="d16-m16"),
]
TRIG_SETTINGS = [
    pytest.param(4, 4, [0.5, 1.0, 2.0], [0.3, 1.0, 2.0], 150_000, id="d4-m4-small"),
    pytest.param(4, 4, [1.0, 0.5, 3.0], [8.0, 12.0, 16.0], 200_000, id="d4-m4-large"),
    pytest.param(8, 19, [1.0, 0.3, 2.0], [0.5, 1.5, 3.0], 150_000, id="d8-m19-stacked"),
    pytest.param(16, 16, [0.5, 1.0, 4.0], [0.2, 0.8, 2.0], 150_000, id="d16-m16"),
]


def _diag_A(d, seed):
    return np.random.default_rng(seed).uniform(0.6, 1.6, size=d)


def _full_A(d, seed):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return Q * rng.uniform(0.8, 1.25, size=d)


EXP_MAPS = {
    "positive": lambda m, d, p: F.Positive(m, projection=p),
    "hyperbolic": lambda m, d, p: F.Hyperbolic(m, projection=p),
    "cexp-full": lambda m, d, p: F.CEXP(m, A=_full_A(d, 7713), projection=p),
    "hcexp-diag": lambda m, d, p: F.HCEXP(m, A=_diag_A(d, 4421), projection=p),
    "oprf": lambda m, d, p: F.OPRF(m, A=-0.06, projection=p),
}


@pytest.mark.parametrize("name", list(EXP_MAPS))
@pytest.mark.parametrize("d,m,z2s,D2s,T", EXP_SETTINGS)
def test_exp_family_iid(name, d, m, z2s, D2s, T):
    X, Y = make_pairs(d, z2s, D2s, seed=9100 + d)
    assert_conforms(EXP_MAPS[name](m, d, "iid"), X, Y, T // 2, 6305148819125540231, reject_iid=False)


@pytest.mark.parametrize("name", list(EXP_MAPS))
@pytest.mark.parametrize("d,m,z2s,D2s,T", EXP_SETTINGS)
def test_exp_family_orthogonal(name, d, m, z2s, D2s, T):
    X, Y = make_pairs(d, z2s, D2s, seed=9200 + d)
    assert_conforms(EXP_MAPS[name](m, d, "orthogonal"), X, Y, T, 1843726150934418807, reject_iid=True)


@pytest.mark.parametrize("name", list(EXP_MAPS))
@pytest.mark.parametrize("d,m,z2s,D2s,T", EXP_SETTINGS)
def test_exp_family_orthogonal_fixed(name, d, m, z2s, D2s, T):
    X, Y = make_pairs(d, z2s, D2s, seed=9300 + d)
    assert_conforms(EXP_MAPS[name](m, d, "orthogonal-fixed"), X, Y, T, 5521908473300167413, reject_iid=True)


@pytest.mark.parametrize("proj", ["iid", "orthogonal", "orthogonal-fixed"])
@pytest.mark.parametrize("d,m,z2s,D2s,T", TRIG_SETTINGS)
def test_trig(proj, d, m, z2s, D2s, T):
    X, Y = make_pairs(d, z2s, D2s, seed=9400 + d)
    fm = F.Trig(m, projection=proj)
    assert_conforms(fm, X, Y, T, 7260943385511092017, reject_iid=proj != "iid")


@pytest.mark.slow
def test_trig_orthogonal_can_be_worse_than_iid():
    """Docs page *Theory*, section 1: d = m = 4, ||x-y||^2 = 12: exact ORF MSE 51.18 > iid 50.43, and the data agree."""
    X, Y = make_pairs(4, [0.0], [12.0], seed=1)
    orth = th.mse(F.Trig(4, projection="orthogonal"), X, Y)
    iid = th.mse(F.Trig(4), X, Y)
    assert orth[0] == pytest.approx(51.1761, rel=1e-4)
    assert iid[0] == pytest.approx(50.4280, rel=1e-4)
    res = assert_conforms(F.Trig(4, projection="orthogonal"), X, Y, 2_000_000, 3346012297415506711, True)
    assert res.measured_mse[0] > iid[0]


@pytest.mark.parametrize("d,m,z2s,D2s,T", EXP_SETTINGS)
def test_oprf_heavy_A_with_fixed_norms(d, m, z2s, D2s, T):
    """1/8 <= A < 1/4: infinite variance with chi(d) norms, but finite (and exact) with fixed norms."""
    X, Y = make_pairs(d, z2s, D2s, seed=9500 + d)
    with pytest.warns(RFKitWarning, match="infinite variance"):
        fm = F.OPRF(m, A=0.15, projection="orthogonal-fixed")
    assert_conforms(fm, X, Y, T // 2, 2209871553190247761, reject_iid=False)
