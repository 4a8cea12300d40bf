"""`rfkit bound ...`: readable output, --json, and clean user errors (no traceback)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rfkit.cli import main


def test_max_relative_error_text(capsys):
    assert main(["bound", "max-relative-error", "--r", "0.5", "--n-features", "64"]) == 0
    out = capsys.readouterr().out
    assert "0.0921175" in out and "assumptions" in out


def test_max_relative_error_json(capsys):
    assert main(["bound", "max-relative-error", "--r", "0.2", "--r-y", "0.5", "-m", "16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["bound"] == pytest.approx(2 / np.sqrt(32) * np.sinh(0.49 / 2), rel=1e-12)
    assert data["r_y"] == 0.5


def test_chi2_json_with_scalar_covariances(capsys):
    args = ["bound", "chi2", "--mean-x", "[0, 0, 0]", "--cov-x", "0.01", "--mean-y", "[0,0,0]"]
    args += ["--cov-y", "0.04", "--n-points", "20", "--p", "0.9", "--n-features", "64", "--json"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lambda_y"] == pytest.approx(0.04)
    assert data["method"] == "chi2"


def test_hotelling_from_files(tmp_path, capsys):
    rng = np.random.default_rng(0)
    fx, fy = tmp_path / "x.npy", tmp_path / "y.csv"
    np.save(fx, rng.normal(size=(40, 3)))
    np.savetxt(fy, rng.normal(size=(50, 3)), delimiter=",")
    assert (
        main(
            [
                "bound",
                "hotelling",
                "--x",
                str(fx),
                "--y",
                str(fy),
                "--p",
                "0.95",
                "-m",
                "32",
                "--A",
                "[1, 2, 0.5]",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "hotelling-new" in out and "quantile_x" in out


@pytest.mark.parametrize(
    "argv,match",
    [
        (["bound", "max-relative-error", "--r", "0.5", "--n-features", "0"], "n_features"),
        (["bound", "max-relative-error", "--r", "-1", "--n-features", "4"], "`r`"),
        (
            [
                "bound",
                "chi2",
                "--mean-x",
                "[0,0]",
                "--cov-x",
                "[[1,2],[2,1]]",
                "--mean-y",
                "[0,0]",
                "--cov-y",
                "1",
                "--n-points",
                "3",
                "--p",
                "0.9",
                "-m",
                "4",
            ],
            "positive definite",
        ),
        (
            [
                "bound",
                "chi2",
                "--mean-x",
                "[0,0]",
                "--cov-x",
                "1",
                "--mean-y",
                "[0,0]",
                "--cov-y",
                "1",
                "--n-points",
                "3",
                "--p",
                "1.5",
                "-m",
                "4",
            ],
            "`p`",
        ),
        (
            [
                "bound",
                "chi2",
                "--mean-x",
                "[0,0]",
                "--cov-x",
                "1",
                "--mean-y",
                "[0,0]",
                "--cov-y",
                "1",
                "--n-points",
                "0",
                "--p",
                "0.5",
                "-m",
                "4",
            ],
            "n_points",
        ),
        (
            [
                "bound",
                "chi2",
                "--mean-x",
                "oops",
                "--cov-x",
                "1",
                "--mean-y",
                "[0,0]",
                "--cov-y",
                "1",
                "--n-points",
                "3",
                "--p",
                "0.5",
                "-m",
                "4",
            ],
            "mean-x",
        ),
        (
            [
                "bound",
                "chi2",
                "--mean-x",
                "[0,0]",
                "--cov-x",
                "1",
                "--mean-y",
                "[0,0]",
                "--cov-y",
                "1",
                "--A",
                "[[1,1],[1,1]]",
                "--n-points",
                "3",
                "--p",
                "0.5",
                "-m",
                "4",
            ],
            "singular",
        ),
        (
            [
                "bound",
                "hotelling",
                "--x",
                "[[0,1],[1,0]]",
                "--y",
                "[[0,1],[1,0],[2,2]]",
                "--p",
                "0.5",
                "-m",
                "4",
            ],
            "n > d",
        ),
    ],
)
def test_user_errors_return_nonzero_without_traceback(argv, match, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err
    assert "Traceback" not in err


def test_usage_errors(capsys):
    assert main(["bound"]) == 2
    assert main(["bound", "max-relative-error", "--r", "x", "-m", "3"]) == 2
    assert main([]) == 2
    assert main(["--help"]) == 0
    capsys.readouterr()


def test_study_commands_are_wired(tmp_path, capsys):
    """`rfkit list` / `rfkit run` come from the study harness; a missing study file is a user error."""
    assert main(["list"]) == 0
    capsys.readouterr()
    assert main(["run", str(tmp_path / "missing.toml")]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_output_piped_into_head_is_not_an_error():
    """stdout whose reader has gone (``rfkit list | head``): exit 0, no traceback."""
    import subprocess
    import sys

    code = (
        "import os, sys\n"
        "r, w = os.pipe(); os.close(r); os.dup2(w, 1)\n"  # every write to stdout now fails with EPIPE
        "from rfkit.cli import main\n"
        "sys.exit(main(['list']))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr


def test_help_does_not_load_the_study_harness():
    """`rfkit --help` builds every subcommand's parser without importing pandas or the study package."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from rfkit.cli import build_parser\n"
        "build_parser().format_help()\n"
        "print(sorted(m for m in ('pandas', 'matplotlib', 'rfkit.study', 'rfkit.report') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    res = subprocess.run([sys.executable, "-m", "rfkit.cli", "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "{list,run,bound,advise}" in res.stdout


