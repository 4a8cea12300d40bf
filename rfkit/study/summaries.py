"""What the layers above the study computation read from a summary (public interface).

Facets of a summary (one panel per value of the other grid axes), the rows that are not
``ok`` (failed or non-finite trials), the heavy-tail flag and what each summary metric
measures in words. The presentation package :mod:`rfkit.report` and the command line use
these; they compute nothing new from the trials, except the drop-in study's proxy points and
rank correlations (:func:`dropin_points`, :func:`proxy_correlation`), computed here from its trials,
and Spearman's rank correlation (:func:`spearman`), which the reports' tables quote. The
rounding of an estimate to its MCSE (:func:`format_mcse`, :func:`format_interval`) and whether a
metric is a proportion (:func:`metric_is_proportion`) are defined beside the MCSE and the metric
records; :mod:`rfkit.tables` writes its tables with them.
"""

from ._dropin_tables import dropin_points, proxy_correlation, spearman
from ._mcse import format_interval, format_mcse
from ._metric_sources import metric_is_proportion, metric_words
from ._tables import HEAVY_TAIL_RATIO, facets, heavy_tailed, not_ok, ranking_table

__all__ = [
    "format_mcse",
    "format_interval",
    "metric_is_proportion",
    "metric_words",
    "HEAVY_TAIL_RATIO",
    "facets",
    "heavy_tailed",
    "not_ok",
    "ranking_table",
    "dropin_points",
    "proxy_correlation",
    "spearman",
]
