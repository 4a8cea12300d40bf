"""ADERF, SDERF, RandomMaclaurin, TensorSketch: construction, identities, optimality, bad input.

Statistical checks (unbiasedness, MSE vs simulation) are in tests/statistical/test_derf_sketch_mse.py;
mpmath pins in tests/reference/test_derf_sketch_reference.py.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from scipy.linalg import sqrtm

import rfkit as rk
import rfkit.theory as th
from rfkit.exceptions import InvalidParameterError, RFKitWarning, ShapeError, SingularMatrixError

F = rk.features
D = 5
_rng = np.random.default_rng(6202216719448510871)
_L1, _L2 = _rng.normal(size=(2, D, D))
QD = 0.25 * _rng.normal(size=(80, D)) @ _L1 + 0.2
KD = 0.25 * _rng.normal(size=(70, D)) @ _L2 - 0.1
X = QD[:6]
Y = KD[:6]


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda: F.ADERF(0),
            "The `n_features` parameter of ADERF must be an int in the range [1, inf). Got 0",
        ),
        (
            lambda: F.ADERF(4, A=0.25),
            "The `A` parameter of ADERF must be a real number in the range (-inf, 0.25)",
        ),
        (lambda: F.ADERF(4, projection="sobol"), "The `projection` parameter of ADERF must be a str among"),
        (
            lambda: F.SDERF(4, A=0.3),
            "The `A` parameter of SDERF must be a real number in the range (-inf, 0.25)",
        ),
        (
            lambda: F.SDERF(4, A=np.diag([0.1, 0.26])),
            "The `A` parameter of SDERF must have every eigenvalue in the range (-inf, 0.25)",
        ),
        (lambda: F.SDERF(4, A=np.array([0.0, 0.3])), "every eigenvalue in the range (-inf, 0.25)"),
        (
            lambda: F.SDERF(4, A=np.array([[0.0, 0.1], [0.0, 0.0]])),
            "The `A` parameter of SDERF must be a symmetric",
        ),
        (lambda: F.SDERF(-1), "The `n_features` parameter of SDERF must be an int"),
        (lambda: F.RandomMaclaurin(0), "The `n_features` parameter of RandomMaclaurin must be an int"),
        (
            lambda: F.RandomMaclaurin(4, p=1.0),
            "The `p` parameter of RandomMaclaurin must be a real number in the range (1.0, inf)",
        ),
        (
            lambda: F.RandomMaclaurin(4, max_degree=-1),
            "The `max_degree` parameter of RandomMaclaurin must be an int in the range [0, inf). Got -1",
        ),
        (
            lambda: F.RandomMaclaurin(4, distribution="uniform"),
            "The `distribution` parameter of RandomMaclaurin must be a str among",
        ),
        (
            lambda: F.TensorSketch(8, -1),
            "The `degree` parameter of TensorSketch must be an int in the range [0, inf). Got -1",
        ),
        (
            lambda: F.TensorSketch(0, 2),
            "The `n_features` parameter of TensorSketch must be an int in the range [1, inf). Got 0",
        ),
        (lambda: F.TensorSketch(8, 2.0), "The `degree` parameter of TensorSketch must be an int"),
    ],
)
def test_invalid_parameters(make, match):
    with pytest.raises(InvalidParameterError, match=re.escape(match)):
        make()


def test_infinite_variance_warns():
    with pytest.warns(RFKitWarning, match=r"ADERF with A=0.2 >= 1/8 is unbiased but has infinite variance"):
        fm = F.ADERF(4, A=0.2, G=np.ones(D))
    assert np.all(np.isposinf(th.log_mse(fm, X, Y)))
    with pytest.warns(RFKitWarning, match=r"SDERF with an eigenvalue of A equal to 0.15 >= 1/8"):
        fm = F.SDERF(4, A=np.array([0.0, 0.15, 0.0, 0.0, 0.0]))
    assert np.all(np.isposinf(th.log_mse(fm, X, Y)))


def test_singular_inputs():
    with pytest.raises(
        SingularMatrixError, match=r"`G` is singular \(rcond=.*\) in ADERF; the key side needs G\^-T"
    ):
        F.ADERF(4, G=np.array([1.0, 0.0, 2.0]))
    with pytest.raises(SingularMatrixError, match="second-moment matrix of `Q`"):
        F.ADERF(4).fit(QD[:3], KD)  # 3 points cannot span R^5
    with pytest.raises(ShapeError, match="The `G` parameter of ADERF must be a diagonal"):
        F.ADERF(4, G=np.ones((2, 3)))
    with pytest.raises(ShapeError, match="The `G` parameter of ADERF has shape"):
        F.ADERF(4, A=-0.1, G=np.ones(3)).sample(D, rng=0)
    with pytest.raises(ShapeError, match="The `A` parameter of SDERF has shape"):
        F.SDERF(4, A=np.zeros(3)).sample(D, rng=0)


def test_data_dependent_parameters_must_be_resolved():
    for fm in (F.ADERF(4), F.ADERF(4, A=-0.1), F.SDERF(4)):
        with pytest.raises(ShapeError, match=r"call \.fit\(Q, K\)"):
            fm.sample(D, rng=0)
        with pytest.raises(InvalidParameterError, match=r"fm\.fit\(Q, K\)"):
            th.mse(fm, X, Y)
    assert F.ADERF(4).sample(rng=0, data=(QD, KD)).dim == D


def test_projections_without_closed_form():
    with pytest.raises(InvalidParameterError, match="closed-form MSE for projection='iid' only"):
        th.mse(F.SDERF(4, A=-0.1, projection="orthogonal"), X, Y)
    with pytest.raises(InvalidParameterError, match="no closed-form MSE for ADERF"):
        th.mse(F.ADERF(4, A=-0.1, G=np.ones(D), projection="qmc"), X, Y)
    assert np.all(th.bias(F.SDERF(4, A=-0.1, projection="orthogonal"), X, Y) == 0)


# --------------------------------------------------------------------------- identities
def test_aderf_is_oprf_of_transformed_inputs():
    G = np.eye(D) + 0.3 * np.triu(_rng.normal(size=(D, D)), 1)
    a = -0.07
    aderf = F.ADERF(16, A=a, G=G, projection="orthogonal").sample(D, rng=11)
    oprf = F.OPRF(16, A=a, projection="orthogonal").sample(D, rng=11)
    Ginv = np.linalg.inv(G)
    np.testing.assert_allclose(aderf.kernel(X, Y), oprf.kernel(X @ G.T, Y @ Ginv), rtol=1e-12)
    np.testing.assert_allclose(
        th.mse(F.ADERF(16, A=a, G=G), X, Y), th.mse(F.OPRF(16, A=a), X @ G.T, Y @ Ginv), rtol=1e-12
    )


def test_sderf_scalar_is_oprf_and_matrix_form_matches_paper_definition():
    a = -0.06
    np.testing.assert_allclose(
        F.SDERF(8, A=a).sample(D, rng=4).kernel(X, Y),
        F.OPRF(8, A=a).sample(D, rng=4).kernel(X, Y),
        rtol=1e-12,
    )
    np.testing.assert_allclose(th.mse(F.SDERF(8, A=a), X, Y), th.mse(F.OPRF(8, A=a), X, Y), rtol=1e-12)
    # dense A: f(w, u) = det(I-4A)^{1/4} exp(w^T A w + w^T (I-4A)^{1/2} u - |u|^2/2), w = V omega
    S = _rng.normal(size=(D, D))
    A = -0.05 * (S @ S.T) / D + 0.02 * np.eye(D)
    draw = F.SDERF(8, A=A).sample(D, rng=5)
    Wfull = draw.projection @ draw.eigenvectors.T  # the directions back in the input basis
    B = np.real(sqrtm(np.eye(D) - 4 * A))
    Dc = np.linalg.det(np.eye(D) - 4 * A) ** 0.25

    def f(U):
        return Dc * np.exp(
            np.sum((Wfull @ A) * Wfull, 1) + U @ (Wfull @ B).T - 0.5 * np.sum(U * U, 1)[:, None]
        )

    np.testing.assert_allclose(draw.kernel(X, Y), f(X) @ f(Y).T / 8, rtol=1e-11)


def test_features_finite_for_large_norms():
    big_x, big_y = (
        40 * X / np.linalg.norm(X, axis=1, keepdims=True),
        40 * Y / np.linalg.norm(Y, axis=1, keepdims=True),
    )
    for fm in (F.ADERF(8).fit(QD, KD), F.SDERF(8).fit(QD, KD), F.RandomMaclaurin(8), F.TensorSketch(8, 6)):
        draw = fm.sample(D, rng=2)
        sign, logabs = draw.slog_kernel(big_x.astype(np.float32), big_y.astype(np.float32))
        assert np.all(np.isfinite(logabs[sign != 0])), fm
        assert np.all(np.isfinite(draw.queries(big_x.astype(np.float32)).log_scale))


def test_maclaurin_and_tensorsketch_zero_inputs():
    Z = np.zeros((2, D))
    for fm in (F.RandomMaclaurin(8), F.TensorSketch(4, 3)):
        draw = fm.sample(D, rng=0, n_draws=3)
        np.testing.assert_allclose(draw.kernel(Z, X), draw.kernel(Z, X)[:, :1, :1] * np.ones((3, 2, 6)))
    np.testing.assert_allclose(F.TensorSketch(4, 3).sample(D, rng=0).kernel(Z, X), 1.0)


def test_maclaurin_degree_measure_and_draw_layout():
    fm = F.RandomMaclaurin(4000, p=3.0)
    draw = fm.sample(2, rng=9)
    degrees = draw.degrees
    assert np.all(np.diff(degrees) <= 0)  # ordered by decreasing degree
    counts = np.bincount(degrees, minlength=4)[:4] / 4000
    q = np.exp(fm.log_degree_probability(np.arange(4)))
    np.testing.assert_allclose(q, [2 / 3, 2 / 9, 2 / 27, 2 / 81])
    assert np.all(np.abs(counts - q) <= 5 * np.sqrt(q * (1 - q) / 4000))
    trunc = F.RandomMaclaurin(3000, max_degree=2).sample(2, rng=9)
    assert trunc.degrees.max() == 2
    np.testing.assert_allclose(
        np.exp(F.RandomMaclaurin(4, max_degree=2).log_degree_probability(np.arange(3))).sum(), 1.0
    )


def test_tensorsketch_matches_direct_count_sketch_convolution():
    """Features are an orthogonal transform of Pham & Pagh's TS_j(x) (direct circular convolution)."""
    Dk, n = 6, 3
    fm = F.TensorSketch(Dk, n)
    draw = fm.sample(D, rng=7)
    h = draw.hashes[:, 0, :].astype(int)
    s = draw.hashes[:, 1, :]

    def ts(x, ks):
        out = np.zeros(Dk)
        out[0] = 1.0
        for k in ks:
            c = np.zeros(Dk)
            np.add.at(c, h[k], s[k] * x)
            out = np.array([sum(out[a] * c[(b - a) % Dk] for a in range(Dk)) for b in range(Dk)])
        return out

    def phi(x):
        parts, o = [np.ones(1)], 0
        for j in range(1, n + 1):
            parts.append(ts(x, range(o, o + j)) / np.sqrt(np.prod(np.arange(1, j + 1))))
            o += j
        return np.concatenate(parts)

    ref = np.array([[phi(x) @ phi(y) for y in Y] for x in X])
    np.testing.assert_allclose(draw.kernel(X, Y), ref, rtol=1e-11, atol=1e-13)
    f = draw.queries(X).dense()
    np.testing.assert_allclose(np.linalg.norm(f, axis=1), [np.linalg.norm(phi(x)) for x in X], rtol=1e-12)


