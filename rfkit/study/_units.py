"""Work units of a study: (cell, chunk of trials), their trial streams, and the pieces every kind shares.

A cell's trials are cut into chunks of ``design.chunk_trials``; each (cell, chunk) is one work
unit, so a study has ``cells x chunks`` units to spread over workers. Trial ``t`` of cell ``c``
always uses the stream :func:`rfkit._random.trial_seed_sequence` of the root
``SeedSequence(entropy, spawn_key=spawn_key)`` and key ``(c, t)``, whatever unit computes it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .._random import trial_seed_sequence
from ..exceptions import StudyError
from ._records import MetricRecord, metric_record

if TYPE_CHECKING:
    from ._design import Design

__all__ = [
    "computed_metrics",
    "WorkUnit",
    "trial_streams",
    "n_chunks",
    "chunk_range",
    "concat_chunks",
    "frame",
    "trial_failure",
]


def trial_streams(
    entropy: int, spawn_key: tuple[int, ...], cell: int, trials: range
) -> list[np.random.SeedSequence]:
    """The stream of each trial ``t`` of cell ``cell``: ``SeedSequence(entropy, spawn_key=spawn_key + (cell, t))``.

    >>> s = trial_streams(7, (), cell=2, trials=range(3, 5))
    >>> [x.spawn_key for x in s]
    [(2, 3), (2, 4)]
    """
    root = np.random.SeedSequence(entropy, spawn_key=tuple(spawn_key))
    return [trial_seed_sequence(root, cell, t) for t in trials]


def n_chunks(design: Design) -> int:
    """Work units per cell: chunks of ``design.chunk_trials`` trials (the last one may be shorter)."""
    return -(-design.trials // design.chunk_trials)


def chunk_range(design: Design, chunk: int) -> range:
    """Trial indices of chunk ``chunk`` of a cell."""
    start = chunk * design.chunk_trials
    return range(start, min(design.trials, start + design.chunk_trials))


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """One work unit: chunk ``chunk`` of the trials of cell ``cell_index``, every estimator.

    ``entropy`` and ``spawn_key`` are the run's root; ``on_error`` says whether a failing trial
    raises a :class:`~rfkit.exceptions.StudyError` or is recorded.
    """

    design: Design
    cell_index: int
    chunk: int
    entropy: int
    spawn_key: tuple[int, ...]
    on_error: str = "raise"

    @property
    def cell(self) -> dict[str, Any]:
        """The cell's grid point."""
        return self.design.cells()[self.cell_index]

    @property
    def trials(self) -> range:
        """Trial indices of the unit."""
        return chunk_range(self.design, self.chunk)

    def streams(self) -> list[np.random.SeedSequence]:
        """The unit's trial streams, shared by every estimator (common random numbers)."""
        return trial_streams(self.entropy, self.spawn_key, self.cell_index, self.trials)

    def failure(self, exc: Exception, label: str, t: int) -> StudyError:
        """The error of trial ``t`` of estimator ``label`` (names the replay call)."""
        return trial_failure(exc, label, self.cell, self.cell_index, t, self.entropy, self.spawn_key)


def trial_failure(
    exc: Exception,
    label: str,
    cell: dict[str, Any],
    cell_index: int,
    t: int,
    entropy: int,
    spawn_key: tuple[int, ...],
) -> StudyError:
    """A :class:`~rfkit.exceptions.StudyError` naming the failing (cell, trial) and how to replay it."""
    return StudyError(
        f"trial {t} of cell {cell_index} ({label!r}, {cell}) failed: {type(exc).__name__}: {exc}. "
        f"Replay it with rfkit.study.run_trial(design, cell={cell_index}, trial={t}, entropy={entropy}).",
        cell=cell_index,
        trial=t,
        spawn_key=tuple(spawn_key) + (cell_index, t),
    )


def concat_chunks(parts: list[dict[str, Any]], name: str) -> np.ndarray:
    """Per-trial arrays (estimator, trial, ...) of all chunks, in chunk order."""
    if len(parts) == 1:
        return np.asarray(parts[0][name])
    return np.concatenate([np.asarray(p[name]) for p in parts], axis=1)


def frame(parts: list[dict[str, Any]]) -> pd.DataFrame:
    """One DataFrame from per-estimator column dicts (scalars broadcast to each part's length)."""
    cols = list(parts[0])
    lengths = [max(np.size(v) for v in p.values()) for p in parts]
    data = {
        c: np.concatenate([np.broadcast_to(np.asarray(p[c]), (n,)) for p, n in zip(parts, lengths)])
        for c in cols
    }
    return pd.DataFrame(data)


def computed_metrics(design: Design) -> list[MetricRecord]:
    """The design's metrics whose record computes their per-trial column (``compute``)."""
    return [m for m in map(metric_record, design.metrics) if m.compute is not None]
