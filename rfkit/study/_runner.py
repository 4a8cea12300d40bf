"""Study runner: work units (cell, chunk of trials) over an executor, verified parts, resumable.

A run has three steps: :func:`~rfkit.study._plan.plan_run` checks the arguments and lists the
work units (a frozen :class:`~rfkit.study._plan.RunPlan`; nothing computed, nothing written);
:func:`_execute` computes the units not resumed from the run folder, over the plan's executor,
recording each as it finishes; and :func:`_finish` joins the cells' tables with the grid, writes
the provenance and the final files.
Work units talk in :mod:`~rfkit.study._messages` dataclasses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import numbers
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .._version import __version__
from ..exceptions import InvalidParameterError
from ._cell import finalize_cell, forget_setups, replay_trial, run_unit
from ._data_arrays import forget_arrays
from ._design import Design
from ._device_draws import numpy_draws
from ._executors import _iter_results, worker_env
from ._messages import CellTables, PartTables, UnitResult
from ._plan import EXECUTORS, ExecutorChoice, RunOptions, RunPlan, _resolve_design, plan_run
from ._results import StudyResult
from ._runfolder import RunFolder

__all__ = [
    "run",
    "run_trial",
    "plan_run",
    "RunPlan",
    "RunOptions",
    "ExecutorChoice",
    "EXECUTORS",
    "worker_env",
]

#: optional per-cell tables besides trials and pairs (not part of the reproducible summary)
EXTRA_TABLES = CellTables.EXTRAS


def _versions(bk: Any = None) -> dict[str, str]:
    import scipy

    out = {
        "rfkit": __version__,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "pandas": pd.__version__,
    }
    if bk is not None and bk.name not in out:
        out[bk.name] = bk.library_version
    return out


def _machine() -> dict[str, Any]:
    return {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count()}


class _Merger:
    """Collects finished units; a cell's tables are built once all its chunks are in (chunk order)."""

    def __init__(self, plan: RunPlan):
        self.plan = plan
        self.cells: dict[int, CellTables] = {}
        self.pending: dict[int, dict[int, PartTables]] = {}
        self.have: set[tuple[int, int]] = set()

    def add(self, res: UnitResult) -> None:
        self.have.add((res.cell, res.chunk))
        if isinstance(res.tables, CellTables):
            self.cells[res.cell] = res.tables
            return
        parts = self.pending.setdefault(res.cell, {})
        parts[res.chunk] = res.tables
        if len(parts) == self.plan.n_chunks:
            p = self.plan
            ordered = [parts[k] for k in range(p.n_chunks)]
            self.cells[res.cell] = finalize_cell(p.design_dict, res.cell, ordered, p.entropy, p.spawn_key)
            del self.pending[res.cell]


@dataclasses.dataclass(frozen=True)
class Execution:
    """What executing a plan gave: every cell's tables, and how they came (for the provenance)."""

    cells: dict[int, CellTables]
    units_computed: int
    units_resumed: int
    cells_resumed: int
    pids: frozenset[int]
    seconds: float


def _execute(plan: RunPlan, folder: RunFolder | None) -> Execution:
    """Every work unit of the plan not resumed from ``folder``, each recorded in it as it finishes."""
    merger = _Merger(plan)
    if folder is not None:
        for _, resumed in sorted(folder.resumed.items()):
            merger.add(resumed)
    n_resumed = len(merger.have)
    tasks = [(u,) for u in plan.units if (u.cell, u.chunk) not in merger.have]
    ex = plan.executor
    t0 = time.perf_counter()
    bar = _progress(len(plan.units), n_resumed, plan.options.progress, plan.design.name)
    pids = set()
    try:
        for res in _iter_results(run_unit, tasks, ex.name, ex.workers, ex.scheduler, plan.resume_hint()):
            pids.add(res.pid)
            if folder is not None:
                folder.record(res)
            merger.add(res)
            bar(1)
    finally:
        bar(None)
    elapsed = time.perf_counter() - t0
    n_cells, chunks = len(plan.design.cells()), plan.n_chunks
    whole = sum(all((c, k) in merger.have for k in range(chunks)) for c in range(n_cells))
    return Execution(
        cells=merger.cells,
        units_computed=len(tasks),
        units_resumed=n_resumed,
        cells_resumed=int(whole) if folder is not None and n_resumed else 0,
        pids=frozenset(p for p in pids if p is not None),
        seconds=elapsed,
    )


