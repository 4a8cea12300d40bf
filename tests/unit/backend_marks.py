"""Optional array libraries and the skip marks shared by the backend test modules."""

from __future__ import annotations

import pytest

try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None

try:
    import cupy
except ImportError:  # pragma: no cover - cupy is optional
    cupy = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional backend)")
HAS_CUDA = torch is not None and torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device (GPU tests run on a GPU machine)")
needs_cupy = pytest.mark.skipif(
    cupy is None or not HAS_CUDA, reason="CuPy or a CUDA device is missing (GPU tests run on a GPU machine)"
)
