"""Shared fixtures. Seeds are large literals (SciPy style) so tests are reproducible."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(2442101192988600726)


@pytest.fixture(params=[np.float32, np.float64], ids=["float32", "float64"])
def float_dtype(request: pytest.FixtureRequest) -> type:
    return request.param
