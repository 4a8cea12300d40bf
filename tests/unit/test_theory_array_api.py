"""Every array-taking function of ``rk.theory`` accepts any supported array library.

The closed forms and bounds are float64 NumPy reference computations: an input of PyTorch or
``array_api_strict`` is validated in its own library, moved to the host and gives the same
numbers as the NumPy input (results are NumPy arrays or result objects).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from backend_marks import needs_torch, torch

import rfkit as rk
from rfkit.exceptions import NonFiniteInputError

th = rk.theory
_R = np.random.default_rng(20261124)
X = 0.3 * _R.standard_normal((6, 4))
Y = 0.3 * _R.standard_normal((6, 4))
V = _R.standard_normal((6, 2))
Z1 = 0.1 * _R.standard_normal(
    (40, 4)
)  # small enough that the concentration bound is not vacuous (no warning)
Z2 = 0.1 * _R.standard_normal((40, 4))
T = np.linspace(-1.0, 2.0, 5)
PRF = rk.features.Positive(16)
EXACT = np.zeros(6, dtype=bool)
EXACT[:2] = True

# name -> (function of a converter `a` that wraps every array argument)
CALLS: dict[str, Callable[[Callable[[np.ndarray], Any]], Any]] = {
    "mse": lambda a: th.mse(PRF, a(X), a(Y)),
    "log_mse": lambda a: th.log_mse(PRF, a(X), a(Y)),
    "relative_mse": lambda a: th.relative_mse(PRF, a(X), a(Y)),
    "bias": lambda a: th.bias(PRF, a(X), a(Y)),
    "mse-trig": lambda a: th.mse(rk.features.Trig(8), a(X), a(Y)),
    "mse-orthogonal": lambda a: th.mse(rk.features.Positive(8, projection="orthogonal"), a(X), a(Y)),
    "performer_orthogonal_bound": lambda a: th.performer_orthogonal_bound(a(X), a(Y), 4),
    "rfa_delta_method": lambda a: th.rfa_delta_method(a(X[0]), a(Y), a(V)),
    "hybrid_delta_method": lambda a: th.hybrid_delta_method(a(X[0]), a(Y), a(V), exact=EXACT),
    "ratio_bias_identity": lambda a: th.ratio_bias_identity(
        a(1.0 + 0.1 * X[:, 0]), a(1.0 + 0.1 * Y[:, 0]), 1.0
    ),
    "ra_mse": lambda a: th.ra_mse(a(np.abs(X[:, 0])), 8),
    "attention_error_bound": lambda a: th.attention_error_bound(a(np.abs(X[:, 0]) / 10)),
    "truncated_kernel": lambda a: th.truncated_kernel(rk.features.Taylor(3), a(T)),
    "relative_truncation_error": lambda a: th.relative_truncation_error(rk.features.Taylor(3), a(T)),
    "truncation_error_bound": lambda a: th.truncation_error_bound(rk.features.Limit(3), a(T)),
    "chi2_concentration": lambda a: th.bounds.chi2_concentration(
        a(np.zeros(4)), a(0.01 * np.eye(4)), a(np.zeros(4)), a(0.01 * np.eye(4)), None, 5, 0.9, 64
    ),
    "hotelling_concentration": lambda a: th.bounds.hotelling_concentration(a(Z1), a(Z2), None, 0.9, 64),
}


def _values(res: Any) -> list[np.ndarray]:
    if dataclasses.is_dataclass(res):
        out = []
        for f in dataclasses.fields(res):
            v = getattr(res, f.name)
            if isinstance(v, np.ndarray | float | int) and not isinstance(v, bool):
                out.append(np.asarray(v, dtype=float))
        return out
    return [np.asarray(res, dtype=float)]


def _strict(a: np.ndarray) -> Any:
    import array_api_strict as xps

    return xps.asarray(np.asarray(a, dtype=np.float64))


def _torch(a: np.ndarray) -> Any:
    return torch.asarray(np.asarray(a, dtype=np.float64))


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize(
    "convert",
    [pytest.param(_strict, id="array_api_strict"), pytest.param(_torch, id="torch", marks=needs_torch)],
)
def test_theory_takes_any_array_library(name: str, convert: Callable[[np.ndarray], Any]) -> None:
    ref = _values(CALLS[name](np.asarray))
    got = _values(CALLS[name](convert))
    assert len(got) == len(ref) > 0
    for g, r in zip(got, ref):
        assert isinstance(g, np.ndarray)
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=0)


def test_nonfinite_input_of_another_library_is_named() -> None:
    import array_api_strict as xps

    bad = X.copy()
    bad[1, 1] = np.nan
    with pytest.raises(NonFiniteInputError, match="`x`"):
        th.mse(PRF, xps.asarray(bad), xps.asarray(Y))
