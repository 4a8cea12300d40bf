"""A study's progress bar is one output: one widget or one updating line in a notebook (and so
one output on the built docs pages, which myst-nb executes in a Jupyter kernel), one final line
when stderr is no terminal, and tqdm's single updating line on a terminal."""

from __future__ import annotations

import io

import nbformat
import pytest
from nbclient import NotebookClient

import rfkit.study as st
from rfkit.study import _runner

TINY = """
import rfkit.study as st
design = st.Design(
    name="tiny",
    estimators=[{"map": "Positive"}],
    grid={"n_features": [4, 8]},
    data={"source": "gaussian", "n_pairs": 4, "dim": 4},
    trials=40,
    chunk_trials=5,
    seed=1,
)
result = st.run(design)  # 16 work units: 16 updates of the bar
"""


def _tiny(**kw) -> None:
    design = st.Design(
        name="tiny",
        estimators=[{"map": "Positive"}],
        grid={"n_features": [4, 8]},
        data={"source": "gaussian", "n_pairs": 4, "dim": 4},
        trials=40,
        chunk_trials=5,
        seed=1,
    )
    st.run(design, **kw)


def test_notebook_cell_shows_one_output_for_the_bar():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(TINY)])
    NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    outputs = nb.cells[0].outputs
    assert not [o for o in outputs if o.get("output_type") == "error"], outputs
    assert len(outputs) == 1, f"the bar left {len(outputs)} outputs: {outputs}"
    (out,) = outputs
    shown = out.get("text", "") + str(out.get("data", {}).get("text/plain", ""))
    assert shown.startswith("tiny: 16/16 work units"), out


class _Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


def test_not_a_terminal_one_final_line(monkeypatch: pytest.MonkeyPatch):
    err = _Pipe()
    monkeypatch.setattr(_runner.sys, "stderr", err)
    _tiny(progress=True)
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and "\r" not in err.getvalue(), err.getvalue()
    assert lines[0].startswith("tiny: 16/16 work units"), lines


def test_not_a_terminal_default_is_silent(monkeypatch: pytest.MonkeyPatch):
    err = _Pipe()
    monkeypatch.setattr(_runner.sys, "stderr", err)
    _tiny()
    assert err.getvalue() == ""
