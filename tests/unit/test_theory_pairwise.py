"""The cross-key moments behind ``rfa_delta_method(..., exact=, feature_map=)``: the orthogonal-pair
series against an independent quadrature, its limits and symmetries, the old RFA call, the maps
without a closed form, and the coefficient bookkeeping (docs page *Sparse + random features*,
section "Theory")."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import hyp1f1, ndtr

import rfkit as rk
import rfkit.theory as th
from rfkit.exceptions import InvalidParameterError, NumericalOverflowError
from rfkit.theory._orth_pair import orth_pair_gap
from rfkit.theory._pairwise import cross_moments

F = rk.features


def _haar_pair_quadrature_d3(a, b, signed):
    """E[e^{w1.a + w2.b}] (signed: E[cos(w1.a) cos(w2.b)]) for one orthogonal chi(3) pair, by quadrature.

    Independent of the series: u1 over the sphere (Gauss-Legendre in cos(theta) x uniform phi), u2
    uniform on the circle orthogonal to u1, and the chi(3) (Maxwell) norms in closed form:
    E e^{rho c} = 2(1+c^2) e^{c^2/2} Phi(c) + c sqrt(2/pi), E cos(rho c) = (1-c^2) e^{-c^2/2}.
    """

    def radial(c):
        if signed:
            return (1.0 - c * c) * np.exp(-0.5 * c * c)
        return 2.0 * (1.0 + c * c) * np.exp(0.5 * c * c) * ndtr(c) + c * np.sqrt(2.0 / np.pi)

    ct, wt = np.polynomial.legendre.leggauss(60)
    ph = np.linspace(0.0, 2.0 * np.pi, 96, endpoint=False)
    ps = np.linspace(0.0, 2.0 * np.pi, 96, endpoint=False)
    CT, PH = np.meshgrid(ct, ph, indexing="ij")
    ST = np.sqrt(1.0 - CT**2)
    U1 = np.stack([ST * np.cos(PH), ST * np.sin(PH), CT], -1)
    E1 = np.stack([CT * np.cos(PH), CT * np.sin(PH), -ST], -1)
    E2 = np.stack([-np.sin(PH), np.cos(PH), 0.0 * PH], -1)
    U2 = (
        np.cos(ps)[None, None, :, None] * E1[:, :, None, :]
        + np.sin(ps)[None, None, :, None] * E2[:, :, None, :]
    )
    inner = radial(U1 @ a) * radial(U2 @ b).mean(-1)
    return float((inner.mean(1) * wt).sum() / 2.0)


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("scale", [0.4, 0.9])
def test_orthogonal_pair_series_matches_quadrature(signed, scale):
    rng = np.random.default_rng(int(10 * scale) + signed)
    a = scale * rng.normal(size=3)
    b = scale * rng.normal(size=3) + 0.4 * a
    al, be, ga = a @ a, b @ b, a @ b
    quad = _haar_pair_quadrature_d3(a, b, signed)
    rel = quad * np.exp((al + be) / 2 if signed else -(al + be) / 2) - 1.0
    got = orth_pair_gap(3, al, be, ga, signed=signed)
    assert abs(got - rel) <= 1e-10 * max(1.0, abs(rel)), (got, rel)


@pytest.mark.parametrize("d", [2, 3, 7, 64])
def test_orthogonal_pair_limits_and_symmetry(d):
    rng = np.random.default_rng(d)
    A = 1.1 / np.sqrt(d) * rng.normal(size=(5, d))  # |a|^2 about 1.2: inside the signed series' domain
    B = 1.1 / np.sqrt(d) * rng.normal(size=(5, d)) + 0.3 * A
    al, be, ga = np.sum(A * A, 1), np.sum(B * B, 1), np.sum(A * B, 1)
    for signed in (False, True):
        np.testing.assert_allclose(
            orth_pair_gap(d, al, be, ga, signed), orth_pair_gap(d, be, al, ga, signed), rtol=1e-9, atol=1e-15
        )
        # f is even in gamma (w1 -> -w1 leaves the pair's law unchanged)
        np.testing.assert_allclose(
            orth_pair_gap(d, al, be, -ga, signed), orth_pair_gap(d, al, be, ga, signed), rtol=1e-12
        )
    # a = b: the pair moment of docs page Theory, section 1
    np.testing.assert_allclose(
        orth_pair_gap(d, al, al, al), np.exp(-al) * hyp1f1(d, d / 2, al / 2) - 1, rtol=1e-9
    )
    np.testing.assert_allclose(
        orth_pair_gap(d, al, al, al, True), np.exp(al) * hyp1f1(d, d / 2, -al / 2) - 1, rtol=1e-8
    )
    # b = 0: the second direction alone is Gaussian
    np.testing.assert_allclose(orth_pair_gap(d, al, 0.0 * al, 0.0 * al), 0.0, atol=1e-15)


def test_orthogonal_pair_high_dimension_limit():
    """d (R - 1) -> -gamma^2 / 2: at large d orthogonality removes the quadratic term of e^{gamma} - 1."""
    al, be, ga = 1.0, 1.5, 0.7
    for signed in (False, True):
        scaled = [d * float(orth_pair_gap(d, al, be, ga, signed)) for d in (256, 1024, 4096)]
        assert abs(scaled[-1] + ga**2 / 2) < 0.01 * ga**2 / 2, scaled
        assert abs(scaled[0] + ga**2 / 2) > abs(scaled[-1] + ga**2 / 2)


def test_orthogonal_pair_domain_is_refused():
    with pytest.raises(NumericalOverflowError, match="trigonometric"):
        orth_pair_gap(4, 20.0, 10.0, 1.0, signed=True)
    with pytest.raises(NumericalOverflowError):
        orth_pair_gap(4, 2000.0, 10.0, 1.0)
    with pytest.raises(InvalidParameterError):
        orth_pair_gap(1, 1.0, 1.0, 1.0)


def _old_rfa(q, K, V):
    """The iid positive-feature formula as rfkit had it before the general form (docs page Theory, section 3)."""
    s = K @ q
    Z = np.exp(s).sum()
    a = np.exp(s) @ V / Z
    G = np.exp(q @ q + 2 * s[:, None] + 2 * s[None, :] + K @ K.T) / Z**2
    C = V - a
    return a, -(G.sum(0) @ C), np.einsum("md,mn,nd->d", C, G, C), G.sum()


def test_old_call_unchanged_and_aliases_agree():
    rng = np.random.default_rng(3)
    q, K, V = 0.4 * rng.normal(size=5), 0.4 * rng.normal(size=(11, 5)), rng.normal(size=(11, 3))
    res = th.rfa_delta_method(q, K, V)
    a, b, v, ratio = _old_rfa(q, K, V)
    np.testing.assert_allclose(res.attention, a, rtol=1e-13)
    np.testing.assert_allclose(res.bias_coef, b, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(res.var_coef, v, rtol=1e-10)
    assert res.moment_ratio == pytest.approx(ratio, rel=1e-12)
    assert res.pair_var_coef is None and res.dim is None
    same = th.rfa_delta_method(q, K, V, feature_map=F.Positive(7))
    np.testing.assert_allclose(same.var_coef, res.var_coef, rtol=1e-14)
    ex = np.arange(11) % 3 == 0
    for variant in ("plain", "ratio"):
        h = th.hybrid_delta_method(q, K, V, ex, variant, feature_map=F.Trig(4, projection="orthogonal"))
        r = th.rfa_delta_method(
            q, K, V, exact=ex, variant=variant, feature_map=F.Trig(4, projection="orthogonal")
        )
        np.testing.assert_array_equal(h.var_coef, r.var_coef)
        np.testing.assert_array_equal(h.pair_bias_coef, r.pair_bias_coef)


@pytest.mark.filterwarnings("ignore::rfkit.exceptions.OutOfDomainWarning")  # algebra at small m
def test_orthogonal_coefficients_follow_the_block_count():
    rng = np.random.default_rng(4)
    d = 6
    q, K, V = 0.3 * rng.normal(size=d), 0.3 * rng.normal(size=(9, d)), rng.normal(size=9)
    dm = th.rfa_delta_method(q, K, V, feature_map=F.Positive(1, projection="orthogonal"))
    assert dm.dim == d and dm.pair_var_coef is not None and dm.pair_bias_coef is not None
    for m in (1, 4, 6, 13, 60):
        Kp = (m // d) * d * (d - 1) + (m % d) * (m % d - 1)
        assert dm.variance(m)[0] == pytest.approx(
            (dm.var_coef[0] + dm.pair_var_coef[0] * Kp / m) / m, rel=1e-12
        )
        assert dm.bias(m)[0] == pytest.approx(
            (dm.bias_coef[0] + dm.pair_bias_coef[0] * Kp / m) / m, rel=1e-12
        )
    assert dm.variance(1)[0] == pytest.approx(dm.var_coef[0])  # one direction: no pairs
    # the one-direction part is the iid formula
    iid = th.rfa_delta_method(q, K, V)
    np.testing.assert_allclose(dm.var_coef, iid.var_coef, rtol=1e-12)


def test_diagonal_of_cross_moments_is_the_kernel_variance():
    """L_jj is log E[F^2]/kappa^2: its expm1 must equal rk.theory's relative variance for every map."""
    rng = np.random.default_rng(5)
    d = 4
    q, K = 0.3 * rng.normal(size=d), 0.3 * rng.normal(size=(6, d))
    maps = [
        F.Positive(8),
        F.Hyperbolic(8),
        F.Trig(8),
        F.OPRF(8, A=-0.1),
        F.OPRF(8, A=0.02, hyperbolic=True),
        F.CEXP(8, A=np.array([0.8, 1.1, 1.3, 0.9])),
        F.HCEXP(8, A=np.array([0.8, 1.1, 1.3, 0.9])),
        F.GERF(8, A=0.03, s=-1),
        F.GERF(8, A=-0.05, s=1),
        F.SADERF(8, A=-0.04, psi=np.array([0.9, 1.1, 1.0, 1.2])),
        F.ADERF(8, A=-0.03, G=np.eye(d) + 0.1 * rng.normal(size=(d, d))),
        F.SDERF(8, A=np.array([-0.1, 0.0, 0.05, -0.02])),
    ]
    for fm in maps:
        cm = cross_moments(fm, q, K, "test")
        rel = np.expm1(np.diag(cm.log_second))
        expect = th.relative_mse(fm, q[None, :], K, n_features=1)
        np.testing.assert_allclose(rel, expect, rtol=1e-10, err_msg=fm.name)
        np.testing.assert_allclose(cm.log_second, cm.log_second.T, rtol=1e-12, atol=1e-14)