def _finish(plan: RunPlan, folder: RunFolder | None, done: Execution) -> StudyResult:
    """The run's tables (the grid's columns joined), its provenance and, with a folder, the final files."""
    cells = plan.design.cells()
    grid = pd.DataFrame(cells).assign(cell=np.arange(len(cells)))
    tables = [done.cells[c] for c in range(len(cells))]
    trials_df = _with_grid(pd.concat([t.trials for t in tables], ignore_index=True), grid)
    pairs_df = _with_grid(pd.concat([t.pairs for t in tables], ignore_index=True), grid)
    extras = {
        name: _with_grid(pd.concat([getattr(t, name) for t in tables], ignore_index=True), grid)
        for name in EXTRA_TABLES
        if all(getattr(t, name) is not None for t in tables)
    }
    result = StudyResult(
        design=plan.design,
        trials=trials_df,
        pairs=pairs_df,
        provenance=_provenance(plan, folder, done),
        timings=extras.get("timings"),
        data_stats=extras.get("data_stats"),
    )
    if folder is not None:
        folder.write_result(result)
    return result


def _read_back(plan: RunPlan, folder: RunFolder) -> StudyResult:
    """A resumed finished run whose parts were removed: its verified final tables, written again.

    The tables are read back (their SHA-256 checked against ``manifest.json``) and saved again
    with the recorded provenance (``repaired`` from this call), as any finish does, so a damaged
    ``summary.csv`` or ``theory.csv`` is rewritten too; nothing is recomputed.
    """
    out = folder.out
    prov = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    prov.pop("files", None)
    prov["repaired"] = list(folder.repaired)
    extra = {
        n: pd.read_parquet(out / f"{n}.parquet") for n in EXTRA_TABLES if (out / f"{n}.parquet").exists()
    }
    result = StudyResult(
        design=plan.design,
        trials=pd.read_parquet(out / "trials.parquet"),
        pairs=pd.read_parquet(out / "pairs.parquet"),
        provenance=prov,
        timings=extra.get("timings"),
        data_stats=extra.get("data_stats"),
    )
    folder.write_result(result)
    return result


