"""Closed forms of simplex random features, GERF and hyperbolic OPRF pinned (rtol 1e-12) to values computed with mpmath.

The mpmath code (below, run once with mpmath 1.3, dps 60-80) evaluates the formulas by an
independent route: the simplex pair moment as the exact power series
``sum_k x^k (d)_k / (k! (d/2)_k) E[(1 + cS)^k]`` with the binomial moments of ``S`` in closed form
(rfkit uses log-space Gauss-Legendre quadrature over ``S``), and the GERF / hyperbolic-OPRF
variances and orthogonal pair terms directly from docs page *Theory*, section 1a.

```python
import mpmath as mp
mp.mp.dps = 60   # 80 for the relative-covariance pins

def e_k(d, c, K):
    # E[(1 + c S)^k], S = sin(psi), psi ~ sin^{d-1} on [0, pi];
    # E[S^j] = G((d+j)/2) G((d+1)/2) / (G((d+j+1)/2) G(d/2))
    M = [mp.gamma(mp.mpf(d + j) / 2) * mp.gamma(mp.mpf(d + 1) / 2)
         / (mp.gamma(mp.mpf(d + j + 1) / 2) * mp.gamma(mp.mpf(d) / 2)) for j in range(K)]
    return [mp.fsum(mp.binomial(k, j) * c**j * M[j] for j in range(k + 1)) for k in range(K)]

def pair(d, c, x, K=400):   # E over a simplex pair of 1F1(d; d/2; (1 + cS) x); K=200 for relcov pins
    ek = e_k(d, c, K)
    return mp.fsum(x**k * mp.rf(d, k) / (mp.factorial(k) * mp.rf(mp.mpf(d) / 2, k)) * ek[k] for k in range(K))

def blocks(m, d):
    return (m // d) * d * (d - 1) + (m % d) * (m % d - 1)

def mse(kind, x, y, m, proj, A=0, psi=None):
    d = len(x); x = [mp.mpf(v) for v in x]; y = [mp.mpf(v) for v in y]
    if psi is not None:
        x = [a * mp.mpf(p) for a, p in zip(x, psi)]; y = [a / mp.mpf(p) for a, p in zip(y, psi)]
    A = mp.mpf(A)
    sm2 = mp.exp(2 * mp.fsum(a * b for a, b in zip(x, y)))
    z2 = mp.fsum((a + b)**2 for a, b in zip(x, y)); D2 = mp.fsum((a - b)**2 for a, b in zip(x, y))
    Kc = ((1 - 4 * A)**2 / (1 - 8 * A))**(mp.mpf(d) / 2)
    c = -1 / mp.mpf(d - 1)
    if kind == "exp":
        relvar = Kc * mp.exp(z2 / (1 - 8 * A)) - 1
        pm = {"orthogonal": mp.hyp1f1(d, mp.mpf(d) / 2, z2 / 2), "simplex": pair(d, c, z2 / 2)}
        relcov = {k: mp.exp(-z2) * v - 1 for k, v in pm.items()}
    elif kind == "hyp":
        relvar = Kc * (mp.exp(-z2) + mp.exp(z2 / (1 - 8 * A))) / 2 - 1
        pm = {"orthogonal": mp.hyp1f1(d, mp.mpf(d) / 2, z2 / 2),
              "simplex": (pair(d, c, z2 / 2) + pair(d, -c, z2 / 2)) / 2}
        relcov = {k: mp.exp(-z2) * v - 1 for k, v in pm.items()}
    else:  # trig / GERF s = -1
        relvar = Kc * (mp.exp(D2) + mp.exp(-D2 / (1 - 8 * A))) / 2 - 1
        pm = {"orthogonal": mp.hyp1f1(d, mp.mpf(d) / 2, -D2 / 2),
              "simplex": (pair(d, c, -D2 / 2) + pair(d, -c, -D2 / 2)) / 2}
        relcov = {k: mp.exp(D2) * v - 1 for k, v in pm.items()}
    K = 0 if proj == "iid" else blocks(m, d)
    rc = 0 if proj == "iid" else relcov[proj]
    return sm2 * (relvar / m + mp.mpf(K) / m**2 * rc)

def relcov(kind, d, t):   # relative pair covariance of a simplex pair
    t = mp.mpf(t); c = -1 / mp.mpf(d - 1)
    if kind == "exp":
        return mp.exp(-t) * pair(d, c, t / 2) - 1
    if kind == "hyp":
        return mp.exp(-t) * (pair(d, c, t / 2) + pair(d, -c, t / 2)) / 2 - 1
    return mp.exp(t) * (pair(d, c, -t / 2) + pair(d, -c, -t / 2)) / 2 - 1

X = [0.3, -0.2, 0.5, 0.1, -0.4]; Y = [0.2, 0.4, -0.1, 0.3, 0.25]
# e.g. mse("exp", X[:4], Y[:4], 6, "simplex"); mse("exp", X, Y, 8, "orthogonal", -0.06, PSI)
# x32 = [0.1 * (-1)**i * (1 + (i % 5) / 4) for i in range(32)]; y32 = [0.08 * ((i % 3) - 1) + 0.05 ...]
```
"""

