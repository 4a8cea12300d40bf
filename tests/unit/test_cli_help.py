"""The command line helps: help text on every option, did-you-mean, --version, exit codes, messages."""

from __future__ import annotations

import argparse
import os
import re
import textwrap
from pathlib import Path

import pytest
from bad_input_kit import GOOD_TOML

import rfkit
from rfkit.cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, build_parser, main
from rfkit.cli._study import _resume_command

STUDY = GOOD_TOML + "[quick]\ntrials = 8\n"


def _parsers(parser: argparse.ArgumentParser, name: str = "rfkit"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_every_option_of_every_command_has_help() -> None:
    missing = [
        f"{name}: {action.option_strings or action.dest}"
        for name, parser in _parsers(build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction) and not (action.help or "").strip()
    ]
    assert not missing, missing


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"rfkit {rfkit.__version__}"


def test_exit_codes_are_documented(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for code in (0, 1, 2, 130):
        assert re.search(rf"^\s+{code}\s+\w", out, re.M), out
    assert (EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED) == (1, 2, 130)
    guide = (Path(__file__).parents[2] / "docs" / "guide.md").read_text(encoding="utf-8")
    assert "| 130 |" in guide and "| 2 |" in guide


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["run", "s.toml", "--quik"], "did you mean --quick?"),
        (["run", "s.toml", "--trails", "3"], "did you mean --trials?"),
        (["rnu", "s.toml"], "did you mean 'run'?"),
        (["lsit"], "did you mean 'list'?"),
        (["bound", "max-relative-eror"], "did you mean 'max-relative-error'?"),
    ],
)
def test_did_you_mean(argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert hint in err and "Traceback" not in err
    if argv[0] == "run":  # the usage of the subcommand, not the top-level one
        assert "usage: rfkit run" in err


def test_list_is_aligned_with_wrapped_descriptions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 5
    starts = {len(re.match(r"\S*\s+", line).group(0)) for line in lines}  # type: ignore[union-attr]
    assert len(starts) == 1, lines  # the descriptions (and their continued lines) start in one column
    assert any(line.startswith("performer-mse ") for line in lines)


def test_trials_printed_are_the_trials_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--quick with --trials: the console states the trials that really ran (the override)."""
    study = tmp_path / "s.toml"
    study.write_text(textwrap.dedent(STUDY))
    argv = ["run", str(study), "--quick", "--trials", "3", "--out", str(tmp_path / "o"), "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "x 3 trials" in out, out


def test_console_and_report_name_the_span_each_time_measures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One run, several times: each is labelled with its span, and the spans nest."""
    study = tmp_path / "s.toml"
    study.write_text(textwrap.dedent(STUDY))
    assert main(["run", str(study), "--quick", "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    m = re.search(
        r"trials; run (\d+\.\d) s \(work units (\d+\.\d) s\), report \+ figures (\d+\.\d) s, "
        r"whole command (\d+\.\d) s \(process start to here\)",
        out,
    )
    assert m, out
    run_s, units_s, report_s, whole_s = map(float, m.groups())
    assert units_s <= run_s + 0.1 and run_s + report_s <= whole_s + 0.1, out
    report = (tmp_path / "o" / "report.md").read_text()
    # the report states the work units' span, the same number as the console, and says what it leaves out
    assert f"work units {units_s:.1f} s (this run's computation only" in report, report


def test_resume_hint_reproduces_the_command(tmp_path: Path) -> None:
    argv = ["run", "my study.toml", "--quick", "--trials", "7", "--seed", "3"]
    hint = _resume_command(argparse.Namespace(argv=argv), tmp_path / "o")
    assert hint == (f"rfkit run 'my study.toml' --quick --trials 7 --seed 3 --resume --out {tmp_path / 'o'}")
    with_out = _resume_command(argparse.Namespace(argv=[*argv, "--out", "x y", "--resume"]), Path("x y"))
    assert with_out.endswith("--seed 3 --out 'x y' --resume")


def test_an_unexpected_error_is_one_line_and_its_traceback_is_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rfkit.cli import _study

    def boom(args: argparse.Namespace) -> int:
        raise ZeroDivisionError("deep inside")

    monkeypatch.setattr(_study, "cmd_list", boom)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["list"]) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "Traceback" not in err and "ZeroDivisionError: deep inside" in err
    saved = re.search(r"full traceback in (\S+?);", err)
    assert saved and os.path.exists(saved.group(1))
    assert "Traceback" in Path(saved.group(1)).read_text(encoding="utf-8")
    assert main(["--debug", "list"]) == EXIT_FAILED
    assert "Traceback" in capsys.readouterr().err
    assert main(["list", "--debug"]) == EXIT_FAILED
    assert "Traceback" in capsys.readouterr().err


def test_help_does_not_load_the_study_harness() -> None:
    import subprocess
    import sys

    code = "import sys\nfrom rfkit.cli import main\nmain(['--help'])\nprint('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("False")


def test_a_run_says_when_it_took_over_a_stale_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json
    import socket
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that has finished: its lock is stale
    study = tmp_path / "s.toml"
    study.write_text(textwrap.dedent(STUDY))
    out = tmp_path / "o"
    out.mkdir()
    lock = {
        "pid": gone.pid,
        "host": socket.gethostname(),
        "started": "earlier",
        "command": "rfkit run s.toml",
    }
    (out / "run.lock").write_text(json.dumps(lock))
    assert main(["run", str(study), "--out", str(out), "--no-progress", "--resume"]) == 0
    printed = capsys.readouterr().out
    assert f"took over the stale lock of an earlier run that is gone (pid {gone.pid}" in printed, printed


# ----------------------------------------------------------------------------- an existing --out
def _run_study(tmp_path: Path, *extra: str) -> list[str]:
    study = tmp_path / "s.toml"
    study.write_text(textwrap.dedent(STUDY))
    return ["run", str(study), "--quick", "--out", str(tmp_path / "o"), "--no-progress", *extra]


def test_a_second_run_into_a_finished_folder_is_a_usage_error_in_command_line_terms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_run_study(tmp_path)) == 0
    capsys.readouterr()
    assert main(_run_study(tmp_path)) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--resume" in err and "--overwrite" in err, err
    assert "resume=True" not in err and "overwrite=True" not in err and "Traceback" not in err, err