def _provenance(plan: RunPlan, folder: RunFolder | None, done: Execution) -> dict[str, Any]:
    design, bk = plan.design, plan.backend
    provenance = {
        "design": plan.design_dict,
        "design_hash": design.hash(),
        "design_source": design.source,
        "entropy": str(plan.entropy),
        "spawn_key": list(plan.spawn_key),
        "executor": plan.executor.label,
        "workers": plan.executor.workers_used(done.units_computed),
        "cells": len(design.cells()),
        "cells_resumed": done.cells_resumed,
        "chunk_trials": design.chunk_trials,
        "units": len(plan.units),
        "units_resumed": done.units_resumed,
        "worker_processes": len(done.pids),  # distinct processes that computed this run's units
        "repaired": list(folder.repaired) if folder is not None else [],
        "seconds": done.seconds,
        "versions": _versions(bk),
        "machine": _machine(),
        "backend": design.backend,
        "draws": design.draws,
        "numpy_draws": numpy_draws(design) if design.draws == "backend" else [],
        "device": str(bk.device),
        "device_name": bk.device_name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if "sha256" in design.data:  # data of your own (source "arrays"): the SHA-256 of the file or arrays
        provenance["data_sha256"] = design.data["sha256"]
    if folder is not None and folder.lock.taken_over:
        provenance["lock_taken_over"] = folder.lock.taken_over
    return provenance


def run(
    design: Design | str | Path,
    *,
    data: Any = None,
    rng: Any = None,
    executor: Any = "serial",
    workers: int | None = None,
    scheduler: str | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    quick: bool = False,
    trials: int | None = None,
    on_error: str | None = None,
    progress: bool | None = None,
    lock_timeout: float | None = 0.0,
    backend: str | None = None,
    device: str | None = None,
    draws: str | None = None,
    overwrite: bool = False,
    keep_parts: bool = False,
) -> StudyResult:
    """Run a study: every cell of the grid, every estimator, all trials.

    The unit of work is (cell, chunk of ``design.chunk_trials`` trials), so ``workers``
    processes are all busy even when the study has fewer cells than workers.

    Parameters
    ----------
    design : Design, path or str
        A :class:`Design`, a TOML study file, or the name of a built-in study (``"performer-mse"``,
        as ``rfkit list`` shows them).
    data : mapping or object, optional
        Arrays of your own for a design whose ``data.source`` is ``"arrays"`` and names no
        ``file``: a mapping (or an object) holding ``q`` and ``k`` (float32/float64, shaped
        ``(n, d)``, ``(texts, n, d)`` or ``(texts, layers, heads, n, d)``), optionally ``v`` and a
        bool ``mask`` (see :doc:`/your-data`). Their SHA-256 becomes the design's ``data.sha256``
        (so the design hash and the provenance name the data) and a resume with other arrays is
        refused (:class:`~rfkit.exceptions.DataChecksumError`). Worker processes get a copy with
        each work unit.
    rng : {None, int, SeedSequence, Generator}, optional
        Root of all randomness; defaults to the design's ``seed`` (or OS entropy, recorded).
        Trial ``t`` of cell ``c`` uses ``SeedSequence(root.entropy, spawn_key=root.spawn_key +
        (c, t))``, so results do not depend on the executor, worker count or order. A Generator
        contributes one draw from its stream (it advances; the same state gives the same run); a
        SeedSequence with a list of ints as entropy is reduced to one int drawn from it. The
        entropy and spawn key used are recorded (``provenance["entropy"]``, ``["spawn_key"]``)
        and reproduce the run when passed back: ``rng=provenance["entropy"]`` (the int or its
        decimal string) where the spawn key is empty, else
        ``rng=SeedSequence(int(provenance["entropy"]), spawn_key=provenance["spawn_key"])``.
    executor : {"serial", "processes", "dask"} or dask.distributed.Client, default="serial"
        Where work units run. ``"processes"`` uses a local pool of ``workers`` processes;
        ``"dask"`` a local cluster of ``workers`` processes, or the scheduler at ``scheduler``.
        Local worker processes get ``max(1, cpus // workers)`` threads each
        (``RFKIT_NUM_THREADS`` and the BLAS/OpenMP variables), so cores are not oversubscribed.
    workers : int, optional
        Number of worker processes of ``"processes"`` or a local Dask cluster (default: CPU
        count). With ``executor="serial"`` only ``workers=1`` is accepted (a larger number would
        be ignored); the provenance records the number of worker processes actually used.
    scheduler : str, optional
        Dask scheduler address (implies ``executor="dask"``).
    out : path, optional
        Folder for results (see :doc:`/run-folders`). Each finished work unit is written at once
        (atomically) and its files' sizes and SHA-256 recorded in ``out/run.json``, so an
        interrupted run loses at most the units in progress; final tables are written at the
        end. The run holds ``out/run.lock`` while it works: one writer per folder.
    resume : bool, default=False
        Continue an interrupted (or re-verify a finished) run in ``out``: every recorded part is
        verified (size, SHA-256) and read back; missing, truncated or altered parts are reported
        (:class:`~rfkit.exceptions.DamagedResultWarning`, and ``provenance["repaired"]``) and
        recomputed; the final tables are identical to those of an uninterrupted run. Refused if
        ``out`` holds a different design, seed or backend. A finished run whose parts were
        removed (the default) is re-verified from its final tables, which are read back and not
        recomputed; if one of them is damaged, every unit is recomputed.
    overwrite : bool, default=False
        Replace the run in ``out``: the files the earlier run wrote (those its manifests list,
        and rfkit's own part, lock and temporary files) are removed first, and nothing else;
        a folder holding any other file is refused with a
        :class:`~rfkit.exceptions.RunFolderError` naming them, and nothing removed. Not with
        ``resume``. Without ``resume`` or ``overwrite``, a folder holding a run is refused
        (:class:`~rfkit.exceptions.RunFolderError`).
    keep_parts : bool, default=False
        Keep the part files (``out/parts/``) of a finished run. By default they are removed once
        the final tables are written and verified against their SHA-256 in ``manifest.json``
        (``run.json`` then records ``parts_removed``); an interrupted or failed run keeps them
        either way, for ``resume``.
    quick : bool, default=False
        Apply the design's ``[quick]`` profile.
    trials : int, optional
        Override the number of trials.
    on_error : {"raise", "record"}, optional
        A failing trial raises :class:`~rfkit.exceptions.StudyError` naming its (cell, trial),
        or is recorded with ``status="error:<Exception>"`` and counted in ``summary().n_failed``
        (so is every trial of a data-dependent map that cannot be fitted to a cell's data).
        Default: the design's ``on_error`` (``"raise"`` unless the study file says otherwise).
    progress : bool, optional
        Show a progress bar: ``True`` always, ``False`` never; default: when stderr is a terminal
        or in a Jupyter notebook. The bar is one output wherever it shows: in a notebook a widget
        when ``ipywidgets`` is installed, else one text line updated in place (never a warning
        about missing widgets); on a terminal tqdm's updating line; on a stderr that is no
        terminal (a log file, a pipe, ``progress=True``) one line when the run ends.
    lock_timeout : float or None, default=0
        When another live run holds ``out``: seconds to wait for it before refusing with a
        :class:`~rfkit.exceptions.StudyError` that names it (0: refuse at once; None: wait
        without limit). A lock left by a killed process on this host is taken over.
    backend : {"numpy", "torch", "cupy", "array_api_strict"}, optional
        Array library the estimates run on (overrides the design's ``backend``; see
        :doc:`/backends`). Data and random draws are NumPy, moved to ``device``, so the tables
        equal NumPy's to round-off. Kernel and attention designs; concentration designs compute
        closed forms and stay NumPy.
    device : str, optional
        Device of the backend (``"cuda"``, ``"cuda:1"``; overrides the design's ``device``).
    draws : {"numpy", "backend"}, optional
        Where random directions are drawn (overrides the design's ``draws``): NumPy streams per
        trial, or the backend's own generator on its device, seeded per work unit (RA, SNIS and
        LARA: per trial); statistically equivalent, not the same numbers (see :class:`Design`).

    Returns
    -------
    StudyResult
    """
    plan = plan_run(
        design,
        data=data,
        rng=rng,
        executor=executor,
        workers=workers,
        scheduler=scheduler,
        out=out,
        resume=resume,
        quick=quick,
        trials=trials,
        on_error=on_error,
        progress=progress,
        lock_timeout=lock_timeout,
        backend=backend,
        device=device,
        draws=draws,
        overwrite=overwrite,
        keep_parts=keep_parts,
    )
    folder = plan.folder()
    try:
        with folder if folder is not None else contextlib.nullcontext():
            if folder is not None and folder.reuse_tables:
                return _read_back(plan, folder)
            result = _finish(plan, folder, _execute(plan, folder))
            if folder is not None and not plan.options.keep_parts:
                folder.remove_parts()
            return result
    finally:
        forget_setups()  # a cell's setup kept for its chunks: not past the run
        forget_arrays()  # arrays of source "arrays" held for the cells: not past the run


def _with_grid(df: pd.DataFrame, grid: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in grid.columns if c != "cell"]
    merged = df.drop(columns=[c for c in cols if c in df.columns]).merge(grid, on="cell", how="left")
    front = [c for c in ("cell", "estimator") if c in merged.columns] + cols
    return merged[front + [c for c in merged.columns if c not in front]]


def _in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (the test tqdm.auto makes)."""
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None  # type: ignore[attr-defined]
        return shell is not None and "IPKernelApp" in shell.config
    except Exception:  # noqa: BLE001 - any odd IPython counts as not a notebook
        return False


def _progress(total: int, initial: int, show: bool | None, name: str) -> Callable[[int | None], None]:
    """A progress bar that is one output wherever it is shown.

    In a Jupyter kernel: one tqdm widget with ``ipywidgets``, else one line updated in place
    through an IPython display handle (a text bar on a kernel's stderr would leave an output per
    flush, on a notebook page and on the built docs pages). On a terminal: tqdm's updating line.
    Elsewhere (stderr a pipe or a file, asked for with ``progress=True``): one line when the run
    ends. Never a warning about missing widgets.
    """
    notebook = _in_notebook()
    if show is None:
        show = sys.stderr.isatty() or notebook
    if not show:
        return lambda n: None
    if notebook:
        if importlib.util.find_spec("ipywidgets") is not None:
            from tqdm.notebook import tqdm as notebook_tqdm

            with contextlib.suppress(ImportError):  # ipywidgets too old for tqdm: the line below
                return _tqdm_update(notebook_tqdm(total=total, initial=initial, desc=name, unit="unit"))
        return _display_line(total, initial, name)
    if sys.stderr.isatty():
        from tqdm.std import tqdm

        return _tqdm_update(tqdm(total=total, initial=initial, desc=name, unit="unit"))
    return _final_line(total, initial, name)


def _tqdm_update(bar: Any) -> Callable[[int | None], None]:
    def update(n: int | None) -> None:
        if n is None:
            bar.close()
        else:
            bar.update(n)

    return update


def _bar_text(name: str, done: int, total: int, initial: int, seconds: float) -> str:
    resumed = f", {initial} resumed" if initial else ""
    return f"{name}: {done}/{total} work units{resumed} in {seconds:.1f} s"


def _display_line(total: int, initial: int, name: str) -> Callable[[int | None], None]:
    """One output in a notebook: a text line replaced in place (at most 5 times a second)."""
    try:
        from IPython.display import display
    except ImportError:  # an IPython without its display machinery: the line at the end
        return _final_line(total, initial, name)

    t0 = time.perf_counter()
    state = {"done": initial, "shown": t0}
    first = {"text/plain": _bar_text(name, initial, total, initial, 0.0)}
    handle = display(first, raw=True, display_id=True)

    def update(n: int | None) -> None:
        now = time.perf_counter()
        if n is not None:
            state["done"] += n
            if now - state["shown"] < 0.2:
                return
        state["shown"] = now
        if handle is not None:
            handle.update(
                {"text/plain": _bar_text(name, int(state["done"]), total, initial, now - t0)}, raw=True
            )

    return update


def _final_line(total: int, initial: int, name: str) -> Callable[[int | None], None]:
    """One line on stderr when the run ends (no carriage returns in a log file or a pipe)."""
    t0 = time.perf_counter()
    done = [initial]

    def update(n: int | None) -> None:
        if n is not None:
            done[0] += n
            return
        print(_bar_text(name, done[0], total, initial, time.perf_counter() - t0), file=sys.stderr, flush=True)

    return update


def run_trial(
    design: Design | str | Path, *, cell: int, trial: int, entropy: int, spawn_key: tuple[int, ...] = ()
) -> pd.DataFrame:
    """Replay one (cell, trial) alone, e.g. the one a :class:`StudyError` names.

    Parameters
    ----------
    design : Design, str or path
        The design, or a study file or built-in study name.
    cell : int
        The grid cell, in ``[0, number of cells)``.
    trial : int
        The trial, in ``[0, design.trials)``.
    entropy : int
        The run's root seed entropy (``provenance["entropy"]``; a string of digits is accepted).
    spawn_key : tuple of int, default=()
        The run's root spawn key (``provenance["spawn_key"]``).

    Returns
    -------
    pandas.DataFrame
        Kernel designs: the ratios estimate/truth per estimator and pair; attention designs: the
        squared error of each query's output per estimator.
    """
    design = _resolve_design(design, False, None)
    n_cells = len(design.cells())
    for name, value, top in (("cell", cell, n_cells), ("trial", trial, design.trials)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value < top:
            raise InvalidParameterError(
                f"`{name}` must be an integer in [0, {top}) for this design ({n_cells} cells, "
                f"{design.trials} trials). Got {value!r} instead."
            )
    if isinstance(entropy, str) and entropy.strip().isdigit():
        entropy = int(entropy)  # as recorded in a provenance
    if isinstance(entropy, bool) or not isinstance(entropy, numbers.Integral) or entropy < 0:
        raise InvalidParameterError(
            f"`entropy` must be a non-negative integer (a run's provenance['entropy']). Got {entropy!r} instead."
        )
    try:
        key = tuple(int(k) for k in spawn_key)
        if any(k < 0 for k in key) or any(isinstance(k, bool) for k in spawn_key):
            raise ValueError
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"`spawn_key` must be a sequence of non-negative integers (a run's provenance['spawn_key']). "
            f"Got {spawn_key!r} instead."
        ) from None
    return replay_trial(design, int(cell), int(trial), int(entropy), key)
