"""Bad-input table: study runs and their folders (one writer, verified outputs, write failures, foreign
files, seeds passed back, worker and scheduler failures, run_trial, compare).

Collected by tests/unit/test_bad_inputs.py (see bad_input_kit.py for the three kinds of case).
"""

from __future__ import annotations

import errno
import json
import os
import threading
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd
from bad_input_kit import GOOD_TOML, Bad, Cli, Good, _design, _toml

import rfkit.study as st
from rfkit.exceptions import InvalidParameterError, StudyError
from rfkit.report import write_report
from rfkit.study._atomic import OutputWriteError
from rfkit.study._lock import RunLock

FIGURE_TOML = GOOD_TOML.replace('name = "t"', 'name = "fig"').replace("[2]", "[2, 4]") + (
    '[outputs]\nfigures = ["mse_vs_features"]\n'
)


def _finished(tmp: Path, name: str = "o") -> tuple[Path, st.StudyResult]:
    """A finished run folder with its report (figures, LaTeX) written."""
    out = tmp / name
    res = st.run(_toml(tmp, FIGURE_TOML, "fig.toml"), out=out)
    write_report(res, out)
    return out, res


def _with_foreign(tmp: Path, name: str = "notes.txt") -> Path:
    out = tmp / "o"
    out.mkdir()
    (out / name).write_text("not rfkit's")
    return out


def _dangling(tmp: Path) -> Path:
    link = tmp / "link"
    link.symlink_to(tmp / "nowhere")
    return link


def _summary_dir_then_resume(tmp: Path) -> Any:
    out, _ = _finished(tmp)
    (out / "summary.csv").unlink()
    (out / "summary.csv").mkdir()
    return st.run(_toml(tmp, FIGURE_TOML, "fig.toml"), out=out, resume=True)


def _save_over_dir(tmp: Path, name: str) -> Any:
    res = st.run(_design())
    (tmp / "o" / name).mkdir(parents=True)
    return res.save(tmp / "o")


def _figures_file(tmp: Path) -> Any:
    out, res = _finished(tmp)
    for f in (out / "figures").iterdir():
        f.unlink()
    (out / "figures").rmdir()
    (out / "figures").write_text("a file")
    return write_report(res, out)


def _tables_file(tmp: Path) -> Any:
    out, res = _finished(tmp)
    for f in (out / "tables").iterdir():
        f.unlink()
    (out / "tables").rmdir()
    (out / "tables").write_text("a file")
    return write_report(res, out)


def _failing_write(tmp: Path, code: int, target: str) -> Any:
    real = os.replace if target == "replace" else open

    def fail(*a: Any, **k: Any) -> Any:
        if "run.json" in str(a[0]):
            raise OSError(code, os.strerror(code))
        return real(*a, **k)

    where = "rfkit.study._atomic.os.replace" if target == "replace" else "rfkit.study._atomic.open"
    with mock.patch(where, fail, create=True):
        return st.run(_design(), out=tmp / "o")


def _other_thread_holds(tmp: Path) -> Any:
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with RunLock(tmp / "o"):
            held.set()
            done.wait(30)

    t = threading.Thread(target=hold, name="holder")
    t.start()
    held.wait(30)
    try:
        return st.run(_design(), out=tmp / "o")
    finally:
        done.set()
        t.join()


MODULE = """
import dataclasses
from rfkit.features import Positive


@dataclasses.dataclass(frozen=True)
class Mine(Positive):
    pass
"""


def _code_changed(tmp: Path) -> Any:
    import sys

    mod = tmp / "runs_case_maps.py"
    mod.write_text(MODULE)
    sys.path.insert(0, str(tmp))
    try:
        d = _design(estimators=[{"map": "runs_case_maps:Mine"}])
        st.run(d, out=tmp / "o")
        mod.write_text(MODULE + "\n# edited\n")
        return st.run(d, out=tmp / "o", resume=True)
    finally:
        sys.path.remove(str(tmp))
        sys.modules.pop("runs_case_maps", None)


