"""Bad inputs of the scikit-learn transformers (rfkit.sklearn): hyperparameters, arrays, order of calls.

Collected by test_bad_inputs.py; every case skips (with the reason) where scikit-learn is missing.
Each error is rfkit's and scikit-learn's at once where scikit-learn has its own class (a bad
hyperparameter, a transformer used before ``fit``), and names the argument and the value received.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from bad_input_kit import Bad

from rfkit.exceptions import (
    InvalidParameterError,
    NonFiniteInputError,
    NotFittedError,
    NumericalOverflowError,
    ShapeError,
)


def _sk() -> Any:
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (rfkit.sklearn needs it)")
    import rfkit.sklearn

    return rfkit.sklearn


def _X(n: int = 6, d: int = 3) -> np.ndarray:
    return 0.3 * np.random.default_rng(20261128).normal(size=(n, d))


def _fit(**params: Any) -> Any:
    return _sk().SoftmaxKernelFeatures(**params).fit(_X())


def _gauss_fit(**params: Any) -> Any:
    return _sk().GaussianKernelFeatures(**params).fit(_X())


CASES: list[Bad] = [
    Bad(
        "sklearn.SoftmaxKernelFeatures-kind-unknown",
        lambda t: _fit(kind="favor"),
        InvalidParameterError,
        "kind",
        "'favor'",
    ),
    Bad(
        "sklearn.SoftmaxKernelFeatures-n_components-zero",
        lambda t: _fit(n_components=0),
        InvalidParameterError,
        "n_components",
        "0",
    ),
    Bad(
        "sklearn.SoftmaxKernelFeatures-n_components-float",
        lambda t: _fit(n_components=8.5),
        InvalidParameterError,
        "n_components",
        "8.5",
    ),
    Bad(
        "sklearn.SoftmaxKernelFeatures-projection-unknown",
        lambda t: _fit(projection="gaussian"),
        InvalidParameterError,
        "projection",
        "'gaussian'",
    ),
    Bad(
        "sklearn.SoftmaxKernelFeatures-random_state-string",
        lambda t: _fit(random_state="seed"),
        InvalidParameterError,
        "random_state",
        "'seed'",
    ),
    Bad(
        "sklearn.GaussianKernelFeatures-gamma-negative",
        lambda t: _gauss_fit(gamma=-1.0),
        InvalidParameterError,
        "gamma",
        "-1.0",
    ),
    Bad(
        "sklearn.GaussianKernelFeatures-gamma-string",
        lambda t: _gauss_fit(gamma="auto"),
        InvalidParameterError,
        "gamma",
        "'auto'",
    ),
    Bad(
        "sklearn.SoftmaxKernelFeatures-transform-before-fit",
        lambda t: _sk().SoftmaxKernelFeatures().transform(_X()),
        NotFittedError,
        "SoftmaxKernelFeatures",
        "not fitted",
    ),
    Bad(
        "sklearn.GaussianKernelFeatures-names-before-fit",
        lambda t: _sk().GaussianKernelFeatures().get_feature_names_out(),
        NotFittedError,
        "GaussianKernelFeatures",
        "not fitted",
    ),
    Bad(
        "sklearn.SoftmaxKernelFeatures-X-nan",
        lambda t: _sk().SoftmaxKernelFeatures().fit(np.where(np.eye(3, dtype=bool), np.nan, 1.0)),
        NonFiniteInputError,
        "X",
        "NaN",
    ),
    Bad(
        "sklearn.SoftmaxKernelFeatures-X-wrong-width",
        lambda t: _fit(n_components=4).transform(_X(d=5)),
        ShapeError,
        "X has 5 features",
        "expecting 3 features",
    ),
    Bad(
        "sklearn.SoftmaxKernelFeatures-X-1d",
        lambda t: _sk().SoftmaxKernelFeatures().fit(np.ones(4)),
        ShapeError,
        "Expected 2D array",
        "1D array",
    ),
    Bad(
        # the trig scale exp(||x||^2 / 2) / sqrt(m) of a row of norm 40 is e^(800 - log 2) = e^799.3 > float64
        "sklearn.SoftmaxKernelFeatures-transform-overflow",
        lambda t: _fit(kind="trig", n_components=4).transform(np.full((2, 3), 40.0 / np.sqrt(3.0))),
        NumericalOverflowError,
        "SoftmaxKernelFeatures.transform",
        "799.3",
    ),
]
