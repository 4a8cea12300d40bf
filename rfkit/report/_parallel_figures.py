"""The figures of a report drawn in worker processes, one figure per task (``rfkit run --workers K``).

Each worker reads the saved tables of the run folder, builds the same figure plan as the lead
(:func:`~rfkit.report._figures.figure_plan`), draws the figure it is given by name and saves it
(PDF and PNG, atomically); the lead writes the report's text meanwhile and then collects the
files' records in plan order, so the report and the manifest are those of a serial report.
Workers fork from rfkit's fork server (:func:`rfkit._parallel.process_context`), which imports
the plotting code once when :func:`preload_for_workers` was called before the server started
(the command line does so).
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import warnings
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pandas as pd

from .._parallel import adopt_lead_state, lead_state, process_context, resolve_threads, shutdown_pool
from ..exceptions import RFKitWarning
from ..plots import paper_size, save_figure, set_paper_size
from ..study import Design
from ..study.outputs import Record, ensure_dir, file_record, write_error
from ._figures import declared_kinds, figure_plan
from ._sections import finite_rows
from ._shown import figure_alt, figure_caption

__all__ = [
    "PRELOAD",
    "preload_for_workers",
    "figure_names_to_draw",
    "FiguresInWorkers",
    "save_report_figure",
    "MIN_PARALLEL",
    "figure_workers",
]

#: modules a worker needs imported: matplotlib (Agg), the plotting code and the study tables
PRELOAD = ["rfkit.report._worker_warmup"]
#: fewer figures than this are drawn in the lead (a pool costs more than it saves)
MIN_PARALLEL = 2


def preload_for_workers() -> None:
    """Ask rfkit's fork server to import the plotting code when it starts (before the first pool).

    ``rfkit run`` starts the server itself, first thing (:func:`rfkit._parallel.start_process_server`
    with the same module), so that its imports overlap the command's.
    """
    process_context(PRELOAD)


def figure_workers(workers: int | None) -> int:
    """Return the number of processes that draw a report's figures: ``workers``, else as many as rfkit's threads.

    ``None`` (``rfkit run`` without ``--workers``) follows :func:`rfkit.threads` and
    ``RFKIT_NUM_THREADS`` (all CPUs by default), as the study's own computations do, where
    workers fork from a process server; without one (Windows) each worker would be a fresh
    interpreter importing matplotlib, and ``None`` means 1.

    Parameters
    ----------
    workers : int or None
        The number asked for; None: as described above.

    Returns
    -------
    int
        The number of processes.
    """
    if workers is None and "forkserver" not in multiprocessing.get_all_start_methods():
        return 1  # pragma: no cover - Windows
    return resolve_threads(workers, "write_report")


def _inputs(out: Path, design: Any) -> tuple[pd.DataFrame, pd.DataFrame, Any]:
    summary = finite_rows(pd.read_parquet(out / "summary.parquet"))
    theory_path = out / "theory.csv"
    theory = pd.read_csv(theory_path) if theory_path.exists() else pd.DataFrame()

    def table(name: str) -> pd.DataFrame | None:
        path = out / f"{name}.parquet"
        return pd.read_parquet(path) if path.exists() else None

    return summary, theory, table


def figure_names_to_draw(design: Any, out: Path) -> list[tuple[str, str]]:
    """``(kind, name)`` of every figure the report draws, in order, none drawn."""
    summary, theory, table = _inputs(out, design)
    return [
        (kind, name)
        for kind in declared_kinds(design)
        for name, _ in figure_plan(kind, design, summary, theory, table)
    ]


def _draw_one(
    task: tuple[dict[str, Any], str, str, str, str | None],
) -> tuple[str, dict[str, Record], tuple[str, str]]:
    """Worker: draw and save figure ``name`` of kind ``kind``; the PNG's path, both files' records
    and the figure's alt text and caption.

    The design is the lead's, ``source`` included (``to_dict`` leaves it out): captions name a
    quick or other profile from it. The worker has the lead's import path, environment and
    folder (:func:`~rfkit._parallel.adopt_lead_state`), and imports the design's ``imports``
    as the lead did: legends show the display names of the records they register.
    """
    dd, folder, kind, name, size = task
    out = Path(folder)
    design = Design.trusted(dd)
    for module in design.imports:  # they register records whose display names the figure shows
        importlib.import_module(module)
    if size is not None:
        set_paper_size(size)
    summary, theory, table = _inputs(out, design)
    draw = dict(figure_plan(kind, design, summary, theory, table))[name]
    files: dict[str, Record] = {}
    shown: dict[str, tuple[str, str]] = {}
    png = save_report_figure(draw(None), out, name, files, shown)
    return str(png), files, shown[name]


def save_report_figure(
    fig: Any, out: Path, name: str, files: dict[str, Record], shown: dict[str, tuple[str, str]] | None = None
) -> Path:
    """Save a figure as PDF and PNG under ``out/figures`` (Agg backend), close it, return the PNG.

    Both files are written atomically and their records added to ``files``; ``shown[name]``
    (where ``shown`` is given) gets the figure's alt text and caption (:func:`figure_alt`,
    :func:`figure_caption`).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    if shown is not None:
        shown[name] = (figure_alt(fig, name), figure_caption(fig))
    ensure_dir(out / "figures")
    try:
        saved = save_figure(fig, out / "figures" / name)
    except OSError as exc:
        raise write_error(out / "figures" / name, exc) from None
    finally:
        plt.close(fig)
    for f in saved:
        files[f.relative_to(out).as_posix()] = file_record(f)
    return saved[1]