def test_orthogonal_diagonal_is_the_kernel_pair_covariance():
    rng = np.random.default_rng(6)
    d = 5
    q, K = 0.3 * rng.normal(size=d), 0.3 * rng.normal(size=(4, d))
    for fm in (F.Positive(d, projection="orthogonal"), F.Trig(d, projection="orthogonal")):
        cm = cross_moments(fm, q, K, "test")
        # MSE/SM^2 = rho_V/m + (K/m^2) rho_C with m = d: K/m^2 = (d-1)/d
        rho_v = np.expm1(np.diag(cm.log_second))
        total = rho_v / d + (d - 1) / d * np.diag(cm.pair_gap)
        np.testing.assert_allclose(total, th.relative_mse(fm, q[None, :], K), rtol=1e-9)


@pytest.mark.parametrize(
    "fm, match",
    [
        (F.RandomMaclaurin(8), "RandomMaclaurin"),
        (F.TensorSketch(8, degree=2), "TensorSketch"),
        (F.Positive(8, projection="simplex"), "simplex"),
        (F.Positive(8, projection="orthogonal-fixed"), "orthogonal-fixed"),
        (F.Positive(8, projection="qmc"), "qmc"),
        (F.SDERF(8, A=np.array([-0.1, 0.0, 0.05]), projection="orthogonal"), "SDERF"),
        (F.Taylor(2), "deterministic"),
        (F.OPRF(8), "OPRF"),
    ],
)
def test_maps_without_closed_form_are_refused(fm, match):
    rng = np.random.default_rng(7)
    q, K, V = 0.3 * rng.normal(size=3), 0.3 * rng.normal(size=(5, 3)), rng.normal(size=5)
    with pytest.raises(InvalidParameterError, match=match):
        th.rfa_delta_method(q, K, V, feature_map=fm)


