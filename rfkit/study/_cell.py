"""Evaluation of work units: (cell, chunk of trials), every estimator, vectorised over the chunk.

A cell's trials are cut into chunks of ``design.chunk_trials``; each (cell, chunk) is one work
unit (:func:`run_unit`), so a study has ``cells x chunks`` units to spread over workers. A unit
covering a whole cell returns the cell's tables; otherwise it returns per-trial arrays, which
:func:`finalize_cell` concatenates in chunk order and reduces exactly as a single unit would.
Trial ``t`` of cell ``c`` always uses ``SeedSequence(entropy, spawn_key=spawn_key + (c, t))``
(:func:`rfkit._random.trial_seed_sequence`). Each kind of design has its own module:
:mod:`~rfkit.study._eval_kernel`, :mod:`~rfkit.study._eval_attention`,
:mod:`~rfkit.study._eval_concentration`, :mod:`~rfkit.study._eval_dropin`, each read through
one :class:`Kind`.

Runs inside workers: takes a :class:`~rfkit.study._messages.UnitTask` and answers a
:class:`~rfkit.study._messages.UnitResult` (frozen dataclasses of plain, picklable data).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import pandas as pd

from .._parallel import blas_limited
from ._data_arrays import remember_arrays
from ._design import Design
from ._eval_attention import attention_finalize, attention_partial, attention_replay
from ._eval_concentration import concentration_finalize, concentration_partial
from ._eval_dropin import dropin_finalize, dropin_partial, dropin_replay
from ._eval_kernel import kernel_finalize, kernel_partial, kernel_replay, kernel_setup
from ._messages import CellTables, PartTables, UnitResult, UnitTask
from ._units import WorkUnit, n_chunks, trial_streams

__all__ = [
    "KINDS",
    "Kind",
    "cell_setup",
    "forget_setups",
    "run_cell",
    "run_unit",
    "finalize_cell",
    "replay_trial",
    "n_chunks",
]


class Kind(NamedTuple):
    """How one kind of design evaluates its cells: every kind through the same three calls.

    ``setup(unit)`` prepares what all units of a cell share (data, fitted maps; None where a kind
    has nothing to share), once per cell and process; ``partial(unit, setup)`` evaluates one
    chunk of trials; ``finalize(unit, setup, parts)`` reduces the chunks' parts, in chunk order,
    to the cell's tables.
    """

    setup: Callable[[WorkUnit], Any]
    partial: Callable[[WorkUnit, Any], PartTables]
    finalize: Callable[[WorkUnit, Any, list[PartTables]], CellTables]
    replay: Callable[..., pd.DataFrame]


def no_setup(unit: WorkUnit) -> None:
    """The setup of a kind whose units share nothing: each unit reads its cell's data itself."""
    return None


KINDS = {
    "kernel": Kind(kernel_setup, kernel_partial, kernel_finalize, kernel_replay),
    "attention": Kind(no_setup, attention_partial, attention_finalize, attention_replay),
    # a concentration trial replays as a kernel trial: each map's ratios on the cell's data
    "concentration": Kind(no_setup, concentration_partial, concentration_finalize, kernel_replay),
    "drop-in": Kind(no_setup, dropin_partial, dropin_finalize, dropin_replay),
}

#: the last cell set up in this process: (key, setup); its chunks and its tables share it
_LAST_SETUP: tuple[tuple[Any, ...], Any] | None = None


def cell_setup(unit: WorkUnit, design_dict: dict[str, Any]) -> Any:
    """The setup of the unit's cell: computed once per cell and process, then reused.

    A process keeps the last cell's setup, keyed by the design (its ``to_dict()``, compared by
    value), the cell and the root seed, so the chunks of a cell that follow one another, and the
    cell's tables made in the same process, reuse it; a setup is deterministic, so the numbers are
    those of a fresh one. :func:`forget_setups` drops it (a run does at its end).
    """
    global _LAST_SETUP
    kind = KINDS[unit.design.kind]
    if kind.setup is no_setup:
        return None
    key = (design_dict, unit.cell_index, unit.entropy, tuple(unit.spawn_key))
    last = _LAST_SETUP
    if last is not None and last[0] == key:
        return last[1]
    setup = kind.setup(unit)
    _LAST_SETUP = (key, setup)
    return setup


