"""The pieces every table of the bad-input suite uses (tests/unit/test_bad_inputs.py).

A table module (``bad_cases_<area>.py``) defines ``CASES`` (a list of :class:`Bad`) and may
define ``CLI_CASES`` (a list of :class:`Cli`) and ``RESULT_CASES`` (a list of :class:`Good`:
inputs that must give a correct result, not an error); test_bad_inputs.py collects every
table and counts the cases.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rfkit.study as st
from rfkit.exceptions import RFKitError


@dataclasses.dataclass(frozen=True)
class Bad:
    """One bad input: ``call(tmp)`` must raise ``error`` whose message contains ``arg`` and ``value``."""

    id: str
    call: Callable[[Path], Any]
    error: type[RFKitError]
    arg: str  # how the message names the argument
    value: str  # how the message shows the value received


@dataclasses.dataclass(frozen=True)
class Cli:
    """One bad command line: exit status ``status``, stderr naming ``arg`` and ``value``, no traceback."""

    id: str
    argv: Callable[[Path], list[str]]
    status: int
    arg: str
    value: str


def _toml(tmp: Path, text: str, name: str = "s.toml") -> Path:
    path = tmp / name
    path.write_text(textwrap.dedent(text))
    return path


GOOD_TOML = """
name = "t"
trials = 4
seed = 1
[data]
source = "pairs"
n_pairs = 3
dim = 2
[grid]
n_features = [2]
[[estimators]]
map = "Positive"
"""


def _design(**over: Any) -> st.Design:
    kw: dict[str, Any] = dict(
        name="t",
        estimators=[{"map": "Positive"}],
        grid={"n_features": [2]},
        data={"source": "pairs", "n_pairs": 3, "dim": 2},
        trials=4,
        seed=1,
    )
    kw.update(over)
    return st.Design(**kw)


@dataclasses.dataclass(frozen=True)
class Good:
    """An unlucky but legal input: ``check(tmp)`` runs it and asserts the result is right (or flagged)."""

    id: str
    check: Callable[[Path], None]
