"""Maps fitted on the causal pairs stay unbiased: the mean estimate equals exp(x.y) within 5 MCSE.

Fitting chooses parameters, not the estimator's expectation: every fitted map is unbiased for
every parameter in its domain. One vectorised call per map (``sample(n_draws=T).pairwise``,
fixed seeds), on held-out pairs that are not part of the fit's sample.
"""

from __future__ import annotations

import numpy as np
import pytest

import rfkit as rk

F = rk.features
SEED = 6618230485520917374
T = 6000
Z = 5.0
D = 4

MAPS = {
    "oprf": lambda: F.OPRF(8, projection="orthogonal", fit_pairs="causal"),
    "oprf-hyperbolic": lambda: F.OPRF(8, hyperbolic=True, fit_pairs="causal"),
    "gerf-trig": lambda: F.GERF(8, s=-1, fit_pairs="causal"),
    "saderf": lambda: F.SADERF(8, projection="orthogonal", fit_pairs="causal"),
    "aderf": lambda: F.ADERF(8, fit_pairs="causal"),
    "sderf": lambda: F.SDERF(8, fit_pairs="causal"),
    "cexp-variance": lambda: F.CEXP(8, A="variance", fit_pairs="causal"),
    "hcexp-mean": lambda: F.HCEXP(8, A="mean", fit_pairs="causal"),
}


def _sample(seed):
    """Two sequences of 16 decoder-like queries and keys: offset means, a growing drift along the sequence."""
    g = np.random.default_rng(seed)
    drift = np.linspace(0.0, 0.6, 16)[None, :, None]
    Q = 0.3 * g.standard_normal((2, 16, D)) + 0.4 + drift
    K = 0.3 * g.standard_normal((2, 16, D)) - 0.2 - drift * np.array([1.0, -1.0, 0.5, 0.0])
    return Q, K


def _params(fm):
    return np.concatenate(
        [np.ravel(np.asarray(getattr(fm, p), dtype=float)) for p in ("A", "G", "psi") if hasattr(fm, p)]
    )


@pytest.mark.parametrize("name", list(MAPS))
def test_causal_fit_is_unbiased(name):
    Q, K = _sample(3)
    fm = MAPS[name]()
    fitted = fm.fit(Q, K)
    # the causal fit really moves the parameters (else this test would repeat the "all" one)
    assert not np.allclose(_params(fitted), _params(fm.fit(Q, K, pairs="all")), rtol=1e-3)
    g = np.random.default_rng(41)
    X = 0.35 * g.standard_normal((5, D)) + 0.3
    Y = 0.35 * g.standard_normal((5, D)) - 0.1
    est = fitted.sample(D, rng=SEED, n_draws=T).pairwise(X, Y)
    se = est.std(axis=0, ddof=1) / np.sqrt(T)
    z = (est.mean(axis=0) - np.exp(np.sum(X * Y, axis=1))) / se
    assert np.all(np.abs(z) <= Z), z
