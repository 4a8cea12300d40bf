"""Run safety: one writer across threads, verified outputs, write failures, foreign files, values that
can be passed back, named errors for a dead worker, progress in notebooks, loose comparisons."""

from __future__ import annotations

import errno
import json
import os
import sys
import threading
import types
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rfkit as rk
import rfkit.study as st
from rfkit.cli import main as cli_main
from rfkit.exceptions import DamagedResultWarning, InvalidParameterError, StudyError
from rfkit.report import write_report
from rfkit.study import _atomic, _runfolder
from rfkit.study._atomic import OutputWriteError, tmp_name
from rfkit.study._lock import RunLock
from rfkit.study._manifest import read_run_manifest, write_run_manifest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "studies" / "examples"

STUDY = """
name = "safe"
trials = 20
chunk_trials = 10
seed = 77
[data]
source = "pairs"
n_pairs = 4
dim = 3
norm = 0.8
[grid]
n_features = [4, 8]
[[estimators]]
label = "positive"
map = "Positive"
[outputs]
figures = ["mse_vs_features"]
"""


def small(**over):
    kw = dict(
        name="safe",
        estimators=[{"map": "Positive"}],
        grid={"n_features": [4, 8]},
        data={"source": "pairs", "n_pairs": 4, "dim": 3},
        trials=20,
        chunk_trials=10,
        seed=77,
    )
    kw.update(over)
    return st.Design(**kw)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    path = tmp_path_factory.mktemp("safe") / "safe.toml"
    path.write_text(STUDY)
    return path


@pytest.fixture(scope="module")
def reference():
    return st.run(small())


def _same(a, b):
    for name in ("trials", "pairs"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)


def _snapshot(paths):
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in paths}


# ----------------------------------------------------------------------------- one writer, threads
def test_two_threads_on_one_folder_one_runs_the_other_is_refused(tmp_path, monkeypatch, reference):
    out = tmp_path / "o"
    inside, go_on = threading.Event(), threading.Event()
    record = _runfolder.RunFolder.record

    def slow_record(self, *a, **k):
        inside.set()
        go_on.wait(30)
        return record(self, *a, **k)

    monkeypatch.setattr(_runfolder.RunFolder, "record", slow_record)
    results: dict[str, object] = {}

    def first():
        results["first"] = st.run(small(), out=out)

    t = threading.Thread(target=first, name="first-run")
    t.start()
    assert inside.wait(30)
    try:
        with pytest.raises(StudyError, match="in use by another rfkit run.*thread 'first-run'"):
            st.run(small(), out=out)
    finally:
        go_on.set()
        t.join(60)
    _same(results["first"], reference)
    assert not (out / "run.lock").exists()


def test_lock_is_reentrant_in_one_thread_and_exclusive_across_threads(tmp_path):
    errors = []
    with RunLock(tmp_path), RunLock(tmp_path):  # the same thread takes it again

        def other():
            try:
                RunLock(tmp_path).acquire()
            except StudyError as exc:
                errors.append(str(exc))

        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert errors and "another thread of this process" in errors[0]
    with RunLock(tmp_path):  # released: free again
        pass


def test_temporary_names_are_unique_per_thread_and_process(tmp_path):
    names = []
    t = threading.Thread(target=lambda: names.append(tmp_name(tmp_path / "run.json")))
    t.start()
    t.join()
    names.append(tmp_name(tmp_path / "run.json"))
    assert names[0] != names[1] and all(str(os.getpid()) in n.name for n in names)


