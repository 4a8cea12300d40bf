"""Evaluation of work units: (cell, chunk of trials), every estimator, vectorised over the chunk.

A cell's trials are cut into chunks of ``design.chunk_trials``; each (cell, chunk) is one work
unit (:func:`run_unit`), so a study has ``cells x chunks`` units to spread over workers. A unit
covering a whole cell returns the cell's tables; otherwise it returns per-trial arrays, which
:func:`finalize_cell` concatenates in chunk order and reduces exactly as a single unit would.
Trial ``t`` of cell ``c`` always uses ``SeedSequence(entropy, spawn_key=spawn_key + (c, t))``
(:func:`rfkit._random.trial_seed_sequence`). Each kind of design has its own module:
:mod:`~rfkit.study._eval_kernel`, :mod:`~rfkit.study._eval_attention`,
:mod:`~rfkit.study._eval_concentration`.

Runs inside workers: takes and returns plain, picklable data only.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import pandas as pd

from .._parallel import blas_limited
from ._design import Design
from ._eval_attention import attention_finalize, attention_partial, attention_replay
from ._eval_concentration import concentration_finalize, concentration_partial
from ._eval_dropin import dropin_finalize, dropin_partial, dropin_replay
from ._eval_kernel import kernel_finalize, kernel_partial, kernel_replay, kernel_setup
from ._units import WorkUnit, n_chunks, trial_streams

__all__ = [
    "run_cell",
    "run_unit",
    "finalize_cell",
    "replay_trial",
    "n_chunks",
]


class _Kind(NamedTuple):
    """How one kind of design evaluates a unit and merges a cell's units."""

    partial: Callable[[WorkUnit], dict[str, Any]]
    finalize: Callable[[WorkUnit, list[dict[str, Any]]], dict[str, Any]]
    replay: Callable[..., pd.DataFrame]


def _kernel_partial(unit: WorkUnit) -> dict[str, Any]:
    setup = kernel_setup(unit.design, unit.cell_index, unit.entropy, unit.spawn_key)
    return kernel_partial(unit, setup)


def _kernel_finalize(unit: WorkUnit, parts: list[dict[str, Any]]) -> dict[str, Any]:
    setup = kernel_setup(unit.design, unit.cell_index, unit.entropy, unit.spawn_key)
    return kernel_finalize(unit.design, setup, unit.cell_index, parts)


_KINDS = {
    "kernel": _Kind(_kernel_partial, _kernel_finalize, kernel_replay),
    "attention": _Kind(
        attention_partial,
        lambda u, parts: attention_finalize(u.design, u.cell_index, parts),
        attention_replay,
    ),
    # a concentration trial replays as a kernel trial: each map's ratios on the cell's data
    "concentration": _Kind(
        concentration_partial, lambda u, parts: concentration_finalize(u.design, parts), kernel_replay
    ),
    "drop-in": _Kind(
        dropin_partial, lambda u, parts: dropin_finalize(u.design, u.cell_index, parts), dropin_replay
    ),
}


def run_unit(
    design_dict: dict[str, Any],
    cell_index: int,
    chunk: int,
    entropy: int,
    spawn_key: tuple[int, ...],
    on_error: str = "raise",
    imports: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One work unit: the trials of chunk ``chunk`` of cell ``cell_index``, every estimator.

    Trial ``t`` uses the stream ``SeedSequence(entropy, spawn_key=spawn_key + (cell, t))``
    whatever unit computes it, so the tables do not depend on how units are distributed.
    ``imports`` are modules to import first (those that register records of your own:
    :func:`~rfkit.study._records.registered_modules`).

    Returns
    -------
    dict
        ``{"cell", "chunk", "final", "tables", "pid"}``. When the chunk is the whole cell (``final``),
        ``tables`` are the cell's tables (``trials``, ``pairs``, maybe ``timings`` and
        ``data_stats``); otherwise the chunk's per-trial results (arrays and frames) that
        :func:`finalize_cell` merges, in chunk order, once every chunk of the cell is done.
    """
    for module in (*imports, *design_dict.get("imports", ())):  # modules that register records of yours
        importlib.import_module(module)
    design = Design.trusted(design_dict)  # validated once by run(); workers skip the checks
    unit = WorkUnit(design, cell_index, chunk, entropy, tuple(spawn_key), on_error)
    kind = _KINDS[design.kind]
    single = n_chunks(design) == 1
    with blas_limited():  # small matrices: one BLAS thread each (a busy pool of them is many times slower)
        part = kind.partial(unit)
        tables = kind.finalize(unit, [part]) if single else part
    return {"cell": cell_index, "chunk": chunk, "final": single, "tables": tables, "pid": os.getpid()}


def finalize_cell(
    design_dict: dict[str, Any],
    cell_index: int,
    parts: list[dict[str, Any]],
    entropy: int,
    spawn_key: tuple[int, ...],
) -> dict[str, pd.DataFrame]:
    """The tables of a cell from the partial results of all its chunks, in chunk order.

    The per-trial arrays are concatenated in chunk order and reduced exactly as one unit
    covering the whole cell would, so the tables do not depend on executor or worker count.
    """
    design = Design.trusted(design_dict)
    unit = WorkUnit(design, cell_index, 0, entropy, tuple(spawn_key))
    return _KINDS[design.kind].finalize(unit, parts)


def run_cell(
    design_dict: dict[str, Any],
    cell_index: int,
    entropy: int,
    spawn_key: tuple[int, ...],
    on_error: str = "raise",
) -> dict[str, Any]:
    """All trials of every estimator in one cell (its work units one after another, merged).

    Returns ``{"cell": c, "trials": DataFrame, "pairs": DataFrame, ...}`` as :func:`finalize_cell`.
    """
    units = [
        run_unit(design_dict, cell_index, k, entropy, spawn_key, on_error)
        for k in range(n_chunks(Design.trusted(design_dict)))
    ]
    if units[0]["final"]:
        return {"cell": cell_index, **units[0]["tables"]}
    tables = finalize_cell(design_dict, cell_index, [u["tables"] for u in units], entropy, spawn_key)
    return {"cell": cell_index, **tables}


def replay_trial(
    design: Design, cell: int, trial: int, entropy: int, spawn_key: tuple[int, ...] = ()
) -> pd.DataFrame:
    """One (cell, trial) of every estimator alone, on the trial's own stream (:func:`rfkit.study.run_trial`).

    Kernel designs: the ratios estimate/truth per estimator and pair; attention designs: the
    squared error of each query's output per estimator.
    """
    replay = _KINDS[design.kind].replay
    stream = trial_streams(entropy, spawn_key, cell, range(trial, trial + 1))[0]
    return replay(design, cell, stream, entropy, spawn_key)
