"""Random-number-generator normalisation and per-(cell, trial) streams.

rfkit takes randomness only through a keyword-only ``rng`` argument that may be
``None``, an ``int``, a :class:`numpy.random.SeedSequence` or a
:class:`numpy.random.Generator` (SPEC 7 / ``numpy.random.default_rng``
semantics). A legacy :class:`numpy.random.RandomState` is refused: its stream
differs from ``Generator``'s and mixing the two silently changes results.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any

import numpy as np

from .exceptions import InvalidParameterError

__all__ = [
    "check_rng",
    "as_seed_sequence",
    "trial_seed_sequence",
    "RewoundGenerators",
    "TrialStreams",
    "check_rng_or_trials",
]

_RNG_DOC = "None, a non-negative int, a numpy.random.SeedSequence or a numpy.random.Generator"


def check_rng(rng: object, name: str = "rng") -> np.random.Generator:
    """Turn ``rng`` into a :class:`numpy.random.Generator`.

    Parameters
    ----------
    rng : {None, int, SeedSequence, Generator}
        When ``rng`` is None, a new Generator is created using entropy from the
        operating system. An int or SeedSequence seeds a new PCG64 Generator
        (same seed, same numbers). A Generator is used as is, so its state
        advances: two calls with the same Generator give different draws.
    name : str
        Argument name used in error messages.

    Returns
    -------
    numpy.random.Generator

    Raises
    ------
    InvalidParameterError
        For a legacy ``RandomState``, a negative int, a bool or any other type.
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if type(rng) is np.random.SeedSequence:  # hot path of studies: same stream as default_rng(ss)
        return np.random.Generator(np.random.PCG64(rng))
    if rng is None or isinstance(rng, np.random.SeedSequence):
        return np.random.default_rng(rng)
    if type(rng).__module__.split(".", 1)[0] == "torch" and type(rng).__name__ == "Generator":
        raise InvalidParameterError(
            f"`{name}` is a torch.Generator, but these draws are NumPy's (one `rng`, the same directions on "
            f"every backend): `{name}` must be {_RNG_DOC}. To draw on the device with a torch.Generator, draw "
            "the directions with `feature_map.projection_on(dim, n_draws, generator)`, build the draw with "
            "`feature_map.from_projection(dim, n_draws, W)` and pass it as `draw=` (RFA), or run a study "
            'with draws = "backend".'
        )
    if isinstance(rng, np.random.RandomState):
        raise InvalidParameterError(
            f"`{name}` must be {_RNG_DOC}; got a legacy numpy.random.RandomState, "
            "which rfkit refuses (its stream differs from Generator's). "
            "Use numpy.random.default_rng(seed) instead."
        )
    if isinstance(rng, bool) or not isinstance(rng, numbers.Integral):
        raise InvalidParameterError(
            f"`{name}` must be {_RNG_DOC}. Got {rng!r} of type {type(rng).__name__} instead."
        )
    if int(rng) < 0:
        raise InvalidParameterError(f"`{name}` must be a non-negative int seed. Got {rng!r} instead.")
    return np.random.default_rng(int(rng))


def as_seed_sequence(rng: object, name: str = "rng") -> np.random.SeedSequence:
    """Return a root :class:`numpy.random.SeedSequence` for a reproducible study.

    An int or SeedSequence gives a fully reproducible root; ``None`` draws fresh
    OS entropy (recorded in the result so the run can be replayed); a Generator
    contributes 128 bits drawn from its stream (so it advances).
    """
    if isinstance(rng, np.random.SeedSequence):
        return rng
    if rng is None:
        return np.random.SeedSequence()
    if isinstance(rng, np.random.Generator):
        return np.random.SeedSequence(rng.integers(0, 2**63, size=2).tolist())
    gen_check = check_rng(rng, name)  # validates type and sign
    del gen_check
    return np.random.SeedSequence(int(rng))  # type: ignore[call-overload]


def trial_seed_sequence(root: np.random.SeedSequence, cell: int, trial: int) -> np.random.SeedSequence:
    """Stream of trial ``trial`` in grid cell ``cell``.

    ``SeedSequence(root.entropy, spawn_key=root.spawn_key + (cell, trial))``: the
    numbers of a trial depend only on the root and its (cell, trial) key, never
    on worker count, chunking or execution order (docs page *Backends and scaling*, "Same seed, same directions, everywhere").
    """
    return np.random.SeedSequence(root.entropy, spawn_key=tuple(root.spawn_key) + (int(cell), int(trial)))


