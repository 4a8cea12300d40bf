"""Unit tests of rfkit.theory.mse / log_mse / bias / check: identities, shapes, domains, bad input."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from scipy.special import hyp1f1

import rfkit.features as F
import rfkit.theory as th
from rfkit.exceptions import (
    InvalidParameterError,
    MonteCarloPrecisionWarning,
    NonFiniteInputError,
    NumericalOverflowError,
    RFKitWarning,
    ShapeError,
)

RNG = np.random.default_rng(20240601)
X4 = 0.4 * RNG.normal(size=(5, 4))
Y4 = 0.4 * RNG.normal(size=(5, 4))


def _sq(a):
    return np.sum(a * a, axis=-1)


def test_iid_closed_forms_performer_lemma2():
    m = 16
    z2, D2 = _sq(X4 + Y4), _sq(X4 - Y4)
    sm = np.exp(np.sum(X4 * Y4, -1))
    lam = np.exp(-(_sq(X4) + _sq(Y4)) / 2)
    np.testing.assert_allclose(
        th.mse(F.Positive(m), X4, Y4), lam**2 * (np.exp(2 * z2) - np.exp(z2)) / m, rtol=1e-13
    )
    np.testing.assert_allclose(
        th.mse(F.Hyperbolic(m), X4, Y4), lam**2 * np.expm1(z2) ** 2 / (2 * m), rtol=1e-13
    )
    np.testing.assert_allclose(
        th.mse(F.Trig(m), X4, Y4), np.exp(_sq(X4) + _sq(Y4)) * (1 - np.exp(-D2)) ** 2 / (2 * m), rtol=1e-13
    )
    np.testing.assert_allclose(th.relative_mse(F.Positive(m), X4, Y4), np.expm1(z2) / m, rtol=1e-13)
    np.testing.assert_allclose(th.mse(F.Positive(m), X4, Y4) / sm**2, np.expm1(z2) / m, rtol=1e-13)


def test_hyperbolic_beats_positive_at_equal_feature_dimension():
    z2 = _sq(X4 + Y4)
    ratio = th.mse(F.Hyperbolic(8), X4, Y4) / th.mse(F.Positive(16), X4, Y4)
    np.testing.assert_allclose(ratio, 1 - np.exp(-z2), rtol=1e-13)


def test_oprf_with_A_zero_is_positive_and_cexp_identity_is_positive():
    for proj in ("iid", "orthogonal", "orthogonal-fixed"):
        ref = th.mse(F.Positive(7, projection=proj), X4, Y4)
        np.testing.assert_allclose(th.mse(F.OPRF(7, A=0.0, projection=proj), X4, Y4), ref, rtol=1e-12)
        np.testing.assert_allclose(th.mse(F.CEXP(7, projection=proj), X4, Y4), ref, rtol=1e-12)
        np.testing.assert_allclose(th.mse(F.CEXP(7, A=np.ones(4), projection=proj), X4, Y4), ref, rtol=1e-12)


def test_orthogonal_one_block_gap_is_1f1_formula():
    d, m = 8, 5
    x, y = 0.3 * RNG.normal(size=(2, d))
    z2 = _sq(x + y)
    lam2 = np.exp(-(_sq(x) + _sq(y)))
    gap = th.mse(F.Positive(m, projection="orthogonal"), x, y) - th.mse(F.Positive(m), x, y)
    assert gap == pytest.approx((m - 1) / m * lam2 * (hyp1f1(d, d / 2, z2 / 2) - np.exp(z2)), rel=1e-9)
    assert gap < 0


def test_stacked_blocks_use_K_over_m2():
    """m > d: only same-block pairs correlate; with full blocks K/m^2 = (d-1)/m (docs page *Theory*, section 1)."""
    d, m = 4, 12
    x, y = 0.3 * RNG.normal(size=(2, d))
    iid = th.mse(F.Positive(m), x, y)
    one = th.mse(F.Positive(d, projection="orthogonal"), x, y) - th.mse(
        F.Positive(d), x, y
    )  # (d-1)/d * gapterm
    gap = th.mse(F.Positive(m, projection="orthogonal"), x, y) - iid
    assert gap == pytest.approx(one * d / (d - 1) * (d - 1) / m, rel=1e-9)


def test_dimension_one_orthogonal_equals_iid():
    x, y = np.array([0.4]), np.array([-0.1])
    for fm in (F.Positive, F.Trig, F.Hyperbolic):
        assert th.mse(fm(5, projection="orthogonal"), x, y) == pytest.approx(th.mse(fm(5), x, y), rel=1e-14)


@pytest.mark.parametrize("d", [2, 4, 8, 64])
def test_performer_theorem2_bound_holds_and_is_tight_for_small_norms(d):
    rng = np.random.default_rng(d)
    for scale in (0.02, 0.1, 0.3, 0.6):
        x, y = scale * rng.normal(size=(2, d)) / np.sqrt(d) * 2
        for m in sorted({1, 2, d // 2 or 1, d}):
            exact = th.mse(F.Positive(m, projection="orthogonal"), x, y)
            bound = th.performer_orthogonal_bound(x, y, m)
            assert exact <= bound * (1 + 1e-12)
    x = 0.02 / np.sqrt(d) * np.ones(d)
    iid = th.mse(F.Positive(d), x, x)
    red_exact = iid - th.mse(F.Positive(d, projection="orthogonal"), x, x)
    red_bound = iid - th.performer_orthogonal_bound(x, x, d)
    assert red_exact / red_bound == pytest.approx(1.0, rel=1e-2)


def test_performer_bound_domain():
    with pytest.raises(InvalidParameterError, match="n_features"):
        th.performer_orthogonal_bound(X4[0], Y4[0], 5)


def test_orthogonality_never_hurts_positive_but_can_hurt_trig():
    for scale in (0.1, 0.5, 1.0):
        x, y = scale * RNG.normal(size=(2, 6))
        assert th.mse(F.Positive(6, projection="orthogonal"), x, y) <= th.mse(F.Positive(6), x, y)
    x = np.zeros(4)
    x[0] = np.sqrt(3.0)
    assert th.mse(F.Trig(4, projection="orthogonal"), x, -x) > th.mse(F.Trig(4), x, -x)


def test_vectorised_over_pairs_and_feature_counts():
    ms = np.array([1, 3, 4, 9, 40])
    for proj in ("iid", "orthogonal", "orthogonal-fixed"):
        fm = F.Positive(4, projection=proj)
        out = th.mse(fm, X4[:, None, :], Y4[:, None, :], n_features=ms)
        assert out.shape == (5, 5)
        for j, m in enumerate(ms):
            np.testing.assert_allclose(
                out[:, j], th.mse(F.Positive(int(m), projection=proj), X4, Y4), rtol=1e-13
            )
    assert th.mse(F.Trig(3), X4, Y4[0]).shape == (5,)
    assert np.ndim(th.mse(F.Trig(3), X4[0], Y4[0])) == 0


@pytest.mark.parametrize("proj", ["iid", "orthogonal", "orthogonal-fixed"])
@pytest.mark.parametrize(
    "make",
    [
        lambda p: F.Positive(32, projection=p),
        lambda p: F.Hyperbolic(32, projection=p),
        lambda p: F.Trig(32, projection=p),
        lambda p: F.CEXP(32, A=np.linspace(0.5, 2, 8), projection=p),
        lambda p: F.OPRF(32, A=-0.3, projection=p),
    ],
)
def test_log_mse_finite_for_norms_in_the_hundreds(make, proj):
    u = np.ones(8) / np.sqrt(8)
    v = np.r_[np.ones(4), -np.ones(4)] / np.sqrt(8)
    for z2 in (100.0, 300.0, 800.0):
        h = 0.5 * np.sqrt(z2)
        x, y = h * (u + v), h * (u - v)  # ||x + y||^2 = ||x - y||^2 = z2
        assert np.isfinite(th.log_mse(make(proj), x, y))


@pytest.mark.parametrize("fm", [F.Positive(4), F.Hyperbolic(4, projection="orthogonal"), F.Trig(4)])
def test_mse_overflow_points_to_log_mse(fm):
    x = np.full(4, 10.0)
    with pytest.raises(NumericalOverflowError, match="log_mse"):
        th.mse(fm, x, np.r_[x[:2], -x[2:]])


def test_zero_error_at_x_equals_minus_y_for_positive_maps():
    x = X4[0]
    assert th.mse(F.Positive(4), x, -x) == 0.0
    assert np.isneginf(th.log_mse(F.Hyperbolic(4, projection="orthogonal"), x, -x))
    assert th.mse(F.Trig(4), x, x) == 0.0


def test_oprf_infinite_variance_region():
    with pytest.warns(RFKitWarning, match="infinite variance"):
        fm = F.OPRF(4, A=0.2)
    assert np.isposinf(th.log_mse(fm, X4, Y4)).all()


def test_bias_zero_for_unbiased_and_negative_smreg():
    for proj in ("iid", "orthogonal"):
        assert np.all(th.bias(F.Positive(4, projection=proj), X4, Y4) == 0)
    b = th.bias(F.Positive(4, projection="orthogonal-fixed"), X4, Y4)
    assert np.all(b < 0)  # SMREG <= SM for d >= 2 (Performer Thm 1)
    assert np.all(b == th.bias(F.Hyperbolic(9, projection="orthogonal-fixed"), X4, Y4))
    # fixed-norm MSE = variance + bias^2 >= bias^2
    assert np.all(th.mse(F.Positive(4, projection="orthogonal-fixed"), X4, Y4) >= b**2)


# ------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("proj", ["qmc", "structured"])
def test_projection_without_closed_form(proj):
    with pytest.raises(InvalidParameterError, match="no closed-form"):
        th.mse(F.Positive(4, projection=proj), X4, Y4)


def test_deterministic_maps_point_to_truncation_error():
    with pytest.raises(InvalidParameterError, match="truncation_error"):
        th.mse(F.Taylor(2), X4, Y4)
    with pytest.raises(InvalidParameterError, match="truncation_error"):
        th.log_mse(F.Limit(3), X4, Y4)


def test_unresolved_rules():
    with pytest.raises(InvalidParameterError, match="fit"):
        th.mse(F.CEXP(4, A="mean"), X4, Y4)
    with pytest.raises(InvalidParameterError, match="OPRF"):
        th.mse(F.OPRF(4), X4, Y4)
    fitted = F.HCEXP(4, A="variance").fit(X4 + 1.0, Y4 + 1.0)
    assert np.all(np.isfinite(th.mse(fitted, X4, Y4)))


def test_unsupported_object():
    with pytest.raises(InvalidParameterError, match="no closed form"):
        th.mse(object(), X4, Y4)


def test_bad_arrays():
    x = X4.copy()
    x[1, 2] = np.nan
    with pytest.raises(NonFiniteInputError, match="NaN"):
        th.mse(F.Positive(4), x, Y4)
    with pytest.raises(ShapeError, match="last dimension"):
        th.mse(F.Positive(4), X4, Y4[:, :3])
    with pytest.raises(ShapeError, match="broadcastable"):
        th.mse(F.Positive(4), X4, Y4[:3])
    with pytest.raises(InvalidParameterError, match="floating-point"):
        th.mse(F.Positive(4), np.ones((2, 4), dtype=int), Y4[:2])


@pytest.mark.parametrize("bad", [0, -3, np.array([2, 0]), 2.5])
def test_bad_n_features(bad):
    with pytest.raises(InvalidParameterError, match="n_features"):
        th.mse(F.Positive(4), X4, Y4, n_features=bad)


def test_expected_mse_domain():
    assert th.expected_mse(F.Positive(8), 0.04, 4) == pytest.approx(0.058923553123600675, rel=1e-12)
    with pytest.raises(InvalidParameterError, match="infinite"):
        th.expected_mse(F.Positive(8), 1 / 6, 4)
    with pytest.raises(InvalidParameterError, match="infinite"):
        th.expected_mse(F.Trig(8), 0.5, 4)
    assert np.isfinite(th.expected_mse(F.Trig(8), 0.3, 4))
    with pytest.raises(InvalidParameterError, match="iid"):
        th.expected_mse(F.Positive(8, projection="orthogonal"), 0.01, 4)
    with pytest.raises(InvalidParameterError, match="sigma2"):
        th.expected_mse(F.Positive(8), -0.1, 4)


# ------------------------------------------------------------------------- check
def test_check_result_and_frame():
    res = th.check(F.Positive(8), X4[:2], Y4[:2], n_trials=2000, rng=123)
    assert res.z.shape == (2,)
    df = res.to_frame()
    assert list(df["pair"]) == [(0,), (1,)]
    assert {"predicted_mse", "measured_mse", "mse_mcse", "z", "measured_bias", "bias_se"} <= set(df.columns)
    chunked = th.check(F.Positive(8), X4[:2], Y4[:2], n_trials=2000, rng=123, chunk_trials=300)
    assert chunked.n_trials == 2000
    np.testing.assert_array_equal(chunked.predicted_mse, res.predicted_mse)


def test_check_reproducible_and_chunking_consistent():
    a = th.check(F.Trig(8), X4[:3], Y4[:3], n_trials=1000, rng=5)
    b = th.check(F.Trig(8), X4[:3], Y4[:3], n_trials=1000, rng=5)
    np.testing.assert_array_equal(a.measured_mse, b.measured_mse)


def test_check_warns_on_heavy_tails():
    x = np.full(4, 0.9)
    with pytest.warns(MonteCarloPrecisionWarning, match="heavy-tailed"):
        th.check(F.Positive(2), x, x, n_trials=200, rng=1)


def test_check_bad_input():
    with pytest.raises(InvalidParameterError, match="n_trials"):
        th.check(F.Positive(2), X4, Y4, n_trials=1)
    with pytest.raises(InvalidParameterError, match="no closed-form"):
        th.check(F.Positive(2, projection="qmc"), X4, Y4, n_trials=10, require_prediction=True)
    sim = th.check(F.Positive(8, projection="qmc"), X4[:2], Y4[:2], n_trials=2000, rng=0)  # simulation only
    assert sim.prediction == "none" and np.isnan(sim.z).all() and np.isfinite(sim.measured_mse).all()


def test_import_does_not_load_pandas():
    code = "import sys, rfkit, rfkit.theory, rfkit.cli; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("d", [1, 3, 8])
def test_no_nan_anywhere(d):
    """log_mse and bias are never NaN: zero pairs, x = y, x = -y, tiny and large norms, every map/projection."""
    rng = np.random.default_rng(77 + d)
    for scale in (0.0, 1e-8, 0.01, 1.0, 10.0):
        x, y = scale * rng.normal(size=(2, 6, d))
        x[0], x[1] = y[0], -y[1]
        for proj in ("iid", "orthogonal", "orthogonal-fixed"):
            for fm in (
                F.Trig(5, projection=proj),
                F.Positive(5, projection=proj),
                F.Hyperbolic(5, projection=proj),
                F.CEXP(5, A=np.linspace(0.5, 2, d), projection=proj),
                F.OPRF(70, A=-0.2, projection=proj),
            ):
                lm = th.log_mse(fm, x, y)
                assert not np.any(np.isnan(lm)), (fm, scale)
                assert not np.any(
                    np.isnan(th.log_mse(fm, x, y, n_features=np.array([[1], [d], [3 * d + 1]])))
                )
                if scale <= 1.0:
                    assert not np.any(np.isnan(th.bias(fm, x, y)))


# ----------------------------------------------------------------------------- formulas of other map classes
def _halved_log_relative(fm, X, Y, d, m):
    """Half the PRF's relative MSE: a made-up formula, only to see that dispatch reaches it."""
    return (
        th.log_mse(F.Positive(int(fm.n_features)), X, Y, n_features=m)
        - 2.0 * np.sum(X * Y, axis=-1)
        - np.log(2.0)
    )


