"""The size of a study, estimated from its design before anything is built or drawn.

A design whose work or memory is far beyond one machine (a typo such as ``trials = 2000000``,
``n_features = [10**9]`` or ``n_tokens = 10**6``) is refused when it is built, with the
estimate, instead of allocating for minutes and dying. The estimate is an upper bound read
from the design's plain values (the largest feature count, dimension and number of rows of
the grid), so it needs no map to be built:

* **work**: multiply-adds of every trial of every estimator in every cell, about
  ``rows x columns x (dim + 2)`` per trial (``rows`` = pairs, or tokens for attention, whose
  exact attention adds ``tokens**2 x dim`` per cell);
* **memory**: the largest array of one work unit (a chunk of trials), about
  ``8 bytes x chunk x (2 rows + dim) x columns``, and the per-trial table of the whole run.

The limits are :data:`MAX_WORK` and :data:`MAX_MEMORY_FRACTION` of the machine's memory;
``allow_large=True`` (``allow_large = true`` in a study file, ``--allow-large`` on the command
line) skips the check for a study that really is that large.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..exceptions import InvalidParameterError

if TYPE_CHECKING:
    from ._design import Design

__all__ = ["StudyTooLargeError", "StudySize", "estimate_size", "check_size", "MAX_WORK", "MAX_CELLS"]

#: multiply-adds above which a study is refused (about a day at 1e10 per second)
MAX_WORK = 1e15
#: grid cells above which a study is refused (every cell is built and checked up front)
MAX_CELLS = 100_000
#: share of the machine's memory one work unit (or the trial table) may take (estimates are upper bounds)
MAX_MEMORY_FRACTION = 1.0
_FALLBACK_MEMORY = 8 * 2**30  # where the machine's memory cannot be read
_TRIAL_ROW_BYTES = 200  # one row of the per-trial table, all columns
_DEFAULT_ROWS = 64  # the sources' default n_pairs / n_tokens
_MODEL_DIM = 64  # real-model data: the largest head dimension


class StudyTooLargeError(InvalidParameterError):
    """A study's estimated work or memory is far beyond the machine (pass ``allow_large=True`` to run it)."""


@dataclasses.dataclass(frozen=True)
class StudySize:
    """The estimated size of a study: ``cells``, ``work`` (multiply-adds), ``unit_bytes``, ``table_bytes``."""

    cells: int
    work: float
    unit_bytes: float
    table_bytes: float


def machine_memory() -> int:
    """Physical memory of this machine in bytes (8 GiB where it cannot be read)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return _FALLBACK_MEMORY


def _largest(d: Design, keys: tuple[str, ...], default: float) -> float:
    """The largest number among ``keys`` of ``[data]``, the grid and the estimators' own values."""
    found: list[float] = []
    sources: list[Mapping[str, Any]] = [d.data, *[e for e in d.estimators if isinstance(e, Mapping)]]
    for src in sources:
        for k in keys:
            v = src.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                found.append(float(v))
    for k in keys:
        for v in d.grid.get(k, []) if isinstance(d.grid, Mapping) else []:
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                found.append(float(v))
    return max(found) if found else default


def estimate_size(d: Design) -> StudySize:
    """Upper bounds of a design's work and memory, from its plain values (nothing is built)."""
    cells = math.prod(len(v) for v in d.grid.values() if isinstance(v, list)) if d.grid else 1
    n_est = max(1, len(d.estimators))
    dim = _largest(d, ("dim",), _MODEL_DIM)
    columns = _largest(d, ("feature_dim", "samples", "n_features"), 1.0)
    if "feature_dim" not in d.grid:  # a map's columns per direction: 2 for sin/cos, degree+1 for sketches
        columns *= 2 * (1 + _largest(d, ("degree", "n"), 1.0))
    if d.kind == "attention":
        rows = _largest(d, ("n_tokens", "max_len"), _DEFAULT_ROWS)
        d_v = _largest(d, ("d_v",), dim)
        per_trial = rows * columns * (2 * dim + d_v + 2)
        per_cell = rows * rows * (dim + d_v)
    else:
        rows = _largest(d, ("n_pairs",), _DEFAULT_ROWS)
        per_trial = rows * columns * (dim + 2)
        per_cell = 0.0
    trials = float(d.trials)
    work = cells * (n_est * trials * per_trial + per_cell)
    chunk = min(float(d.chunk_trials), trials)
    unit = 8.0 * chunk * (2 * rows + dim) * columns + (8.0 * rows * rows if d.kind == "attention" else 0.0)
    table = _TRIAL_ROW_BYTES * cells * n_est * trials
    return StudySize(int(cells), work, unit, table)


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"


def check_size(d: Design, allow_large: bool = False) -> StudySize:
    """Refuse (:class:`StudyTooLargeError`, with the estimate) a design far beyond this machine."""
    size = estimate_size(d)
    if allow_large:
        return size
    limit = MAX_MEMORY_FRACTION * machine_memory()
    how = (
        "If it really is meant to be this large, pass allow_large=True (`allow_large = true` in "
        "the study file, `--allow-large` on the command line)."
    )
    problems = []
    if size.cells > MAX_CELLS:
        problems.append(f"{size.cells} grid cells (limit {MAX_CELLS})")
    if size.work > MAX_WORK:
        problems.append(f"about {size.work:.2g} multiply-adds (limit {MAX_WORK:.0g}, about a day)")
    if size.unit_bytes > limit:
        problems.append(
            f"about {_gib(size.unit_bytes)} for one work unit of {min(d.chunk_trials, d.trials)} trials "
            f"(limit {_gib(limit)}, this machine's memory; a smaller chunk_trials helps)"
        )
    if size.table_bytes > limit:
        problems.append(f"about {_gib(size.table_bytes)} of per-trial results (limit {_gib(limit)})")
    if problems:
        raise StudyTooLargeError(
            f"{d.source}: study {d.name!r} is too large for this machine: {'; '.join(problems)} "
            f"(estimated from `trials` = {d.trials}, the grid and the data sizes). {how}"
        )
    return size
