"""Closed forms pinned to rtol 1e-12 against independent mpmath computations written here.

The mpmath side implements each formula of docs page *Theory* directly (hypergeometric functions,
matrix algebra, series) at 50 significant digits; rfkit's side uses its log-space float64 code.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

import rfkit.features as F
import rfkit.theory as th
from rfkit.exceptions import RFKitWarning
from rfkit.projections import block_sizes

mp.mp.dps = 50
RTOL = 1e-12


def _mpv(v):
    return [mp.mpf(float(t)) for t in np.ravel(v)]


def _dot(a, b):
    return mp.fsum(p * q for p, q in zip(a, b))


def _K(m, d):
    return sum(k * (k - 1) for k in block_sizes(m, d))


def mp_mse(kind, proj, x, y, m, a=0.0):
    """Exact MSE from docs page *Theory*, sections 1 and 1a (s, g, u table and the block formula)."""
    d = len(x)
    X, Y = _mpv(x), _mpv(y)
    a = mp.mpf(a)
    sm = mp.e ** _dot(X, Y)
    z = [p + q for p, q in zip(X, Y)]
    D = [p - q for p, q in zip(X, Y)]
    z2, D2 = _dot(z, z), _dot(D, D)
    lam = mp.e ** (-(_dot(X, X) + _dot(Y, Y)) / 2)
    K = _K(m, d) if proj != "iid" else 0
    b = mp.mpf(d) / 2
    if kind == "trig":
        s = mp.e ** ((_dot(X, X) + _dot(Y, Y)) / 2)
        if proj == "orthogonal-fixed":
            mu1 = mp.hyp0f1(b, -d * D2 / 4)
            musq = (1 + mp.hyp0f1(b, -d * D2)) / 2
            pair = mp.hyp0f1(b, -d * D2 / 2)
        else:
            mu1 = mp.e ** (-D2 / 2)
            musq = (1 + mp.e ** (-2 * D2)) / 2
            pair = mp.hyp1f1(d, b, -D2 / 2)
    else:
        s = lam
        if proj == "orthogonal-fixed":
            c = (1 - 4 * a) ** b * mp.e ** (2 * a * d)
            bb = 1 - 4 * a
            s = lam * c
            mu1 = mp.hyp0f1(b, d * bb * z2 / 4)
            pair = mp.hyp0f1(b, d * bb * z2 / 2)
            musq = (1 + mp.hyp0f1(b, d * z2)) / 2 if kind == "hyp" else mp.hyp0f1(b, d * bb * z2)
        else:
            if kind == "oprf":
                # Var of one sample (Likhosherstov et al. (NeurIPS 2022)), expressed as s^2 (musq - mu1^2).
                var1 = ((1 - 4 * a) ** 2 / (1 - 8 * a)) ** b * mp.e ** (
                    2 * (1 - 4 * a) / (1 - 8 * a) * z2 - _dot(X, X) - _dot(Y, Y)
                ) - sm**2
                mu1 = mp.e ** (z2 / 2)
                musq = var1 / lam**2 + mu1**2
            else:
                mu1 = mp.e ** (z2 / 2)
                musq = mp.e ** (2 * z2) if kind == "prf" else (1 + mp.e ** (2 * z2)) / 2
            pair = mp.hyp1f1(d, b, z2 / 2)
    return s**2 * ((musq - mu1**2) / m + mp.mpf(K) / m**2 * (pair - mu1**2)) + (s * mu1 - sm) ** 2


def _pair(d, seed, scale):
    rng = np.random.default_rng(seed)
    return scale * rng.normal(size=d), scale * rng.normal(size=d)


MAPS = {
    "trig": (lambda m, p: F.Trig(m, projection=p), "trig", 0.0),
    "prf": (lambda m, p: F.Positive(m, projection=p), "prf", 0.0),
    "hyp": (lambda m, p: F.Hyperbolic(m, projection=p), "hyp", 0.0),
    "oprf": (lambda m, p: F.OPRF(m, A=-0.07, projection=p), "oprf", -0.07),
    "oprf-pos": (lambda m, p: F.OPRF(m, A=0.05, projection=p), "oprf", 0.05),
}
CASES = [(3, 2, 0.4), (5, 5, 0.7), (6, 15, 0.3), (16, 40, 0.35), (2, 3, 1.2)]


@pytest.mark.parametrize("proj", ["iid", "orthogonal", "orthogonal-fixed"])
@pytest.mark.parametrize("name", list(MAPS))
@pytest.mark.parametrize("d,m,scale", CASES)
def test_mse_matches_mpmath(name, proj, d, m, scale):
    make, kind, a = MAPS[name]
    x, y = _pair(d, 1000 * d + m, scale)
    got = th.mse(make(m, proj), x, y)
    want = float(mp_mse(kind, proj, x, y, m, a))
    assert got == pytest.approx(want, rel=RTOL)


@pytest.mark.parametrize("proj", ["iid", "orthogonal", "orthogonal-fixed"])
@pytest.mark.parametrize("hyper", [False, True])
def test_cexp_full_and_diag_A_match_mpmath(proj, hyper):
    d, m = 5, 7
    x, y = _pair(d, 77, 0.4)
    rng = np.random.default_rng(5)
    A_full = rng.normal(size=(d, d)) + 2.0 * np.eye(d)
    A_diag = rng.uniform(0.5, 2.0, size=d)
    for A in (A_full, A_diag):
        Am = mp.matrix(np.diag(A).tolist() if A.ndim == 1 else A.tolist())
        xa = Am * mp.matrix(_mpv(x))
        ya = (Am.T**-1) * mp.matrix(_mpv(y))
        want = mp_mse_transformed("hyp" if hyper else "prf", proj, xa, ya, m)
        spec = (F.HCEXP if hyper else F.CEXP)(m, A=A, projection=proj)
        assert th.mse(spec, x, y) == pytest.approx(float(want), rel=RTOL)


def mp_mse_transformed(kind, proj, xa, ya, m):
    """As mp_mse but on exact mp vectors (CEXP = PRF on Ax and A^-T y, docs page *Theory*, section 1)."""
    X, Y = list(xa), list(ya)
    d = len(X)
    sm = mp.e ** _dot(X, Y)
    z = [p + q for p, q in zip(X, Y)]
    z2 = _dot(z, z)
    lam = mp.e ** (-(_dot(X, X) + _dot(Y, Y)) / 2)
    K = _K(m, d) if proj != "iid" else 0
    b = mp.mpf(d) / 2
    if proj == "orthogonal-fixed":
        mu1, pair = mp.hyp0f1(b, d * z2 / 4), mp.hyp0f1(b, d * z2 / 2)
        musq = (1 + mp.hyp0f1(b, d * z2)) / 2 if kind == "hyp" else mp.hyp0f1(b, d * z2)
    else:
        mu1, pair = mp.e ** (z2 / 2), mp.hyp1f1(d, b, z2 / 2)
        musq = (1 + mp.e ** (2 * z2)) / 2 if kind == "hyp" else mp.e ** (2 * z2)
    return lam**2 * ((musq - mu1**2) / m + mp.mpf(K) / m**2 * (pair - mu1**2)) + (lam * mu1 - sm) ** 2


def test_log_mse_large_norms_matches_mpmath():
    """log_mse stays finite and exact for ||x+y||^2 in the hundreds (mse itself would overflow)."""
    d = 8
    rng = np.random.default_rng(3)
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    for z2 in (150.0, 400.0, 900.0):
        x = y = 0.5 * np.sqrt(z2) * u
        for proj in ("iid", "orthogonal", "orthogonal-fixed"):
            for kind, spec in (
                ("prf", F.Positive(16, projection=proj)),
                ("hyp", F.Hyperbolic(16, projection=proj)),
            ):
                got = th.log_mse(spec, x, y)
                want = mp.log(mp_mse(kind, proj, x, y, 16))
                assert np.isfinite(got)
                assert got == pytest.approx(float(want), rel=RTOL)


def test_trig_large_distance_log_mse_matches_mpmath():
    d = 6
    x = np.zeros(d)
    x[0] = 6.0
    y = -x  # ||x - y||^2 = 144
    for proj in ("iid", "orthogonal"):
        got = th.log_mse(F.Trig(6, projection=proj), x, y)
        assert got == pytest.approx(float(mp.log(mp_mse("trig", proj, x, y, 6))), rel=RTOL)


@pytest.mark.parametrize("proj", ["orthogonal-fixed"])
def test_bias_fixed_norm_matches_smreg(proj):
    """bias = SMREG - SM = Lambda 0F1(;d/2; d||z||^2/4) - SM (Performer Thm 1)."""
    for d, scale in ((2, 0.5), (8, 0.4), (32, 0.2)):
        x, y = _pair(d, d, scale)
        X, Y = _mpv(x), _mpv(y)
        z = [p + q for p, q in zip(X, Y)]
        lam = mp.e ** (-(_dot(X, X) + _dot(Y, Y)) / 2)
        want = lam * mp.hyp0f1(mp.mpf(d) / 2, d * _dot(z, z) / 4) - mp.e ** _dot(X, Y)
        assert th.bias(F.Positive(4, projection=proj), x, y) == pytest.approx(float(want), rel=RTOL)


def test_performer_bound_matches_mpmath():
    d, m = 8, 5
    x, y = _pair(d, 11, 0.3)
    X, Y = _mpv(x), _mpv(y)
    lam = mp.e ** (-(_dot(X, X) + _dot(Y, Y)) / 2)
    sm = mp.e ** _dot(X, Y)
    want = mp_mse("prf", "iid", x, y, m) - mp.mpf(2 * (m - 1)) / (m * (d + 2)) * (sm - lam) ** 2
    assert th.performer_orthogonal_bound(x, y, m) == pytest.approx(float(want), rel=RTOL)


@pytest.mark.parametrize("s2", [0.01, 0.05, 0.12])
@pytest.mark.parametrize("d", [1, 4, 16])
def test_expected_mse_matches_mpmath(d, s2):
    m = 8
    s2m = mp.mpf(s2)
    p = ((1 - 6 * s2m) * (1 + 2 * s2m)) ** (-mp.mpf(d) / 2)
    q = (1 - 4 * s2m**2) ** (-mp.mpf(d) / 2)
    want = {
        "Positive": (p - q) / m,
        "Hyperbolic": (p - 2 * q + (1 + 2 * s2m) ** (-d)) / (2 * m),
        "Trig": ((1 - 2 * s2m) ** (-d) - 2 * q + ((1 - 2 * s2m) * (1 + 6 * s2m)) ** (-mp.mpf(d) / 2))
        / (2 * m),
    }
    for name, cls in (("Positive", F.Positive), ("Hyperbolic", F.Hyperbolic), ("Trig", F.Trig)):
        assert th.expected_mse(cls(m), s2, d) == pytest.approx(float(want[name]), rel=RTOL)


# the values are checked whether or not they are vacuous (>= 1 at r = 1 and 2.5: the warning is tested in
# tests/unit/test_theory_bounds.py)
@pytest.mark.filterwarnings("ignore::rfkit.exceptions.VacuousBoundWarning")
@pytest.mark.parametrize("r", [0.05, 0.4, 1.0, 2.5])
def test_W_matches_mpmath(r):
    rm = mp.mpf(r)
    want = mp.e ** (2 * rm**2) * (1 - mp.e ** (-4 * rm**2))
    assert float(th.bounds.W(r)) == pytest.approx(float(want), rel=RTOL)
    b = th.bounds.max_relative_error(r, 64)
    assert b.bound == pytest.approx(float(want / mp.sqrt(128)), rel=RTOL)
    c = th.bounds.max_relative_error(r, 64, kind="cexp")
    assert c.bound == pytest.approx(float(mp.sqrt((mp.e ** (4 * rm**2) - 1) / 64)), rel=RTOL)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_truncated_kernels_and_errors_match_mpmath(n):
    for t in (-3.5, -0.7, 0.0, 0.3, 2.0, 6.0):
        tm = mp.mpf(t)
        Tn = mp.fsum(tm**j / mp.factorial(j) for j in range(n + 1))
        Ln = (1 + tm / n) ** n
        assert th.truncated_kernel(F.Taylor(n), np.array(t)) == pytest.approx(float(Tn), rel=RTOL, abs=1e-300)
        assert th.truncated_kernel(F.Limit(n), np.array(t)) == pytest.approx(float(Ln), rel=RTOL, abs=1e-300)
        et = 1 - Tn * mp.e ** (-tm)
        el = 1 - Ln * mp.e ** (-tm)
        assert th.relative_truncation_error(F.Taylor(n), np.array(t)) == pytest.approx(
            float(et), rel=1e-11, abs=1e-15
        )
        assert th.relative_truncation_error(F.Limit(n), np.array(t)) == pytest.approx(
            float(el), rel=1e-11, abs=1e-15
        )


@pytest.mark.parametrize("n", [1, 3, 5, 7, 9])
def test_taylor_root_matches_mpmath(n):
    root = mp.findroot(lambda s: mp.fsum(s**j / mp.factorial(j) for j in range(n + 1)), -1.0 - 0.25 * n)
    assert th.taylor_real_root(n) == pytest.approx(float(root), rel=RTOL)


def test_rfa_delta_method_matches_mpmath():
    rng = np.random.default_rng(2)
    d, M = 4, 6
    q, K, V = 0.35 * rng.normal(size=d), 0.35 * rng.normal(size=(M, d)), rng.normal(size=(M, 2))
    res = th.rfa_delta_method(q, K, V)
    Q, Ks = _mpv(q), [_mpv(k) for k in K]
    e = [mp.e ** _dot(Q, k) for k in Ks]
    Z = mp.fsum(e)
    G = [
        [
            mp.e ** (_dot(Q, Q) + 2 * _dot(Q, Ks[i]) + 2 * _dot(Q, Ks[j]) + _dot(Ks[i], Ks[j]))
            for j in range(M)
        ]
        for i in range(M)
    ]
    for c in range(2):
        v = [mp.mpf(float(V[i, c])) for i in range(M)]
        a = mp.fsum(e[i] * v[i] for i in range(M)) / Z
        w = [vi - a for vi in v]
        bias = -mp.fsum(G[i][j] * w[j] for i in range(M) for j in range(M)) / Z**2
        var = mp.fsum(w[i] * G[i][j] * w[j] for i in range(M) for j in range(M)) / Z**2
        assert res.attention[c] == pytest.approx(float(a), rel=RTOL)
        assert res.bias_coef[c] == pytest.approx(float(bias), rel=1e-11)
        assert res.var_coef[c] == pytest.approx(float(var), rel=1e-11)
    ratio = mp.fsum(G[i][j] for i in range(M) for j in range(M)) / Z**2
    assert res.moment_ratio == pytest.approx(float(ratio), rel=RTOL)


def test_oprf_heavy_A_fixed_norm_is_finite_and_exact():
    """With fixed norms e^{2A||w||^2} is constant: finite MSE even for 1/8 <= A < 1/4 (iid/orthogonal: +inf)."""
    d, m = 4, 6
    x, y = _pair(d, 5, 0.3)
    with pytest.warns(RFKitWarning, match="infinite variance"):
        fixed = F.OPRF(m, A=0.15, projection="orthogonal-fixed")
    assert th.mse(fixed, x, y) == pytest.approx(
        float(mp_mse("oprf", "orthogonal-fixed", x, y, m, 0.15)), rel=RTOL
    )
    with pytest.warns(RFKitWarning, match="infinite variance"):
        assert np.isposinf(th.log_mse(F.OPRF(m, A=0.15, projection="orthogonal"), x, y))


@pytest.mark.filterwarnings(
    "ignore::rfkit.exceptions.VacuousBoundWarning"
)  # large radii: vacuous, still exact
@pytest.mark.parametrize("d,s,p", [(2, 1, 0.5), (3, 20, 0.9), (6, 50, 0.99)])
def test_chi2_concentration_matches_mpmath(d, s, p):
    """Thm 3.3 restated: chi^2_d quantile at p^(1/2s) by root-finding on the regularised gamma function."""
    rng = np.random.default_rng(d)
    mx, my = 0.1 * rng.normal(size=d), 0.1 * rng.normal(size=d)
    L = 0.1 * rng.normal(size=(d, d))
    Sx, Sy = L @ L.T + 0.01 * np.eye(d), 0.02 * np.eye(d)
    A = rng.uniform(0.5, 2.0, size=d)
    m = 32
    res = th.bounds.chi2_concentration(mx, Sx, my, Sy, A, s, p, m)
    q = mp.mpf(p) ** (mp.mpf(1) / (2 * s))
    Q = mp.findroot(lambda t: mp.gammainc(mp.mpf(d) / 2, 0, t / 2, regularized=True) - q, mp.mpf(d) + 4)
    Am = mp.diag(_mpv(A))
    Sxm, Sym = mp.matrix(Sx.tolist()), mp.matrix(Sy.tolist())
    lam_x = max(mp.eigsy(Am * Sxm * Am.T)[0])
    Ai = Am**-1
    lam_y = max(mp.eigsy(Ai.T * Sym * Ai)[0])
    rx = mp.sqrt(lam_x * Q) + mp.norm(Am * mp.matrix(_mpv(mx)))
    ry = mp.sqrt(lam_y * Q) + mp.norm(Ai.T * mp.matrix(_mpv(my)))
    r = max(rx, ry)
    assert res.quantile_x == pytest.approx(float(Q), rel=RTOL)
    assert res.r == pytest.approx(float(r), rel=RTOL)
    assert res.bound == pytest.approx(float(2 * mp.sinh(2 * r**2) / mp.sqrt(2 * m)), rel=RTOL)
    assert res.bound_separate == pytest.approx(
        float(2 * mp.sinh((rx + ry) ** 2 / 2) / mp.sqrt(2 * m)), rel=RTOL
    )


@pytest.mark.parametrize("n", [1, 2, 4, 7])
def test_truncation_bounds_match_mpmath(n):
    for t in (-0.9, -0.3, 0.0, 0.5, 3.0):
        tm = mp.mpf(t)
        tay = abs(tm) ** (n + 1) / mp.factorial(n + 1) * mp.e ** max(-tm, 0)
        lim = tm**2 / (2 * (n + min(tm, 0)))
        assert th.truncation_error_bound(F.Taylor(n), np.array(t)) == pytest.approx(float(tay), rel=RTOL)
        assert th.truncation_error_bound(F.Limit(n), np.array(t)) == pytest.approx(float(lim), rel=RTOL)