def test_sample_streams_equal_single_draws_with_ragged_maclaurin_draws():
    fm = F.RandomMaclaurin(5, p=1.6)
    seeds = [np.random.SeedSequence(3, spawn_key=(t,)) for t in range(6)]
    K = fm.sample_streams(D, seeds).kernel(X, Y)
    for t, ss in enumerate([np.random.SeedSequence(3, spawn_key=(t,)) for t in range(6)]):
        np.testing.assert_allclose(fm.sample(D, rng=ss).kernel(X, Y), K[t], rtol=1e-13)


# --------------------------------------------------------------------------- optimal parameters
def _mean_log_second_moment(fm, Q, K):
    """Mean over all (query, key) pairs of log E[(f f)^2] = log(m MSE + SM^2) (the papers' objective)."""
    x, y = Q[:, None, :], K[None, :, :]
    t = np.sum(x * y, -1)
    return np.mean(np.logaddexp(th.log_mse(fm, x, y, n_features=1), 2 * t))


def test_closed_form_optima_minimise_the_objective_and_beat_oprf():
    oprf = F.OPRF(1).fit(QD, KD)
    aderf = F.ADERF(1).fit(QD, KD)
    sderf = F.SDERF(1).fit(QD, KD)
    base_a, base_s, base_o = (_mean_log_second_moment(f, QD, KD) for f in (aderf, sderf, oprf))
    assert base_a < base_o and base_s < base_o
    rng = np.random.default_rng(1)
    for _ in range(6):  # random perturbations never improve on the closed form
        dG = 0.05 * rng.normal(size=(D, D))
        pert = F.ADERF(1, A=aderf.A + 0.01 * rng.normal(), G=aderf.G + dG)
        assert _mean_log_second_moment(pert, QD, KD) > base_a
        S = 0.02 * rng.normal(size=(D, D))
        assert _mean_log_second_moment(F.SDERF(1, A=sderf.A + (S + S.T) / 2), QD, KD) > base_s
    # a given G keeps G and fits only a (OPRF's rule on Gx, G^-T y); G = I gives OPRF's A*
    assert F.ADERF(1, G=np.ones(D)).fit(QD, KD).A == pytest.approx(oprf.A, rel=1e-12)
    np.testing.assert_allclose(F.ADERF(1, A=-0.01).fit(QD, KD).G, aderf.G, rtol=1e-12)


