"""rfkit: random-feature estimators of the softmax kernel and of softmax attention.

Estimators, closed-form theory, Monte Carlo harnesses, bounds, figures and tables.
``import rfkit`` loads NumPy and SciPy only (no pandas, no matplotlib).
"""

from __future__ import annotations

from . import exceptions, features, projections
from .kernels import gaussian_kernel, log_gaussian_kernel, log_softmax_kernel, softmax_kernel

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "exceptions",
    "features",
    "projections",
    "softmax_kernel",
    "log_softmax_kernel",
    "gaussian_kernel",
    "log_gaussian_kernel",
]
