"""Monte Carlo studies: declarative designs, a reproducible runner, tidy results with MCSE.

Example (not executed here)::

    import rfkit as rk
    result = rk.study.run("studies/performer-mse.toml", rng=0, executor="processes", out="out/p")
    result.summary(); result.compare_theory()
    result                                   # in Jupyter: design, provenance, summary, first figure
    result.plot("mse_vs_features")           # its Axes (ax=: into yours), drawn from the tables
    again = rk.study.load("out/p")           # reopen a finished run
    rk.study.compare(before, after)          # metric differences with combined MCSE and z

Feature maps, attention estimators, metrics, data sources and closed forms each have a record
(:class:`FeatureMapRecord`, ...) registered with ``register_*``; rfkit's own go through the same
functions. A class of your own is also named ``map = "package.module:ClassName"`` in a study file
(the module is imported), or passed as a class / instance in a :class:`Design`; see the docs page
"Bring your own estimator".
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import _builtin_records, _data_sources  # noqa: F401  (register rfkit's own records)
from ._atomic import OutputWriteError
from ._attention_hooks import BatchedCall, CellSizes, TrialCalls
from ._builtin import builtin_studies, builtin_study, builtin_study_dirs, find_study
from ._design import Design, load_design
from ._design_limits import StudyTooLargeError
from ._estimators import check_attention_estimator
from ._figure_kinds import (
    FIGURE_ALIASES,
    FIGURE_KINDS,
    declare_figure_kind,
    figure_kinds,
    forget_figure_kind,
    resolve_figure_kind,
)
from ._record_types import KINDS
from ._records import (
    AttentionEstimatorRecord,
    Capabilities,
    ClosedFormRecord,
    DataSourceRecord,
    FeatureMapRecord,
    MetricRecord,
    attention_estimator_record,
    closed_form_record,
    data_source_record,
    feature_map_record,
    metric_record,
    records,
    register_attention_estimator,
    register_closed_form,
    register_data_source,
    register_feature_map,
    register_metric,
)
from ._results import COMPARE_Z, StudyResult, compare, load, mcse_summary
from ._tables import ranking_table
from ._verify import RunReport, verify_run
from ._views import DATA_SOURCES, FEATURE_MAPS, METRICS, METRICS_BY_KIND

if TYPE_CHECKING:
    from ._probes import check_design
    from ._runner import EXECUTORS, run, run_trial

#: names whose modules run estimators on data (the runner, the protocol probes): imported on first
#: use, so that building and validating a design loads no evaluation module
_ON_USE = {"run": "_runner", "run_trial": "_runner", "EXECUTORS": "_runner", "check_design": "_probes"}

__all__ = [
    "builtin_study",
    "builtin_studies",
    "builtin_study_dirs",
    "find_study",
    "Design",
    "load_design",
    "check_design",
    "FIGURE_KINDS",
    "FIGURE_ALIASES",
    "figure_kinds",
    "declare_figure_kind",
    "forget_figure_kind",
    "resolve_figure_kind",
    "StudyTooLargeError",
    "run",
    "run_trial",
    "StudyResult",
    "load",
    "compare",
    "COMPARE_Z",
    "check_attention_estimator",
    "verify_run",
    "OutputWriteError",
    "RunReport",
    "mcse_summary",
    "ranking_table",
    "EXECUTORS",
    "KINDS",
    "DATA_SOURCES",
    "METRICS",
    "METRICS_BY_KIND",
    "FEATURE_MAPS",
    "Capabilities",
    "FeatureMapRecord",
    "AttentionEstimatorRecord",
    "TrialCalls",
    "BatchedCall",
    "CellSizes",
    "MetricRecord",
    "DataSourceRecord",
    "ClosedFormRecord",
    "register_feature_map",
    "register_attention_estimator",
    "register_metric",
    "register_data_source",
    "register_closed_form",
    "feature_map_record",
    "attention_estimator_record",
    "metric_record",
    "data_source_record",
    "closed_form_record",
    "records",
]


def __getattr__(name: str) -> Any:
    if name in _ON_USE:
        value = getattr(importlib.import_module(f".{_ON_USE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rfkit.study' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_ON_USE))
