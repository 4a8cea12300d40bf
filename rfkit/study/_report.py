"""Former home of the study report, kept so that old import paths of its computed tables keep working.

The tables computed from a summary are in :mod:`._tables`; the figures and the Markdown report
moved to the presentation package :mod:`rfkit.report`.
"""

from ._tables import heavy_tailed, ranking_table

__all__ = ["ranking_table", "heavy_tailed"]