class FiguresInWorkers:
    """Figures being drawn in worker processes while the lead goes on (a context manager).

    On entry the figures of ``names`` are handed to ``workers`` processes; :meth:`result` waits
    for them and gives the PNG paths in order and every file's record. Where the pool breaks (a
    worker killed, or one that cannot start: a script without a ``__main__`` guard, which each
    worker re-runs), the figures it did not draw are drawn in the calling process, with an
    :class:`~rfkit.exceptions.RFKitWarning` that says why. Leaving the block before (an error in
    the lead's own work) cancels the figures not yet started and waits for the rest.
    """

    def __init__(self, design: Any, out: Path, names: list[tuple[str, str]], workers: int) -> None:
        dd, size = {**design.to_dict(), "source": design.source}, paper_size()
        self._tasks = [(dd, os.path.abspath(out), kind, name, size) for kind, name in names]
        self._workers = min(workers, len(self._tasks))
        self._pool: Any = None
        self._futures: list[Any] = []
        #: each figure's alt text and caption by name, once :meth:`result` has returned
        self.shown: dict[str, tuple[str, str]] = {}

    def __enter__(self) -> FiguresInWorkers:
        from concurrent.futures import ProcessPoolExecutor

        self._pool = ProcessPoolExecutor(
            max_workers=self._workers,
            mp_context=process_context(PRELOAD),
            initializer=adopt_lead_state,
            initargs=(lead_state(),),
        )
        self._futures = [self._pool.submit(_draw_one, task) for task in self._tasks]
        return self

    def result(self) -> tuple[list[Path], dict[str, Record]]:
        files: dict[str, Record] = {}
        pngs = []
        broken: BaseException | None = None
        for task, future in zip(self._tasks, self._futures):
            try:
                png, recs, words = future.result()
            except BrokenProcessPool as exc:  # a worker died or could not start: this process draws
                broken = broken or exc
                png, recs, words = _draw_one(
                    task
                )  # the same files (a figure's bytes do not depend on its process)
            pngs.append(Path(png))
            self.shown[task[3]] = words
            files.update(recs)
        if broken is not None:
            warnings.warn(
                f"the report's figure worker processes failed ({broken}); the figures they had not "
                "drawn were drawn in this process instead. A script that runs rfkit (rfkit.cli.main, "
                'or write_report with workers > 1) must start it under `if __name__ == "__main__":`, '
                "as Python's multiprocessing requires; --workers 1 or RFKIT_NUM_THREADS=1 draws every "
                "figure in the calling process.",
                RFKitWarning,
                stacklevel=2,
            )
        return pngs, files

    def __exit__(self, *exc: Any) -> None:
        if self._pool is not None:
            shutdown_pool(self._pool, self._futures, cancel=exc[0] is not None)
