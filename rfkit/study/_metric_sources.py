"""Summary metrics: the per-trial column each one averages, how it is computed and summarised.

The metrics are records of the study registry (:func:`rfkit.study.register_metric`); the rest
of rfkit reads them through :func:`metric_column`, :func:`metric_words`,
:func:`metric_is_proportion`, :func:`metric_ddof` and :func:`metric_values`. Nothing here
knows a metric by its name: each record says whether it is a proportion, its ddof and how to
compute its column.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..exceptions import InvalidParameterError
from ._record_types import MetricRecord
from ._records import metric_record, records
from ._views import METRIC_SOURCES

__all__ = [
    "METRIC_SOURCES",
    "metric_column",
    "metric_words",
    "metric_is_proportion",
    "metric_ddof",
    "metric_values",
    "trial_metrics",
]


def metric_column(name: str) -> str:
    """The per-trial column whose mean over trials is the summary metric ``name`` (KeyError if unknown).

    >>> metric_column("rel_mse")
    'rel_sq_err'
    """
    return METRIC_SOURCES[name][0]


def metric_words(name: str) -> str:
    """What the summary metric ``name`` measures, in words (KeyError if unknown).

    Parameters
    ----------
    name : str
        The metric's name (a summary's ``metric`` column).

    Returns
    -------
    str
        The description.
    """
    return METRIC_SOURCES[name][1]


def metric_is_proportion(name: str) -> bool:
    """Whether the summary metric ``name`` is a proportion of 0/1 outcomes: its record's ``proportion``.

    An unregistered name (a saved summary read back) is no proportion.

    Parameters
    ----------
    name : str
        A metric's name, as a summary's ``metric`` column holds it.

    Returns
    -------
    bool
        The record's ``proportion`` (a Wilson interval goes with the estimate); False for a name
        no record has.

    >>> metric_is_proportion("coverage"), metric_is_proportion("mse")
    (True, False)
    """
    try:
        return metric_record(name).proportion
    except InvalidParameterError:
        return False


def metric_ddof(name: str) -> int:
    """The delta degrees of freedom of the summary metric ``name``: its record's ``ddof`` (0 if unregistered).

    The summary multiplies the metric's estimate, MCSE and interval by n / (n - ddof).

    >>> metric_ddof("variance"), metric_ddof("mse")
    (1, 0)
    """
    try:
        return metric_record(name).ddof
    except InvalidParameterError:
        return 0


def _accepted(fn: Any, available: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``available`` that ``fn`` takes (all of them if it takes ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature to read (some builtins): give it every keyword
        return available
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return available
    return {k: v for k, v in available.items() if k in params}


def metric_values(record: MetricRecord, n_trials: int, **available: Any) -> np.ndarray:
    """The column of a metric, one value per trial: ``record.compute`` called on the design kind's arrays.

    ``compute`` gets the keyword arguments of ``available`` that it accepts. Integer and float
    results keep their dtype; booleans become 0.0/1.0.

    Raises
    ------
    InvalidParameterError
        The result is not one real value per trial (shape ``(n_trials,)``).
    """
    assert record.compute is not None
    values = np.asarray(record.compute(**_accepted(record.compute, available)))
    if values.dtype.kind == "b":
        values = values.astype(float)
    if values.shape != (n_trials,) or values.dtype.kind not in "iuf":
        raise InvalidParameterError(
            f"The `compute` function of MetricRecord {record.name!r} must return one real value per trial, "
            f"shape ({n_trials},). Got dtype {values.dtype} and shape {values.shape} instead."
        )
    return values


def trial_metrics(kind: str, names: Iterable[str], columns: Iterable[str] = ()) -> list[MetricRecord]:
    """The metrics whose columns a trial table of ``kind`` holds, each column computed once.

    First, in the order of ``columns``, the registered metric of ``kind`` that computes each of
    those columns (the trial table's fixed layout, kept as saved tables have it); then the
    metrics ``names`` (a design's) that compute a column not yet there.
    """
    of_kind = [r for r in records("metric") if kind in r.kinds and r.compute is not None]
    by_column: dict[str, MetricRecord] = {}
    for r in of_kind:
        by_column.setdefault(r.column, r)
    out = [by_column[c] for c in columns if c in by_column]
    seen = {r.column for r in out}
    for name in names:
        r = metric_record(name)
        if r.compute is not None and kind in r.kinds and r.column not in seen:
            out.append(r)
            seen.add(r.column)
    return out
