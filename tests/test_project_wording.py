"""The project's files name measurements and changes by date and commit, not by work session or ticket.

A reader of the repository knows its commits and dates. Words such as "session 31", "this
session's start", "issue 23" or "(#12)" point at a history the reader cannot look up, so no
tracked text file may use them. Ordinary uses stay allowed: a test session (pytest's
``scope="session"``), an interactive session, an HTTP session, colours such as ``#009E73``, and
list labels such as ``"PRF (iid) #2"`` in code. An upstream bug is cited by its address
(``https://github.com/python/cpython/issues/116685``), which names the tracker it lives in.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SELF = Path(__file__).resolve()
TEXT_SUFFIXES = {".md", ".py", ".toml", ".json", ".txt", ".rst", ".cfg", ".ini", ".yml", ".yaml", ".sh"}
TEXT_NAMES = {"Makefile"}

#: Checked on every line of every tracked text file.
EVERYWHERE = [
    ("a numbered work session", re.compile(r"\bsessions?\s+\d+", re.IGNORECASE)),
    (
        "a work session named by its place in a history",
        re.compile(
            r"\b(?:this|that|each|previous|next|earlier|later|first|last|same|its|one|an?)\s+sessions?\b",
            re.IGNORECASE,
        ),
    ),
    (
        "a ticket number",
        re.compile(
            r"\b(?:(?:issues?|tickets?|PRs?|pull requests?)(?:\s+#?|#)\d+|(?:issues?|tickets?)\d+)",
            re.IGNORECASE,
        ),
    ),
    ("a ticket number in parentheses", re.compile(r"\(#\d+\)")),
]
#: Checked in prose only: non-Python files and Python comment lines (code may hold ``"#2"`` labels).
PROSE = [("a bare ticket number", re.compile(r"(?:^|[\s(\[])#\d{1,5}\b(?![\w-])"))]


def _tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    files = []
    for name in out.split("\0"):
        path = ROOT / name
        if path == SELF:  # this file quotes the words it looks for
            continue
        if name and (path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES) and path.is_file():
            files.append(path)
    return files


def _findings(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []  # a binary file with a text-like name
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        prose = line
        if path.suffix == ".py":
            stripped = line.lstrip()
            prose = stripped[1:] if stripped.startswith("#") else ""
        for what, pattern in EVERYWHERE:
            m = pattern.search(line)
            if m:
                found.append(f"{path.relative_to(ROOT)}:{number}: {what}: {m.group(0).strip()!r}")
        for what, pattern in PROSE:
            m = pattern.search(prose)
            if m:
                found.append(f"{path.relative_to(ROOT)}:{number}: {what}: {m.group(0).strip()!r}")
    return found


def test_no_tracked_file_names_a_work_session_or_a_ticket_number() -> None:
    files = _tracked_text_files()
    assert files, "git ls-files listed no text files"
    found = [f for path in files for f in _findings(path)]
    assert not found, f"{len(found)} lines name a session or ticket:\n" + "\n".join(found[:60])


@pytest.mark.parametrize(
    "line",
    [
        "Measured in session 31, alternated.",
        "this session's start (eb8b0f5)",
        "Target (issue 7): extracting q, k, v",
        "Issue 23's fixed-cost target",
        "see (#12) for the fix",
        "fixed in #123.",
    ],
)
def test_the_patterns_flag_history_words(line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "note.md"
    path.write_text(line + "\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _findings(path), line


@pytest.mark.parametrize(
    "line",
    [
        '@pytest.fixture(scope="session")',
        "Each built-in study runs once per test session.",
        "`x` = 1 is defined in this interactive session (a notebook or REPL)",
        '_PALETTE = ["#0072B2", "#000000", "#999999"]',
        'label = "PRF (iid) #2"',
        "see https://github.com/python/cpython/issues/116685",
        "requests.Session() keeps the connection",
        "# numpydoc checks PR01, PR02 and RT01",
    ],
)
def test_the_patterns_leave_ordinary_words_alone(
    line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "code.py"
    path.write_text(line + "\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert not _findings(path), line
