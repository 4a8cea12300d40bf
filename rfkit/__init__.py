"""rfkit: random-feature estimators of the softmax kernel and of softmax attention.

Estimators, closed-form theory, Monte Carlo harnesses, bounds, figures and tables.

Submodules: :mod:`rfkit.features`, :mod:`rfkit.projections`, :mod:`rfkit.kernels` (loaded
with the package) and :mod:`rfkit.theory`, :mod:`rfkit.attention`, :mod:`rfkit.data`,
:mod:`rfkit.study`, :mod:`rfkit.plots`, :mod:`rfkit.tables` (loaded on first use, so
``import rfkit`` loads NumPy and SciPy only: no pandas, no matplotlib).
"""

from __future__ import annotations

import importlib
from typing import Any

from . import exceptions, features, projections
from ._parallel import threads
from ._version import __version__
from .kernels import gaussian_kernel, log_gaussian_kernel, log_softmax_kernel, softmax_kernel

_LAZY = ("theory", "attention", "data", "study", "plots", "tables")

__all__ = [
    "__version__",
    "exceptions",
    "features",
    "projections",
    "softmax_kernel",
    "log_softmax_kernel",
    "gaussian_kernel",
    "log_gaussian_kernel",
    "threads",
    *_LAZY,
    "advise",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    if name == "advise":  # rfkit.advice.advise, loaded on first use (it needs pandas)
        func = importlib.import_module(".advice", __name__).advise
        globals()[name] = func
        return func
    raise AttributeError(f"module 'rfkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"advise"})
