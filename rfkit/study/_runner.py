"""Study runner: work units (cell, chunk of trials) over an executor, verified parts, resumable."""

from __future__ import annotations

import contextlib
import importlib.util
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

from .._backend import backend_for
from .._params import check_int
from .._random import as_seed_sequence
from .._version import __version__
from ..exceptions import InvalidParameterError
from ._builtin import find_study
from ._cell import finalize_cell, n_chunks, replay_trial, run_unit
from ._design import Design, load_design
from ._device_draws import numpy_draws
from ._executors import _iter_results, worker_env
from ._plain import workers_can_import
from ._probes import probe_design
from ._records import registered_modules
from ._results import StudyResult
from ._runfolder import RunFolder

__all__ = ["run", "run_trial", "EXECUTORS", "worker_env"]

EXECUTORS = ("serial", "processes", "dask")
#: optional per-cell tables besides trials and pairs (not part of the reproducible summary)
EXTRA_TABLES = ("timings", "data_stats")


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


def _resolve_design(design: Design | str | Path, quick: bool, trials: int | None) -> Design:
    if isinstance(design, str):
        design = find_study(design)  # a built-in study by name ("performer-mse"), else a path
    if isinstance(design, Path):
        design = load_design(design)
    if not isinstance(design, Design):
        raise InvalidParameterError(
            f"`design` must be a Design, a path to a TOML file or the name of a built-in study. "
            f"Got {type(design).__name__}."
        )
    if quick:
        design = design.quick_profile()
    if trials is not None:
        design = design.with_trials(check_int(trials, "trials", "rk.study.run", low=1))
    probe_design(design)  # maps and estimators of your own, on probe data: before any unit or folder
    return design


def _root_seed(rng: Any, design_seed: int | None) -> np.random.SeedSequence:
    """The root seed of a run, with one integer entropy that is recorded and can be passed back.

    ``rng`` is None (the design's ``seed``, or fresh OS entropy), an int (or the decimal string
    recorded in a provenance), a SeedSequence or a Generator. A Generator contributes one draw
    (so it advances, and the same Generator state gives the same run); a SeedSequence whose
    entropy is a list of ints is reduced to one 128-bit int drawn from it (deterministically).
    """
    if rng is None:
        rng = design_seed
    if isinstance(rng, str) and rng.strip().isdigit():
        rng = int(rng)
    if isinstance(rng, np.random.Generator):
        rng = int(rng.integers(0, 2**63))
    root = as_seed_sequence(rng)
    if not isinstance(root.entropy, numbers.Integral):
        words = root.generate_state(4, np.uint32)
        entropy = sum(int(w) << (32 * i) for i, w in enumerate(words))
        root = np.random.SeedSequence(entropy, spawn_key=root.spawn_key)
    return root


class _Merger:
    """Collects finished units; a cell's tables are built once all its chunks are in (chunk order)."""

    def __init__(self, design_dict: dict[str, Any], chunks: int, entropy: int, spawn_key: tuple[int, ...]):
        self.dd, self.chunks, self.entropy, self.spawn_key = design_dict, chunks, entropy, spawn_key
        self.cells: dict[int, dict[str, Any]] = {}
        self.pending: dict[int, dict[int, dict[str, Any]]] = {}
        self.have: set[tuple[int, int]] = set()

    def add(self, cell: int, chunk: int, final: bool, tables: dict[str, Any]) -> None:
        self.have.add((cell, chunk))
        if final:
            self.cells[cell] = tables
            return
        parts = self.pending.setdefault(cell, {})
        parts[chunk] = tables
        if len(parts) == self.chunks:
            ordered = [parts[k] for k in range(self.chunks)]
            self.cells[cell] = finalize_cell(self.dd, cell, ordered, self.entropy, self.spawn_key)
            del self.pending[cell]