def _truncated_figure_load(tmp: Path) -> Any:
    out, _ = _finished(tmp)
    png = next((out / "figures").glob("*.png"))
    png.write_bytes(png.read_bytes()[:50])
    return st.load(out)


def _compare_loose_paired(tmp: Path) -> Any:
    a = st.run(_design())
    b = st.run(_design(trials=6))
    return st.compare(a, b, strict=False, paired=True)


_RT = dict(entropy=1)  # run_trial's other arguments where one bad one is tried

CASES = [
    Bad(
        "run-workers-serial", lambda t: st.run(_design(), workers=2), InvalidParameterError, "`workers`", "2"
    ),
    Bad(
        "run-workers-serial-explicit",
        lambda t: st.run(_design(), executor="serial", workers=3),
        InvalidParameterError,
        "`workers`",
        "3",
    ),
    Bad(
        "run-progress-str",
        lambda t: st.run(_design(), progress="yes"),
        InvalidParameterError,
        "`progress`",
        "'yes'",
    ),
    Bad("run-rng-str", lambda t: st.run(_design(), rng="-1"), InvalidParameterError, "`rng`", "'-1'"),
    Bad("run-rng-float", lambda t: st.run(_design(), rng=1.5), InvalidParameterError, "`rng`", "1.5"),
    Bad(
        "run-rng-randomstate",
        lambda t: st.run(_design(), rng=np.random.RandomState(0)),
        InvalidParameterError,
        "`rng`",
        "RandomState",
    ),
    Bad(
        "run-scheduler-bogus",
        lambda t: st.run(_design(), scheduler="bogus://x"),
        StudyError,
        "Dask scheduler",
        "'bogus://x'",
    ),
    Bad(
        "run-unknown-study-name",
        lambda t: st.run("no-such-study-x"),
        InvalidParameterError,
        "study",
        "no-such-study-x",
    ),
    Bad(
        "run-out-is-a-file",
        lambda t: (t / "f").write_text("x") and st.run(_design(), out=t / "f"),
        StudyError,
        "output directory",
        "is a file",
    ),
    Bad(
        "run-foreign-files",
        lambda t: st.run(_design(), out=_with_foreign(t)),
        StudyError,
        "did not write",
        "notes.txt",
    ),
    Bad(
        "run-foreign-files-resume-without-manifest",
        lambda t: st.run(_design(), out=_with_foreign(t, "data.csv"), resume=True),
        StudyError,
        "did not write",
        "data.csv",
    ),
    Bad("run-summary-csv-is-a-folder", _summary_dir_then_resume, OutputWriteError, "summary.csv", "folder"),
    Bad(
        "save-summary-csv-is-a-folder",
        lambda t: _save_over_dir(t, "summary.csv"),
        OutputWriteError,
        "summary.csv",
        "folder",
    ),
    Bad(
        "save-trials-parquet-is-a-folder",
        lambda t: _save_over_dir(t, "trials.parquet"),
        OutputWriteError,
        "trials.parquet",
        "folder",
    ),
    Bad("write_report-figures-is-a-file", _figures_file, OutputWriteError, "figures", "in the way"),
    Bad("write_report-tables-is-a-file", _tables_file, OutputWriteError, "tables", "in the way"),
    Bad(
        "run-disk-full-rename",
        lambda t: _failing_write(t, errno.ENOSPC, "replace"),
        OutputWriteError,
        "run.json",
        "disk is full",
    ),
    Bad(
        "run-disk-full-open",
        lambda t: _failing_write(t, errno.ENOSPC, "open"),
        OutputWriteError,
        "run.json",
        "disk is full",
    ),
    Bad(
        "run-permission-denied",
        lambda t: _failing_write(t, errno.EACCES, "open"),
        OutputWriteError,
        "run.json",
        "permission denied",
    ),
    Bad(
        "run-read-only-file-system",
        lambda t: _failing_write(t, errno.EROFS, "replace"),
        OutputWriteError,
        "run.json",
        "read-only",
    ),
    Bad("run-other-thread-holds-folder", _other_thread_holds, StudyError, "in use", "'holder'"),
    Bad("run-resume-code-changed", _code_changed, StudyError, "runs_case_maps", "changed"),
    Bad("load-truncated-figure", _truncated_figure_load, StudyError, ".png", "truncated"),
    Bad(
        "run_trial-cell-too-big",
        lambda t: st.run_trial(_design(), cell=5, trial=0, **_RT),
        InvalidParameterError,
        "`cell`",
        "5",
    ),
    Bad(
        "run_trial-cell-negative",
        lambda t: st.run_trial(_design(), cell=-1, trial=0, **_RT),
        InvalidParameterError,
        "`cell`",
        "-1",
    ),
    Bad(
        "run_trial-cell-float",
        lambda t: st.run_trial(_design(), cell=0.5, trial=0, **_RT),
        InvalidParameterError,
        "`cell`",
        "0.5",
    ),
    Bad(
        "run_trial-trial-too-big",
        lambda t: st.run_trial(_design(), cell=0, trial=4, **_RT),
        InvalidParameterError,
        "`trial`",
        "4",
    ),
    Bad(
        "run_trial-trial-bool",
        lambda t: st.run_trial(_design(), cell=0, trial=True, **_RT),
        InvalidParameterError,
        "`trial`",
        "True",
    ),
    Bad(
        "run_trial-entropy-negative",
        lambda t: st.run_trial(_design(), cell=0, trial=0, entropy=-3),
        InvalidParameterError,
        "`entropy`",
        "-3",
    ),
    Bad(
        "run_trial-entropy-text",
        lambda t: st.run_trial(_design(), cell=0, trial=0, entropy="abc"),
        InvalidParameterError,
        "`entropy`",
        "'abc'",
    ),
    Bad(
        "run_trial-spawn-key-negative",
        lambda t: st.run_trial(_design(), cell=0, trial=0, entropy=1, spawn_key=(-1,)),
        InvalidParameterError,
        "`spawn_key`",
        "(-1,)",
    ),
    Bad(
        "run_trial-spawn-key-text",
        lambda t: st.run_trial(_design(), cell=0, trial=0, entropy=1, spawn_key="ab"),
        InvalidParameterError,
        "`spawn_key`",
        "'ab'",
    ),
    Bad(
        "verify_run-missing-folder",
        lambda t: st.verify_run(t / "nope"),
        InvalidParameterError,
        "`out`",
        "nope",
    ),
    Bad(
        "compare-strict-text",
        lambda t: st.compare(st.run(_design()), st.run(_design()), strict="no"),
        InvalidParameterError,
        "`strict`",
        "'no'",
    ),
    Bad(
        "compare-loose-paired-trials", _compare_loose_paired, InvalidParameterError, "paired=True", "4 and 6"
    ),
]


