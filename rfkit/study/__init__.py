"""Monte Carlo studies: declarative designs, a reproducible runner, tidy results with MCSE.

Example (not executed here)::

    import rfkit as rk
    result = rk.study.run("studies/performer-mse.toml", rng=0, executor="processes")
    result.summary(); result.compare_theory()
"""

from ._cli import builtin_study
from ._design import DATA_SOURCES, FEATURE_MAPS, KINDS, METRICS, METRICS_BY_KIND, Design, load_design
from ._results import StudyResult, mcse_summary
from ._runner import EXECUTORS, run, run_trial
from ._storage import RunReport, verify_run

__all__ = [
    "builtin_study",
    "Design",
    "load_design",
    "run",
    "run_trial",
    "StudyResult",
    "verify_run",
    "RunReport",
    "mcse_summary",
    "EXECUTORS",
    "KINDS",
    "DATA_SOURCES",
    "METRICS",
    "METRICS_BY_KIND",
    "FEATURE_MAPS",
]