from __future__ import annotations

import numpy as np
import pytest

import rfkit as rk
from rfkit.theory._simplex import simplex_exp_pair_cov, simplex_trig_pair_cov

F = rk.features
RTOL = 1e-12
X = np.array([0.3, -0.2, 0.5, 0.1, -0.4])
Y = np.array([0.2, 0.4, -0.1, 0.3, 0.25])
PSI = np.array([1.2, 0.8, 1.5, 0.7, 1.0])
X32 = np.array([0.1 * (-1) ** i * (1 + (i % 5) / 4) for i in range(32)])
Y32 = np.array([0.08 * ((i % 3) - 1) + 0.05 for i in range(32)])

# (label, spec, x, y, mpmath MSE)
MSE_PINS = [
    ("positive-simplex", F.Positive(6, projection="simplex"), X[:4], Y[:4], 0.066201601823411601659),
    ("positive-simplex-d5-m13", F.Positive(13, projection="simplex"), X, Y, 0.021143646289454667543),
    ("hyperbolic-simplex", F.Hyperbolic(5, projection="simplex"), X, Y, 0.020916114034248610729),
    ("trig-simplex", F.Trig(7, projection="simplex"), X[:3], Y[:3], 0.031019773121079230708),
    ("oprf-simplex", F.OPRF(8, A=-0.07, projection="simplex"), X, Y, 0.020713239243227540504),
    ("oprf-hyp-iid", F.OPRF(8, A=-0.07, hyperbolic=True), X, Y, 0.013988780224950739351),
    (
        "oprf-hyp-orth",
        F.OPRF(8, A=-0.07, hyperbolic=True, projection="orthogonal"),
        X,
        Y,
        0.0063703568193477994042,
    ),
    (
        "oprf-hyp-simplex",
        F.OPRF(12, A=0.03, hyperbolic=True, projection="simplex"),
        X,
        Y,
        0.026639620815304507112,
    ),
    ("gerf-trig-iid", F.GERF(8, A=0.02, s=-1), X, Y, 0.075808347093222420188),
    ("gerf-trig-orth", F.GERF(8, A=-0.05, s=-1, projection="orthogonal"), X, Y, 0.053676565936535845407),
    ("gerf-trig-simplex", F.GERF(9, A=0.02, s=-1, projection="simplex"), X, Y, 0.040020537580755661203),
    ("saderf-orth", F.SADERF(8, A=-0.06, psi=PSI, projection="orthogonal"), X, Y, 0.10691884936559262672),
    ("saderf-simplex", F.SADERF(7, A=-0.06, psi=PSI, projection="simplex"), X, Y, 0.058731607275610458419),
    (
        "positive-simplex-d2",
        F.Positive(5, projection="simplex"),
        [1.2, 0.5],
        [0.8, 0.9],
        1294.5745191089247517,
    ),
    (
        "hyperbolic-simplex-d2",
        F.Hyperbolic(5, projection="simplex"),
        [1.2, 0.5],
        [0.8, 0.9],
        649.83416818399624894,
    ),
    ("positive-simplex-d32-m70", F.Positive(70, projection="simplex"), X32, Y32, 0.0052950814917653653205),
    ("trig-simplex-d32-m70", F.Trig(70, projection="simplex"), X32, Y32, 0.0014344553133885923618),
]


@pytest.mark.parametrize("label, fm, x, y, ref", MSE_PINS, ids=[p[0] for p in MSE_PINS])
def test_mse_pinned_to_mpmath(label, fm, x, y, ref):
    np.testing.assert_allclose(float(rk.theory.mse(fm, x, y)), ref, rtol=RTOL)
    # log_mse is the same number in log space
    np.testing.assert_allclose(float(rk.theory.log_mse(fm, x, y)), np.log(ref), rtol=RTOL, atol=RTOL)


# (family, d, |z|^2 or |x-y|^2, mpmath relative pair covariance)
COV_PINS = [
    ("exp", 2, 7.84, -0.9955908957932986365),
    ("exp", 3, 0.01, -0.0042381384700185106888),
    ("exp", 48, 12.5, -0.73189454704446123774),
    ("hyp", 2, 3.0, 0.4883919652339705208),
    ("hyp", 3, 5.0, -0.26719307979360695542),
    ("hyp", 6, 2.0, -0.12827765886936435173),
    ("trig", 2, 3.0, 3.7529245270431870417),
    ("trig", 5, 6.5, -9.777793440436928534),
    ("trig", 24, 0.3, -0.0016872348196499750844),
]


@pytest.mark.parametrize("family, d, t, ref", COV_PINS)
def test_simplex_pair_covariance_pinned_to_mpmath(family, d, t, ref):
    if family == "trig":
        s, lg = simplex_trig_pair_cov(d, np.array(t))
    else:
        s, lg = simplex_exp_pair_cov(d, np.array(t), family == "hyp")
    np.testing.assert_allclose(float(s * np.exp(lg)), ref, rtol=RTOL)
