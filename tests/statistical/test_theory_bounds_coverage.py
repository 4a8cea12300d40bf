"""Bounds in simulation: Performer Thm 2, the max-relative-error equality case, chi^2 and Hotelling coverage, for every map.

Fixed large-literal seeds; tolerances are 5 Monte Carlo standard errors.
"""

from __future__ import annotations

import numpy as np
import pytest

import rfkit.features as F
import rfkit.theory as th

B = th.bounds


@pytest.mark.parametrize("d,m,scale", [(4, 3, 0.25), (8, 8, 0.2), (16, 12, 0.12)])
def test_performer_theorem2_bound_holds_in_simulation(d, m, scale):
    rng = np.random.default_rng(4410934201)
    X, Y = scale * rng.normal(size=(2, 3, d))
    res = th.check(F.Positive(m, projection="orthogonal"), X, Y, n_trials=150_000, rng=8855011290311)
    bound = th.performer_orthogonal_bound(X, Y, m)
    assert np.all(res.measured_mse <= bound + 5 * res.mse_mcse)
    assert np.all(np.abs(res.z) <= 5)


@pytest.mark.parametrize("d,m,r", [(2, 16, 0.2), (5, 64, 0.4), (16, 8, 0.6)])
def test_max_relative_error_attained_in_equality_case(d, m, r):
    """A = I, x = y with ||x|| = r: sqrt(MSE)/SM equals W(r)/sqrt(2m) (Lemma 3.2 equality case)."""
    x = np.zeros(d)
    x[0] = r
    res = th.check(F.HCEXP(m), x, x, n_trials=200_000, rng=3071198822014)
    b = B.max_relative_error(r, m).bound
    target = (b * res.kernel) ** 2
    assert abs(res.measured_mse - target) <= 5 * res.mse_mcse
    # the W printed in Blackwelder (2024), Lemma 3.2, is negative, i.e. cannot be an RMS error
    assert np.exp(2 * r * r) * (1 - np.exp(4 * r * r)) < 0 < b


def _rel_rmse_max(m, A, X, Y):
    rel = th.relative_mse(F.HCEXP(m, A="identity" if A is None else A), X[:, None, :], Y[None, :, :])
    return float(np.sqrt(rel.max()))


@pytest.mark.filterwarnings(
    "ignore::rfkit.exceptions.VacuousBoundWarning"
)  # bounds >= 1 here (flagged vacuous)
@pytest.mark.parametrize("d,s,p", [(3, 10, 0.9), (5, 20, 0.9), (8, 5, 0.99)])
def test_chi2_concentration_coverage(d, s, p):
    rng = np.random.default_rng(1200937741 + d)
    mx, my = 0.1 * rng.normal(size=d), 0.1 * rng.normal(size=d)
    Lx, Ly = 0.12 * rng.normal(size=(d, d)) / np.sqrt(d), 0.12 * rng.normal(size=(d, d)) / np.sqrt(d)
    Sx, Sy = Lx @ Lx.T + 0.004 * np.eye(d), Ly @ Ly.T + 0.004 * np.eye(d)
    A = rng.uniform(0.7, 1.4, size=d)
    m = 32
    res = B.chi2_concentration(mx, Sx, my, Sy, A, s, p, m)
    R = 4000
    Xs = rng.multivariate_normal(mx, Sx, size=(R, s))
    Ys = rng.multivariate_normal(my, Sy, size=(R, s))
    # (a) the 2s Mahalanobis events hold jointly with probability exactly q^{2s} = p
    dx = np.einsum("rsi,ij,rsj->rs", Xs - mx, np.linalg.inv(Sx), Xs - mx)
    dy = np.einsum("rsi,ij,rsj->rs", Ys - my, np.linalg.inv(Sy), Ys - my)
    joint = np.mean(np.all(dx <= res.quantile_x, 1) & np.all(dy <= res.quantile_y, 1))
    se = np.sqrt(p * (1 - p) / R)
    assert abs(joint - p) <= 5 * se
    # (b) the bound on the max relative RMS error holds with probability >= p
    ok = np.array([_rel_rmse_max(m, A, Xs[i], Ys[i]) <= res.bound for i in range(R)])
    assert ok.mean() >= p - 5 * se
    # (c) the radii hold at least as often as the Mahalanobis events
    nx = np.linalg.norm(Xs * A, axis=-1).max(1) <= res.r_x
    ny = np.linalg.norm(Ys / A, axis=-1).max(1) <= res.r_y
    assert np.mean(nx & ny) >= joint - 1e-12