def test_optima_are_computed_on_any_backend():
    xps = pytest.importorskip("array_api_strict")
    a, G = F.aderf_optimal(xps.asarray(QD), xps.asarray(KD))
    a0, G0 = F.aderf_optimal(QD, KD)
    assert a == pytest.approx(a0, rel=1e-12)
    np.testing.assert_allclose(G, G0, rtol=1e-10)
    np.testing.assert_allclose(
        F.sderf_optimal_A(xps.asarray(QD), xps.asarray(KD)), F.sderf_optimal_A(QD, KD), rtol=1e-12
    )


# --------------------------------------------------------------------------- theory plumbing
def test_theory_vectorises_over_feature_counts_and_log_space():
    for fm in (F.ADERF(8).fit(QD, KD), F.SDERF(8).fit(QD, KD), F.RandomMaclaurin(8), F.TensorSketch(8, 3)):
        m = np.array([4, 8, 16])[:, None]
        out = th.mse(fm, X, Y, n_features=m)
        assert out.shape == (3, 6)
        np.testing.assert_allclose(out[1], th.mse(fm, X, Y), rtol=1e-12)
        np.testing.assert_allclose(np.exp(th.log_mse(fm, X, Y)), th.mse(fm, X, Y), rtol=1e-12)
        big = th.log_mse(fm, 12 * X, 12 * Y)
        assert np.all(np.isfinite(big))


