"""The last lines of ``rfkit run``: which estimator wins where, and what the run wrote."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..report import winner_lines

if TYPE_CHECKING:
    from ..study import StudyResult

__all__ = ["closing_lines"]


def closing_lines(result: StudyResult, out: Path, report: Path) -> list[str]:
    """The winners per grid setting (:func:`rfkit.report.winner_lines`), then the files written.

    Parameters
    ----------
    result : StudyResult
        The run's result.
    out : Path
        Its folder.
    report : Path
        The Markdown report written into it.

    Returns
    -------
    list of str
        The lines, the ``wrote ...`` line last.
    """
    written = ["summary.parquet", "summary.csv", "trials.parquet", "pairs.parquet"]
    if (out / "figures").is_dir():
        written.append("figures/")
    wrote = f"wrote {out}/{written[0]}, {', '.join(written[1:])}, report: {report}"
    return [*winner_lines(result), wrote]
