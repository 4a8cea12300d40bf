"""The fixed cost stays small: ``import rfkit`` and ``rfkit --help`` load no heavy module.

Structural checks only (which modules a fresh interpreter holds afterwards), never timings:
SciPy's stats, optimize and linear algebra, array_api_compat's NumPy wrapper, pandas and
matplotlib load when a computation, a QMC draw or a figure asks for them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Modules that ``import rfkit`` must not load (each costs 0.05-0.4 s of a 2-core machine).
HEAVY_FOR_IMPORT = (
    "scipy.stats",
    "scipy.optimize",
    "scipy.linalg",
    "scipy.special",
    "pandas",
    "matplotlib",
    "array_api_compat.numpy",
    "torch",  # rfkit.nn and the torch backend load it only when asked
    "sklearn",  # rfkit.sklearn loads it; nothing else in rfkit imports it
)
#: Modules that ``rfkit --help`` must not load (its parser needs neither theory nor studies).
HEAVY_FOR_HELP = ("scipy.stats", "scipy.special", "pandas", "matplotlib", "rfkit.study", "rfkit.report")


def _loaded(code: str, names: tuple[str, ...]) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {names!r} if m in sys.modules)))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env, cwd=ROOT
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_import_rfkit_loads_no_heavy_module():
    assert _loaded("import rfkit", HEAVY_FOR_IMPORT) == []


@pytest.mark.parametrize("sub", ["features", "projections", "kernels"])
def test_eager_subpackages_load_no_heavy_module(sub):
    assert _loaded(f"import rfkit.{sub}", HEAVY_FOR_IMPORT) == []


def test_import_theory_loads_no_scipy_stats():
    assert _loaded("import rfkit.theory", ("scipy.stats", "scipy.special", "pandas", "matplotlib")) == []


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["bound", "--help"]])
def test_cli_help_loads_no_heavy_module(argv):
    code = f"from rfkit.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass"
    assert _loaded(code, HEAVY_FOR_HELP) == []


def test_lazy_names_still_resolve():
    code = (
        "import rfkit as rk, numpy as np\n"
        "x = np.full(3, 0.1)\n"
        "v = float(rk.theory.mse(rk.features.Positive(4, projection='orthogonal'), x, x))\n"
        "assert v > 0\n"
        "from rfkit._backend import NUMPY\n"
        "assert NUMPY.is_numpy"
    )
    assert _loaded(code, ("scipy.special", "array_api_compat.numpy")) == [
        "array_api_compat.numpy",
        "scipy.special",
    ]


def test_rfkit_run_loads_no_scipy_stats_or_statsmodels():
    """`rfkit run` (the study command, its report and figures) imports none of SciPy's stats, optimize
    and spatial, statsmodels or seaborn up front: each costs a tenth of a second to most of one, and
    the figures and statistics that use them import them when they are drawn or computed."""
    heavy = ("scipy.stats", "scipy.optimize", "scipy.spatial", "statsmodels", "seaborn")
    assert _loaded("import rfkit.cli._study", heavy) == []


def test_bounds_and_rank_correlations_load_no_scipy_stats():
    """The concentration bounds (chi2, F and beta quantiles) and the reports' Spearman correlations use
    scipy.special and NumPy, so a study that computes them never imports SciPy's stats module."""
    code = (
        "import numpy as np, rfkit as rk\n"
        "from rfkit.study.summaries import spearman\n"
        "rng = np.random.default_rng(0)\n"
        "X, Y = rng.normal(size=(40, 3)), rng.normal(size=(50, 3))\n"
        "rk.theory.bounds.hotelling_concentration(X, Y, None, 0.9, 16)\n"
        "rk.theory.bounds.hotelling_concentration(X, Y, None, 0.9, 16, points='in-sample')\n"
        "rk.theory.bounds.chi2_concentration(np.zeros(3), np.eye(3), np.zeros(3), np.eye(3), None, 5, 0.9, 16)\n"
        "assert abs(spearman([1.0, 2, 3, 4], [2.0, 1, 4, 3]) - 0.6) < 1e-12\n"
    )
    assert _loaded(code, ("scipy.stats",)) == []