@pytest.mark.filterwarnings(
    "ignore::rfkit.exceptions.VacuousBoundWarning"
)  # bounds >= 1 here (flagged vacuous)
@pytest.mark.parametrize("n,d,p", [(30, 5, 0.9), (15, 3, 0.95), (60, 8, 0.8)])
def test_hotelling_quantiles_exact_coverage(n, d, p):
    """New point: P[D^2 <= (n+1)(n-1)d/(n(n-d)) F(q)] = q; in-sample: Beta quantile; naive chi^2 under-covers."""
    rng = np.random.default_rng(5590321177 + n)
    R = 20_000
    Z = rng.normal(size=(R, n + 1, d))
    X, xn = Z[:, :n], Z[:, n]
    xb = X.mean(1)
    C = X - xb[:, None]
    S = np.einsum("rni,rnj->rij", C, C) / (n - 1)
    Si = np.linalg.inv(S)
    D2 = np.einsum("ri,rij,rj->r", xn - xb, Si, xn - xb)
    Din = np.einsum("ri,rij,rj->r", X[:, 0] - xb, Si, X[:, 0] - xb)
    # quantiles as computed by hotelling_concentration for one dataset (they depend on n, d, q only)
    res_new = B.hotelling_concentration(X[0], X[1], None, p, 4, n_points=1)
    q = res_new.q
    se = np.sqrt(q * (1 - q) / R)
    assert abs(np.mean(D2 <= res_new.quantile_x) - q) <= 5 * se
    res_in = B.hotelling_concentration(X[0], X[1], None, p, 4, points="in-sample")
    qi = res_in.q
    assert abs(np.mean(Din <= res_in.quantile_x) - qi) <= 5 * np.sqrt(qi * (1 - qi) / R) + 1e-12
    from scipy import stats

    assert np.mean(D2 <= stats.chi2.ppf(q, d)) < q - 5 * se


@pytest.mark.filterwarnings(
    "ignore::rfkit.exceptions.VacuousBoundWarning"
)  # bounds >= 1 here (flagged vacuous)
@pytest.mark.parametrize("n,d,s", [(40, 3, 10), (25, 4, 5), (80, 6, 20)])
def test_hotelling_bound_coverage(n, d, s):
    """With estimated parameters and the union bound, the bound covers s new queries and keys w.p. >= p."""
    rng = np.random.default_rng(7781202231 + n)
    p, m = 0.9, 16
    mx, my = 0.1 * rng.normal(size=d), -0.1 * rng.normal(size=d)
    Sx, Sy = 0.02 * np.eye(d), 0.01 * (np.eye(d) + 0.5)
    R = 1500
    hits = 0
    for _ in range(R):
        X = rng.multivariate_normal(mx, Sx, size=n)
        Y = rng.multivariate_normal(my, Sy, size=n)
        res = B.hotelling_concentration(X, Y, None, p, m, n_points=s)
        Xn = rng.multivariate_normal(mx, Sx, size=s)
        Yn = rng.multivariate_normal(my, Sy, size=s)
        hits += _rel_rmse_max(m, None, Xn, Yn) <= res.bound
    assert hits / R >= p - 5 * np.sqrt(p * (1 - p) / R)


# --- every map: the equality case in simulation, and the coverage of the concentration bounds ---------

_MAPS = {
    "positive": lambda m, proj: F.Positive(m, projection=proj),
    "hyperbolic": lambda m, proj: F.Hyperbolic(m, projection=proj),
    "trig": lambda m, proj: F.Trig(m, projection=proj),
}