def test_the_same_refusal_from_python_speaks_python(tmp_path: Path) -> None:
    from rfkit.exceptions import RunFolderError, StudyError
    from rfkit.study import run

    study = tmp_path / "s.toml"
    study.write_text(textwrap.dedent(STUDY))
    run(study, quick=True, out=tmp_path / "o")
    with pytest.raises(RunFolderError) as info:
        run(study, quick=True, out=tmp_path / "o")
    text = str(info.value)
    assert "resume=True" in text and "overwrite=True" in text and "--resume" not in text, text
    assert isinstance(info.value, StudyError)  # callers catching StudyError still do


def test_overwrite_replaces_the_previous_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rfkit.study import StudyResult

    assert main(_run_study(tmp_path)) == 0
    assert main(_run_study(tmp_path, "--trials", "3", "--overwrite")) == 0
    assert "x 3 trials" in capsys.readouterr().out
    res = StudyResult.load(tmp_path / "o")
    assert res.design.trials == 3 and set(res.trials["trial"]) == {0, 1, 2}


def test_overwrite_refuses_a_folder_with_files_the_run_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_run_study(tmp_path)) == 0
    out = tmp_path / "o"
    notes = out / "figures" / "my-notes.txt"
    notes.parent.mkdir(exist_ok=True)
    notes.write_text("mine")
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    capsys.readouterr()
    assert main(_run_study(tmp_path, "--overwrite")) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "figures/my-notes.txt" in err and "--overwrite" in err and "Traceback" not in err, err
    assert notes.read_text() == "mine"
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before  # nothing removed


def test_resume_and_overwrite_together_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_run_study(tmp_path, "--resume", "--overwrite")) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--overwrite" in err and "not allowed with" in err and "--resume" in err, err
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------- rfkit list
def test_list_wraps_descriptions_at_word_boundaries(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rfkit.cli._study import _one_line
    from rfkit.study import builtin_study_dirs, load_design

    monkeypatch.setenv("COLUMNS", "64")
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 64 for line in out.splitlines()), out
    flat = " ".join(out.split())
    for d in builtin_study_dirs():
        for f in d.glob("*.toml"):
            desc = _one_line(load_design(f, allow_large=True).description)
            assert desc in flat, desc  # whole: every word, none cut


def test_list_name_describes_one_study(capsys: pytest.CaptureFixture[str]) -> None:
    from rfkit.study import load_design
    from rfkit.study._builtin import builtin_study

    assert main(["list", "performer-mse"]) == 0
    out = capsys.readouterr().out
    design = load_design(builtin_study("performer-mse"), allow_large=True)
    flat = " ".join(out.split())
    assert " ".join(design.description.split()) in flat, out
    assert "kind: kernel" in out, out
    for axis, values in design.grid.items():
        assert re.search(rf"{axis}\b.*{', '.join(map(str, values))}", out), out
    for est in design.estimators:
        assert est["label"] in out
    for metric in design.metrics:
        assert metric in out
    assert "mse_vs_features" in out and "quick" in out, out


def test_list_of_an_unknown_study_is_a_usage_error_with_a_suggestion(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["list", "performer-mes"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "performer-mse" in err and "did you mean" in err and "Traceback" not in err, err
