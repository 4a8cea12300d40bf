"""Closed forms of ADERF, SDERF, RandomMaclaurin and TensorSketch pinned to mpmath values (rtol 1e-12).

The pinned numbers were computed at 50 digits by the mpmath code below, which implements each
variance *independently* of rfkit's code path: the DERFs through the paper's matrix form
(Likhosherstov et al., NeurIPS 2023, Thm. 4.1: determinants, matrix inverses and ``sqrtm``,
no eigen-decomposition, no OPRF reduction); random Maclaurin through the series
sum_n kappa^n / (n!^2 q_n) summed by ``mp.nsum`` (not the Bessel identity rfkit uses);
TensorSketch through the difference form of V_j (not the multinomial expansion rfkit uses).
The ``*_log_big`` pins check the log-space paths at large norms.

The mpmath code is in the comment below (values printed with ``mp.nstr(v, 20)``).
"""

# import mpmath as mp
# mp.mp.dps = 50
# def V(v): return mp.matrix([mp.mpf(str(t)) for t in v])
# def M(rows): return mp.matrix([[mp.mpf(str(t)) for t in r] for r in rows])
# def dot(a, b): return sum(a[i]*b[i] for i in range(len(a)))
# def quad(x, S, y): return (x.T * S * y)[0]
# def derf_var(x, y, A, B1, B2):
#     # Thm 4.1: D^4 det(I-8A)^{-1/2} exp(2x^T(C1+B1^T R B1)x + 2y^T(C2+B2^T R B2)y + 4x^T B1^T R B2 y) - SM^2
#     d = len(x); I = mp.eye(d)
#     P = (I - 4*A)**-1; R = (I - 8*A)**-1
#     C1 = -B1.T*P*B1/2; C2 = -B2.T*P*B2/2
#     D4 = mp.det(I - 4*A)
#     e = 2*quad(x, C1 + B1.T*R*B1, x) + 2*quad(y, C2 + B2.T*R*B2, y) + 4*quad(x, B1.T*R*B2, y)
#     return D4 / mp.sqrt(mp.det(I - 8*A)) * mp.e**e - mp.e**(2*dot(x, y))
# def aderf(x, y, a, G, m, K=0):
#     d = len(x); I = mp.eye(d); a = mp.mpf(str(a))
#     B1 = mp.sqrt(1-4*a)*G; B2 = mp.sqrt(1-4*a)*(G**-1).T
#     var = derf_var(x, y, a*I, B1, B2)
#     z = G*x + (G**-1).T*y; z2 = dot(z, z)
#     cov = mp.e**(2*dot(x, y)) * (mp.e**(-z2)*mp.hyp1f1(d, mp.mpf(d)/2, z2/2) - 1)
#     return var/m + K*cov/m**2
# def sderf(x, y, A, m):
#     d = len(x); I = mp.eye(d)
#     B = mp.sqrtm(I - 4*A)
#     return derf_var(x, y, A, B, B)/m
# def kappa(x, y, dist):
#     t = dot(x, y); k = dot(x, x)*dot(y, y) + 2*t*t
#     if dist == "rademacher": k -= 2*sum(x[i]**2*y[i]**2 for i in range(len(x)))
#     return k
# def rm(x, y, m, p, K, dist):
#     t = dot(x, y); k = kappa(x, y, dist); r = 1/mp.mpf(str(p))
#     if K is None:
#         q = lambda n: (1-r)*r**n
#         E2 = mp.nsum(lambda n: k**n/(mp.factorial(n)**2*q(n)), [0, mp.inf])
#         mu = mp.e**t
#     else:
#         q = lambda n: (1-r)*r**n/(1-r**(K+1))
#         E2 = sum(k**n/(mp.factorial(n)**2*q(n)) for n in range(K+1))
#         mu = sum(t**n/mp.factorial(n) for n in range(K+1))
#     return (E2 - mu**2)/m + (mu - mp.e**t)**2
# def ts(x, y, D, n):
#     t = dot(x, y); N = dot(x, x)*dot(y, y); w1 = sum(x[i]**2*y[i]**2 for i in range(len(x)))
#     c, w3, w4 = t*t, N - w1, t*t - w1; g = 2 if D % 2 == 0 else 1
#     var = 0
#     for j in range(1, n+1):
#         Vj = ((c+w3)**j + (c+w4)**j - 2*c**j)/D + g*((c+w3+w4)**j - (c+w3)**j - (c+w4)**j + c**j)/mp.mpf(D)**2
#         var += Vj/mp.factorial(j)**2
#     Tn = sum(t**j/mp.factorial(j) for j in range(n+1))
#     return var + (Tn - mp.e**t)**2
#
# x3 = [0.3, -0.2, 0.5]; y3 = [0.1, 0.4, -0.3]
# G = M([[1.2, 0.3, 0.0], [0.0, 0.8, -0.2], [0.1, 0.0, 1.1]])
# A3 = M([[-0.08, 0.02, 0.01], [0.02, 0.05, -0.03], [0.01, -0.03, -0.2]])
# x4 = [0.4, -0.3, 0.2, 0.5]; y4 = [0.3, 0.1, -0.4, 0.6]
# aderf_iid = aderf(V(x3), V(y3), -0.07, G, 8)
# aderf_orth_m5 = aderf(V(x3), V(y3), -0.07, G, 5, K=8)      # blocks (3, 2): K = 3*2 + 2*1
# aderf_log_big = mp.log(aderf(V(10 * x3), V(10 * y3), -0.3, G, 8))
# sderf_iid = sderf(V(x3), V(y3), A3, 8)
# sderf_log_big = mp.log(sderf(V(10 * x3), V(12 * y3), A3, 8))
# rm_rad = rm(V(x4), V(y4), 8, 2.0, None, "rademacher")
# rm_gauss_p3 = rm(V(x4), V(y4), 5, 3.0, None, "gaussian")
# rm_trunc = rm(V(x4), V(y4), 6, 1.5, 4, "rademacher")
# rm_log_big = mp.log(rm(V(6 * x4), V(6 * y4), 8, 2.0, None, "rademacher"))
# ts_D5_n3 = ts(V(x4), V(y4), 5, 3)
# ts_D6_n4 = ts(V(x4), V(y4), 6, 4)
# ts_log_big = mp.log(ts(V(8 * x4), V(8 * y4), 16, 6))

