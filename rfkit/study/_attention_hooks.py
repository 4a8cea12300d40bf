"""What the study harness hands the hooks of an attention estimator's record, and the hooks' defaults.

An :class:`~rfkit.study.AttentionEstimatorRecord` carries the behaviour the harness needs from
an attention estimator (docs page *Bring your own*, section "An attention estimator"): how to
call it for several trials at once, how one trial is called, whether its random numbers can be
drawn on a device, how it is fitted to a cell's data, what one query costs, and whether equal
instances may share their outputs. The harness asks the record and never the estimator's class;
rfkit's own estimators register their hooks (:mod:`rfkit.study._builtin_attention_hooks`) as
yours do. The hooks receive the dataclasses below.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["TrialCalls", "BatchedCall", "CellSizes", "call_trial"]


@dataclasses.dataclass(frozen=True)
class TrialCalls:
    """The trials of one work unit, as the hooks of an estimator's record see them.

    Parameters
    ----------
    Q, K, V : array
        The cell's queries, keys and values on the design's backend (``(..., n, d)``,
        ``(..., M, d)``, ``(..., M, d_v)``).
    dim : int
        The data dimension ``d``.
    streams : sequence of numpy.random.SeedSequence
        The unit's trial streams: trial ``j`` of the unit draws from ``streams[j]``.
    backend : rfkit._backend.Backend
        The design's array backend (``backend.xp`` its namespace; ``backend.uses_thread_pool``
        true on NumPy).
    device : object or None
        With ``draws = "backend"``: the unit's directions drawn on the device
        (``device.projection(feature_map, dim)``, shape ``(trials, m, d)``); None with NumPy
        draws. A hook draws on the device only for an instance its record's ``device_draws``
        accepts, and otherwise keeps the NumPy streams.
    """

    Q: Any
    K: Any
    V: Any
    dim: int
    streams: Sequence[np.random.SeedSequence]
    backend: Any
    device: Any = None

    @property
    def inputs(self) -> tuple[Any, Any, Any]:
        """``(Q, K, V)``."""
        return self.Q, self.K, self.V

    @property
    def rows(self) -> int:
        """Query rows of one trial (all leading axes times ``n``, at least 1)."""
        return max(1, int(np.prod(self.Q.shape[:-1])))


@dataclasses.dataclass(frozen=True)
class BatchedCall:
    """Several trials in one call: the answer of a record's ``batched`` hook.

    Parameters
    ----------
    size : int
        Trials per call (at least 1); the harness calls ``call(j0, j1)`` with ``j1 - j0 <= size``.
    call : callable
        ``call(j0, j1) -> AttentionResult`` for trials ``j0 .. j1 - 1`` of the unit, with a leading
        trial axis on its output (and on ``denominator_values`` where it has them); trial ``t`` is
        the output of ``call_trial`` for that trial, round-off apart. If a call raises, the harness
        calls those trials one by one (and records the failing ones).
    """

    size: int
    call: Callable[[int, int], Any]


@dataclasses.dataclass(frozen=True)
class CellSizes:
    """The sizes of a cell, as a record's ``cost`` hook sees them.

    Parameters
    ----------
    n_queries, n_keys, dim : int
        Queries ``n`` and keys ``M`` per slice, and the dimension ``d``.
    n_slices : int
        Slices (texts x heads: every leading axis).
    causal : bool
        The estimator's ``causal`` where it has one, else the cell's.
    Q, K : numpy.ndarray
        The cell's queries and keys (for a cost that depends on the data, as LSH buckets).
    rng : numpy.random.Generator
        The cell's own stream for a cost that draws (LSH rotations); never a trial's stream.
    """

    n_queries: int
    n_keys: int
    dim: int
    n_slices: int
    causal: bool
    Q: Any
    K: Any
    rng: np.random.Generator


def call_trial(estimator: Any, calls: TrialCalls, j: int) -> Any:
    """The default call of trial ``j``: ``estimator(Q, K, V, rng=streams[j])`` (NumPy draws)."""
    return estimator(calls.Q, calls.K, calls.V, rng=calls.streams[j])
