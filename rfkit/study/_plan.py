"""Planning a study run: the arguments checked, the work units listed, nothing computed or written.

:func:`plan_run` takes the arguments of :func:`rfkit.study.run` and returns a frozen
:class:`RunPlan`: the design (profile, trial count and backend applied), every work unit as a
:class:`~rfkit.study._messages.UnitTask`, the executor, the run folder, the root seed and the
options. The runner (:mod:`rfkit.study._runner`) then executes and finishes it.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from pathlib import Path
from typing import Any

import numpy as np

from .._backend import backend_for
from .._params import check_int
from .._random import as_seed_sequence
from ..exceptions import InvalidParameterError
from ._builtin import find_study
from ._cell_data import bind_source
from ._data_arrays import bind_arrays
from ._design import Design, load_design
from ._messages import UnitTask
from ._plain import workers_can_import
from ._probes import probe_design
from ._records import registered_modules
from ._runfolder import RunFolder
from ._units import n_chunks

__all__ = ["plan_run", "RunPlan", "RunOptions", "ExecutorChoice", "EXECUTORS"]

EXECUTORS = ("serial", "processes", "dask")


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


@dataclasses.dataclass(frozen=True)
class ExecutorChoice:
    """Where a run's work units are computed.

    Attributes
    ----------
    name : {"serial", "processes", "dask"} or dask.distributed.Client
        The executor.
    workers : int or None
        Worker processes asked for (``"processes"``, a local Dask cluster).
    scheduler : str or None
        Address of a Dask scheduler.
    """

    name: Any = "serial"
    workers: int | None = None
    scheduler: str | None = None

    @property
    def label(self) -> str:
        """The executor as the provenance records it (a Client by its class name)."""
        return self.name if isinstance(self.name, str) else type(self.name).__name__

    def workers_used(self, n_tasks: int) -> int | None:
        """Worker processes a call with ``n_tasks`` units starts (1 for serial; None where a Dask
        scheduler decides)."""
        if self.name == "serial":
            return 1
        if not isinstance(self.name, str) or self.scheduler:
            return None
        return min(self.workers or os.cpu_count() or 1, max(n_tasks, 1))


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a run treats failures, progress and its folder (as :func:`run` documents them)."""

    on_error: str = "raise"
    progress: bool | None = None
    resume: bool = False
    lock_timeout: float | None = 0.0
    overwrite: bool = False
    keep_parts: bool = False


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """A checked run, before anything is computed or written: what :func:`plan_run` returns.

    Attributes
    ----------
    design : Design
        The design with its profile, trial count and backend applied.
    design_dict : dict
        ``design.to_dict()``, what work units carry.
    units : tuple of UnitTask
        Every work unit of the run, in (cell, chunk) order.
    n_chunks : int
        Work units per cell.
    executor : ExecutorChoice
        Where the units run.
    out : Path or None
        The run folder (None: nothing is saved).
    entropy : int
        Entropy of the root seed (recorded as a decimal string).
    spawn_key : tuple of int
        Spawn key of the root seed.
    backend : Backend
        The resolved array backend and device of the estimates.
    options : RunOptions
        Failures, progress bar, resume and lock wait.
    """

    design: Design
    design_dict: dict[str, Any]
    units: tuple[UnitTask, ...]
    n_chunks: int
    executor: ExecutorChoice
    out: Path | None
    entropy: int
    spawn_key: tuple[int, ...]
    backend: Any
    options: RunOptions

    def folder(self) -> RunFolder | None:
        """The run folder (not opened yet: entering it takes the lock and reads what it holds)."""
        if self.out is None:
            return None
        return RunFolder(
            self.out,
            self.design,
            self.entropy,
            self.spawn_key,
            self.n_chunks,
            resume=self.options.resume,
            lock_timeout=self.options.lock_timeout,
            overwrite=self.options.overwrite,
        )

    def resume_hint(self) -> str:
        """What an interrupted run's error says about its finished units."""
        if self.out is None:
            return "Nothing was saved (no `out` folder); pass out=FOLDER to make a run resumable."
        return (
            f"The finished units are kept in {self.out}: the run is resumable, rerun with resume=True "
            "and the same arguments to continue."
        )


def plan_run(
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
) -> RunPlan:
    """Check the arguments of :func:`run` (same meaning, same errors) and plan the run.

    Starts no worker and touches no folder.
    """
    design = _resolve_design(design, quick, trials)
    design, arrays = bind_arrays(design, data, out, resume)  # source "arrays": bound to their SHA-256
    if backend is not None or device is not None or draws is not None:
        design = design.on_backend(backend, device, draws)
    design = bind_source(design)  # a source that binds its data's identity (a model's files) into the design
    bk = backend_for(design.backend, design.device)  # fails early, naming a missing library
    if on_error is None:
        on_error = design.on_error
    if on_error not in ("raise", "record"):
        raise InvalidParameterError(f"`on_error` must be 'raise' or 'record'. Got {on_error!r} instead.")
    choice = _executor_choice(executor, workers, scheduler)
    options = _options(on_error, progress, resume, out, lock_timeout, overwrite, keep_parts)
    if choice.name != "serial":
        reason = workers_can_import(design.estimators)
        if reason is not None:
            raise InvalidParameterError(f"executor={choice.name!r}: {reason}")
    root = _root_seed(rng, design.seed)
    entropy, spawn_key = int(root.entropy), tuple(int(k) for k in root.spawn_key)  # type: ignore[arg-type]
    dd, chunks = design.to_dict(), n_chunks(design)
    imports = registered_modules() if choice.name != "serial" else ()
    units = tuple(
        UnitTask(dd, c, k, entropy, spawn_key, on_error, imports, arrays)
        for c in range(len(design.cells()))
        for k in range(chunks)
    )
    out = Path(out) if out is not None else None
    return RunPlan(design, dd, units, chunks, choice, out, entropy, spawn_key, bk, options)


def _executor_choice(executor: Any, workers: int | None, scheduler: str | None) -> ExecutorChoice:
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
    return ExecutorChoice(executor, workers, scheduler)


def _options(
    on_error: str,
    progress: bool | None,
    resume: bool,
    out: str | Path | None,
    lock_timeout: float | None,
    overwrite: bool = False,
    keep_parts: bool = False,
) -> RunOptions:
    if progress is not None and not isinstance(progress, bool):
        raise InvalidParameterError(f"`progress` must be None, True or False. Got {progress!r} instead.")
    if not isinstance(resume, bool):
        raise InvalidParameterError(f"`resume` must be True or False. Got {resume!r} instead.")
    if resume and out is None:
        raise InvalidParameterError("`resume=True` needs `out`, the folder of the interrupted run.")
    for name, value in (("overwrite", overwrite), ("keep_parts", keep_parts)):
        if not isinstance(value, bool):
            raise InvalidParameterError(f"`{name}` must be True or False. Got {value!r} instead.")
    if overwrite and resume:
        raise InvalidParameterError(
            "`overwrite` and `resume` cannot both be True: `resume` continues the run in `out`, `overwrite` "
            "replaces it. Got overwrite=True, resume=True."
        )
    if overwrite and out is None:
        raise InvalidParameterError("`overwrite=True` needs `out`, the folder of the run to replace.")
    return RunOptions(on_error, progress, resume, lock_timeout, overwrite, keep_parts)
