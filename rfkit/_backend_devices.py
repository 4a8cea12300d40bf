"""Which devices an array library can compute on here (for messages and ``rfkit`` provenance).

Kept apart from :mod:`rfkit._backend` (which re-exports :func:`available_devices`) so that module
stays small; it needs only the library module itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["available_devices"]


def available_devices(library: str, mod: Any = None) -> str:
    """A readable list of the devices ``library`` can compute on here, with its version."""
    if library == "numpy":
        return f"numpy {np.__version__}: cpu"
    try:
        mod = mod if mod is not None else __import__(library)
    except ImportError:
        return f"{library} is not installed"
    version = getattr(mod, "__version__", "?")
    devices = ["cpu"]
    try:
        if library == "torch":
            n_cuda = int(mod.cuda.device_count()) if mod.cuda.is_available() else 0
            devices += [f"cuda:{i}" for i in range(n_cuda)]
            if getattr(mod.backends, "mps", None) is not None and mod.backends.mps.is_available():
                devices.append("mps")
            if not n_cuda:
                build = "CPU-only build" if mod.version.cuda is None else f"built for CUDA {mod.version.cuda}"
                devices.append(f"no CUDA device ({build})")
        elif library == "cupy":
            devices = [f"cuda:{i}" for i in range(int(mod.cuda.runtime.getDeviceCount()))]
        elif library == "array_api_strict":
            devices = [str(d) for d in mod.__array_namespace_info__().devices()]
    except Exception:  # pragma: no cover - a broken driver: report what is known
        devices.append("device query failed")
    return f"{library} {version}: {', '.join(devices) or 'no device'}"
