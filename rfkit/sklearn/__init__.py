"""scikit-learn transformers that approximate a kernel with rfkit's random features.

:class:`SoftmaxKernelFeatures` maps rows to features whose inner products estimate the softmax
kernel :math:`\\exp(x^\\top y)`; :class:`GaussianKernelFeatures` estimates the Gaussian kernel
:math:`\\exp(-\\gamma\\|x-y\\|^2)` with the parameter ``gamma`` of scikit-learn's
:class:`~sklearn.kernel_approximation.RBFSampler`. Both take any of rfkit's symmetric random maps
(``kind`` in :data:`KINDS`: ``"trig"``, ``"positive"``, ``"hyperbolic"``, ``"oprf"``,
``"hyperbolic-oprf"``, ``"sderf"``), draw the directions in ``fit`` and return dense features in
``transform``, so they work in a :class:`~sklearn.pipeline.Pipeline`, with
``set_output(transform="pandas")`` and in scikit-learn's estimator checks.

This module needs scikit-learn (``pip install "rfkit[sklearn]"``); ``import rfkit`` never imports
it, and importing :mod:`rfkit.sklearn` without it raises
:class:`~rfkit.exceptions.BackendNotInstalledError`.
"""

from __future__ import annotations

from ..exceptions import BackendNotInstalledError

try:
    import sklearn  # noqa: F401
except ImportError:  # pragma: no cover - exercised in a subprocess without scikit-learn
    raise BackendNotInstalledError(
        'rfkit.sklearn needs scikit-learn, which is not installed: pip install "rfkit[sklearn]" '
        "(or pip install scikit-learn)."
    ) from None

from ._transformers import KINDS, GaussianKernelFeatures, SoftmaxKernelFeatures

__all__ = ["SoftmaxKernelFeatures", "GaussianKernelFeatures", "KINDS"]
