"""The notebooks execute (quick mode) so they cannot rot; outputs are never committed.

Each notebook is a jupytext MyST file (``notebooks/NAME.md``, the one to edit and review) paired
with ``notebooks/NAME.ipynb`` (what Jupyter, VS Code and ``jupyter nbconvert`` open). The pair
must hold the same cells, and the ``.ipynb`` no outputs; the execution test runs the ``.ipynb``
itself, which the pair test shows to be the notebook jupytext reads from the ``.md``.
"""

from __future__ import annotations

import os
from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.md"))


def test_there_are_notebooks():
    assert {p.stem for p in NOTEBOOKS} >= {"quickstart", "theory-vs-simulation", "reproduce-figures"}


def _cells(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_ipynb_pair_is_in_sync(path):
    """``jupytext --sync notebooks/NAME.md`` regenerates a stale pair."""
    ipynb = path.with_suffix(".ipynb")
    assert ipynb.is_file(), (
        f"{ipynb.name} is missing: run `jupytext --sync {path.relative_to(path.parents[1])}`"
    )
    paired = nbformat.read(ipynb, as_version=4)
    nbformat.validate(paired)
    assert _cells(paired) == _cells(jupytext.read(path)), (
        f"{ipynb.name} and {path.name} differ: run jupytext --sync"
    )
    for c in paired.cells:
        if c.cell_type == "code":
            assert c.outputs == [] and c.execution_count is None, f"{ipynb.name}: outputs are committed"
    assert paired.metadata.get("jupytext", {}).get("formats") == "ipynb,md:myst"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, monkeypatch):
    monkeypatch.setenv("RFKIT_DOCS_QUICK", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path.with_suffix(".ipynb"), as_version=4)  # the notebook users open
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors
    assert os.environ.get("RFKIT_DOCS_QUICK") == "1"
    # the figures reach the page (a non-interactive backend and plt.show() would leave none)
    images = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if "image/png" in o.get("data", {})
    ]
    assert images, f"{path.name}: no cell output holds a figure"
