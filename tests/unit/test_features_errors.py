"""Bad input raises rfkit's exception (rfkit.exceptions) naming the argument, the rule and the value."""

from __future__ import annotations

import re

import numpy as np
import pytest

import rfkit as rk
from rfkit.exceptions import (
    IllConditionedWarning,
    InvalidParameterError,
    NonFiniteInputError,
    NotFittedError,
    NumericalOverflowError,
    RFKitError,
    RFKitWarning,
    ShapeError,
    SingularMatrixError,
)

F = rk.features


@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda: F.Positive(0),
            "The `n_features` parameter of Positive must be an int in the range [1, inf). Got 0 instead.",
        ),
        (lambda: F.Trig(-3), "The `n_features` parameter of Trig must be an int"),
        (lambda: F.Hyperbolic(2.5), "Got 2.5 instead"),
        (
            lambda: F.Positive(4, projection="gaussian"),
            "The `projection` parameter of Positive must be a str among",
        ),
        (
            lambda: F.Taylor(-1),
            "The `degree` parameter of Taylor must be an int in the range [0, inf). Got -1",
        ),
        (lambda: F.Taylor(2, form="dense"), "The `form` parameter of Taylor must be a str among"),
        (lambda: F.Limit(0), "The `n` parameter of Limit must be an int in the range [1, inf). Got 0"),
        (lambda: F.CEXP(4, A="median"), "The `A` parameter of CEXP must be a str among"),
        (
            lambda: F.OPRF(4, A=0.3),
            "The `A` parameter of OPRF must be a real number in the range (-inf, 0.25)",
        ),
        (lambda: F.OPRF(4, A=float("nan")), "The `A` parameter of OPRF must be a real number"),
        (lambda: F.Positive(4).sample(0), "The `dim` parameter of Positive.sample must be an int"),
        (lambda: F.Positive(4).sample(3, n_draws=0), "The `n_draws` parameter of Positive.sample"),
    ],
)
def test_invalid_parameters(make, match):
    with pytest.raises(InvalidParameterError, match=re.escape(match)):
        make()


def test_invalid_parameter_is_value_and_type_error():
    with pytest.raises(ValueError):
        F.Positive(0)
    with pytest.raises(TypeError):
        F.Positive(0)


@pytest.mark.parametrize(
    "A", [np.array([1.0, 0.0, 2.0]), np.array([[1.0, 2.0, 0], [2.0, 4.0, 0], [0, 0, 1.0]])]
)
def test_singular_A(A):
    with pytest.raises(SingularMatrixError, match=r"`A` is singular \(rcond="):
        F.CEXP(4, A=A)
    with pytest.raises(np.linalg.LinAlgError):
        F.HCEXP(4, A=A)


def test_ill_conditioned_A_warns():
    with pytest.warns(IllConditionedWarning, match="ill-conditioned"):
        F.CEXP(4, A=np.array([1.0, 1e-14, 1.0]))


@pytest.mark.parametrize(
    "A, err, match",
    [
        (np.array([1.0, np.nan]), NonFiniteInputError, "Input `A` contains NaN"),
        (
            np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]),
            ShapeError,
            "must be a diagonal (d,) or a square (d, d)",
        ),
        (np.ones((2, 2, 2)), ShapeError, "got shape (2, 2, 2)"),
        (np.array([1, 2]), InvalidParameterError, "`A` must be a floating-point array"),
    ],
)
def test_bad_A_arrays(A, err, match):
    with pytest.raises(err, match=re.escape(match)):
        F.CEXP(4, A=A)


def test_A_of_wrong_dimension_at_sample():
    with pytest.raises(ShapeError, match=r"has shape \(3,\) but the draw is for dim=4"):
        F.CEXP(4, A=np.ones(3)).sample(4)


def test_rule_needs_data():
    with pytest.raises(ShapeError, match=re.escape("call .fit(Q, K) first")):
        F.HCEXP(4, A="mean").sample(3)
    with pytest.raises(ShapeError, match="OPRF"):
        F.OPRF(4).sample(3)
    with pytest.raises(ShapeError, match="needs `dim`"):
        F.Positive(4).sample()


def test_mean_rule_degenerate_coordinate():
    Q = np.array([[1.0, 0.0], [1.0, 0.0]])  # second coordinate has mean 0
    K = np.ones((2, 2))
    with pytest.raises(SingularMatrixError, match="degenerate at coordinate 1"):
        F.CEXP(4, A="mean").fit(Q, K)


