"""Presentation of study results: the figures of a study and its Markdown/LaTeX report.

Reads what :mod:`rfkit.study` computed and saved (summaries, theory comparison, tables) and
draws it with :mod:`rfkit.plots` and :mod:`rfkit.tables`; nothing here recomputes an estimate.
``rfkit run`` writes the report with :func:`write_report`; :meth:`rfkit.study.StudyResult.plot`
and the notebook display of a result use :func:`plot_result` and :func:`result_html`.
"""

from ._figures import FIGURE_KINDS, figure_plan, study_figures
from ._markdown import metric_description, provenance_line, write_report
from ._parallel_figures import figure_workers, preload_for_workers
from ._verdict import theory_verdict, winner_lines
from ._view import figure_names, plot_result, result_html

__all__ = [
    "FIGURE_KINDS",
    "study_figures",
    "figure_plan",
    "write_report",
    "provenance_line",
    "metric_description",
    "figure_names",
    "plot_result",
    "result_html",
    "preload_for_workers",
    "figure_workers",
    "theory_verdict",
    "winner_lines",
]