CLI_CASES = [
    Cli(
        "run-out-foreign-files",
        lambda t: ["run", str(_toml(t, FIGURE_TOML)), "--out", str(_with_foreign(t)), "--no-progress"],
        2,  # a usage error: the folder is not the run's; nothing was run
        "did not write",
        "notes.txt",
    ),
    Cli(
        "run-out-is-a-file",
        lambda t: [
            "run",
            str(_toml(t, FIGURE_TOML)),
            "--out",
            str(_toml(t, "x", "file.txt")),
            "--no-progress",
        ],
        2,  # a usage error: nothing was run
        "--out",
        "file.txt', which is a file",
    ),
    Cli(
        "run-out-under-a-file",
        lambda t: [
            "run",
            str(_toml(t, FIGURE_TOML)),
            "--out",
            str(_toml(t, "x", "file.txt") / "o"),
            "--no-progress",
        ],
        2,
        "--out",
        "file.txt', which is a file",
    ),
    Cli(
        "run-out-dangling-symlink",
        lambda t: ["run", str(_toml(t, FIGURE_TOML)), "--out", str(_dangling(t)), "--no-progress"],
        2,
        "--out",
        "symbolic link",
    ),
]


# ----------------------------------------------------------------------------- correct results
def _same(a: st.StudyResult, b: st.StudyResult) -> None:
    for name in ("trials", "pairs"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)