def test_tensorsketch_variance_depends_on_parity_and_truncation_bias():
    fm7, fm8 = F.TensorSketch(7, 3), F.TensorSketch(8, 3)
    x, y = np.array([0.5, -0.3, 0.2]), np.array([0.1, 0.4, -0.6])
    bias = rk.features.taylor_polynomial(x @ y, 3) - np.exp(x @ y)
    np.testing.assert_allclose(th.bias(fm8, x, y), bias, rtol=1e-12)
    v7 = th.mse(fm7, x, y) - bias**2
    v8 = th.mse(fm8, x, y) - bias**2
    A, B = th._sketch_mse.tensorsketch_variance_terms(x, y, 3)
    N = (x @ x) * (y @ y)
    w = N ** np.arange(1, 4) / np.array([1.0, 2.0, 6.0]) ** 2
    np.testing.assert_allclose(v7, np.sum(w * (A / 7 + B / 49)), rtol=1e-10)
    np.testing.assert_allclose(v8, np.sum(w * (A / 8 + 2 * B / 64)), rtol=1e-10)
    assert th.mse(F.TensorSketch(8, 0), x, y) == pytest.approx((1 - np.exp(x @ y)) ** 2, rel=1e-12)
    # d = 1: every sketch is exact up to sign, zero variance
    assert th.mse(F.TensorSketch(3, 4), np.array([0.7]), np.array([0.4])) == pytest.approx(
        (rk.features.taylor_polynomial(0.28, 4) - np.exp(0.28)) ** 2, rel=1e-10
    )