def test_takeover_of_a_stale_lock_is_recorded_when_the_run_reenters(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    stale = {"pid": 999999999, "host": os.uname().nodename, "started": "x"}
    (out / "run.lock").write_text(json.dumps(stale))
    with RunLock(out):  # as the CLI holds it across run and report
        res = st.run(small(), out=out)
    assert res.provenance["lock_taken_over"]["pid"] == 999999999


# ----------------------------------------------------------------------------- code of user modules
MAP = """
import dataclasses
from rescaled import RescaledPositive


@dataclasses.dataclass(frozen=True)
class Mine(RescaledPositive):
    pass
"""


def test_resume_after_the_user_module_changed_refuses_naming_it(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "mymaps_w.py").write_text(MAP)
    design = small(estimators=[{"map": "mymaps_w:Mine", "scale": 0.5}])
    out = tmp_path / "o"
    first = st.run(design, out=out)
    st.run(design, out=out, resume=True)  # unchanged code: resumes
    (tmp_path / "mymaps_w.py").write_text(MAP + "\n# changed\n")
    with pytest.raises(StudyError, match="source of module.*'mymaps_w' changed"):
        st.run(design, out=out, resume=True)
    assert st.load(out).trials.equals(first.trials)


def test_a_run_recorded_before_code_hashes_still_resumes(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    design = small(estimators=[{"map": "rescaled:RescaledPositive", "scale": 0.5}])
    out = tmp_path / "o"
    first = st.run(design, out=out)
    body = read_run_manifest(out / "run.json")
    assert "rescaled" in body.pop("code")
    write_run_manifest(out, body)  # as an older rfkit wrote it
    _same(st.run(design, out=out, resume=True), first)


def test_resume_with_other_rfkit_code_refuses_naming_both(tmp_path, monkeypatch):
    """rfkit's own version and source hash are part of a run's identity: a resume after an upgrade
    or an edit of rfkit refuses; a run recorded before that resumes."""
    design = small()
    out = tmp_path / "o"
    first = st.run(design, out=out)
    body = read_run_manifest(out / "run.json")
    assert body["rfkit"] == _runfolder.rfkit_code() and body["rfkit"].startswith(rk.__version__ + ":")
    monkeypatch.setattr(_runfolder, "rfkit_code", lambda: rk.__version__ + ":0123456789abcdef")
    with pytest.raises(StudyError, match=r"rfkit's own code changed since the run began \(rfkit 0\.1\.0:"):
        st.run(design, out=out, resume=True)
    assert st.load(out).trials.equals(first.trials)  # nothing overwritten
    body.pop("rfkit")
    write_run_manifest(out, body)  # as an older rfkit wrote it: not checkable, resumes
    _same(st.run(design, out=out, resume=True), first)


def test_rfkit_code_hash_follows_the_source(tmp_path, monkeypatch):
    pkg = tmp_path / "rfkit"
    (pkg / "study").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "study" / "_runfolder.py").write_text("")
    monkeypatch.setattr(_runfolder, "__file__", str(pkg / "study" / "_runfolder.py"))
    _runfolder.rfkit_code.cache_clear()
    try:
        a = _runfolder.rfkit_code()
        _runfolder.rfkit_code.cache_clear()
        (pkg / "a.py").write_text("x = 2\n")
        assert _runfolder.rfkit_code() != a
    finally:
        _runfolder.rfkit_code.cache_clear()


def test_code_hashes_name_imports_and_module_paths(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    d = small(estimators=[{"map": "rescaled:RescaledPositive", "scale": 0.5}, {"map": "Positive"}])
    hashes = _runfolder.code_hashes(d)
    assert list(hashes) == ["rescaled"] and len(hashes["rescaled"]) == 64


def _write(root, files):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


# a user module importing user code every way a module can: a package (relative imports), a chain,
# an import inside a function, a literal import_module; and stdlib, installed and rfkit modules
CHAIN = {
    "top_w.py": "import json\nimport numpy as np\nimport rfkit as rk\nfrom pkg_w.sub import VALUE\n"
    "try:\n    import absent_w\nexcept ImportError:\n    pass\n"
    "def late():\n    import late_w\n    return importlib.import_module('dyn_w')\n",
    "pkg_w/__init__.py": "from . import sub\n",
    "pkg_w/sub.py": "from .deep import X as VALUE\n",
    "pkg_w/deep.py": "import chain_w\nX = chain_w.Y\n",
    "chain_w.py": "import os\nY = 1\n",
    "late_w.py": "",
    "dyn_w.py": "",
    "unused_w.py": "",
}
CHAIN_NAMES = ["pkg_w", "pkg_w.sub", "pkg_w.deep", "chain_w", "late_w", "dyn_w"]


def test_code_identity_follows_the_user_modules_imported_transitively(tmp_path, monkeypatch):
    """Every module of the user's that a named module imports, through any number of others, is hashed;
    stdlib, installed packages and rfkit are not, nothing is imported to find them, and the identity is
    the same whether or not the modules were imported before."""
    from rfkit.study._code_identity import user_code_hashes

    _write(tmp_path, CHAIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = user_code_hashes(["top_w"])
    assert list(before) == ["top_w", *sorted(CHAIN_NAMES)]
    assert all(len(h) == 64 for h in before.values())
    assert not any(m in sys.modules for m in ["top_w", *CHAIN_NAMES])  # found, not imported
    try:
        __import__("top_w")
        assert user_code_hashes(["top_w"]) == before  # imported or not: the same identity
    finally:
        for m in ["top_w", *CHAIN_NAMES]:
            sys.modules.pop(m, None)
    (tmp_path / "chain_w.py").write_text("import os\nY = 2\n")  # three imports away
    after = user_code_hashes(["top_w"])
    assert {m for m in after if after[m] != before[m]} == {"chain_w"}


def test_a_resume_after_a_module_imported_through_another_changed_refuses(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.syspath_prepend(str(tmp_path))
    _write(tmp_path, {"deepmaps_w.py": MAP.replace("import dataclasses", "import dataclasses\nimport pkg_w")})
    _write(tmp_path, {k: v for k, v in CHAIN.items() if k.startswith(("pkg_w", "chain_w"))})
    design = small(estimators=[{"map": "deepmaps_w:Mine", "scale": 0.5}])
    out = tmp_path / "o"
    try:
        first = st.run(design, out=out)
        # rescaled (imported by deepmaps_w) ships inside the rfkit package (rfkit/studies/examples):
        # rfkit's own code identity covers it, so it is not among the user's modules
        assert set(read_run_manifest(out / "run.json")["code"]) == {
            "deepmaps_w",
            "pkg_w",
            "pkg_w.sub",
            "pkg_w.deep",
            "chain_w",
        }
        _same(st.run(design, out=out, resume=True), first)  # unchanged code: resumes
        (tmp_path / "chain_w.py").write_text("import os\nY = 2\n")
        with pytest.raises(StudyError, match="source of module.*'chain_w' changed"):
            st.run(design, out=out, resume=True)
    finally:
        for m in ["deepmaps_w", *CHAIN_NAMES]:
            sys.modules.pop(m, None)


# ----------------------------------------------------------------------------- verified outputs
def test_every_output_is_recorded_and_a_truncated_figure_is_detected_and_rerendered(study, tmp_path):
    out = tmp_path / "o"
    assert cli_main(["run", str(study), "--out", str(out), "--no-progress"]) == 0
    files = json.loads((out / "manifest.json").read_text())["files"]
    for name in ("summary.csv", "theory.csv", "report.md", "tables/mse.tex"):
        assert name in files, name
    figs = [f for f in files if f.startswith("figures/")]
    assert any(f.endswith(".png") for f in figs) and any(f.endswith(".pdf") for f in figs)
    assert st.verify_run(out).ok
    png = out / next(f for f in figs if f.endswith(".png"))
    png.write_bytes(png.read_bytes()[:100])
    report = st.verify_run(out)
    assert not report.ok and str(png) in str(report) and "truncated" in str(report)
    with pytest.warns(DamagedResultWarning, match=r"(?s)damaged output file.*png: truncated"):
        res = st.run(study, out=out, resume=True)  # the API run reports it and keeps listing it
    assert res.provenance["repaired"][0]["path"] == str(png)
    assert not st.verify_run(out).ok
    assert cli_main(["run", str(study), "--out", str(out), "--no-progress", "--resume"]) == 0
    assert st.verify_run(out).ok  # re-rendered


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES])
@pytest.mark.parametrize("where", ["replace", "open"])
def test_disk_full_or_permission_denied_names_the_path_and_the_run_resumes(
    tmp_path, monkeypatch, reference, code, where
):
    out = tmp_path / "o"
    calls = {"n": 0}
    real = os.replace if where == "replace" else open

    def failing(*a, **k):
        calls["n"] += 1
        if calls["n"] == 4:  # a part file of the second unit
            raise OSError(code, os.strerror(code))
        return real(*a, **k)

    if where == "replace":
        monkeypatch.setattr(_atomic.os, "replace", failing)
    else:
        monkeypatch.setattr(_atomic, "open", failing, raising=False)
    with pytest.raises(OutputWriteError, match=r"cannot write '.*'.*resume") as info:
        st.run(small(), out=out)
    assert str(out) in str(info.value)
    assert ("disk is full" if code == errno.ENOSPC else "permission denied") in str(info.value)
    monkeypatch.undo()
    assert not list(out.rglob("*.rfkit-tmp"))
    _same(st.run(small(), out=out, resume=True), reference)


def test_a_folder_named_summary_csv_and_a_file_named_figures_are_named_errors(study, tmp_path):
    out = tmp_path / "o"
    res = st.run(study, out=out, keep_parts=True)  # the failed rewrite removes manifest.json: parts rebuild
    (out / "summary.csv").unlink()
    (out / "summary.csv").mkdir()
    with pytest.raises(OutputWriteError, match="summary.csv.*folder of that name"):
        st.run(study, out=out, resume=True)
    (out / "summary.csv").rmdir()
    res = st.run(study, out=out, resume=True)
    (out / "figures").write_text("not a folder")
    with pytest.raises(OutputWriteError, match="figures.*in the way"):
        write_report(res, out)


# ----------------------------------------------------------------------------- foreign files
def test_foreign_files_are_never_touched_and_a_fresh_run_refuses_them(study, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(StudyError, match="holds files this run did not write.*notes.txt"):
        st.run(study, out=out)
    assert not (out / "run.json").exists() and not (out / "parts").exists()
    (out / "notes.txt").unlink()
    assert cli_main(["run", str(study), "--out", str(out), "--no-progress"]) == 0
    foreign = [out / "notes.txt", out / "draft.tmp", out / ".hidden", out / "figures" / "mine.png"]
    foreign += [out / "parts" / "keep.me", out / "sub" / "x.csv"]
    for i, p in enumerate(foreign):
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(b"foreign %d" % i)
    before = _snapshot(foreign)
    st.run(study, out=out, resume=True)
    with pytest.raises(StudyError, match="already holds results"):
        st.run(study, out=out)
    assert cli_main(["run", str(study), "--out", str(out), "--no-progress", "--resume"]) == 0
    assert _snapshot(foreign) == before
    assert st.verify_run(out).ok


# ----------------------------------------------------------------------------- values passed back
def test_recorded_values_reproduce_the_run_when_passed_back(reference):
    prov = reference.provenance
    again = st.run(
        small(),
        rng=prov["entropy"],
        executor=prov["executor"],
        workers=prov["workers"],
        backend=prov["backend"],
        device=prov["device"],
    )
    _same(again, reference)
    _same(st.run(small(), rng=int(prov["entropy"])), reference)
    cell, trial = 1, 3
    replay = st.run_trial(
        small(), cell=cell, trial=trial, entropy=prov["entropy"], spawn_key=prov["spawn_key"]
    )
    assert len(replay)


@pytest.mark.parametrize(
    "rng",
    [
        lambda: np.random.Generator(np.random.PCG64(5)),
        lambda: np.random.SeedSequence(5),
        lambda: np.random.SeedSequence([1, 2, 3], spawn_key=(4,)),
    ],
    ids=["generator", "seedsequence", "seedsequence-list-entropy"],
)
def test_generators_and_seed_sequences_are_accepted_and_reproducible(rng):
    a = st.run(small(), rng=rng())
    b = st.run(small(), rng=rng())  # the same state gives the same run
    _same(a, b)
    prov = a.provenance
    back = np.random.SeedSequence(int(prov["entropy"]), spawn_key=prov["spawn_key"])
    _same(st.run(small(), rng=back), a)


def test_workers_without_processes_is_refused_and_serial_records_one_worker(reference):
    with pytest.raises(InvalidParameterError, match="`workers` = 2 needs executor='processes'"):
        st.run(small(), workers=2)
    assert reference.provenance["workers"] == 1


def test_builtin_study_by_name():
    res = st.run("performer-mse", quick=True, trials=2)
    assert res.design.name == "performer-mse" and "performer-mse.toml" in res.provenance["design_source"]


def test_bogus_dask_scheduler_is_a_named_error():
    with pytest.raises(StudyError, match="cannot reach the Dask scheduler 'bogus://x'"):
        st.run(small(), scheduler="bogus://x")


KILLER = """
import dataclasses
import multiprocessing
import os
import signal
from rescaled import RescaledPositive


@dataclasses.dataclass(frozen=True)
class Killer(RescaledPositive):
    def sample_one(self, dim, *, rng):
        if os.environ.get("RFKIT_TEST_KILL") and multiprocessing.parent_process() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().sample_one(dim, rng=rng)
"""


def test_a_killed_worker_names_the_unit_and_the_run_resumes(tmp_path, monkeypatch):
    (tmp_path / "killer_w.py").write_text(KILLER)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.syspath_prepend(str(tmp_path))
    path = os.pathsep.join([str(tmp_path), str(EXAMPLES), str(ROOT), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)
    design = small(estimators=[{"map": "killer_w:Killer", "scale": 0.5}])
    out = tmp_path / "o"
    monkeypatch.setenv("RFKIT_TEST_KILL", "1")
    with pytest.raises(
        StudyError, match=r"worker process died.*work unit \(cell \d+, chunk \d+\).*resumable"
    ):
        st.run(design, executor="processes", workers=2, out=out)
    monkeypatch.delenv("RFKIT_TEST_KILL")
    _same(st.run(design, executor="processes", workers=2, out=out, resume=True), st.run(design))


# ----------------------------------------------------------------------------- notebooks
def _fake_notebook(monkeypatch):
    shell = types.SimpleNamespace(config={"IPKernelApp": {}})
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # not installed


def test_progress_in_a_notebook_without_widgets_is_a_text_bar_and_no_warning(monkeypatch, capsys, reference):
    _fake_notebook(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = st.run(small())  # default: shown in a notebook
    _same(res, reference)
    assert "safe" in capsys.readouterr().err  # the text bar, on stderr


def test_progress_true_forces_the_bar_and_false_hides_it(capsys):
    st.run(small(), progress=True)
    assert "unit" in capsys.readouterr().err
    st.run(small(), progress=False)
    assert capsys.readouterr().err == ""


# ----------------------------------------------------------------------------- compare
def test_compare_loose_lists_the_differences_instead_of_refusing(reference):
    other = st.run(small(), trials=10)
    with pytest.raises(InvalidParameterError, match="trials"):
        st.compare(reference, other)
    m = st.compare(reference, other, strict=False)
    assert m.attrs["differences"] == [{"what": "trials", "a": 20, "b": 10}] and not m["paired"].any()
    same = st.compare(reference, reference, strict=False)
    assert same.attrs["differences"] == [] and same["paired"].all()
    with pytest.raises(InvalidParameterError, match="`strict`"):
        st.compare(reference, reference, strict="no")


def test_a_work_unit_that_cannot_be_sent_to_a_worker_raises_and_never_hangs():
    """A task that cannot be pickled for the worker processes raises its pickling error, every time.

    ``ProcessPoolExecutor.shutdown(cancel_futures=True)`` waits forever after such an error on
    Python 3.11 (https://github.com/python/cpython/issues/116685; with 64 units the first pool already hangs): the harness cancels
    the pending units itself. Run in a fresh interpreter so that a hang fails the test (timeout)
    instead of stopping the suite.
    """
    import subprocess

    code = (
        "from rfkit.study._executors import _iter_results\n"
        "if __name__ == '__main__':\n"
        "    for attempt in range(5):\n"
        "        try:\n"
        "            list(_iter_results(callable, [(lambda: 1,)] * 64, 'processes', 2, None))\n"
        "        except Exception as exc:\n"
        "            print(attempt, type(exc).__name__, flush=True)\n"
    )
    root = Path(rk.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split()
    assert lines[0::2] == ["0", "1", "2", "3", "4"]
    assert set(lines[1::2]) <= {"PicklingError", "AttributeError", "TypeError"}, proc.stdout
