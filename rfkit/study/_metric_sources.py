"""Summary metrics: the per-trial column each one averages, and what it measures in words.

The metrics are records of the study registry (:func:`rfkit.study.register_metric`); the rest
of rfkit reads them through :func:`metric_column`, :func:`metric_words` and
:func:`metric_is_proportion`.
"""

from __future__ import annotations

from ..exceptions import InvalidParameterError
from ._records import metric_record
from ._views import METRIC_SOURCES

__all__ = ["METRIC_SOURCES", "metric_column", "metric_words", "metric_is_proportion", "PROPORTION_METRICS"]

#: rfkit's metrics that are proportions of 0/1 outcomes (their interval is Wilson's)
PROPORTION_METRICS = frozenset({"coverage", "realized_exceeds"})


def metric_column(name: str) -> str:
    """The per-trial column whose mean over trials is the summary metric ``name`` (KeyError if unknown).

    >>> metric_column("rel_mse")
    'rel_sq_err'
    """
    return METRIC_SOURCES[name][0]


def metric_words(name: str) -> str:
    """What the summary metric ``name`` measures, in words (KeyError if unknown)."""
    return METRIC_SOURCES[name][1]


def metric_is_proportion(name: str) -> bool:
    """Whether the summary metric ``name`` is a proportion of 0/1 outcomes (the coverage of a bound).

    rfkit's own (``coverage``, ``realized_exceeds``), or a registered metric whose record says
    ``proportion = True``.

    >>> metric_is_proportion("coverage"), metric_is_proportion("mse")
    (True, False)
    """
    if name in PROPORTION_METRICS:
        return True
    try:
        return bool(getattr(metric_record(name), "proportion", False))
    except InvalidParameterError:  # an unregistered name (a saved summary read back) is no proportion
        return False