@pytest.mark.parametrize(
    "kind,expected",
    [
        ("hcexp", 2 / np.sqrt(32) * np.sinh(0.25 / 2)),
        ("cexp", np.sqrt(np.expm1(0.25) / 16)),
        ("positive", np.sqrt(np.expm1(0.25) / 16)),
        ("hyperbolic", 2 / np.sqrt(32) * np.sinh(0.25 / 2)),
        ("trig", 2 / np.sqrt(32) * np.sinh(0.25 / 2)),
    ],
)
def test_max_relative_error_every_kind(kind, expected, capsys):
    assert main(["bound", "max-relative-error", "--r", "0.25", "-m", "16", "--kind", kind, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == kind and data["vacuous"] is False
    assert data["bound"] == pytest.approx(expected, rel=1e-12)
    assert main(["bound", "max-relative-error", "--r", "0.25", "-m", "16", "--kind", kind]) == 0
    out = capsys.readouterr().out
    assert kind.upper() in out and "note:" not in out


def test_max_relative_error_orthogonal(capsys):
    import rfkit.theory as th

    argv = ["bound", "max-relative-error", "--r", "0.3", "-m", "6", "--kind", "positive"]
    assert main([*argv, "--projection", "orthogonal", "--d", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["projection"] == "orthogonal" and data["d"] == 4
    ref = th.bounds.max_relative_error(0.3, 6, kind="positive", projection="orthogonal", d=4).bound
    assert data["bound"] == pytest.approx(ref, rel=1e-15)
    assert main([*argv, "--projection", "orthogonal"]) == 2
    assert "`d`" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["hcexp", "cexp", "positive", "hyperbolic", "trig"])
def test_concentration_every_kind(kind, tmp_path, capsys):
    args = [
        "bound",
        "chi2",
        "--mean-x",
        "[0, 0, 0]",
        "--cov-x",
        "0.01",
        "--mean-y",
        "[0,0,0]",
        "--cov-y",
        "0.01",
    ]
    assert main([*args, "--n-points", "10", "--p", "0.9", "-m", "64", "--kind", kind, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == kind and data["vacuous"] is False and 0 < data["bound"] < 1
    rng = np.random.default_rng(5)
    fx, fy = tmp_path / "x.npy", tmp_path / "y.npy"
    np.save(fx, 0.1 * rng.normal(size=(30, 3)))
    np.save(fy, 0.1 * rng.normal(size=(30, 3)))
    assert (
        main(["bound", "hotelling", "--x", str(fx), "--y", str(fy), "--p", "0.9", "-m", "64", "--kind", kind])
        == 0
    )
    assert kind.upper() in capsys.readouterr().out


def test_misspelt_kind_suggests_the_closest(capsys):
    assert main(["bound", "max-relative-error", "--r", "0.3", "-m", "4", "--kind", "positve"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'positive'?" in err and "Traceback" not in err
    args = ["bound", "chi2", "--mean-x", "[0]", "--cov-x", "1", "--mean-y", "[0]", "--cov-y", "1"]
    assert main([*args, "-s", "2", "--p", "0.5", "-m", "4", "--kind", "hyperbolik"]) == 2
    assert "did you mean 'hyperbolic'?" in capsys.readouterr().err
    # positive, hyperbolic and trig features have no transform A
    assert main([*args, "-s", "2", "--p", "0.5", "-m", "4", "--kind", "trig", "--A", "[2]"]) == 2
    assert "`A`" in capsys.readouterr().err


def test_vacuous_bound_is_said_plainly(capsys):
    """--r 3: the bound 5.8e6 is far above 1, the relative error of the estimate 0."""
    assert main(["bound", "max-relative-error", "--r", "3", "--n-features", "64"]) == 0
    cap = capsys.readouterr()
    assert "vacuous" in cap.out and "5.8" in cap.out and "Traceback" not in cap.err
    assert "note:" in cap.out
    assert main(["bound", "max-relative-error", "--r", "3", "--n-features", "64", "--json"]) == 0
    cap = capsys.readouterr()
    data = json.loads(cap.out)
    assert data["vacuous"] is True and data["bound"] == pytest.approx(
        2 * np.sinh(18) / np.sqrt(128), rel=1e-12
    )
    assert "vacuous" in cap.err
