"""Bad-input table: folders that are not (whole) study runs, given to verify_run and load.

A folder with no run manifest and no result manifest, or with some other program's JSON under
those names, is not a run; a result manifest that lacks what reopening a result needs (the
design, the table records) is a damaged one. Both are named errors, never ``ok`` or a raw
``KeyError``. Collected by tests/unit/test_bad_inputs.py (see bad_input_kit.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bad_input_kit import Bad, _design

import rfkit.study as st
from rfkit.exceptions import StudyError


def _plain(tmp: Path, files: dict[str, str] | None = None) -> Path:
    """A folder ``plain`` holding ``files`` (name -> text) and nothing else."""
    out = tmp / "plain"
    out.mkdir()
    for name, text in (files or {}).items():
        (out / name).write_text(text)
    return out


def _edited(tmp: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A saved result whose ``manifest.json`` was edited by ``edit``."""
    out = st.run(_design()).save(tmp / "o")
    path = out / "manifest.json"
    body = json.loads(path.read_text())
    edit(body)
    path.write_text(json.dumps(body))
    return out


OTHER_JSON = json.dumps({"name": "some-app", "version": "1.0", "dependencies": {}})

CASES = [
    Bad("verify_run-empty-folder", lambda t: st.verify_run(_plain(t)), StudyError, "`out`", "plain"),
    Bad(
        "verify_run-empty-folder-says-what-is-missing",
        lambda t: st.verify_run(_plain(t)),
        StudyError,
        "not a study run",
        "neither run.json",
    ),
    Bad(
        "verify_run-other-json-manifest",
        lambda t: st.verify_run(_plain(t, {"manifest.json": OTHER_JSON})),
        StudyError,
        "not a study run",
        "manifest.json",
    ),
    Bad(
        "verify_run-other-json-manifest-names-its-keys",
        lambda t: st.verify_run(_plain(t, {"manifest.json": OTHER_JSON})),
        StudyError,
        "`design`",
        "'dependencies'",
    ),
    Bad(
        "verify_run-json-list-manifest",
        lambda t: st.verify_run(_plain(t, {"manifest.json": "[1, 2]"})),
        StudyError,
        "not a study run",
        "list",
    ),
    Bad(
        "verify_run-other-json-run-manifest",
        lambda t: st.verify_run(_plain(t, {"run.json": OTHER_JSON})),
        StudyError,
        "not a study run",
        "run.json",
    ),
    Bad(
        "load-other-json-manifest",
        lambda t: st.load(_plain(t, {"manifest.json": OTHER_JSON})),
        StudyError,
        "not a study run",
        "manifest.json",
    ),
    Bad(
        "load-manifest-without-design",
        lambda t: st.load(_edited(t, lambda b: b.pop("design"))),
        StudyError,
        "manifest.json",
        "`design` is missing",
    ),
    Bad(
        "load-manifest-design-not-a-table",
        lambda t: st.load(_edited(t, lambda b: b.update(design="t"))),
        StudyError,
        "`design`",
        "'t'",
    ),
    Bad(
        "load-manifest-design-without-estimators",
        lambda t: st.load(_edited(t, lambda b: b["design"].pop("estimators"))),
        StudyError,
        "manifest.json",
        "`design.estimators` is missing",
    ),
    Bad(
        "load-manifest-design-without-metrics",
        lambda t: st.load(_edited(t, lambda b: b["design"].pop("metrics"))),
        StudyError,
        "manifest.json",
        "`design.metrics` is missing",
    ),
    Bad(
        "load-manifest-without-files",
        lambda t: st.load(_edited(t, lambda b: b.pop("files"))),
        StudyError,
        "manifest.json",
        "`files` is missing",
    ),
    Bad(
        "load-manifest-without-the-trials-record",
        lambda t: st.load(_edited(t, lambda b: b["files"].pop("trials.parquet"))),
        StudyError,
        "manifest.json",
        "`files` has no record of trials.parquet",
    ),
]
