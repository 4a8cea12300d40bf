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
    out = capsys.readouterr().out
    assert "relative error of one draw" in out


def test_readme_explains_the_numbers_it_prints(capsys):
    """Every line the quickstart prints is quoted in the text that explains it, with its numbers."""
    for block in _python_blocks():
        exec(compile(block, str(README), "exec"), {"__name__": "readme"})
    text = README.read_text()
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert lines
    for line in lines:
        label = line.split(":")[0].strip()
        assert f"`{label}" in text, f"printed line {line!r} is not explained in README.md"
        if not line.startswith(("HCEXP", "exact")):  # the 2 x 2 block is described, not quoted
            assert f"`{line}`" in text, f"README.md quotes other numbers than the quickstart prints: {line!r}"


def test_readme_names_the_docs_command():
    text = README.read_text()
    assert "make docs" in text and "docs/_build/html" in text


def test_readme_shows_both_commands():
    text = README.read_text()
    assert "make demo" in text and "make test" in text
