import numpy as np
import pytest

import rfkit as rk
from rfkit.exceptions import InvalidParameterError, NonFiniteInputError, NumericalOverflowError, ShapeError


def test_softmax_kernel_values_and_broadcast(rng):
    X = rng.normal(size=(3, 1, 4, 5))
    Y = rng.normal(size=(2, 6, 5))
    K = rk.softmax_kernel(X, Y)
    assert K.shape == (3, 2, 4, 6)
    np.testing.assert_allclose(K[1, 0, 2, 3], np.exp(X[1, 0, 2] @ Y[0, 3]), rtol=1e-14)
    np.testing.assert_allclose(rk.log_softmax_kernel(X, Y), np.log(K), rtol=1e-12, atol=1e-13)


def test_gaussian_kernel(rng):
    X, Y = rng.normal(size=(2, 4, 3))
    G = rk.gaussian_kernel(X, Y)
    np.testing.assert_allclose(G[1, 2], np.exp(-0.5 * np.sum((X[1] - Y[2]) ** 2)), rtol=1e-13)


def test_float32_preserved(rng):
    X = rng.normal(size=(4, 3)).astype(np.float32)
    assert rk.softmax_kernel(X, X).dtype == np.float32


def test_overflow_raises_and_log_is_finite():
    X = np.full((1, 4), 20.0)
    with pytest.raises(NumericalOverflowError, match="log_softmax_kernel"):
        rk.softmax_kernel(X, X)
    assert np.isfinite(rk.log_softmax_kernel(X, X)).all()


@pytest.mark.parametrize(
    "X, Y, err, match",
    [
        (np.ones(4), np.ones((2, 4)), ShapeError, r"`X` must have ndim >= 2; got shape \(4,\)"),
        (np.ones((2, 4)), np.ones((2, 3)), ShapeError, "must share the last dimension"),
        (
            np.array([[np.nan, 1.0]]),
            np.ones((1, 2)),
            NonFiniteInputError,
            r"contains NaN \(first at index \(0, 0\)\)",
        ),
        (np.array([[np.inf, 1.0]]), np.ones((1, 2)), NonFiniteInputError, "contains infinity"),
        (np.ones((2, 3), dtype=int), np.ones((2, 3)), InvalidParameterError, "floating-point array"),
        (np.ones((2, 3), dtype=complex), np.ones((2, 3)), InvalidParameterError, "floating-point array"),
        (np.ones((2, 2, 3)), np.ones((3, 2, 3)), ShapeError, "not broadcastable"),
    ],
)
def test_bad_input(X, Y, err, match):
    with pytest.raises(err, match=match):
        rk.softmax_kernel(X, Y)
