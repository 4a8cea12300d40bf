"""rfkit.theory.bounds: hand-computed values, the sign error of the printed Lemma 3.2 of Blackwelder (2024), and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import rfkit.theory as th
from rfkit.exceptions import InvalidParameterError, ShapeError, SingularMatrixError

B = th.bounds


def test_W_hand_values():
    # r = 0.5: e^{0.5}(1 - e^{-1}) = 1.0421906109874948, so W/sqrt(128) = 0.0921175... (computed by hand)
    assert float(B.W(0.5)) == pytest.approx(math.exp(0.5) * (1 - math.exp(-1.0)), rel=1e-15)
    assert float(B.W(0.5)) == pytest.approx(2 * math.sinh(0.5), rel=1e-15)
    res = B.max_relative_error(0.5, 64)
    assert res.bound == pytest.approx(0.09211750603977609, rel=1e-14)
    assert res.W == pytest.approx(float(B.W(0.5)), rel=1e-14)
    assert (res.r_x, res.r_y, res.z_max, res.n_features, res.kind) == (0.5, 0.5, 1.0, 64, "hcexp")
    assert "RMS" in res.assumptions
    assert float(B.W(0.0)) == 0.0


def test_printed_W_of_lemma_3_2_is_negative():
    """Blackwelder (2024), Lemma 3.2, prints W(r) = e^{2r^2}(1 - e^{4r^2}): negative for every r > 0
    (docs page *Theory*, section 5)."""
    r = np.array([1e-3, 0.1, 0.4, 0.5, 0.6, 1.0, 2.0])
    printed_W = np.exp(2 * r**2) * (1 - np.exp(4 * r**2))
    assert np.all(printed_W < 0)
    assert np.all(B.W(r) > 0)
    # the printed W / sqrt(2m) = -0.2504 at r = 0.5, m = 64, while the corrected bound is 0.0921
    assert printed_W[3] / math.sqrt(128) == pytest.approx(-0.25040134275088965, rel=1e-12)


def test_variants():
    same = B.max_relative_error(0.3, 16, r_y=0.3)
    assert same.bound == pytest.approx(B.max_relative_error(0.3, 16).bound, rel=1e-15)
    sep = B.max_relative_error(0.2, 16, r_y=0.5)
    assert sep.bound == pytest.approx(2 / math.sqrt(32) * math.sinh(0.7**2 / 2), rel=1e-15)
    cexp = B.max_relative_error(0.3, 16, kind="cexp")
    assert cexp.bound == pytest.approx(math.sqrt(math.expm1(4 * 0.09) / 16), rel=1e-15)
    # HCEXP is never worse than CEXP at the same m
    assert B.max_relative_error(0.3, 16).bound < cexp.bound


def test_chi2_hand_computed_identity_covariance():
    d, s, p, m = 3, 20, 0.9, 64
    res = B.chi2_concentration(np.zeros(d), 0.01 * np.eye(d), np.zeros(d), 0.04 * np.eye(d), None, s, p, m)
    q = p ** (1 / (2 * s))
    Q = stats.chi2.ppf(q, d)
    assert res.q == pytest.approx(q, rel=1e-15)
    assert res.quantile_x == pytest.approx(Q, rel=1e-14)
    assert res.lambda_x == pytest.approx(0.01) and res.lambda_y == pytest.approx(0.04)
    assert res.r_x == pytest.approx(math.sqrt(0.01 * Q), rel=1e-14)
    assert res.r_y == pytest.approx(math.sqrt(0.04 * Q), rel=1e-14)
    assert res.r == res.r_y
    assert res.bound == pytest.approx(2 * math.sinh(2 * res.r**2) / math.sqrt(2 * m), rel=1e-14)
    assert res.bound_separate == pytest.approx(
        2 * math.sinh((res.r_x + res.r_y) ** 2 / 2) / math.sqrt(2 * m), rel=1e-14
    )
    assert res.bound_separate <= res.bound
    assert res.method == "chi2" and res.n_points == s


@pytest.mark.filterwarnings(
    "ignore::rfkit.exceptions.VacuousBoundWarning"
)  # vacuous here; other fields are checked
def test_bound_quantiles_are_scipy_stats_quantiles_bit_for_bit():
    """The bounds compute chi2/F/beta quantiles with scipy.special (no scipy.stats import): the same bits."""
    from rfkit.theory._concentration import _hotelling_quantile as hotelling_quantile

    rng = np.random.default_rng(11)
    for _ in range(200):
        d = int(rng.integers(1, 60))
        n = d + int(rng.integers(2, 400))
        q = float(1 - 10.0 ** -rng.uniform(0.1, 12))
        res = B.chi2_concentration(np.zeros(d), np.eye(d), np.zeros(d), np.eye(d), None, 1, q * q, 8)
        assert res.quantile_x == stats.chi2.ppf(res.q, d)
        assert hotelling_quantile(q, n, d, "new") == (n + 1) * (n - 1) * d / (n * (n - d)) * stats.f.ppf(
            q, d, n - d
        )
        if n - d - 1 > 0:
            assert hotelling_quantile(q, n, d, "in-sample") == (n - 1) ** 2 / n * stats.beta.ppf(
                q, d / 2.0, (n - d - 1) / 2.0
            )


@pytest.mark.filterwarnings(
    "ignore::rfkit.exceptions.VacuousBoundWarning"
)  # vacuous here; other fields are checked
def test_chi2_transformed_means_and_covariances():
    A = np.array([2.0, 0.5])
    mx, my = np.array([0.1, -0.2]), np.array([0.3, 0.4])
    Sx = np.array([[0.02, 0.005], [0.005, 0.01]])
    Sy = np.array([[0.03, 0.0], [0.0, 0.01]])
    res = B.chi2_concentration(mx, Sx, my, Sy, A, 5, 0.95, 32)
    Am = np.diag(A)
    assert res.mean_x == pytest.approx(tuple(Am @ mx))
    assert res.mean_y == pytest.approx(tuple(np.linalg.solve(Am.T, my)))
    assert res.lambda_x == pytest.approx(np.linalg.eigvalsh(Am @ Sx @ Am.T).max(), rel=1e-14)
    Ai = np.linalg.inv(Am)
    assert res.lambda_y == pytest.approx(np.linalg.eigvalsh(Ai.T @ Sy @ Ai).max(), rel=1e-14)
    full = B.chi2_concentration(mx, Sx, my, Sy, Am, 5, 0.95, 32)
    assert full.bound == pytest.approx(res.bound, rel=1e-14)


@pytest.mark.filterwarnings(
    "ignore::rfkit.exceptions.VacuousBoundWarning"
)  # vacuous here; other fields are checked
def test_hotelling_hand_computed_quantiles():
    rng = np.random.default_rng(3)
    n, d = 30, 5
    X, Y = rng.normal(size=(n, d)), 0.5 * rng.normal(size=(n + 10, d))
    p, s = 0.9, 30
    res = B.hotelling_concentration(X, Y, None, p, 16, n_points=s)
    q = 1 - (1 - p) / (2 * s)
    assert res.q == pytest.approx(q, rel=1e-15)
    assert res.quantile_x == pytest.approx(
        (n + 1) * (n - 1) * d / (n * (n - d)) * stats.f.ppf(q, d, n - d), rel=1e-13
    )
    n2 = n + 10
    assert res.quantile_y == pytest.approx(
        (n2 + 1) * (n2 - 1) * d / (n2 * (n2 - d)) * stats.f.ppf(q, d, n2 - d), rel=1e-13
    )
    Sx = np.cov(X, rowvar=False)
    assert res.lambda_x == pytest.approx(np.linalg.eigvalsh(Sx).max(), rel=1e-12)
    assert res.r_x == pytest.approx(
        math.sqrt(res.lambda_x * res.quantile_x) + np.linalg.norm(X.mean(0)), rel=1e-12
    )
    ins = B.hotelling_concentration(X, Y, None, p, 16, points="in-sample")
    q2 = 1 - (1 - p) / (n + n2)
    assert ins.quantile_x == pytest.approx(
        (n - 1) ** 2 / n * stats.beta.ppf(q2, d / 2, (n - d - 1) / 2), rel=1e-13
    )
    # with estimated parameters the threshold exceeds the chi^2 one (the naive quantile under-covers)
    assert res.quantile_x > stats.chi2.ppf(q, d)


@pytest.mark.parametrize("p", [0.0, 1.0, 1.5, -0.2, float("nan")])
def test_bad_p(p):
    with pytest.raises(InvalidParameterError, match="`p`"):
        B.chi2_concentration(np.zeros(2), np.eye(2), np.zeros(2), np.eye(2), None, 3, p, 8)
    with pytest.raises(InvalidParameterError, match="`p`"):
        B.hotelling_concentration(np.random.default_rng(0).normal(size=(5, 2)), np.eye(3, 2) + 1, None, p, 8)


def test_bad_inputs_named():
    z, eye = np.zeros(2), np.eye(2)
    with pytest.raises(InvalidParameterError, match="n_points"):
        B.chi2_concentration(z, eye, z, eye, None, 0, 0.9, 8)
    with pytest.raises(InvalidParameterError, match="n_features"):
        B.chi2_concentration(z, eye, z, eye, None, 3, 0.9, 0)
    with pytest.raises(InvalidParameterError, match="cov_x.*positive definite"):
        B.chi2_concentration(z, np.array([[1.0, 2.0], [2.0, 1.0]]), z, eye, None, 3, 0.9, 8)
    with pytest.raises(InvalidParameterError, match="cov_y.*symmetric"):
        B.chi2_concentration(z, eye, z, np.array([[1.0, 0.5], [0.0, 1.0]]), None, 3, 0.9, 8)
    with pytest.raises(SingularMatrixError, match="singular"):
        B.chi2_concentration(z, eye, z, eye, np.array([[1.0, 1.0], [1.0, 1.0]]), 3, 0.9, 8)
    with pytest.raises(SingularMatrixError, match="singular"):
        B.chi2_concentration(z, eye, z, eye, np.array([1.0, 0.0]), 3, 0.9, 8)
    with pytest.raises(ShapeError, match="cov_x"):
        B.chi2_concentration(z, np.eye(3), z, eye, None, 3, 0.9, 8)
    with pytest.raises(InvalidParameterError, match="`A`"):
        B.chi2_concentration(z, eye, z, eye, "mean", 3, 0.9, 8)
    with pytest.raises(InvalidParameterError, match="`r`"):
        B.max_relative_error(-0.1, 8)
    with pytest.raises(InvalidParameterError, match="n_features"):
        B.max_relative_error(0.1, 0)
    with pytest.raises(InvalidParameterError, match="kind"):
        B.max_relative_error(0.1, 4, kind="gaussian")


def test_hotelling_needs_more_samples_than_dimensions():
    rng = np.random.default_rng(1)
    with pytest.raises(InvalidParameterError, match="n > d"):
        B.hotelling_concentration(rng.normal(size=(3, 3)), rng.normal(size=(10, 3)), None, 0.9, 8)
    with pytest.raises(InvalidParameterError, match="n > d \\+ 1"):
        B.hotelling_concentration(
            rng.normal(size=(4, 3)), rng.normal(size=(10, 3)), None, 0.9, 8, points="in-sample"
        )
    with pytest.raises(ShapeError, match="same dimension"):
        B.hotelling_concentration(rng.normal(size=(10, 3)), rng.normal(size=(10, 2)), None, 0.9, 8)


@pytest.mark.filterwarnings(
    "ignore::rfkit.exceptions.VacuousBoundWarning"
)  # vacuous here; other fields are checked
def test_results_are_frozen_and_serialisable():
    import dataclasses
    import json

    res = B.chi2_concentration(np.zeros(2), np.eye(2), np.zeros(2), np.eye(2), None, 3, 0.9, 8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.bound = 0.0
    json.dumps(res.as_dict())
    json.dumps(B.max_relative_error(0.2, 4).as_dict())


# --- every map with a closed-form relative MSE: positive, hyperbolic, trig, orthogonal ----------


def _sinh_form(s2, m):
    return 2 * math.sinh(s2 / 2) / math.sqrt(2 * m)


def test_every_map_hand_values():
    """Relative RMS error at the worst pair of the ball: (e^{s}-1)/m (PRF, CEXP), 2 sinh^2(s/2)/m
    (hyperbolic, HCEXP, trig with s = ||x - y||^2), s = (r_x + r_y)^2."""
    rx, ry, m = 0.3, 0.2, 16
    s2 = (rx + ry) ** 2
    pos = B.max_relative_error(rx, m, r_y=ry, kind="positive")
    assert pos.bound == pytest.approx(math.sqrt(math.expm1(s2) / m), rel=1e-14)
    assert pos.kind == "positive" and pos.projection == "iid"
    for kind in ("hyperbolic", "trig"):
        res = B.max_relative_error(rx, m, r_y=ry, kind=kind)
        assert res.bound == pytest.approx(_sinh_form(s2, m), rel=1e-14)
        assert res.W == pytest.approx(res.bound * math.sqrt(2 * m), rel=1e-14)
    assert B.max_relative_error(rx, m, r_y=ry, kind="hyperbolic").bound == pytest.approx(
        B.max_relative_error(rx, m, r_y=ry).bound, rel=1e-15
    )
    assert "x = -y" in B.max_relative_error(rx, m, kind="trig").assumptions


@pytest.mark.parametrize("kind", ["positive", "hyperbolic"])
@pytest.mark.parametrize("d,m", [(4, 3), (4, 4), (3, 8), (16, 5)])
def test_orthogonal_matches_the_closed_form_mse_at_the_worst_pair(kind, d, m):
    """Orthogonal (chi-normed) directions: the bound is sqrt(MSE)/SM of rfkit.theory at x = y = r e_1, with
    K/m^2 (e^{-s} 1F1(d; d/2; s/2) - 1) added to the iid value; never above the iid bound."""
    from scipy.special import hyp1f1

    import rfkit.features as F

    r = 0.35
    res = B.max_relative_error(r, m, kind=kind, projection="orthogonal", d=d)
    fm = (F.Positive if kind == "positive" else F.Hyperbolic)(m, projection="orthogonal")
    x = np.zeros(d)
    x[0] = r
    assert res.bound == pytest.approx(math.sqrt(float(th.relative_mse(fm, x, x))), rel=1e-10)
    s2 = 4 * r * r
    blocks = [d] * (m // d) + ([m % d] if m % d else [])
    K = sum(k * (k - 1) for k in blocks)
    iid = math.expm1(s2) / m if kind == "positive" else (math.cosh(s2) - 1) / m
    hand = iid + K / m**2 * (math.exp(-s2) * hyp1f1(d, d / 2, s2 / 2) - 1)
    assert res.bound == pytest.approx(math.sqrt(hand), rel=1e-10)
    assert res.bound <= B.max_relative_error(r, m, kind=kind).bound
    assert res.projection == "orthogonal" and res.d == d


@pytest.mark.filterwarnings("ignore::rfkit.exceptions.VacuousBoundWarning")
@pytest.mark.parametrize("kind", ["positive", "hyperbolic", "cexp", "hcexp"])
@pytest.mark.parametrize("d,m", [(2, 2), (5, 3), (8, 8), (8, 20), (64, 64)])
def test_orthogonal_relative_error_increases_with_the_radius(kind, d, m):
    """The supremum over the ball is taken at its boundary: the orthogonal relative RMS error is
    nondecreasing in r (checked on a grid; the iid forms are increasing by inspection)."""
    b = [
        B.max_relative_error(r, m, kind=kind, projection="orthogonal", d=d).bound
        for r in np.linspace(0, 2, 81)
    ]
    assert np.all(np.diff(b) >= 0)


def test_orthogonal_needs_d_and_a_map_with_a_derived_bound():
    with pytest.raises(InvalidParameterError, match="`d`"):
        B.max_relative_error(0.3, 4, kind="positive", projection="orthogonal")
    with pytest.raises(InvalidParameterError, match="projection"):
        B.max_relative_error(0.3, 4, kind="trig", projection="orthogonal", d=3)
    with pytest.raises(InvalidParameterError, match="projection"):
        B.max_relative_error(0.3, 4, kind="positive", projection="qmc", d=3)


def test_vacuous_bound_warns_and_is_flagged():
    """A relative RMS error bound >= 1 is no better than the estimate 0 (whose relative error is exactly 1)."""
    from rfkit.exceptions import VacuousBoundWarning

    with pytest.warns(VacuousBoundWarning, match="vacuous"):
        res = B.max_relative_error(3.0, 64)
    assert res.vacuous and res.bound == pytest.approx(2 * math.sinh(18) / math.sqrt(128), rel=1e-14)
    assert issubclass(VacuousBoundWarning, UserWarning)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = B.max_relative_error(0.5, 64, kind="trig")
        assert not ok.vacuous and ok.as_dict()["vacuous"] is False
    with pytest.warns(VacuousBoundWarning, match="chi2_concentration"):
        res = B.chi2_concentration(
            np.zeros(2), np.eye(2), np.zeros(2), np.eye(2), None, 5, 0.9, 64, kind="positive"
        )
    assert res.vacuous and res.kind == "positive"


def test_concentration_kinds():
    """The concentration bounds take every kind; maps without a transform refuse a non-identity A."""
    z, C = np.zeros(3), 0.01 * np.eye(3)
    hc = B.chi2_concentration(z, C, z, C, None, 10, 0.9, 32)
    for kind in ("hyperbolic", "trig"):
        res = B.chi2_concentration(z, C, z, C, None, 10, 0.9, 32, kind=kind)
        assert res.bound == pytest.approx(hc.bound, rel=1e-15) and res.kind == kind
    pos = B.chi2_concentration(z, C, z, C, None, 10, 0.9, 32, kind="positive")
    assert pos.bound == pytest.approx(math.sqrt(math.expm1(4 * pos.r**2) / 32), rel=1e-14)
    orth = B.chi2_concentration(z, C, z, C, None, 10, 0.9, 32, kind="positive", projection="orthogonal")
    assert orth.bound < pos.bound and orth.projection == "orthogonal"
    rng = np.random.default_rng(2)
    X, Y = 0.1 * rng.normal(size=(20, 3)), 0.1 * rng.normal(size=(25, 3))
    ht = B.hotelling_concentration(X, Y, None, 0.9, 16, kind="trig")
    assert ht.kind == "trig" and ht.bound == pytest.approx(_sinh_form(4 * ht.r**2, 16), rel=1e-14)
    with pytest.raises(InvalidParameterError, match="`A`.*positive"):
        B.chi2_concentration(z, C, z, C, np.array([1.0, 2.0, 0.5]), 10, 0.9, 32, kind="positive")
    with pytest.raises(InvalidParameterError, match="kind"):
        B.hotelling_concentration(X, Y, None, 0.9, 16, kind="trigg")
