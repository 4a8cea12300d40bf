"""Every built-in study runs in its quick profile and writes tables, figures and a report."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

import rfkit.study as st
from rfkit.cli import main as cli_main

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

STUDIES = sorted((Path(__file__).resolve().parents[2] / "studies").glob("*.toml"))
#: (study file, profile name) of every named profile ([profiles.NAME]) of the built-in studies
PROFILES = [
    (p, name) for p in STUDIES for name in tomllib.loads(p.read_text(encoding="utf-8")).get("profiles", {})
]


def test_studies_exist():
    names = {p.stem for p in STUDIES}
    assert {"performer-mse", "cexp-adaptive", "deterministic-maps"} <= names


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_quick_run_writes_everything(path, tmp_path, capsys, checked_figures):
    out = tmp_path / path.stem
    assert cli_main(["run", str(path), "--quick", "--out", str(out), "--no-progress"]) == 0
    for f in (
        "summary.parquet",
        "summary.csv",
        "trials.parquet",
        "pairs.parquet",
        "manifest.json",
        "report.md",
    ):
        assert (out / f).exists(), f
    report = (out / "report.md").read_text()
    design = st.load_design(path)
    for fig in design.outputs.get("figures", []):
        pngs = list((out / "figures").glob("*.png"))
        assert pngs, f"no figure written for {fig}"
        for png in pngs:
            assert f"figures/{png.name}" in report
    summary = pd.read_parquet(out / "summary.parquet")
    assert set(summary["estimator"]) == set(design.quick_profile().labels)  # a [quick] profile may pick a few
    assert "wrote" in capsys.readouterr().out
    # every figure has its legends off the panels (the layout made room for them)
    assert sorted(checked_figures["saved"]) == sorted(p.stem for p in pngs)
    assert not checked_figures["problems"], checked_figures["problems"]


@pytest.mark.parametrize("name", ["softmax-kernel-estimators", "drop-in"])
def test_one_column_figures_keep_their_legends_off_the_panels(name, tmp_path, checked_figures):
    """One-column figures put their legends below the panels, in one or two columns: the layout
    makes room for them there too (the studies with the longest legends, a few trials)."""
    out = tmp_path / name
    args = ["run", name, "--quick", "--trials", "2", "--paper-size", "one-column", "--out", str(out)]
    assert cli_main([*args, "--no-progress"]) == 0
    assert checked_figures["saved"] and not checked_figures["problems"], checked_figures["problems"]


def test_studies_have_profiles():
    assert ("real-attention", "long") in [(p.stem, name) for p, name in PROFILES]


@pytest.mark.parametrize(("path", "profile"), PROFILES, ids=lambda v: getattr(v, "stem", v))
def test_a_profile_with_its_own_estimators_does_not_inherit_the_files_notes(path, profile):
    """The notes of a study file read its default run: a profile that runs other estimators must
    bring its own (``[profiles.NAME.outputs] notes``), or its report would describe rows it lacks."""
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    prof = raw["profiles"][profile]
    if "estimators" not in prof or "notes" not in raw.get("outputs", {}):
        return
    assert "notes" in prof.get("outputs", {}), f"{path.stem} --profile {profile}: notes of the default run"
    design = st.load_design(path).profile(profile)
    assert design.outputs["notes"] != raw["outputs"]["notes"]


@pytest.mark.parametrize(("path", "profile"), PROFILES, ids=lambda v: getattr(v, "stem", v))
def test_profile_quick_run_writes_everything(path, profile, tmp_path, capsys, checked_figures):
    """`rfkit run STUDY --profile NAME --quick`: the profile's CI form runs, with its own figures and tables."""
    out = tmp_path / f"{path.stem}-{profile}"
    assert (
        cli_main(["run", str(path), "--profile", profile, "--quick", "--out", str(out), "--no-progress"]) == 0
    )
    assert f"(profile {profile}.quick)" in capsys.readouterr().out
    design = st.load_design(path, profile=f"{profile}.quick")
    report = (out / "report.md").read_text()
    assert "Quick profile" in report
    pngs = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert pngs and all(f"figures/{png}" in report for png in pngs)
    assert checked_figures["saved"] and not checked_figures["problems"], checked_figures["problems"]
    summary = pd.read_parquet(out / "summary.parquet")
    assert set(summary["estimator"]) == set(design.labels)
    assert len(summary["cell"].unique()) == len(design.cells())
    if design.kind == "attention":  # the cost per query is stated in the tables
        assert summary["cost"].notna().all() and "| cost |" in report