def _generator(tmp: Path) -> None:
    a = st.run(_design(), rng=np.random.default_rng(3))
    _same(a, st.run(_design(), rng=np.random.default_rng(3)))
    _same(a, st.run(_design(), rng=a.provenance["entropy"]))


def _seed_sequence(tmp: Path) -> None:
    a = st.run(_design(), rng=np.random.SeedSequence([7, 8], spawn_key=(2,)))
    prov = a.provenance
    _same(a, st.run(_design(), rng=np.random.SeedSequence(int(prov["entropy"]), spawn_key=prov["spawn_key"])))


def _recorded_values(tmp: Path) -> None:
    a = st.run(_design(), rng=12)
    p = a.provenance
    b = st.run(
        _design(), rng=p["entropy"], executor=p["executor"], workers=p["workers"], backend=p["backend"]
    )
    _same(a, b)


def _builtin_by_name(tmp: Path) -> None:
    res = st.run("performer-mse", quick=True, trials=2)
    assert res.design.name == "performer-mse" and len(res.trials)


def _threads_on_two_folders(tmp: Path) -> None:
    got: dict[str, st.StudyResult] = {}
    ts = [
        threading.Thread(target=lambda n=n: got.__setitem__(n, st.run(_design(), out=tmp / n))) for n in "ab"
    ]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    _same(got["a"], got["b"])


def _outputs_listed(tmp: Path) -> None:
    out, _ = _finished(tmp)
    files = json.loads((out / "manifest.json").read_text())["files"]
    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    written -= {"manifest.json", "run.json", ".run.lock.guard"}
    written = {w for w in written if not w.startswith("parts/")}
    assert written == set(files), written ^ set(files)
    assert st.verify_run(out).ok


def _foreign_untouched(tmp: Path) -> None:
    out, _ = _finished(tmp)
    mine = [out / "keep.tmp", out / "figures" / "mine.png", out / "parts" / "note"]
    for p in mine:
        p.parent.mkdir(exist_ok=True)  # parts/ is gone once a run finished
        p.write_text("mine")
    st.run(_toml(tmp, FIGURE_TOML, "fig.toml"), out=out, resume=True)
    assert all(p.read_text() == "mine" for p in mine)


def _truncated_png_detected(tmp: Path) -> None:
    out, _ = _finished(tmp)
    png = next((out / "figures").glob("*.png"))
    png.write_bytes(png.read_bytes()[:10])
    report = st.verify_run(out)
    assert not report.ok and str(png) in str(report)


def _compare_backends(tmp: Path) -> None:
    a = st.run(_design())
    b = st.run(_design(), backend="torch")
    m = st.compare(a, b, strict=False)
    assert [d["what"] for d in m.attrs["differences"]] == ["backend"]
    assert not m["flagged"].any()


def _notebook_without_widgets(tmp: Path) -> None:
    import sys
    import types

    shell = types.SimpleNamespace(config={"IPKernelApp": {}})
    with mock.patch.dict(
        sys.modules, {"IPython": types.SimpleNamespace(get_ipython=lambda: shell), "ipywidgets": None}
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            st.run(_design())  # shown by default in a notebook
            st.run(_design(), progress=True)


RESULT_CASES = [
    Good("run-rng-generator", _generator),
    Good("run-rng-seedsequence-list-entropy", _seed_sequence),
    Good("run-recorded-values-passed-back", _recorded_values),
    Good("run-builtin-study-by-name", _builtin_by_name),
    Good("run-two-threads-two-folders", _threads_on_two_folders),
    Good("write_report-every-output-listed", _outputs_listed),
    Good("run-foreign-files-untouched", _foreign_untouched),
    Good("verify_run-truncated-png", _truncated_png_detected),
    Good("compare-loose-backends", _compare_backends),
    Good("run-progress-notebook-no-widgets", _notebook_without_widgets),
]
