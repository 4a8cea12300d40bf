"""Study runner: work units (cell, chunk of trials) over an executor, verified parts, resumable."""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .._backend import backend_for
from .._random import as_seed_sequence
from .._version import __version__
from ..exceptions import InvalidParameterError, StudyError
from ._cell import finalize_cell, n_chunks, replay_trial, run_unit
from ._design import Design, load_design
from ._plain import workers_can_import
from ._records import registered_modules
from ._results import StudyResult
from ._runfolder import RunFolder

__all__ = ["run", "run_trial", "EXECUTORS", "worker_env"]

EXECUTORS = ("serial", "processes", "dask")
#: optional per-cell tables besides trials and pairs (not part of the reproducible summary)
EXTRA_TABLES = ("timings", "data_stats")
#: thread-count variables set in each worker process (rfkit's pool, OpenMP and the BLAS libraries)
THREAD_ENV = (
    "RFKIT_NUM_THREADS",
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


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
    if isinstance(design, (str, Path)):
        design = load_design(design)
    if not isinstance(design, Design):
        raise InvalidParameterError(
            f"`design` must be a Design or a path to a TOML file. Got {type(design).__name__}."
        )
    if quick:
        design = design.quick_profile()
    if trials is not None:
        if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
            raise InvalidParameterError(f"`trials` must be an integer >= 1. Got {trials!r} instead.")
        design = design.with_trials(trials)
    return design


def _worker_threads(workers: int) -> int:
    """Threads per worker process: the machine's CPUs shared out, at least one each."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def worker_env(workers: int) -> dict[str, str]:
    """Thread settings of each worker process, so ``workers`` processes never oversubscribe the cores.

    ``RFKIT_NUM_THREADS`` (rfkit's own thread pool) and the BLAS/OpenMP variables are all set to
    ``max(1, cpus // workers)``.
    """
    n = str(_worker_threads(workers))
    return {name: n for name in THREAD_ENV}


@contextlib.contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    """Set environment variables for processes spawned inside the block; restore them after."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _init_worker(env: dict[str, str], parent: int) -> None:
    """Worker start: thread settings, and exit when the lead process dies (e.g. kill -9).

    Pool workers block on a queue whose write end they hold themselves, so they would outlive
    a killed lead; a daemon thread notices the re-parenting and ends the worker.
    """
    import threading

    os.environ.update(env)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="rfkit-lead-watch", daemon=True).start()


def _iter_results(
    fn: Callable[..., Any],
    tasks: list[tuple[Any, ...]],
    executor: Any,
    workers: int | None,
    scheduler: str | None,
) -> Iterable[Any]:
    """Yield ``fn(*task)`` for every task, in the order they finish."""
    if not tasks:
        return
    if executor == "serial":
        for t in tasks:
            yield fn(*t)
        return
    if executor == "processes":
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        n = min(workers or os.cpu_count() or 1, len(tasks))
        env = worker_env(n)
        # spawned workers inherit the environment at spawn time (during the submits), before
        # they import NumPy; the initializer sets it again for anything read later
        with _environ(env):
            pool = ProcessPoolExecutor(
                max_workers=n,
                mp_context=mp.get_context("spawn"),
                initializer=_init_worker,
                initargs=(env, os.getpid()),
            )
            try:
                futs = [pool.submit(fn, *t) for t in tasks]
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        try:
            for f in as_completed(futs):
                yield f.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return
    # dask: a Client, a scheduler address, or a local cluster
    try:
        from dask.distributed import Client, LocalCluster
        from dask.distributed import as_completed as das_completed
    except ImportError:
        raise InvalidParameterError(
            "executor='dask' needs dask.distributed: pip install 'dask[distributed]'"
        ) from None
    own_client = None
    cluster = None
    if isinstance(executor, Client):
        client = executor
    else:
        try:
            if scheduler:
                client = own_client = Client(scheduler, timeout="5s")
            else:
                n = min(workers or os.cpu_count() or 1, len(tasks))
                cluster = LocalCluster(
                    n_workers=n,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=":0",  # any free port: a fixed one may be taken (and warn)
                    env=worker_env(n),
                )
                client = own_client = Client(cluster)
        except (OSError, TimeoutError) as exc:
            raise StudyError(f"cannot reach the Dask scheduler {scheduler!r}: {exc}") from None
    try:
        dfuts: list[Any] = [client.submit(fn, *t, pure=False) for t in tasks]
        for f in das_completed(dfuts):
            yield f.result()
    finally:
        if own_client is not None:
            own_client.close()
        if cluster is not None:
            cluster.close()


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
) -> StudyResult:
    """Run a study: every cell of the grid, every estimator, all trials.

    The unit of work is (cell, chunk of ``design.chunk_trials`` trials), so ``workers``
    processes are all busy even when the study has fewer cells than workers.

    Parameters
    ----------
    design : Design or path
        A :class:`Design` or a TOML study file.
    rng : {None, int, SeedSequence, Generator}, optional
        Root of all randomness; defaults to the design's ``seed`` (or OS entropy, recorded).
        Trial ``t`` of cell ``c`` uses ``SeedSequence(root.entropy, spawn_key=root.spawn_key +
        (c, t))``, so results do not depend on the executor, worker count or order.
    executor : {"serial", "processes", "dask"} or dask.distributed.Client, default="serial"
        Where work units run. ``"processes"`` uses a local pool of ``workers`` processes;
        ``"dask"`` a local cluster of ``workers`` processes, or the scheduler at ``scheduler``.
        Local worker processes get ``max(1, cpus // workers)`` threads each
        (``RFKIT_NUM_THREADS`` and the BLAS/OpenMP variables), so cores are not oversubscribed.
    workers : int, optional
        Number of worker processes (default: CPU count).
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
        Show a progress bar (default: when stderr is a terminal).
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

    Returns
    -------
    StudyResult
    """
    design = _resolve_design(design, quick, trials)
    if backend is not None or device is not None:
        design = design.on_backend(backend, device)
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
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise InvalidParameterError(f"`workers` must be an integer >= 1. Got {workers!r} instead.")
    if not isinstance(resume, bool):
        raise InvalidParameterError(f"`resume` must be True or False. Got {resume!r} instead.")
    if resume and out is None:
        raise InvalidParameterError("`resume=True` needs `out`, the folder of the interrupted run.")
    if executor != "serial":
        reason = workers_can_import(design.estimators)
        if reason is not None:
            raise InvalidParameterError(f"executor={executor!r}: {reason}")
    root = as_seed_sequence(design.seed if rng is None and design.seed is not None else rng)
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
        show = sys.stderr.isatty() if progress is None else progress
        bar = _progress(len(cells) * chunks, n_resumed, show, design.name)
        pids = set()
        try:
            for res in _iter_results(run_unit, tasks, executor, workers, scheduler):
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
            "workers": workers,
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


def _progress(total: int, initial: int, show: bool, name: str) -> Callable[[int | None], None]:
    if not show:
        return lambda n: None
    from tqdm.auto import tqdm

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

    Kernel designs: the ratios estimate/truth per estimator and pair; attention designs: the
    squared error of each query's output per estimator.
    """
    design = _resolve_design(design, False, None)
    return replay_trial(design, cell, trial, entropy, tuple(spawn_key))