class RewoundGenerators:
    """One Generator per stream, handed out rewound to the stream's start each time.

    ``fresh()`` returns generators equal in state to ``[default_rng(s) for s in streams]``: a
    draw from them is the draw from the streams themselves. Rewinding a generator (setting its
    state) costs about a fifth of seeding a new one from a SeedSequence, which matters where a
    study draws several estimators' directions from the same thousands of trial streams. The
    generators are shared: use each list before asking for the next.
    """

    def __init__(self, streams: list[object]) -> None:
        self._gens = [check_rng(s) if isinstance(s, np.random.SeedSequence) else None for s in streams]
        if any(g is None for g in self._gens):
            raise InvalidParameterError("RewoundGenerators takes SeedSequence streams only.")
        self._states = [g.bit_generator.state for g in self._gens]  # type: ignore[union-attr]
        self._dirty = False

    def fresh(self) -> list[np.random.Generator]:
        """The generators, each at the start of its stream."""
        if self._dirty:
            for g, state in zip(self._gens, self._states):
                g.bit_generator.state = state  # type: ignore[union-attr]
        self._dirty = True
        return self._gens  # type: ignore[return-value]


def _is_device_generator(g: object) -> bool:
    """An rfkit ``BackendGenerator`` (draws on a device): its ``backend`` and the methods the estimators call."""
    return hasattr(g, "backend") and all(callable(getattr(g, m, None)) for m in ("random", "standard_normal"))


@dataclasses.dataclass(frozen=True)
class TrialStreams:
    """The generators of ``T`` trials evaluated in one call, on inputs stacked along a new leading axis.

    The study harness passes one as ``rng`` to the sampled attention estimators (SNIS, LARA, RA)
    with ``Q``, ``K``, ``V`` repeated ``T`` times along a new first axis. Trial ``t`` (the inputs'
    index ``t`` on that axis) draws everything from ``generators[t]`` in the order a call on the
    unstacked inputs with that generator would, so its output is that call's output to
    round-off. The generators are NumPy ``Generator`` objects, or, for a study with
    ``draws = "backend"``, rfkit ``BackendGenerator`` objects, whose numbers are drawn on the
    inputs' device (:attr:`on_device`). Not part of the public ``rng`` contract (None, int,
    SeedSequence or Generator).
    """

    generators: tuple[Any, ...]

    def __post_init__(self) -> None:
        gens = tuple(self.generators)
        host = all(isinstance(g, np.random.Generator) for g in gens)
        if not gens or not (host or all(_is_device_generator(g) for g in gens)):
            raise InvalidParameterError(
                "TrialStreams takes a non-empty sequence of numpy.random.Generator, or of rfkit "
                "BackendGenerator (draws on a device), not a mix."
            )
        object.__setattr__(self, "generators", gens)

    def __len__(self) -> int:
        return len(self.generators)

    @property
    def on_device(self) -> bool:
        """True when the generators draw on a device (``BackendGenerator``), False for NumPy's."""
        return not isinstance(self.generators[0], np.random.Generator)

    def slices_per_trial(self, n_slices: int, owner: str) -> int:
        """Slices of one trial among ``n_slices`` (trial-major); refuses inputs that are not stacked."""
        T = len(self.generators)
        if n_slices % T:
            raise InvalidParameterError(
                f"{owner} was given TrialStreams of {T} trials, so Q, K and V must carry a leading trial "
                f"axis of length {T}; their {n_slices} slices do not split into {T} trials."
            )
        return n_slices // T

    def of_slice(self, i: int, n_slices: int) -> Any:
        """The generator of slice ``i`` of ``n_slices`` (trial-major)."""
        return self.generators[i // (n_slices // len(self.generators))]


def check_rng_or_trials(rng: object, name: str = "rng") -> np.random.Generator | TrialStreams:
    """:func:`check_rng`, passing :class:`TrialStreams` through (the sampled estimators' stacked trials)."""
    return rng if isinstance(rng, TrialStreams) else check_rng(rng, name)
