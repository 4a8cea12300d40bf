"""Contract every feature map satisfies (SciPy ``QMCEngineTests`` style)."""

from __future__ import annotations

import numpy as np
import pytest

import rfkit as rk
from rfkit.features import Features

D = 5
_data_rng = np.random.default_rng(99)
QD = 0.4 * _data_rng.normal(size=(40, D)) + 0.3
KD = 0.4 * _data_rng.normal(size=(40, D)) - 0.2

SPECS = {
    "trig": rk.features.Trig(12),
    "positive": rk.features.Positive(12),
    "positive-orth": rk.features.Positive(12, projection="orthogonal"),
    "positive-orthfixed": rk.features.Positive(12, projection="orthogonal-fixed"),
    "positive-qmc": rk.features.Positive(12, projection="qmc"),
    "positive-structured": rk.features.Positive(12, projection="structured"),
    "hyperbolic": rk.features.Hyperbolic(6),
    "cexp-diag": rk.features.CEXP(12, A=np.array([0.5, 2.0, 1.0, 1.5, 0.8])),
    "cexp-full": rk.features.CEXP(12, A=np.eye(D) + 0.3 * np.triu(np.ones((D, D)), 1)),
    "cexp-mean": rk.features.CEXP(12, A="mean").fit(QD, KD),
    "hcexp-variance": rk.features.HCEXP(6, A="variance").fit(QD, KD),
    "oprf": rk.features.OPRF(12).fit(QD, KD),
    "oprf-given": rk.features.OPRF(12, A=-0.05, projection="orthogonal"),
    "oprf-hyperbolic": rk.features.OPRF(6, hyperbolic=True).fit(QD, KD),
    "oprf-hyperbolic-given": rk.features.OPRF(6, A=-0.08, hyperbolic=True, projection="simplex"),
    "positive-simplex": rk.features.Positive(12, projection="simplex"),
    "positive-simplex-plus": rk.features.Positive(12, projection="simplex-plus"),
    "trig-simplex": rk.features.Trig(7, projection="simplex"),
    "gerf": rk.features.GERF(12).fit(QD, KD),
    "gerf-trig": rk.features.GERF(6, s=-1).fit(QD, KD),
    "gerf-trig-given": rk.features.GERF(6, A=-0.03, s=-1, projection="orthogonal"),
    "saderf": rk.features.SADERF(12, projection="simplex").fit(QD, KD),
    "taylor2": rk.features.Taylor(2),
    "taylor3-full": rk.features.Taylor(3, form="full"),
    "limit3": rk.features.Limit(3),
    "aderf": rk.features.ADERF(12).fit(QD, KD),
    "aderf-given": rk.features.ADERF(
        12, A=-0.05, G=np.eye(D) + 0.2 * np.tril(np.ones((D, D)), -1), projection="orthogonal"
    ),
    "sderf": rk.features.SDERF(12).fit(QD, KD),
    "sderf-given": rk.features.SDERF(
        12, A=np.diag([-0.1, 0.05, 0.0, -0.3, 0.1]) + 0.01, projection="orthogonal"
    ),
    "maclaurin": rk.features.RandomMaclaurin(12),
    "maclaurin-trunc-gauss": rk.features.RandomMaclaurin(12, p=1.5, max_degree=4, distribution="gaussian"),
    "tensorsketch3": rk.features.TensorSketch(6, 3),
    "tensorsketch0": rk.features.TensorSketch(4, 0),
}
SYMMETRIC = {k for k in SPECS if not k.startswith(("cexp", "hcexp", "aderf", "saderf"))}


@pytest.fixture(params=list(SPECS), ids=list(SPECS))
def name_spec(request):
    return request.param, SPECS[request.param]


def _xy(rng, *lead, n=4, m=3, scale=0.5):
    return scale * rng.normal(size=lead + (n, D)), scale * rng.normal(size=lead + (m, D))


def test_same_int_seed_identical(name_spec, rng):
    _, spec = name_spec
    X, Y = _xy(rng)
    np.testing.assert_array_equal(spec.sample(D, rng=5).kernel(X, Y), spec.sample(D, rng=5).kernel(X, Y))


RANDOM = [k for k, v in SPECS.items() if v.is_random]


@pytest.mark.parametrize("name", RANDOM)
def test_reused_generator_gives_new_draws(name, rng):
    spec = SPECS[name]
    X, Y = _xy(rng)
    g = np.random.default_rng(1)
    assert not np.array_equal(spec.sample(D, rng=g).kernel(X, Y), spec.sample(D, rng=g).kernel(X, Y))


def test_shapes_and_feature_dim(name_spec, rng):
    _, spec = name_spec
    draw = spec.sample(D, rng=0)
    X, Y = _xy(rng, 2, 3)
    fx = draw.queries(X)
    assert isinstance(fx, Features)
    assert fx.values.shape == (2, 3, 4, spec.feature_dim(D))
    assert fx.log_scale.shape == (2, 3, 4)
    assert np.all(np.abs(fx.values) <= 1.0 + 1e-12)
    assert draw.kernel(X, Y[:1]).shape == (2, 3, 4, 3)  # leading axes broadcast
    assert draw.pairwise(X, Y[..., :4, :] if Y.shape[-2] >= 4 else X).shape == (2, 3, 4)


def test_zero_rows(name_spec):
    _, spec = name_spec
    draw = spec.sample(D, rng=0)
    assert draw.kernel(np.zeros((0, D)), np.ones((3, D))).shape == (0, 3)
    assert draw.queries(np.zeros((0, D))).values.shape == (0, spec.feature_dim(D))