def test_infinite_variance_is_refused():
    with pytest.warns(rk.exceptions.RFKitWarning):
        fm = F.OPRF(8, A=0.2)
    with pytest.raises(InvalidParameterError, match="infinite variance"):
        th.rfa_delta_method(np.zeros(3), np.zeros((4, 3)), np.zeros(4), feature_map=fm)


def test_bad_exact_and_variant():
    q, K, V = np.zeros(3), np.zeros((4, 3)), np.zeros(4)
    with pytest.raises(InvalidParameterError, match="exact"):
        th.rfa_delta_method(q, K, V, exact=np.ones(3, bool))
    with pytest.raises(InvalidParameterError, match="exact"):
        th.rfa_delta_method(q, K, V, exact=np.ones(4))
    with pytest.raises(InvalidParameterError, match="variant"):
        th.rfa_delta_method(q, K, V, variant="best")


def test_full_support_and_ratio_cancellation():
    rng = np.random.default_rng(8)
    q, K, V = 0.4 * rng.normal(size=4), 0.4 * rng.normal(size=(10, 4)), rng.normal(size=(10, 2))
    fm = F.Positive(1, projection="orthogonal")
    for variant in ("plain", "ratio"):
        full = th.rfa_delta_method(q, K, V, exact=np.ones(10, bool), variant=variant, feature_map=fm)
        np.testing.assert_allclose(full.variance(16), 0.0, atol=1e-14)
        np.testing.assert_allclose(full.bias(16), 0.0, atol=1e-14)
    none = th.rfa_delta_method(q, K, V, feature_map=fm)
    for variant in ("plain", "ratio"):
        empty = th.rfa_delta_method(q, K, V, exact=np.zeros(10, bool), variant=variant, feature_map=fm)
        np.testing.assert_allclose(empty.variance(128), none.variance(128), rtol=1e-12)  # m in the domain