from __future__ import annotations

import numpy as np
import pytest

import rfkit.features as F
import rfkit.theory as th

RTOL = 1e-12
x3 = np.array([0.3, -0.2, 0.5])
y3 = np.array([0.1, 0.4, -0.3])
G = np.array([[1.2, 0.3, 0.0], [0.0, 0.8, -0.2], [0.1, 0.0, 1.1]])
A3 = np.array([[-0.08, 0.02, 0.01], [0.02, 0.05, -0.03], [0.01, -0.03, -0.2]])
x4 = np.array([0.4, -0.3, 0.2, 0.5])
y4 = np.array([0.3, 0.1, -0.4, 0.6])

CASES = {
    "aderf_iid": (lambda: th.mse(F.ADERF(8, A=-0.07, G=G), x3, y3), 0.029339810515455150723),
    "aderf_orth_m5": (
        lambda: th.mse(F.ADERF(5, A=-0.07, G=G, projection="orthogonal"), x3, y3),
        0.044518448489776435786,
    ),
    "aderf_log_big": (lambda: th.log_mse(F.ADERF(8, A=-0.3, G=G), 10 * x3, 10 * y3), -31.149563781397034043),
    "sderf_iid": (lambda: th.mse(F.SDERF(8, A=A3), x3, y3), 0.039924473363435762437),
    "sderf_log_big": (lambda: th.log_mse(F.SDERF(8, A=A3), 10 * x3, 12 * y3), -21.462281956568064963),
    "rm_rad": (lambda: th.mse(F.RandomMaclaurin(8), x4, y4), 0.19409234179039261514),
    "rm_gauss_p3": (
        lambda: th.mse(F.RandomMaclaurin(5, p=3.0, distribution="gaussian"), x4, y4),
        0.62638237151992046887,
    ),
    "rm_trunc": (lambda: th.mse(F.RandomMaclaurin(6, p=1.5, max_degree=4), x4, y4), 0.34574253020571376869),
    "rm_log_big": (lambda: th.log_mse(F.RandomMaclaurin(8), 6 * x4, 6 * y4), 51.787994573760985736),
    "ts_D5_n3": (lambda: th.mse(F.TensorSketch(5, 3), x4, y4), 0.046094566838678923442),
    "ts_D6_n4": (lambda: th.mse(F.TensorSketch(6, 4), x4, y4), 0.038373541804313751668),
    "ts_log_big": (lambda: th.log_mse(F.TensorSketch(16, 6), 8 * x4, 8 * y4), 39.679431142143051277),
}


@pytest.mark.parametrize("name", list(CASES))
def test_closed_form_matches_mpmath(name):
    fn, ref = CASES[name]
    np.testing.assert_allclose(float(fn()), ref, rtol=RTOL)