def test_n_draws_adds_leading_axis(name_spec, rng):
    _, spec = name_spec
    X, Y = _xy(rng, 2)
    draws = spec.sample(D, rng=0, n_draws=7)
    assert draws.kernel(X, Y).shape == (7, 2, 4, 3)
    assert draws.queries(X).values.shape == (7, 2, 4, spec.feature_dim(D))
    P = draws.pairwise(X, X)
    assert P.shape == (7, 2, 4)
    # pairwise equals the diagonal of kernel for the same draws
    K = draws.kernel(X, X)
    np.testing.assert_allclose(P, np.diagonal(K, axis1=-2, axis2=-1), rtol=1e-10, atol=1e-12)


def test_pairwise_is_kernel_diagonal(name_spec, rng):
    _, spec = name_spec
    X, Y = _xy(rng, n=6, m=6)
    draw = spec.sample(D, rng=3)
    np.testing.assert_allclose(draw.pairwise(X, Y), np.diag(draw.kernel(X, Y)), rtol=1e-10, atol=1e-12)
    sign, logabs = draw.slog_pairwise(X, Y)
    np.testing.assert_allclose(sign * np.exp(logabs), draw.pairwise(X, Y), rtol=1e-12, atol=1e-14)


def test_cexp_is_positive_map_of_transformed_inputs(rng):
    A = np.eye(D) + 0.3 * np.triu(np.ones((D, D)), 1)
    X, Y = _xy(rng)
    cexp = rk.features.CEXP(12, A=A).sample(D, rng=8)
    prf = rk.features.Positive(12).sample(D, rng=8)  # same directions (same seed, same projection)
    np.testing.assert_allclose(
        cexp.kernel(X, Y), prf.kernel(X @ A.T, np.linalg.solve(A.T, Y.T).T), rtol=1e-12
    )


def test_kernel_equals_dense_features(name_spec, rng):
    _, spec = name_spec
    X, Y = _xy(rng)
    draw = spec.sample(D, rng=4)
    dense = draw.queries(X).dense() @ draw.keys(Y).dense().T
    np.testing.assert_allclose(draw.kernel(X, Y), dense, rtol=1e-10, atol=1e-12)


def test_float32_in_float32_out(name_spec, rng):
    _, spec = name_spec
    X, Y = (a.astype(np.float32) for a in _xy(rng))
    draw = spec.sample(D, rng=0)
    K32 = draw.kernel(X, Y)
    assert K32.dtype == np.float32
    assert draw.queries(X).values.dtype == np.float32
    assert draw.pairwise(X, X).dtype == np.float32
    K64 = draw.kernel(X.astype(np.float64), Y.astype(np.float64))
    np.testing.assert_allclose(K32, K64, rtol=2e-4, atol=2e-5)


def test_inputs_not_mutated(name_spec, rng):
    _, spec = name_spec
    X, Y = _xy(rng)
    X0, Y0 = X.copy(), Y.copy()
    draw = spec.sample(D, rng=0)
    draw.kernel(X, Y)
    draw.pairwise(X, X)
    draw.log_kernel(X, Y)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(Y, Y0)


@pytest.mark.parametrize("name", sorted(SYMMETRIC))
def test_symmetry(name, rng):
    spec = SPECS[name]  # CEXP/HCEXP are excluded: they map queries by A and keys by A^-T
    X, _ = _xy(rng)
    K = spec.sample(D, rng=0).kernel(X, X)
    np.testing.assert_allclose(K, K.T, rtol=1e-12)


def test_positive_maps_positive_and_log_consistent(name_spec, rng):
    _, spec = name_spec
    X, Y = _xy(rng, scale=1.0)
    draw = spec.sample(D, rng=0)
    K = draw.kernel(X, Y)
    sign, logabs = draw.slog_kernel(X, Y)
    np.testing.assert_allclose(sign * np.exp(logabs), K, rtol=1e-12, atol=1e-14)
    if spec.is_positive:
        assert np.all(K > 0)
        np.testing.assert_allclose(draw.log_kernel(X, Y), np.log(K), rtol=1e-12, atol=1e-13)


def test_log_kernel_nan_where_negative():
    draw = rk.features.Taylor(1).sample(2)
    X = np.array([[2.0, 0.0]])
    Y = np.array([[-1.0, 0.0]])  # t = -2: T_1 = -1
    assert draw.kernel(X, Y)[0, 0] == pytest.approx(-1.0)
    assert np.isnan(draw.log_kernel(X, Y)[0, 0])
    sign, logabs = draw.slog_kernel(X, Y)
    assert sign[0, 0] == -1 and logabs[0, 0] == pytest.approx(0.0, abs=1e-15)


def test_sample_streams_each_draw_uses_only_its_stream(name_spec, rng):
    _, spec = name_spec
    X, Y = _xy(rng)

    def seeds():  # fresh objects: SeedSequence.spawn (used by scipy's QMC engines) is stateful
        return [np.random.SeedSequence(5, spawn_key=(0, t)) for t in range(4)]

    stacked = spec.sample_streams(D, seeds())
    K = stacked.kernel(X, Y)
    assert K.shape == (4, 4, 3)
    for t, ss in enumerate(seeds()):
        np.testing.assert_allclose(spec.sample(D, rng=ss).kernel(X, Y), K[t], rtol=1e-13)
    # chunking does not matter: the last two streams alone give the same draws
    np.testing.assert_allclose(spec.sample_streams(D, seeds()[2:]).kernel(X, Y), K[2:], rtol=1e-13)
