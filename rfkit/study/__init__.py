"""Monte Carlo studies: declarative designs, a reproducible runner, tidy results with MCSE.

Example (not executed here)::

    import rfkit as rk
    result = rk.study.run("studies/performer-mse.toml", rng=0, executor="processes", out="out/p")
    result.summary(); result.compare_theory()
    result                                   # in Jupyter: design, provenance, summary, first figure
    result.plot("mse_vs_features")           # a matplotlib Figure, drawn from the tables
    again = rk.study.load("out/p")           # reopen a finished run
    rk.study.compare(before, after)          # metric differences with combined MCSE and z

Feature maps and attention estimators of your own: ``map = "package.module:ClassName"`` in a
study file (the module is imported), or classes / instances in a :class:`Design`; see the docs
page "Bring your own estimator".
"""

from ._cli import builtin_study
from ._design import DATA_SOURCES, FEATURE_MAPS, KINDS, METRICS, METRICS_BY_KIND, Design, load_design
from ._estimators import check_attention_estimator
from ._report import ranking_table
from ._results import COMPARE_Z, StudyResult, compare, load, mcse_summary
from ._runner import EXECUTORS, run, run_trial
from ._storage import RunReport, verify_run

__all__ = [
    "builtin_study",
    "Design",
    "load_design",
    "run",
    "run_trial",
    "StudyResult",
    "load",
    "compare",
    "COMPARE_Z",
    "check_attention_estimator",
    "verify_run",
    "RunReport",
    "mcse_summary",
    "ranking_table",
    "EXECUTORS",
    "KINDS",
    "DATA_SOURCES",
    "METRICS",
    "METRICS_BY_KIND",
    "FEATURE_MAPS",
]