def _register_fresh_class():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class HalfPositive(F.Positive):
        pass

    return HalfPositive


def test_register_mse_formula_plugs_a_class_into_mse_and_relative_mse():
    cls = _register_fresh_class()
    th.register_mse_formula(cls, _halved_log_relative)
    np.testing.assert_allclose(
        th.relative_mse(cls(8), X4, Y4), th.relative_mse(F.Positive(8), X4, Y4) / 2.0, rtol=1e-12
    )
    np.testing.assert_allclose(th.mse(cls(8), X4, Y4), th.mse(F.Positive(8), X4, Y4) / 2.0, rtol=1e-12)
    np.testing.assert_array_equal(th.bias(cls(8), X4, Y4), 0.0)  # no bias function: unbiased


def test_theory_register_closed_form_is_a_deprecated_alias_of_register_mse_formula():
    cls = _register_fresh_class()
    with pytest.warns(DeprecationWarning, match=r"rfkit\.theory\.register_mse_formula") as rec:
        th.register_closed_form(cls, _halved_log_relative)
    assert rec[0].filename == __file__  # points at the caller's line
    np.testing.assert_allclose(
        th.relative_mse(cls(8), X4, Y4), th.relative_mse(F.Positive(8), X4, Y4) / 2.0, rtol=1e-12
    )
    assert "register_mse_formula" in th.__all__ and "register_closed_form" not in th.__all__