def run(
    design: Design | str | Path,
    *,
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
) -> StudyResult:
    """Run a study: every cell of the grid, every estimator, all trials.

    The unit of work is (cell, chunk of ``design.chunk_trials`` trials), so ``workers``
    processes are all busy even when the study has fewer cells than workers.

    Parameters
    ----------
    design : Design, path or str
        A :class:`Design`, a TOML study file, or the name of a built-in study (``"performer-mse"``,
        as ``rfkit list`` shows them).
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
        ``out`` holds a different design, seed or backend.
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
        or in a Jupyter notebook. In a notebook the bar is a widget when ``ipywidgets`` is
        installed and a text bar otherwise (never a warning about missing widgets).
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
    design = _resolve_design(design, quick, trials)
    if backend is not None or device is not None or draws is not None:
        design = design.on_backend(backend, device, draws)
    bk = backend_for(design.backend, design.device)  # fails early, naming a missing library
    if on_error is None:
        on_error = design.on_error
    if on_error not in ("raise", "record"):
        raise InvalidParameterError(f"`on_error` must be 'raise' or 'record'. Got {on_error!r} instead.")
    if scheduler is not None:
        executor = "dask"
    if isinstance(executor, str) and executor not in EXECUTORS:
        raise InvalidParameterError(
            f"`executor` must be one of {list(EXECUTORS)} or a dask Client. Got {executor!r}."
        )
    if workers is not None:
        workers = check_int(workers, "workers", "rk.study.run", low=1)
    if executor == "serial" and workers not in (None, 1):
        raise InvalidParameterError(
            f"`workers` = {workers!r} needs executor='processes' (or 'dask'): executor='serial' computes "
            f"every work unit in this process. Got workers={workers!r} with executor='serial'."
        )
    if progress is not None and not isinstance(progress, bool):
        raise InvalidParameterError(f"`progress` must be None, True or False. Got {progress!r} instead.")
    if not isinstance(resume, bool):
        raise InvalidParameterError(f"`resume` must be True or False. Got {resume!r} instead.")
    if resume and out is None:
        raise InvalidParameterError("`resume=True` needs `out`, the folder of the interrupted run.")
    if executor != "serial":
        reason = workers_can_import(design.estimators)
        if reason is not None:
            raise InvalidParameterError(f"executor={executor!r}: {reason}")
    root = _root_seed(rng, design.seed)
    entropy, spawn_key = int(root.entropy), tuple(int(k) for k in root.spawn_key)  # type: ignore[arg-type]
    cells = design.cells()
    chunks = n_chunks(design)
    dd = design.to_dict()
    merger = _Merger(dd, chunks, entropy, spawn_key)
    folder = None
    if out is not None:
        folder = RunFolder(
            Path(out), design, entropy, spawn_key, chunks, resume=resume, lock_timeout=lock_timeout
        )
    with folder if folder is not None else contextlib.nullcontext():
        if folder is not None:
            for (c, k), (final, tables) in sorted(folder.resumed.items()):
                merger.add(c, k, final, tables)
        n_resumed = len(merger.have)
        imports = registered_modules() if executor != "serial" else ()
        tasks = [
            (dd, c, k, entropy, spawn_key, on_error, imports)
            for c in range(len(cells))
            for k in range(chunks)
            if (c, k) not in merger.have
        ]
        t0 = time.perf_counter()
        bar = _progress(len(cells) * chunks, n_resumed, progress, design.name)
        pids = set()
        hint = (
            f"The finished units are kept in {out}: the run is resumable, rerun with resume=True "
            "(--resume) and the same arguments to continue."
            if out is not None
            else "Nothing was saved (no `out` folder); pass out=FOLDER to make a run resumable."
        )
        try:
            for res in _iter_results(run_unit, tasks, executor, workers, scheduler, hint):
                pids.add(res["pid"])
                if folder is not None:
                    folder.record(res["cell"], res["chunk"], res["final"], res["tables"])
                merger.add(res["cell"], res["chunk"], res["final"], res["tables"])
                bar(1)
        finally:
            bar(None)
        elapsed = time.perf_counter() - t0
        results = merger.cells
        grid = pd.DataFrame(cells).assign(cell=np.arange(len(cells)))
        trials_df = pd.concat([results[c]["trials"] for c in range(len(cells))], ignore_index=True)
        pairs_df = pd.concat([results[c]["pairs"] for c in range(len(cells))], ignore_index=True)
        trials_df = _with_grid(trials_df, grid)
        pairs_df = _with_grid(pairs_df, grid)
        resumed_cells = sum(all((c, k) in merger.have for k in range(chunks)) for c in range(len(cells)))
        provenance = {
            "design": dd,
            "design_hash": design.hash(),
            "design_source": design.source,
            "entropy": str(entropy),
            "spawn_key": list(spawn_key),
            "executor": executor if isinstance(executor, str) else type(executor).__name__,
            "workers": _workers_used(executor, workers, scheduler, len(tasks)),
            "cells": len(cells),
            "cells_resumed": int(resumed_cells) if folder is not None and n_resumed else 0,
            "chunk_trials": design.chunk_trials,
            "units": len(cells) * chunks,
            "units_resumed": n_resumed,
            "worker_processes": len(pids),  # distinct processes that computed this run's units
            "repaired": list(folder.repaired) if folder is not None else [],
            "seconds": elapsed,
            "versions": _versions(bk),
            "machine": _machine(),
            "backend": design.backend,
            "draws": design.draws,
            "numpy_draws": numpy_draws(design) if design.draws == "backend" else [],
            "device": str(bk.device),
            "device_name": bk.device_name,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        if folder is not None and folder.lock.taken_over:
            provenance["lock_taken_over"] = folder.lock.taken_over
        extras = {}
        for extra in EXTRA_TABLES:
            if all(extra in results[c] for c in range(len(cells))):
                frames = [results[c][extra] for c in range(len(cells))]
                extras[extra] = _with_grid(pd.concat(frames, ignore_index=True), grid)
        result = StudyResult(
            design=design,
            trials=trials_df,
            pairs=pairs_df,
            provenance=provenance,
            timings=extras.get("timings"),
            data_stats=extras.get("data_stats"),
        )
        if folder is not None:
            folder.write_result(result)
    return result


def _with_grid(df: pd.DataFrame, grid: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in grid.columns if c != "cell"]
    merged = df.drop(columns=[c for c in cols if c in df.columns]).merge(grid, on="cell", how="left")
    front = [c for c in ("cell", "estimator") if c in merged.columns] + cols
    return merged[front + [c for c in merged.columns if c not in front]]


def _workers_used(executor: Any, workers: int | None, scheduler: str | None, n_tasks: int) -> int | None:
    """Worker processes this run started (1 for serial; None where a Dask scheduler decides)."""
    if executor == "serial":
        return 1
    if not isinstance(executor, str) or scheduler:
        return None
    return min(workers or os.cpu_count() or 1, max(n_tasks, 1))


def _in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (the test tqdm.auto makes)."""
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None  # type: ignore[attr-defined]
        return shell is not None and "IPKernelApp" in shell.config
    except Exception:  # noqa: BLE001 - any odd IPython counts as not a notebook
        return False


def _progress(total: int, initial: int, show: bool | None, name: str) -> Callable[[int | None], None]:
    """A progress bar: tqdm.auto's choice (a widget in a notebook with ipywidgets, else text), no warning."""
    notebook = _in_notebook()
    if show is None:
        show = sys.stderr.isatty() or notebook
    if not show:
        return lambda n: None
    from tqdm.std import tqdm

    bar = None
    if notebook and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.notebook import tqdm as notebook_tqdm

        with contextlib.suppress(ImportError):  # ipywidgets too old for tqdm: the text bar
            bar = notebook_tqdm(total=total, initial=initial, desc=name, unit="unit")
    if bar is None:
        bar = tqdm(total=total, initial=initial, desc=name, unit="unit")

    def update(n: int | None) -> None:
        if n is None:
            bar.close()
        else:
            bar.update(n)

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