@pytest.mark.parametrize(
    "kind,projection,d,m,r",
    [
        ("positive", "iid", 4, 16, 0.3),
        ("hyperbolic", "iid", 4, 16, 0.4),
        ("trig", "iid", 4, 16, 0.4),
        ("positive", "orthogonal", 6, 6, 0.3),
        ("hyperbolic", "orthogonal", 5, 12, 0.4),
    ],
)
def test_max_relative_error_attained_for_every_map(kind, projection, d, m, r):
    """At the worst pair (x = y, trig x = -y, norm r) the simulated MSE of the features equals (bound * SM)^2."""
    x = np.zeros(d)
    x[0] = r
    y = -x if kind == "trig" else x
    res = th.check(_MAPS[kind](m, projection), x, y, n_trials=100_000, rng=6620193847 + d)
    b = B.max_relative_error(
        r, m, kind=kind, projection=projection, d=d if projection != "iid" else None
    ).bound
    assert abs(res.measured_mse - (b * res.kernel) ** 2) <= 5 * res.mse_mcse


def _rel_rmse_max_map(fm, X, Y):
    return float(np.sqrt(th.relative_mse(fm, X[:, None, :], Y[None, :, :]).max()))


@pytest.mark.parametrize(
    "kind,projection,d,s,p",
    [
        ("positive", "iid", 3, 10, 0.9),
        ("hyperbolic", "iid", 5, 20, 0.9),
        ("trig", "iid", 4, 10, 0.95),
        ("positive", "orthogonal", 4, 10, 0.9),
        ("hyperbolic", "orthogonal", 6, 5, 0.99),
    ],
)
def test_chi2_concentration_coverage_every_map(kind, projection, d, s, p):
    """Over draws of the data, max_ij sqrt(MSE)/SM of the map is below the chi^2 bound w.p. >= p (5 MCSE)."""
    rng = np.random.default_rng(3308172265 + 7 * d + s)
    mx, my = 0.1 * rng.normal(size=d), 0.1 * rng.normal(size=d)
    Lx, Ly = 0.08 * rng.normal(size=(d, d)) / np.sqrt(d), 0.08 * rng.normal(size=(d, d)) / np.sqrt(d)
    Sx, Sy = Lx @ Lx.T + 0.002 * np.eye(d), Ly @ Ly.T + 0.002 * np.eye(d)
    m = 64
    res = B.chi2_concentration(mx, Sx, my, Sy, None, s, p, m, kind=kind, projection=projection)
    assert not res.vacuous
    fm = _MAPS[kind](m, projection)
    R = 3000
    Xs = rng.multivariate_normal(mx, Sx, size=(R, s))
    Ys = rng.multivariate_normal(my, Sy, size=(R, s))
    ok = np.array([_rel_rmse_max_map(fm, Xs[i], Ys[i]) <= res.bound for i in range(R)])
    assert ok.mean() >= p - 5 * np.sqrt(p * (1 - p) / R)


@pytest.mark.parametrize(
    "kind,projection", [("positive", "iid"), ("trig", "iid"), ("hyperbolic", "orthogonal")]
)
def test_hotelling_bound_coverage_every_map(kind, projection):
    """Estimated parameters, union bound: new queries and keys are covered w.p. >= p for every map."""
    rng = np.random.default_rng(1187702931)
    n, d, s, p, m = 30, 3, 8, 0.9, 64
    mx, my = 0.1 * rng.normal(size=d), -0.1 * rng.normal(size=d)
    Sx, Sy = 0.008 * np.eye(d), 0.004 * (np.eye(d) + 0.5)
    fm = _MAPS[kind](m, projection)
    R = 800
    hits = 0
    for _ in range(R):
        X = rng.multivariate_normal(mx, Sx, size=n)
        Y = rng.multivariate_normal(my, Sy, size=n)
        res = B.hotelling_concentration(X, Y, None, p, m, n_points=s, kind=kind, projection=projection)
        Xn = rng.multivariate_normal(mx, Sx, size=s)
        Yn = rng.multivariate_normal(my, Sy, size=s)
        hits += _rel_rmse_max_map(fm, Xn, Yn) <= res.bound
    assert hits / R >= p - 5 * np.sqrt(p * (1 - p) / R)