def test_cli_user_errors_exit_nonzero_without_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'name = "x"\ntrials = 1\n[data]\nsource = "pairs"\ndim = 2\n[grid]\nn_features = [1]\n[[estimators]]\nmap = "Nope"\n'
    )
    assert cli_main(["run", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "estimators[0].map" in err and "Traceback" not in err
    assert cli_main(["run", str(tmp_path / "missing.toml")]) == 2
    assert "cannot read study file" in capsys.readouterr().err


def test_cli_list(capsys):
    assert cli_main(["list"]) == 0
    out = capsys.readouterr().out
    assert "performer-mse" in out and "cexp-adaptive" in out


def test_ctrl_c_in_a_terminal_while_the_worker_server_imports_prints_no_traceback(tmp_path):
    """A terminal's Ctrl-C reaches every process of the command, the process server of the figure
    workers too, which ``rfkit run`` starts first thing and which imports matplotlib for about a
    second: it starts with SIGINT ignored, so only rfkit's own message is printed."""
    import os
    import signal
    import subprocess
    import sys
    import time

    code = (
        "import signal, sys\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from rfkit.cli import main\n"
        "print('imported', flush=True)\n"
        f"sys.exit(main(['run', 'performer-mse', '--out', {str(tmp_path / 'o')!r}, '--no-progress']))\n"
    )
    env = {**os.environ, "RFKIT_NUM_THREADS": "2"}
    # the delays count from the end of `import rfkit.cli` (0.4 s on a quiet 2-core machine, several
    # seconds on a loaded one), so the signal lands while `rfkit run` starts, not during the import
    for delay in (0.1, 0.5):
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "imported"
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: the whole process group
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "Traceback" not in err and "interrupted" in err, err


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_resume_completes(tmp_path):
    """SIGINT mid-run: exit 130, finished cells kept, a hint to --resume; resuming completes the run."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from rfkit.study._manifest import units_done

    study = tmp_path / "s.toml"
    study.write_text(
        'name = "s"\ntrials = 50\nseed = 3\n[data]\nsource = "pairs"\nn_pairs = 4\ndim = 4\n'
        '[grid]\nn_features = [2, 4, 8, 16, 32, 64, 128, 256]\n[[estimators]]\nmap = "Positive"\n'
    )
    out = tmp_path / "out"
    code = (
        "import signal, sys, time\n"
        # a terminal's Ctrl-C handler, even when the test runs as a background job with SIGINT ignored
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "import rfkit.study._runner as R\n"
        "real = R.run_unit\n"
        "def slow(*a, **k):\n    r = real(*a, **k); time.sleep(0.5); return r\n"
        "R.run_unit = slow\n"
        "from rfkit.cli import main\n"
        f"sys.exit(main(['run', {str(study)!r}, '--out', {str(out)!r}, '--no-progress']))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and units_done(out) < 2:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "--resume" in err and "Traceback" not in err
    kept = units_done(out)
    assert 2 <= kept < 8
    assert f"{kept} finished work unit(s) are kept" in err
    assert cli_main(["run", str(study), "--out", str(out), "--resume", "--no-progress"]) == 0
    ref = st.run(study)
    got = pd.read_parquet(out / "trials.parquet")
    pd.testing.assert_frame_equal(got, ref.trials, check_exact=True)
