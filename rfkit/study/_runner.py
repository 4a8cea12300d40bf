"""Study runner: cells distributed over an executor, results written per cell, resumable."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .._random import as_seed_sequence
from ..exceptions import InvalidParameterError, StudyError
from ._cell import run_cell, trial_streams
from ._design import Design, load_design
from ._results import StudyResult, atomic_parquet, atomic_text

__all__ = ["run", "run_trial", "EXECUTORS"]

EXECUTORS = ("serial", "processes", "dask")
#: optional per-cell tables besides trials and pairs (not part of the reproducible summary)
EXTRA_TABLES = ("timings", "data_stats")


def _versions() -> dict[str, str]:
    import scipy

    from .. import __version__

    return {
        "rfkit": __version__,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "pandas": pd.__version__,
    }


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


def _prepare_out(out: Path, design: Design, root: np.random.SeedSequence, resume: bool) -> set[int]:
    """Create/validate the output folder; return the cells already complete (on resume)."""
    cells_dir = out / "cells"
    manifest = out / "run.json"
    ident = {"design_hash": design.hash(), "entropy": str(root.entropy), "spawn_key": list(root.spawn_key)}
    try:
        cells_dir.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise StudyError(f"output directory {str(out)!r} is not writable: {exc.strerror or exc}") from None
    done = set()
    for f in cells_dir.glob("cell-*.trials.parquet"):
        c = int(f.name.split("-")[1].split(".")[0])
        if (cells_dir / f"cell-{c:06d}.pairs.parquet").exists():
            done.add(c)
    if manifest.exists():
        old = json.loads(manifest.read_text())
        same = {k: old.get(k) for k in ident} == ident
        if not resume and (done or (out / "trials.parquet").exists()):
            raise StudyError(
                f"{out} already holds results of a study run; pass resume=True (--resume) to continue "
                "it, or choose another output directory. Nothing was overwritten."
            )
        if resume and not same:
            raise StudyError(
                f"cannot resume in {out}: it holds a run of a different design or seed "
                f"(design hash {old.get('design_hash')} vs {ident['design_hash']}, entropy "
                f"{old.get('entropy')} vs {ident['entropy']}). Nothing was overwritten."
            )
    elif resume and done:
        raise StudyError(f"cannot resume in {out}: cell files exist but run.json is missing.")
    atomic_text(manifest, json.dumps({**ident, "design": design.to_dict()}, indent=2, default=str))
    return done


def _iter_results(
    tasks: list[tuple[Any, ...]], executor: Any, workers: int | None, scheduler: str | None
) -> Iterable[dict[str, Any]]:
    """Yield cell results as they finish."""
    if executor == "serial":
        for t in tasks:
            yield run_cell(*t)
        return
    if executor == "processes":
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        n = workers or os.cpu_count() or 1
        pool = ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"))
        try:
            futs = [pool.submit(run_cell, *t) for t in tasks]
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
                cluster = LocalCluster(
                    n_workers=workers or os.cpu_count() or 1,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                )
                client = own_client = Client(cluster)
        except (OSError, TimeoutError) as exc:
            raise StudyError(f"cannot reach the Dask scheduler {scheduler!r}: {exc}") from None
    try:
        dfuts: list[Any] = [client.submit(run_cell, *t, pure=False) for t in tasks]
        for f in das_completed(dfuts):
            yield f.result()
    finally:
        if own_client is not None:
            own_client.close()
        if cluster is not None:
            cluster.close()


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
    on_error: str = "raise",
    progress: bool | None = None,
) -> StudyResult:
    """Run a study: every cell of the grid, every estimator, all trials.

    Parameters
    ----------
    design : Design or path
        A :class:`Design` or a TOML study file.
    rng : {None, int, SeedSequence, Generator}, optional
        Root of all randomness; defaults to the design's ``seed`` (or OS entropy, recorded).
        Trial ``t`` of cell ``c`` uses ``SeedSequence(root.entropy, spawn_key=root.spawn_key +
        (c, t))``, so results do not depend on the executor, worker count or order.
    executor : {"serial", "processes", "dask"} or dask.distributed.Client, default="serial"
        Where cells run. ``"processes"`` uses a local pool of ``workers`` processes;
        ``"dask"`` a local cluster of ``workers`` processes, or the scheduler at ``scheduler``.
    workers : int, optional
        Number of worker processes (default: CPU count).
    scheduler : str, optional
        Dask scheduler address (implies ``executor="dask"``).
    out : path, optional
        Folder for results. Each finished cell is written at once (atomically), so an
        interrupted run loses at most the cells in progress; final tables are written at the end.
    resume : bool, default=False
        Continue an interrupted run in ``out``: completed cells are read back, the others
        computed; the final tables are identical to those of an uninterrupted run. Refused if
        ``out`` holds a different design or seed.
    quick : bool, default=False
        Apply the design's ``[quick]`` profile.
    trials : int, optional
        Override the number of trials.
    on_error : {"raise", "record"}, default="raise"
        A failing trial raises :class:`~rfkit.exceptions.StudyError` naming its (cell, trial),
        or is recorded with ``status="error:<Exception>"`` and counted in ``summary().n_failed``.
    progress : bool, optional
        Show a progress bar (default: when stderr is a terminal).

    Returns
    -------
    StudyResult
    """
    design = _resolve_design(design, quick, trials)
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
    if resume and out is None:
        raise InvalidParameterError("`resume=True` needs `out`, the folder of the interrupted run.")
    root = as_seed_sequence(design.seed if rng is None and design.seed is not None else rng)
    entropy, spawn_key = int(root.entropy), tuple(int(k) for k in root.spawn_key)  # type: ignore[arg-type]
    cells = design.cells()
    out_path = Path(out) if out is not None else None
    done: set[int] = set()
    if out_path is not None:
        done = _prepare_out(out_path, design, root, resume)
    results: dict[int, dict[str, Any]] = {}
    if out_path is not None:
        for c in sorted(done):
            results[c] = {
                "trials": pd.read_parquet(out_path / "cells" / f"cell-{c:06d}.trials.parquet"),
                "pairs": pd.read_parquet(out_path / "cells" / f"cell-{c:06d}.pairs.parquet"),
            }
            for extra in EXTRA_TABLES:
                tpath = out_path / "cells" / f"cell-{c:06d}.{extra}.parquet"
                if tpath.exists():
                    results[c][extra] = pd.read_parquet(tpath)
    todo = [c for c in range(len(cells)) if c not in done]
    dd = design.to_dict()
    tasks = [(dd, c, entropy, spawn_key, on_error) for c in todo]
    t0 = time.perf_counter()
    show = sys.stderr.isatty() if progress is None else progress
    bar = _progress(len(cells), len(done), show, design.name)
    try:
        for res in _iter_results(tasks, executor, workers, scheduler):
            c = res["cell"]
            results[c] = res
            if out_path is not None:
                for extra in EXTRA_TABLES:  # before the pairs file, which marks the cell complete
                    if extra in res:
                        atomic_parquet(res[extra], out_path / "cells" / f"cell-{c:06d}.{extra}.parquet")
                atomic_parquet(res["trials"], out_path / "cells" / f"cell-{c:06d}.trials.parquet")
                atomic_parquet(res["pairs"], out_path / "cells" / f"cell-{c:06d}.pairs.parquet")
            bar(1)
    finally:
        bar(None)
    elapsed = time.perf_counter() - t0
    grid = pd.DataFrame(cells).assign(cell=np.arange(len(cells)))
    trials_df = pd.concat([results[c]["trials"] for c in range(len(cells))], ignore_index=True)
    pairs_df = pd.concat([results[c]["pairs"] for c in range(len(cells))], ignore_index=True)
    trials_df = _with_grid(trials_df, grid)
    pairs_df = _with_grid(pairs_df, grid)
    provenance = {
        "design": dd,
        "design_hash": design.hash(),
        "design_source": design.source,
        "entropy": str(entropy),
        "spawn_key": list(spawn_key),
        "executor": executor if isinstance(executor, str) else type(executor).__name__,
        "workers": workers,
        "cells": len(cells),
        "cells_resumed": len(done),
        "seconds": elapsed,
        "versions": _versions(),
        "machine": _machine(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
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
    if out_path is not None:
        result.save(out_path)
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

    bar = tqdm(total=total, initial=initial, desc=name, unit="cell")

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
    from ._cell import _evaluate, cell_data
    from ._estimators import build_feature_map

    design = _resolve_design(design, False, None)
    cells = design.cells()
    stream = trial_streams(entropy, spawn_key, cell, range(trial, trial + 1))
    rows = []
    if design.kind == "attention":
        from .. import attention
        from ._estimators import build_attention_estimator

        Q, K, V = cell_data(design, cells[cell], entropy, spawn_key)  # type: ignore[misc]
        exact = attention.softmax(Q, K, V)
        for est in design.estimators:
            estimator = build_attention_estimator(design.estimator_params(est, cells[cell]))
            out = estimator(Q, K, V, rng=stream[0]).output
            rows.append(
                pd.DataFrame(
                    {
                        "estimator": design._label(est),
                        "query": np.arange(out.shape[-2]),
                        "sq_err": np.mean((out - exact) ** 2, axis=-1),
                    }
                )
            )
        return pd.concat(rows, ignore_index=True)
    X, Y = cell_data(design, cells[cell], entropy, spawn_key)
    log_truth = np.sum(X * Y, axis=1)
    for est in design.estimators:
        fm = build_feature_map(est["map"], design.estimator_params(est, cells[cell]))
        if fm.needs_data:
            fm = fm.fit(X, Y)
        r = _evaluate(fm, X, Y, log_truth, stream)[0]
        rows.append(pd.DataFrame({"estimator": design._label(est), "pair": np.arange(len(r)), "ratio": r}))
    return pd.concat(rows, ignore_index=True)
