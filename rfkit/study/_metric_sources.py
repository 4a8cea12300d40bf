"""Summary metrics: the per-trial column each one averages, and what it measures in words.

The metrics are records of the study registry (:func:`rfkit.study.register_metric`); the rest
of rfkit reads them through :func:`metric_column` and :func:`metric_words`.
"""

from __future__ import annotations

from ._views import METRIC_SOURCES

__all__ = ["METRIC_SOURCES", "metric_column", "metric_words"]


def metric_column(name: str) -> str:
    """The per-trial column whose mean over trials is the summary metric ``name`` (KeyError if unknown).

    >>> metric_column("rel_mse")
    'rel_sq_err'
    """
    return METRIC_SOURCES[name][0]


def metric_words(name: str) -> str:
    """What the summary metric ``name`` measures, in words (KeyError if unknown)."""
    return METRIC_SOURCES[name][1]