def test_oprf_infinite_variance_warns():
    with pytest.warns(RFKitWarning, match="infinite variance"):
        F.OPRF(4, A=0.2)


@pytest.mark.parametrize("method", ["kernel", "log_kernel", "pairwise"])
def test_draw_input_checks(method):
    draw = F.Positive(4).sample(3, rng=0)
    fn = getattr(draw, method)
    with pytest.raises(ShapeError, match="these features were sampled for dim=3"):
        fn(np.ones((2, 4)), np.ones((2, 4)))
    with pytest.raises(ShapeError, match="ndim >= 2"):
        fn(np.ones(3), np.ones((2, 3)))
    with pytest.raises(NonFiniteInputError, match="Input `Y` contains infinity"):
        fn(np.ones((2, 3)), np.array([[1.0, np.inf, 0.0], [0.0, 0.0, 0.0]]))
    with pytest.raises(InvalidParameterError, match="floating-point"):
        fn(np.ones((2, 3), dtype=np.int64), np.ones((2, 3)))


def test_pairwise_row_mismatch():
    draw = F.Trig(4).sample(3, rng=0)
    with pytest.raises(ShapeError, match="same number of rows for pairwise"):
        draw.pairwise(np.ones((2, 3)), np.ones((3, 3)))


def test_full_tensor_too_large():
    with pytest.raises(InvalidParameterError, match="form='symmetric'"):
        F.Taylor(6, form="full").sample(64)


def test_projection_qmc_dim_limit():
    with pytest.raises(InvalidParameterError, match="qmc"):
        rk.projections.sample_projection("qmc", 4, 30000, rng=0)


UNFITTED = [
    F.OPRF(4),
    F.OPRF(4, hyperbolic=True),
    F.CEXP(4, A="mean"),
    F.HCEXP(4, A="variance"),
    F.GERF(4),
    F.GERF(4, s=-1),
    F.SADERF(4),
    F.ADERF(4),
    F.SDERF(4),
]


@pytest.mark.parametrize("fm", UNFITTED, ids=lambda f: repr(f)[:40])
def test_sampling_before_fit_raises_not_fitted(fm):
    assert fm.needs_data
    calls = [
        lambda: fm.sample(3, rng=0),
        lambda: fm.sample(3, rng=0, n_draws=2),
        lambda: fm.sample_streams(3, [0, 1]),
        lambda: fm.from_projection(3, None, fm.projection_streams(3, [0])[0]),
    ]
    for call in calls:
        with pytest.raises(NotFittedError, match=re.escape(f"{fm.name}(") + r".*call \.fit\(Q, K\)") as info:
            call()
        # the class raised before NotFittedError existed, and rfkit's base class, still catch it
        assert isinstance(info.value, ShapeError) and isinstance(info.value, RFKitError)
    Q = 0.3 * np.random.default_rng(0).standard_normal((20, 3))
    fm.fit(Q, Q).sample(3, rng=0)  # fitted: samples


@pytest.mark.parametrize(
    "make",
    [
        lambda: F.Positive(0),
        lambda: F.Trig(0),
        lambda: F.OPRF(0),
        lambda: F.ADERF(0),
        lambda: F.SDERF(0),
        lambda: F.RandomMaclaurin(0),
        lambda: F.TensorSketch(0, degree=2),
        lambda: rk.projections.sample_projection("iid", 0, 3, rng=0),
    ],
)
def test_n_features_has_one_rule_and_one_message(make):
    with pytest.raises(
        InvalidParameterError,
        match=re.escape("parameter of ") + r".* must be an int in the range \[1, inf\)\. Got 0 instead\.",
    ) as info:
        make()
    assert "`n_features`" in str(info.value)


def test_exp_checked_raises_instead_of_inf_and_ignores_nan():
    from rfkit._validation import exp_checked

    np.testing.assert_array_equal(exp_checked(np.array([0.0, np.nan]), "here", "that()"), [1.0, np.nan])
    with pytest.raises(NumericalOverflowError, match=r"exp overflow in here: .* use that\(\) instead"):
        exp_checked(np.array([1.0, 800.0]), "here", "that()")
    with pytest.raises(NumericalOverflowError):
        exp_checked(np.array([100.0], dtype=np.float32), "here", "that()")
