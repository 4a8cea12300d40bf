"""Random numbers drawn by an array library's own generator, on its device (``draws = "backend"``).

By default every random number rfkit uses comes from a NumPy ``Generator`` (one ``rng``, the same
numbers on every backend) and is moved to the device. A study may instead ask for the backend's
own generator on its device (``draws = "backend"``, docs page *Backends and scaling*): a GPU study
then never waits for NumPy to draw. :class:`BackendGenerator` wraps that generator behind the few
methods rfkit's draws need, seeded from a :class:`numpy.random.SeedSequence` of the study's seed
tree:

=========== ============================================= =========================================
library     generator                                     chi-square
=========== ============================================= =========================================
NumPy       ``numpy.random.Generator(PCG64(seed))``       ``Generator.chisquare``
PyTorch     ``torch.Generator(device).manual_seed(seed)`` sum of ``df`` squared standard normals
CuPy        ``cupy.random.RandomState(seed)``             ``RandomState.chisquare``
=========== ============================================= =========================================

The numbers are reproducible for one library, device and generator implementation (the same seed
gives the same draws on the same kind of device) and have the same distributions as NumPy's, but
they are other numbers: a study with ``draws = "backend"`` is statistically equivalent to, not
bit-identical with, the same study with NumPy draws (tested: MSE within Monte Carlo error).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._backend import Backend, backend_for
from .exceptions import InvalidParameterError

__all__ = ["BackendGenerator", "DRAWS", "BACKEND_DRAW_LIBRARIES", "as_backend_generator"]

#: values of a design's ``draws`` option
DRAWS: tuple[str, ...] = ("numpy", "backend")
#: libraries whose own generator ``draws = "backend"`` uses
BACKEND_DRAW_LIBRARIES: tuple[str, ...] = ("numpy", "torch", "cupy")


def _seed64(seed: np.random.SeedSequence) -> int:
    """A 63-bit integer seed from a SeedSequence (its first two 32-bit words)."""
    lo, hi = (int(w) for w in seed.generate_state(2, np.uint32))
    return ((hi << 32) | lo) & ((1 << 63) - 1)


class BackendGenerator:
    """The random generator of ``backend``'s library on its device, seeded from ``seed``.

    Parameters
    ----------
    backend : Backend
        The array library and device the numbers are drawn on.
    seed : numpy.random.SeedSequence
        The seed (a node of a study's seed tree).

    Raises
    ------
    InvalidParameterError
        For a library without a generator rfkit can use (``array_api_strict``).
    """

    def __init__(self, backend: Backend, seed: np.random.SeedSequence) -> None:
        if backend.name not in BACKEND_DRAW_LIBRARIES:
            raise InvalidParameterError(
                f"draws='backend' needs a library with its own random generator "
                f"({', '.join(BACKEND_DRAW_LIBRARIES)}); {backend.name} has none. Use draws='numpy'."
            )
        if not isinstance(seed, np.random.SeedSequence):
            raise InvalidParameterError(f"`seed` must be a numpy.random.SeedSequence. Got {seed!r} instead.")
        self.backend = backend
        self.seed: np.random.SeedSequence | None = seed  # None: a wrapped torch.Generator (from_torch)
        self._gen: Any
        if backend.name == "numpy":
            self._gen = np.random.Generator(np.random.PCG64(seed))
        elif backend.name == "torch":
            torch = backend.native
            device = torch.device(backend.device) if backend.device is not None else torch.device("cpu")
            self._gen = torch.Generator(device=device)
            self._gen.manual_seed(_seed64(seed))
            self._device = device
        else:  # cupy
            self._gen = backend.native.random.RandomState(_seed64(seed))

    @classmethod
    def from_torch(cls, gen: Any) -> BackendGenerator:
        """Wrap a user's ``torch.Generator``: draws on its device, advancing its state (no reseed).

        Raises
        ------
        InvalidParameterError
            If ``gen`` is not a ``torch.Generator``.
        """
        if not _is_torch_generator(gen):
            raise InvalidParameterError(f"`gen` must be a torch.Generator. Got {type(gen).__name__} instead.")
        self = cls.__new__(cls)
        self.backend = backend_for("torch", gen.device)
        self.seed = None
        self._gen, self._device = gen, gen.device
        return self

    @property
    def library(self) -> str:
        return self.backend.name

    def standard_normal(self, shape: tuple[int, ...]) -> Any:
        """Standard normal float64 numbers of ``shape`` on the device."""
        if self.library == "numpy":
            return self._gen.standard_normal(shape)
        if self.library == "torch":
            torch = self.backend.native
            return torch.randn(shape, generator=self._gen, device=self._device, dtype=torch.float64)
        return self._gen.standard_normal(shape, dtype=np.float64)

    def random(self, shape: tuple[int, ...]) -> Any:
        """Uniform float64 numbers in ``[0, 1)`` of ``shape`` on the device."""
        if self.library == "numpy":
            return self._gen.random(shape)
        if self.library == "torch":
            torch = self.backend.native
            return torch.rand(shape, generator=self._gen, device=self._device, dtype=torch.float64)
        return self._gen.random_sample(size=shape, dtype=np.float64)

    def chisquare(self, df: int, shape: tuple[int, ...]) -> Any:
        """Chi-square numbers with ``df`` degrees of freedom, float64, of ``shape`` on the device.

        PyTorch's generators have no chi-square (or gamma) sampler that takes a generator: there it
        is the sum of ``df`` squared standard normals, which has exactly that distribution.
        """
        if self.library == "numpy":
            return self._gen.chisquare(df, size=shape)
        if self.library == "torch":
            z = self.standard_normal((*shape, int(df)))
            return (z * z).sum(dim=-1)
        return self._gen.chisquare(df, size=shape, dtype=np.float64)

    def integers(self, high: int, shape: tuple[int, ...]) -> Any:
        """Uniform integers in ``[0, high)`` (``high <= 2**62``), int64, of ``shape`` on the device."""
        if not 1 <= high <= 1 << 62:
            raise InvalidParameterError(f"`high` must be in [1, 2**62]. Got {high!r} instead.")
        if self.library == "numpy":
            return self._gen.integers(0, high, size=shape, dtype=np.int64)
        if self.library == "torch":
            torch = self.backend.native
            return torch.randint(0, high, shape, generator=self._gen, device=self._device, dtype=torch.int64)
        if high <= 1 << 31:
            return self._gen.randint(0, high, size=shape, dtype=np.int64)
        # CuPy's randint draws below 2**31 (int32 bounds): combine two 31-bit halves
        bits = int(math.ceil(math.log2(high)))
        lo_bits = bits // 2
        lo = self._gen.randint(0, 1 << lo_bits, size=shape, dtype=np.int64)
        hi = self._gen.randint(0, 1 << (bits - lo_bits), size=shape, dtype=np.int64)
        out = (hi << lo_bits) | lo
        if high != 1 << bits:  # pragma: no cover - rfkit asks for powers of two only
            raise InvalidParameterError(f"CuPy draws of integers need a power-of-two `high`. Got {high!r}.")
        return out

    def __repr__(self) -> str:
        return f"BackendGenerator({self.backend!r})"


def _is_torch_generator(gen: Any) -> bool:
    return type(gen).__module__.split(".", 1)[0] == "torch" and type(gen).__name__ == "Generator"


def is_torch_generator(gen: Any) -> bool:
    """True for a ``torch.Generator`` (checked without importing torch)."""
    return _is_torch_generator(gen)


def torch_generator_for(gen: Any, library: str, array: Any) -> tuple[BackendGenerator | None, str]:
    """``gen`` (a ``torch.Generator``) wrapped as a :class:`BackendGenerator` where ``array`` is a torch
    tensor on the generator's device, with ``""``; else ``None`` and what the inputs are, for a message
    (``"numpy arrays"``, ``"torch arrays on cuda:0"``)."""
    where = array.device if library == "torch" else None
    if where is not None and (where.type, where.index or 0) == (gen.device.type, gen.device.index or 0):
        return BackendGenerator.from_torch(gen), ""
    return None, f"{library} arrays" + (f" on {where}" if where is not None else "")


def as_backend_generator(gen: Any) -> Any:
    """A ``torch.Generator`` wrapped as a :class:`BackendGenerator` (:meth:`BackendGenerator.from_torch`);
    anything else unchanged."""
    return BackendGenerator.from_torch(gen) if _is_torch_generator(gen) else gen
