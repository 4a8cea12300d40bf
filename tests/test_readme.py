"""The README quickstart is executed, so it cannot rot."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_quickstart():
    assert _python_blocks(), "README.md must contain a ```python quickstart"


def test_readme_quickstart_runs(capsys):
    for block in _python_blocks():
        exec(compile(block, str(README), "exec"), {"__name__": "readme"})
    assert "max relative error" in capsys.readouterr().out


def test_readme_shows_both_commands():
    text = README.read_text()
    assert "make demo" in text and "make test" in text
