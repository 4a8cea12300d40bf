"""Run folders: work units, verified parts, one writer per folder, crash and damage recovery.

Crash tests stop a real ``rfkit run`` process at a named point (``RFKIT_STUDY_HOOK``) and
kill it with SIGKILL, so they do not depend on timing.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rfkit.study as st
from rfkit.cli import main as cli_main
from rfkit.exceptions import DamagedResultWarning, InvalidParameterError, StudyError
from rfkit.study import _runfolder
from rfkit.study._lock import RunLock, lock_holder
from rfkit.study._manifest import units_done
from rfkit.study._runner import _iter_results, worker_env

ROOT = Path(__file__).resolve().parents[2]

# 3 cells x 3 chunks = 9 work units, two estimators
STUDY = """
name = "crash"
trials = 30
chunk_trials = 10
seed = 4242
[data]
source = "pairs"
n_pairs = 6
dim = 4
norm = 0.8
[grid]
n_features = [4, 8, 16]
[[estimators]]
label = "positive"
map = "Positive"
[[estimators]]
label = "trig"
map = "Trig"
projection = "orthogonal"
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    path = tmp_path_factory.mktemp("study") / "crash.toml"
    path.write_text(STUDY)
    return path


@pytest.fixture(scope="module")
def reference(study):
    return st.run(study)


def _child_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _start_run(study, out, *args, **env):
    return subprocess.Popen(
        [sys.executable, "-m", "rfkit.cli", "run", str(study), "--out", str(out), "--no-progress", *args],
        env=_child_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop_at(study, out, point, marker, *args, **env):
    """Start ``rfkit run`` paused at ``point`` (test hook); return the process once it is there."""
    proc = _start_run(study, out, *args, RFKIT_STUDY_HOOK=point, RFKIT_STUDY_HOOK_FILE=str(marker), **env)
    deadline = time.time() + 120
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"run ended before {point}: {proc.communicate()}")
        assert time.time() < deadline, f"run never reached {point}"
        time.sleep(0.02)
    return proc


def _kill9(proc):
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()  # reaped: its pid is gone, so its lock is stale
    assert proc.returncode == -signal.SIGKILL


def _assert_complete_and_equal(out, reference):
    got = st.StudyResult.load(out)  # verifies every part and table
    pd.testing.assert_frame_equal(got.trials, reference.trials, check_exact=True)
    pd.testing.assert_frame_equal(got.pairs, reference.pairs, check_exact=True)
    pd.testing.assert_frame_equal(got.summary(), reference.summary(), check_exact=True)
    d = reference.design
    assert got.trials.groupby(["cell", "estimator", "trial"]).size().eq(1).all()
    assert len(got.trials) == len(d.cells()) * len(d.estimators) * d.trials
    assert st.verify_run(out).ok
    return got


# ---------------------------------------------------------------------- crash tests (kill -9, resume)
@pytest.mark.parametrize(
    "point, units_kept",
    [("after-unit:1", 1), ("after-unit:5", 5), ("after-file:trials.parquet", 9)],
    ids=["early", "middle", "final-tables"],
)
def test_kill9_then_resume_gives_the_uninterrupted_tables(study, reference, tmp_path, point, units_kept):
    out = tmp_path / "out"
    proc = _stop_at(study, out, point, tmp_path / "marker")
    _kill9(proc)
    assert units_done(out) == units_kept
    assert (out / "run.lock").exists()  # left behind by the killed run
    with pytest.raises(StudyError, match="unfinished study run"):
        st.StudyResult.load(out)  # never a silently partial result
    res = st.run(study, out=out, resume=True)  # takes over the dead run's lock
    assert res.provenance["units_resumed"] == units_kept
    assert res.provenance["lock_taken_over"]["pid"] == proc.pid
    assert not (out / "run.lock").exists()
    _assert_complete_and_equal(out, reference)


# ---------------------------------------------------------------------- code the estimator imports
MYEST = """
import dataclasses

from helper import SCALE
from rescaled import RescaledPositive


@dataclasses.dataclass(frozen=True)
class MyEstimator(RescaledPositive):
    scale: float = SCALE
"""

