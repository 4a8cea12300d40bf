"""Sphinx configuration for the rfkit documentation (built in CI with warnings as errors)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RFKIT_DOCS_QUICK", "1")
# Agg for anything imported by Sphinx itself; the notebooks switch their kernels to the inline
# backend (`%matplotlib inline`), so their figures are embedded in the pages (a test checks).
os.environ.setdefault("MPLBACKEND", "Agg")

project = "rfkit"
author = "rfkit developers"
copyright = "2026, rfkit developers"  # noqa: A001
release = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "myst_nb",
]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
nb_execution_mode = "force"
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_show_tb = True

autosummary_generate = True
autodoc_typehints = "none"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_use_ivar = True  # Attributes sections as fields: no duplicate descriptions with autodoc members
suppress_warnings = ["myst.header", "autosummary.import_cycle", "ref.python", "docutils", "toc.not_included"]
nitpicky = False
html_theme = "alabaster"
html_title = "rfkit"

# The notebooks live in ../notebooks (jupytext MyST files); copy them in so myst-nb executes
# and renders them (quick mode). The copies are build products, never committed.
_nb_src = ROOT / "notebooks"
_nb_dst = Path(__file__).resolve().parent / "notebooks"
_nb_dst.mkdir(exist_ok=True)
for _f in _nb_src.glob("*.md"):
    (_nb_dst / _f.name).write_text(_f.read_text())
