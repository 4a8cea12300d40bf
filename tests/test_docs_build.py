"""The built docs site shows every notebook's figures.

``make test`` builds the site (``make docs``: Sphinx executes the notebooks) before pytest runs,
so this reads that build. Without one (pytest run on its own) it is skipped with the command
that makes it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "docs" / "_build" / "html"
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.md"))
_IMG = re.compile(r"<img\b[^>]*\bsrc=\"([^\"]+)\"", re.I)


def _built() -> None:
    if not (HTML / "index.html").is_file():
        pytest.skip(f"no docs build in {HTML.relative_to(ROOT)}: run `make docs` first (make test does)")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_page_shows_its_figures(name: str) -> None:
    _built()
    page = HTML / "notebooks" / f"{name}.html"
    assert page.is_file(), f"the docs build has no page for notebooks/{name}.md"
    sources = _IMG.findall(page.read_text(encoding="utf-8"))
    figures = [s for s in sources if s.startswith("data:image/") or "_images/" in s]
    assert figures, f"{page.relative_to(ROOT)} shows no figure (img sources: {sources})"
    for src in figures:
        if not src.startswith("data:"):
            assert (page.parent / src).resolve().is_file(), f"{page.name}: missing image file {src}"
