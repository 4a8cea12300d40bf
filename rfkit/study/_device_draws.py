"""``draws = "backend"``: the directions of a work unit drawn on the backend's device by its own generator.

With NumPy draws (the default) trial ``t`` of cell ``c`` draws from its own NumPy stream, and the
directions are moved to the device. With ``draws = "backend"`` a work unit (cell ``c``, chunk
``k``) seeds the backend's generator from the node ``spawn_key + (c, 2**32 + k)`` of the same
seed tree (disjoint from every trial's node ``(c, t)``, ``t < 2**32``) and draws the directions
of all its trials at once, on the device. Each kind of directions (projection, feature count,
dimension) starts from that same seed, as every kind starts from the trial's stream with NumPy
draws, so the estimators of a cell keep their common random numbers. The sampled attention estimators (RA,
SNIS, LARA) draw per trial instead, each trial from the backend's generator seeded with the trial's
own stream (on NumPy: the very numbers of ``draws = "numpy"``). An attention estimator's record says
whether an instance draws on the device (its ``device_draws`` hook; its ``batched`` and
``call_trial`` hooks then use the unit's draws): the harness names no class.

The tables are reproducible for a backend, a device and a ``chunk_trials`` (a unit's trials are
drawn together), whatever the executor or number of workers. Maps without ``device_draws``, RFA
with a draw per head, Hybrid and estimators whose record has no ``device_draws`` hook keep their
NumPy draws (:func:`numpy_draws` names them, and the run's provenance lists them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._backend import Backend
from .._backend_random import BackendGenerator
from ..features import FeatureMap
from ._estimators import build_feature_map
from ._records import attention_estimator_record

if TYPE_CHECKING:
    from ._design import Design

__all__ = ["UNIT_KEY", "unit_seed", "DeviceDraws", "device_map", "numpy_draws"]

#: offset of the seed-tree key of a work unit's backend generator (above every trial index)
UNIT_KEY = 1 << 32


def unit_seed(entropy: int, spawn_key: tuple[int, ...], cell: int, chunk: int) -> np.random.SeedSequence:
    """The seed of work unit (``cell``, ``chunk``)'s backend generator: key ``spawn_key + (cell, 2**32 + chunk)``.

    >>> unit_seed(7, (), 3, 1).spawn_key
    (3, 4294967297)
    """
    return np.random.SeedSequence(
        int(entropy), spawn_key=tuple(spawn_key) + (int(cell), UNIT_KEY + int(chunk))
    )


def device_map(fm: Any) -> bool:
    """True for a random feature map whose directions can be drawn on the device."""
    return (
        isinstance(fm, FeatureMap)
        and fm.is_random
        and bool(getattr(fm, "device_draws", False))
        and bool(getattr(fm, "shares_projection", False))
    )


class DeviceDraws:
    """The directions of one work unit, drawn on ``backend``'s device, one set per kind (cached)."""

    def __init__(self, backend: Backend, seed: np.random.SeedSequence, n_trials: int) -> None:
        self.backend = backend
        self.seed = seed
        self.n_trials = n_trials
        self._cache: dict[tuple[Any, ...], Any] = {}

    def projection(self, fm: Any, dim: int) -> Any:
        """Directions ``(trials, m, d)`` of ``fm`` on the device (every kind from the unit's seed)."""
        key = (fm.projection, fm.n_features, dim)
        W = self._cache.get(key)
        if W is None:
            gen = BackendGenerator(self.backend, self.seed)
            W = self._cache[key] = fm.projection_on(dim, self.n_trials, gen)
        return W

    def only(self, trial: int) -> _OneTrial:
        """The draws of the unit's ``trial``-th trial alone (to replay it)."""
        return _OneTrial(self, trial)


class _OneTrial(DeviceDraws):
    def __init__(self, parent: DeviceDraws, trial: int) -> None:
        super().__init__(parent.backend, parent.seed, 1)
        self._parent, self._trial = parent, trial

    def projection(self, fm: Any, dim: int) -> Any:
        return self._parent.projection(fm, dim)[self._trial : self._trial + 1]


def numpy_draws(design: Design) -> list[str]:
    """Labels of the estimators that keep NumPy draws under ``draws = "backend"`` (checked on the first cell)."""
    cell = design.cells()[0]
    out = []
    for est in design.estimators:
        params = design.estimator_params(est, cell)
        if design.kind == "attention":
            record = attention_estimator_record(params["estimator"])
            obj = record.build(params)
            ok = record.device_draws is not None and bool(record.device_draws(obj))
        else:
            fm = build_feature_map(est["map"], params)
            ok = device_map(fm) or not fm.is_random
        if not ok:
            out.append(design.label(est))
    return out
