"""Messages between a study run and its work units: the task, the unit's answer, a cell's tables.

The lead process sends each worker a :class:`UnitTask` (pickled: plain data and a validated
design's ``to_dict()``); the worker answers a :class:`UnitResult`. Its ``tables`` are the
cell's finished :class:`CellTables` when the unit covers the whole cell, else the chunk's
:data:`PartTables` (per-trial arrays and frames by name) that the lead merges, in chunk order,
once every chunk of the cell is in.

In a run folder both are stored as they always were: one part file per name
(``parts/cell-CCCCCC.chunk-KKKKK.NAME.{parquet,npy}``), with the unit's ``final`` flag in
``run.json``; :meth:`CellTables.from_parts` reads a finished cell's files back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pandas as pd

from ..exceptions import StudyError

__all__ = ["PartTables", "UnitTask", "UnitResult", "CellTables", "PartLayoutError"]

#: a chunk's partial results: part name -> ndarray or DataFrame (one part file each)
PartTables = dict[str, Any]


class PartLayoutError(StudyError):
    """The recorded part files of a finished cell do not hold a cell's tables (a run folder's damage)."""


@dataclasses.dataclass(frozen=True)
class UnitTask:
    """One work unit to compute: chunk ``chunk`` of the trials of cell ``cell``, every estimator.

    Attributes
    ----------
    design : dict
        ``Design.to_dict()`` of a validated design (workers rebuild it without the checks).
    cell, chunk : int
        The cell (grid point) and the chunk of its trials.
    entropy : int
        Entropy of the run's root seed.
    spawn_key : tuple of int
        Spawn key of the run's root seed.
    on_error : {"raise", "record"}
        Whether a failing trial raises a :class:`~rfkit.exceptions.StudyError` or is recorded.
    imports : tuple of str
        Modules the worker imports first (those that register records of yours).
    data : QKArrays, optional
        The arrays of a design whose ``data.source`` is ``"arrays"``, passed to the run in memory
        (``rk.study.run(design, data=...)``): the worker holds them for its cells.
    """

    design: dict[str, Any]
    cell: int
    chunk: int
    entropy: int
    spawn_key: tuple[int, ...]
    on_error: str = "raise"
    imports: tuple[str, ...] = ()
    data: Any = None

    @property
    def name(self) -> str:
        """How messages name the unit: ``"work unit (cell C, chunk K)"``."""
        return f"work unit (cell {self.cell}, chunk {self.chunk})"


@dataclasses.dataclass(frozen=True)
class CellTables:
    """The finished tables of one cell.

    Attributes
    ----------
    trials : DataFrame
        One row per (estimator, trial).
    pairs : DataFrame
        One row per (estimator, pair or query).
    timings : DataFrame or None
        Wall time per estimator (not reproducible; attention and drop-in cells).
    data_stats : DataFrame or None
        Statistics of the cell's real data.
    """

    trials: pd.DataFrame
    pairs: pd.DataFrame
    timings: pd.DataFrame | None = None
    data_stats: pd.DataFrame | None = None

    #: tables a cell has beside trials and pairs (kept apart from the reproducible summary)
    EXTRAS = ("timings", "data_stats")

    def as_parts(self) -> PartTables:
        """The tables by name, those present only, in the order their part files are written."""
        return {f.name: v for f in dataclasses.fields(self) if (v := getattr(self, f.name)) is not None}

    @classmethod
    def from_parts(cls, parts: Mapping[str, Any]) -> CellTables:
        """A cell's tables from its part files read back (names as :meth:`as_parts` wrote them).

        Raises
        ------
        PartLayoutError
            When ``trials`` or ``pairs`` is missing or any of the tables is not a DataFrame. Names
            that are no table of a cell are ignored, as the runner always ignored them.
        """
        for name in ("trials", "pairs"):
            if name not in parts:
                raise PartLayoutError(
                    f"no {name!r} table among the cell's part files (found {sorted(parts)})"
                )
        fields = [f.name for f in dataclasses.fields(cls)]
        for name in fields:
            if name in parts and not isinstance(parts[name], pd.DataFrame):
                raise PartLayoutError(
                    f"the cell's {name!r} part must be a table (DataFrame). Got {type(parts[name]).__name__}."
                )
        return cls(**{name: parts[name] for name in fields if name in parts})


@dataclasses.dataclass(frozen=True)
class UnitResult:
    """A work unit's answer.

    Attributes
    ----------
    cell, chunk : int
        The unit.
    tables : CellTables or dict
        The cell's tables when the unit covers the whole cell (:attr:`final`), else the chunk's
        partial results by name.
    pid : int or None
        The process that computed it (None: read back from a run folder).
    """

    cell: int
    chunk: int
    tables: CellTables | PartTables
    pid: int | None = None

    @property
    def final(self) -> bool:
        """Whether the unit covers its whole cell (``tables`` are the cell's)."""
        return isinstance(self.tables, CellTables)