def forget_setups() -> None:
    """Drop the setup this process keeps (its data may sit on an accelerator)."""
    global _LAST_SETUP
    _LAST_SETUP = None


def run_unit(task: UnitTask) -> UnitResult:
    """One work unit: the trials of chunk ``task.chunk`` of cell ``task.cell``, every estimator.

    Trial ``t`` uses the stream ``SeedSequence(entropy, spawn_key=spawn_key + (cell, t))``
    whatever unit computes it, so the tables do not depend on how units are distributed.
    ``task.imports`` are modules to import first (those that register records of your own:
    :func:`~rfkit.study._records.registered_modules`).

    Returns
    -------
    UnitResult
        When the chunk is the whole cell (``final``), ``tables`` are the cell's
        :class:`CellTables`; otherwise the chunk's per-trial results (arrays and frames by name)
        that :func:`finalize_cell` merges, in chunk order, once every chunk of the cell is done.
    """
    for module in (*task.imports, *task.design.get("imports", ())):  # modules that register records of yours
        importlib.import_module(module)
    design = Design.trusted(task.design)  # validated once by run(); workers skip the checks
    if task.data is not None:  # arrays passed to the run in memory: held for the cells of this process
        remember_arrays(task.design["data"]["sha256"], task.data)
    unit = WorkUnit(design, task.cell, task.chunk, task.entropy, tuple(task.spawn_key), task.on_error)
    kind = KINDS[design.kind]
    with blas_limited():  # small matrices: one BLAS thread each (a busy pool of them is many times slower)
        setup = cell_setup(unit, task.design)
        part = kind.partial(unit, setup)
        tables = kind.finalize(unit, setup, [part]) if n_chunks(design) == 1 else part
    return UnitResult(task.cell, task.chunk, tables, os.getpid())


def finalize_cell(
    design_dict: dict[str, Any],
    cell_index: int,
    parts: list[PartTables],
    entropy: int,
    spawn_key: tuple[int, ...],
) -> CellTables:
    """The tables of a cell from the partial results of all its chunks, in chunk order.

    The per-trial arrays are concatenated in chunk order and reduced exactly as one unit
    covering the whole cell would, so the tables do not depend on executor or worker count.
    """
    design = Design.trusted(design_dict)
    unit = WorkUnit(design, cell_index, 0, entropy, tuple(spawn_key))
    return KINDS[design.kind].finalize(unit, cell_setup(unit, design_dict), parts)


def run_cell(
    design_dict: dict[str, Any],
    cell_index: int,
    entropy: int,
    spawn_key: tuple[int, ...],
    on_error: str = "raise",
) -> CellTables:
    """All trials of every estimator in one cell (its work units one after another, merged)."""
    units = [
        run_unit(UnitTask(design_dict, cell_index, k, entropy, tuple(spawn_key), on_error))
        for k in range(n_chunks(Design.trusted(design_dict)))
    ]
    if isinstance(units[0].tables, CellTables):
        return units[0].tables
    return finalize_cell(design_dict, cell_index, [u.tables for u in units], entropy, spawn_key)  # type: ignore[misc]


def replay_trial(
    design: Design, cell: int, trial: int, entropy: int, spawn_key: tuple[int, ...] = ()
) -> pd.DataFrame:
    """One (cell, trial) of every estimator alone, on the trial's own stream (:func:`rfkit.study.run_trial`).

    Kernel designs: the ratios estimate/truth per estimator and pair; attention designs: the
    squared error of each query's output per estimator.
    """
    replay = KINDS[design.kind].replay
    stream = trial_streams(entropy, spawn_key, cell, range(trial, trial + 1))[0]
    return replay(design, cell, stream, entropy, spawn_key)