# 4 cells x 2 chunks = 8 work units
MYEST_STUDY = """
name = "mine"
trials = 20
chunk_trials = 10
seed = 5
[data]
source = "pairs"
n_pairs = 4
dim = 3
norm = 0.8
[grid]
n_features = [4, 8, 16, 32]
[[estimators]]
map = "myest:MyEstimator"
"""


def test_resume_after_a_module_the_estimator_imports_changed_refuses_naming_it(tmp_path, monkeypatch):
    """myest.py (named by the design) takes a constant from helper.py beside it: killed after 2 of 8
    units, helper.py edited, a resume must refuse (else the tables mix both versions)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "myest.py").write_text(MYEST)
    (code / "helper.py").write_text("SCALE = 0.5\n")
    study = tmp_path / "mine.toml"
    study.write_text(MYEST_STUDY)
    path = os.pathsep.join([str(ROOT), str(code), str(ROOT / "studies" / "examples")])
    out = tmp_path / "out"
    _kill9(_stop_at(study, out, "after-unit:2", tmp_path / "marker", PYTHONPATH=path))
    assert units_done(out) == 2
    recorded = json.loads((out / "run.json").read_text())["code"]
    # not rfkit, numpy or dataclasses; nor rescaled, which ships inside rfkit (rfkit's code identity covers it)
    assert set(recorded) == {"myest", "helper"}
    (code / "helper.py").write_text("SCALE = 0.25\n")
    # resumed here, with rfkit's own code identity pinned to the recorded one: only the user's code differs
    monkeypatch.setattr(_runfolder, "rfkit_code", lambda: json.loads((out / "run.json").read_text())["rfkit"])
    monkeypatch.syspath_prepend(str(ROOT / "studies" / "examples"))
    monkeypatch.syspath_prepend(str(code))
    try:
        with pytest.raises(StudyError, match=r"source of module\(s\) 'helper' changed since the run began"):
            st.run(study, out=out, resume=True)
    finally:
        for name in ("myest", "helper"):
            sys.modules.pop(name, None)
    assert units_done(out) == 2  # nothing recomputed, nothing mixed
    assert not (out / "trials.parquet").exists()


# ---------------------------------------------------------------------- damaged parts
def _parts(out):
    return sorted((out / "parts").glob("*.npy"))


def test_damaged_parts_are_reported_recomputed_and_tables_unchanged(tmp_path, capsys):
    """performer-mse --quick: a truncated, an altered (same size) and a missing part."""
    out = tmp_path / "pm"
    args = ["run", "performer-mse", "--quick", "--out", str(out), "--no-progress", "--keep-parts"]
    assert cli_main(args) == 0
    ref = st.StudyResult.load(out)
    parts = _parts(out)
    assert len(parts) >= 6
    truncated, altered, missing = parts[0], parts[3], parts[-1]
    truncated.write_bytes(truncated.read_bytes()[:-100])
    data = bytearray(altered.read_bytes())
    data[-8:] = bytes(8) if data[-8:] != bytes(8) else b"\x01" * 8  # same size, other bytes
    altered.write_bytes(bytes(data))
    missing.unlink()
    report = st.verify_run(out)
    assert not report.ok and {p for p, _ in report.problems} == {str(truncated), str(altered), str(missing)}
    with pytest.raises(StudyError, match="damaged") as info:
        st.StudyResult.load(out)
    for p in (truncated, altered, missing):
        assert str(p) in str(info.value)
    capsys.readouterr()
    assert cli_main([*args, "--resume"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"{truncated}: truncated" in err and f"{altered}: altered" in err and f"{missing}: missing" in err
    res = st.StudyResult.load(out)
    pd.testing.assert_frame_equal(res.trials, ref.trials, check_exact=True)
    pd.testing.assert_frame_equal(res.pairs, ref.pairs, check_exact=True)
    assert {r["path"] for r in res.provenance["repaired"]} == {str(truncated), str(altered), str(missing)}
    assert st.verify_run(out).ok


def test_damaged_final_table_is_an_error_on_load_and_resume_repairs_it(study, reference, tmp_path):
    out = tmp_path / "o"
    st.run(study, out=out, keep_parts=True)
    table = out / "pairs.parquet"
    table.write_bytes(table.read_bytes()[:50])
    with pytest.raises(StudyError, match=r"pairs\.parquet: truncated"):
        st.StudyResult.load(out)
    res = st.run(study, out=out, resume=True)  # every part verified; the tables are rewritten
    assert res.provenance["units_resumed"] == 9 and res.provenance["repaired"] == []
    _assert_complete_and_equal(out, reference)


def test_damaged_run_manifest_gives_a_recovery_recipe(study, reference, tmp_path):
    out = tmp_path / "o"
    st.run(study, out=out, keep_parts=True)
    manifest = out / "run.json"
    text = manifest.read_text()
    manifest.write_text(text.replace('"size": ', '"size": 1', 1))  # still valid JSON, altered
    with pytest.raises(StudyError, match="run.json") as info:
        st.run(study, out=out, resume=True)
    msg = str(info.value)
    assert "does not match its checksum" in msg and "delete" in msg and "--resume" in msg
    assert "damaged run manifest" in str(st.verify_run(out))
    manifest.write_text(text[: len(text) // 2])  # truncated: not JSON
    with pytest.raises(StudyError, match="cannot be parsed"):
        st.run(study, out=out, resume=True)
    with pytest.raises(StudyError, match="already holds results"):
        st.run(study, out=out)
    manifest.unlink()  # the documented recovery: every part is recomputed
    with pytest.warns(DamagedResultWarning, match="no run manifest"):
        res = st.run(study, out=out, resume=True)
    assert res.provenance["units_resumed"] == 0
    _assert_complete_and_equal(out, reference)


def test_load_errors_name_the_problem(tmp_path):
    with pytest.raises(StudyError, match="no such directory"):
        st.StudyResult.load(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StudyError, match="manifest.json is missing"):
        st.StudyResult.load(tmp_path / "empty")
    with pytest.raises(InvalidParameterError, match="must be an existing folder"):
        st.verify_run(tmp_path / "nope")


def test_verify_run_tells_a_folder_that_is_not_a_run_from_a_damaged_one(reference, tmp_path):
    """A folder with neither manifest, or only another program's JSON, is not a run (a named error, never
    ``ok``); an rfkit manifest that lacks what reopening needs is a damaged run (``ok`` is False)."""
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        StudyError, match=r"'.*empty' is not a study run: it holds neither run.json .* nor manifest.json"
    ):
        st.verify_run(tmp_path / "empty")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "manifest.json").write_text('{"name": "app", "version": "2"}')
    with pytest.raises(
        StudyError, match=r"manifest.json is not an rfkit result manifest .*'name', 'version'"
    ):
        st.verify_run(tmp_path / "app")
    out = reference.save(tmp_path / "saved")
    assert st.verify_run(out).ok
    body = json.loads((out / "manifest.json").read_text())
    del body["design"], body["files"]["pairs.parquet"]
    (out / "manifest.json").write_text(json.dumps(body))
    report = st.verify_run(out)
    assert not report.ok and report.finished
    assert [why for _, why in report.problems] == [
        "damaged result manifest: `design` is missing (the study design, needed to reopen the result)",
        "damaged result manifest: `files` has no record of pairs.parquet (a table the result is read from)",
    ]
    with pytest.raises(
        StudyError, match=r"(?s)is damaged; nothing was loaded.*manifest.json.*`design` is missing"
    ):
        st.load(out)


# ---------------------------------------------------------------------- one writer per folder
def test_lock_refuses_names_holder_waits_and_takes_over_stale(study, tmp_path):
    out = tmp_path / "o"
    holder = _stop_at(study, out, "after-unit:2", tmp_path / "m")  # a live run holding the folder
    try:
        with pytest.raises(StudyError, match=f"in use by another rfkit run: pid {holder.pid} on host"):
            st.run(study, out=out, resume=True)
        t0 = time.monotonic()
        with pytest.raises(StudyError, match="after waiting 0.5 s"):
            st.run(study, out=out, resume=True, lock_timeout=0.5)
        assert time.monotonic() - t0 >= 0.5
        info = json.loads((out / "run.lock").read_text())
        assert info["pid"] == holder.pid and info["host"] and info["started"]
        # CLI: refuses with exit status 1 and the holder on stderr, no traceback
        r = subprocess.run(
            [sys.executable, "-m", "rfkit.cli", "run", str(study), "--out", str(out), "--resume"],
            env=_child_env(),
            capture_output=True,
            text=True,
        )
        assert r.returncode == 1 and f"pid {holder.pid}" in r.stderr and "Traceback" not in r.stderr
    finally:
        _kill9(holder)
    assert lock_holder(out) is None  # dead holder: the lock is stale
    with pytest.raises(InvalidParameterError, match="`lock_timeout` parameter"):
        st.run(study, out=out, resume=True, lock_timeout=-1)


def test_two_simultaneous_resumes_end_with_one_correct_table(study, reference, tmp_path):
    out = tmp_path / "o"
    _kill9(_stop_at(study, out, "after-unit:2", tmp_path / "m"))  # an interrupted run
    procs = [_start_run(study, out, "--resume", "--wait-lock", "120", "--keep-parts") for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    got = _assert_complete_and_equal(out, reference)
    assert got.provenance["units_resumed"] == 9  # the later run found the finished one
    # without waiting, a second run refuses while the first holds the folder, naming it
    holder = _stop_at(study, out, "after-file:trials.parquet", tmp_path / "m2", "--resume")
    try:
        late = _start_run(study, out, "--resume")
        _, err = late.communicate(timeout=120)
        assert late.returncode == 1 and f"pid {holder.pid}" in err
    finally:
        _kill9(holder)
    st.run(study, out=out, resume=True)
    _assert_complete_and_equal(out, reference)


def test_waiting_run_survives_the_holders_sweep_of_its_write_probe(tmp_path, monkeypatch):
    # The run holding a folder sweeps rfkit's temporary files (``.*.rfkit-tmp``) when it opens it;
    # a second run's write probe is one of them and can vanish between its write and its removal.
    # That once failed a waiting ``--resume`` with "output directory ... is not writable".
    out = tmp_path / "o"
    out.mkdir()
    write_text = Path.write_text

    def write_then_swept(self, *args, **kwargs):
        n = write_text(self, *args, **kwargs)
        if self.name.startswith(".write-test-"):
            self.unlink()  # what the holder's sweep does
        return n

    monkeypatch.setattr(Path, "write_text", write_then_swept)
    with RunLock(out):
        assert (out / "run.lock").exists()
    assert not any(out.glob(".write-test-*"))


def test_lock_is_reentrant_and_released(tmp_path):
    out = tmp_path / "o"
    with RunLock(out) as lock:
        with RunLock(out):
            assert (out / "run.lock").exists()
        assert (out / "run.lock").exists()
        assert json.loads((out / "run.lock").read_text())["token"] == lock.token
    assert not (out / "run.lock").exists()
    (out / "run.lock").write_text("")  # an abandoned, unreadable lock file ...
    old = time.time() - 60
    os.utime(out / "run.lock", (old, old))
    with RunLock(out) as lock:  # ... is taken over once it is old
        assert lock.taken_over == {}


# ---------------------------------------------------------------------- work units and executors
def _kind_designs():
    small = dict(trials=9, chunk_trials=4, seed=77)
    return {
        "kernel": st.Design(
            name="k",
            estimators=[{"map": "Positive"}, {"map": "HCEXP", "A": "variance"}, {"map": "Taylor"}],
            grid={"n_features": [4, 8], "degree": [1]},
            data={"source": "pairs", "n_pairs": 5, "dim": 3, "norm": 0.7},
            **small,
        ),
        "attention": st.Design(
            name="a",
            kind="attention",
            estimators=[{"estimator": "RFA", "map": "Positive"}, {"estimator": "LARA", "weights": "balance"}],
            grid={"samples": [4]},
            data={"source": "sequence", "n_tokens": 12, "dim": 4, "d_v": 3, "structure": "local"},
            **small,
        ),
        "concentration": st.Design(
            name="c",
            kind="concentration",
            estimators=[{"map": "HCEXP", "A": "identity"}],
            grid={"p": [0.9], "n_pairs": [4], "n_features": [16]},
            data={"source": "gaussian", "dim": 3, "mean_q": 0.1, "cov_q": 0.01, "mean_k": 0.0, "cov_k": 0.01},
            **small,
        ),
    }


def _tables(res):
    return res.trials, res.pairs, res.summary()


def test_chunking_is_exact_for_every_kind():
    """A cell cut into chunks gives the same tables as one unit with every trial (kernel, attention, concentration)."""
    for kind, d in _kind_designs().items():
        whole = st.run(st.Design(**{**d.to_dict(), "chunk_trials": d.trials}))
        parts = st.run(d)
        assert parts.provenance["units"] == len(d.cells()) * 3, kind
        for a, b in zip(_tables(whole), _tables(parts)):
            pd.testing.assert_frame_equal(a, b, check_exact=True)


@pytest.mark.slow
def test_tables_bit_identical_across_executors_and_worker_counts():
    """Fewer cells than workers: (cell, chunk) units keep every worker busy; tables do not change.

    (Dask on a chunked design: tests/studies/test_study_harness.py::test_executors_bit_identical.)
    """
    for d in _kind_designs().values():
        serial = st.run(d)
        procs = st.run(d, executor="processes", workers=3)
        assert len(d.cells()) < 3 and procs.provenance["units"] >= 3
        for a, b in zip(_tables(serial), _tables(procs)):
            pd.testing.assert_frame_equal(a, b, check_exact=True)


@pytest.mark.slow
def test_one_cell_uses_every_worker():
    d = st.Design(
        name="one",
        estimators=[{"map": "Positive", "projection": "orthogonal"}],
        grid={"n_features": [512]},
        data={"source": "pairs", "n_pairs": 400, "dim": 64, "norm": 0.3},
        trials=600,
        chunk_trials=100,
        seed=9,
    )
    res = st.run(d, executor="processes", workers=2)
    assert len(d.cells()) == 1 and res.provenance["units"] == 6
    assert res.provenance["worker_processes"] == 2  # both workers computed units of the one cell


def test_worker_processes_get_their_share_of_threads(monkeypatch):
    monkeypatch.setenv("RFKIT_NUM_THREADS", "sentinel")
    cpus = os.cpu_count() or 1
    assert worker_env(1)["RFKIT_NUM_THREADS"] == str(cpus)
    assert worker_env(10 * cpus)["OMP_NUM_THREADS"] == "1"
    names = ["RFKIT_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"]
    got = list(_iter_results(functools.partial(os.getenv), [(n,) for n in names], "processes", 2, None))
    assert sorted(got) == [str(max(1, cpus // 2))] * 4
    assert os.environ["RFKIT_NUM_THREADS"] == "sentinel"  # the parent's environment is restored


def test_part_files_and_manifest_layout(study, tmp_path):
    out = tmp_path / "o"
    st.run(study, out=out, keep_parts=True)
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["format"] == "rfkit-run/2" and manifest["n_chunks"] == 3
    assert sorted(manifest["units"]) == sorted(f"{c}.{k}" for c in range(3) for k in range(3))
    for entry in manifest["units"].values():
        assert not entry["final"]
        for rel, rec in entry["files"].items():
            data = (out / rel).read_bytes()
            assert rec["size"] == len(data) and len(rec["sha256"]) == 64
    assert {"trials.parquet", "pairs.parquet", "summary.parquet"} <= set(
        json.loads((out / "manifest.json").read_text())["files"]
    )
    assert not list(out.rglob("*.tmp")) and not (out / "run.lock").exists()
    arr = np.load(out / "parts" / "cell-000000.chunk-00002.ratio.npy")
    assert arr.shape == (2, 10, 6)  # (estimator, trial of the chunk, pair)


def test_folder_of_an_older_rfkit_is_recomputed_on_resume(study, reference, tmp_path):
    """Per-cell files (cells/) and a run.json without checksums: nothing verifiable, all recomputed."""
    out = tmp_path / "old"
    (out / "cells").mkdir(parents=True)
    d = reference.design
    ident = {"design_hash": d.hash(), "entropy": reference.provenance["entropy"], "spawn_key": []}
    (out / "run.json").write_text(json.dumps({**ident, "design": d.to_dict()}))
    reference.trials.head(3).to_parquet(out / "cells" / "cell-000000.trials.parquet")
    with pytest.raises(StudyError, match="already holds results"):
        st.run(study, out=out)
    with pytest.warns(DamagedResultWarning, match="older rfkit"):
        res = st.run(study, out=out, resume=True)
    assert res.provenance["units_resumed"] == 0
    _assert_complete_and_equal(out, reference)


# ---------------------------------------------------------------------- what a finished run leaves
def test_a_finished_run_leaves_no_lock_files_and_no_parts(study, reference, tmp_path):
    out = tmp_path / "o"
    res = st.run(study, out=out)
    assert not (out / "run.lock").exists() and not (out / ".run.lock.guard").exists()
    assert not (out / "parts").exists(), sorted((out / "parts").iterdir())
    report = st.verify_run(out)
    assert report.ok and report.finished and report.units_done == report.units_total == 9, report
    loaded = st.StudyResult.load(out)
    pd.testing.assert_frame_equal(loaded.trials, res.trials, check_exact=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DamagedResultWarning)  # nothing is missing: no damage reported
        again = st.run(study, out=out, resume=True)
    _assert_complete_and_equal(out, reference)
    pd.testing.assert_frame_equal(again.trials, reference.trials, check_exact=True)
    assert not (out / "parts").exists() and not (out / ".run.lock.guard").exists()
    table = out / "pairs.parquet"  # without parts, a damaged table is reported and every unit recomputed
    table.write_bytes(table.read_bytes()[:50])
    with pytest.warns(DamagedResultWarning, match=r"pairs\.parquet: truncated"):
        repaired = st.run(study, out=out, resume=True)
    assert repaired.provenance["units_resumed"] == 0
    _assert_complete_and_equal(out, reference)


def test_keep_parts_keeps_them(study, tmp_path, capsys):
    out = tmp_path / "o"
    st.run(study, out=out, keep_parts=True)
    assert len(list((out / "parts").glob("*.npy"))) == 9 * 2  # ratio and status of each unit
    assert st.verify_run(out).ok and not (out / ".run.lock.guard").exists()
    cli_out = tmp_path / "cli"
    assert cli_main(["run", str(study), "--out", str(cli_out), "--no-progress", "--keep-parts"]) == 0
    assert len(list((cli_out / "parts").glob("*.npy"))) == 9 * 2  # ratio and status of each unit


def test_a_failed_run_keeps_its_parts_and_leaves_no_lock_files(study, tmp_path, monkeypatch):
    out = tmp_path / "o"
    calls = []

    def fail_on_third(self, result):
        calls.append(result)
        if len(calls) == 3:
            raise StudyError("stop here")
        return real(self, result)

    real = _runfolder.RunFolder.record
    monkeypatch.setattr(_runfolder.RunFolder, "record", fail_on_third)
    with pytest.raises(StudyError, match="stop here"):
        st.run(study, out=out)
    assert units_done(out) == 2 and len(list((out / "parts").glob("*.npy"))) == 2 * 2  # ratio, status
    assert not (out / "run.lock").exists() and not (out / ".run.lock.guard").exists()


def test_overwrite_removes_only_what_the_previous_run_wrote(study, reference, tmp_path):
    out = tmp_path / "o"
    st.run(study, out=out, trials=10, keep_parts=True)
    stray = out / "parts" / "cell-000009.chunk-00000.ratio.npy"  # rfkit's own name, not recorded
    stray.write_bytes(b"x")
    res = st.run(study, out=out, overwrite=True)
    pd.testing.assert_frame_equal(res.trials, reference.trials, check_exact=True)
    _assert_complete_and_equal(out, reference)
    assert not stray.exists() and not (out / "parts").exists()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(StudyError, match=r"notes\.txt") as info:
        st.run(study, out=out, overwrite=True)
    assert "overwrite=True" in str(info.value) and (out / "notes.txt").read_text() == "mine"
    assert st.verify_run(out).ok  # the refused overwrite removed nothing
    with pytest.raises(InvalidParameterError, match="`overwrite`.*`resume`|`resume`.*`overwrite`"):
        st.run(study, out=out, overwrite=True, resume=True)
