"""The built wheel works on its own: installed into a clean virtual environment, away from the
source tree, it lists the built-in studies, runs one by name and reports its version.

The wheel is built from a copy of the source tree (so the build leaves nothing in the checkout)
and installed with ``--no-deps`` into a new virtual environment made without pip. Its
third-party dependencies (NumPy, pandas, ...) are not downloaded again: a ``.pth`` file adds
this interpreter's site-packages folder *after* the new environment's own. A path line in a
``.pth`` file is only appended to ``sys.path``; the ``.pth`` files inside that folder (such as
an editable install of rfkit) are not processed, so the only rfkit the new environment can
import is the installed wheel's, which the first test checks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import rfkit
from rfkit.cli import build_parser
from rfkit.cli import main as cli_main
from rfkit.study._builtin import BUILTIN_STUDY_DIR, StudyNotFoundError, builtin_study, find_study

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = sorted(p.stem for p in (ROOT / "rfkit" / "studies").glob("*.toml"))
_SKIP_DIRS = {".git", ".venv", "out", "build", "dist", "_build", "generated", "__pycache__", ".pytest_cache"}


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    return res


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built without network access from a copy of the source tree."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(
        ROOT,
        src,
        symlinks=True,
        ignore=lambda d, names: [n for n in names if n in _SKIP_DIRS or n.endswith(".egg-info")],
    )
    return build_wheel(src, tmp / "dist")


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    """A new virtual environment holding only the wheel; returns (bin folder, environment, cwd)."""
    return install_in_new_venv(wheel, tmp_path_factory.mktemp("venv"))


def build_wheel(src: Path, dist: Path) -> Path:
    """Build rfkit's wheel from the source tree ``src`` into the folder ``dist``, offline."""
    _run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
        + [str(src), "-w", str(dist)],
        cwd=dist.parent,
    )
    (whl,) = dist.glob("rfkit-*.whl")
    return whl


def install_in_new_venv(wheel: Path, tmp: Path) -> tuple[Path, dict[str, str], Path]:
    """Install ``wheel`` into a new virtual environment under ``tmp`` (see the module docstring).

    Returns the environment's bin folder, the process environment to run its commands with
    (its bin folder first on ``PATH``), and an empty working folder outside the source tree.
    """
    env_dir = tmp / "env"
    # no PYTHONPATH: the source tree (or an rfkit.egg-info in it) must not be seen by pip or Python
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "RFKIT_"))}
    env["MPLBACKEND"] = "Agg"
    _run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], cwd=tmp, env=env)
    bindir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    py = bindir / ("python.exe" if os.name == "nt" else "python")
    _run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--quiet", "--no-deps", "--no-index"]
        + ["--force-reinstall", str(wheel)],
        cwd=tmp,
        env=env,
    )
    purelib = _run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp, env=env
    )
    site = Path(purelib.stdout.strip())
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "zz_rfkit_test_deps.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    cwd = tmp / "work"  # no studies/ folder and no source tree here
    cwd.mkdir()
    return bindir, env, cwd


@pytest.mark.slow
def test_wheel_holds_the_builtin_studies(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert BUILTIN and {f"rfkit/studies/{s}.toml" for s in BUILTIN} <= set(names)
    assert "rfkit/py.typed" in names


@pytest.mark.slow
def test_installed_wheel_is_the_rfkit_imported(venv: tuple[Path, dict[str, str], Path]) -> None:
    bindir, env, cwd = venv
    res = _run([str(bindir / "python"), "-c", "import rfkit; print(rfkit.__file__)"], cwd=cwd, env=env)
    where = Path(res.stdout.strip()).resolve()
    assert bindir.parent.resolve() in where.parents, where
    assert ROOT not in where.parents


@pytest.mark.slow
def test_rfkit_list_finds_every_builtin_study(venv: tuple[Path, dict[str, str], Path]) -> None:
    bindir, env, cwd = venv
    out = _run([str(bindir / "rfkit"), "list"], cwd=cwd, env=env).stdout
    for name in BUILTIN:
        assert name in out, f"{name} missing from `rfkit list`:\n{out}"


@pytest.mark.slow
def test_builtin_study_runs_by_name(venv: tuple[Path, dict[str, str], Path]) -> None:
    bindir, env, cwd = venv
    res = _run(
        [str(bindir / "rfkit"), "run", "performer-mse", "--quick", "--out", "q", "--no-progress"],
        cwd=cwd,
        env=env,
    )
    assert "wrote" in res.stdout
    assert (cwd / "q" / "summary.parquet").is_file() and (cwd / "q" / "report.md").is_file()
    code = "import rfkit.study as st; print(st.builtin_study('concentration'))"
    where = _run([str(bindir / "python"), "-c", code], cwd=cwd, env=env).stdout.strip()
    assert bindir.parent.resolve() in Path(where).resolve().parents


@pytest.mark.slow
def test_misspelt_study_name_gets_a_suggestion(venv: tuple[Path, dict[str, str], Path]) -> None:
    bindir, env, cwd = venv
    res = subprocess.run(
        [str(bindir / "rfkit"), "run", "performr-mse", "--quick"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2
    assert "did you mean 'performer-mse'?" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow
def test_version(venv: tuple[Path, dict[str, str], Path]) -> None:
    if "--version" not in build_parser().format_help():
        pytest.skip("`rfkit --version` is not part of this checkout's command line yet")
    bindir, env, cwd = venv
    res = _run([str(bindir / "rfkit"), "--version"], cwd=cwd, env=env)
    assert rfkit.__version__ in res.stdout + res.stderr


# ----------------------------------------------------------------------------- finding studies by name
def test_builtin_studies_are_package_data() -> None:
    assert BUILTIN_STUDY_DIR == Path(rfkit.__file__).resolve().parent / "studies"
    assert {"performer-mse", "cexp-adaptive", "concentration"} <= set(BUILTIN)
    for name in BUILTIN:  # the source tree's studies/NAME.toml is the same file (a link)
        assert (ROOT / "studies" / f"{name}.toml").read_text() == (
            BUILTIN_STUDY_DIR / f"{name}.toml"
        ).read_text()


def test_builtin_study_found_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert builtin_study("performer-mse") == BUILTIN_STUDY_DIR / "performer-mse.toml"
    assert find_study("performer-mse") == BUILTIN_STUDY_DIR / "performer-mse.toml"
    # the docs' `rfkit run studies/NAME.toml`, typed where there is no such file
    assert find_study("studies/cexp-adaptive.toml") == BUILTIN_STUDY_DIR / "cexp-adaptive.toml"
    assert find_study(Path("studies") / "concentration.toml") == BUILTIN_STUDY_DIR / "concentration.toml"
    # a missing path that is no built-in study comes back for load_design to report
    assert find_study("elsewhere/nothing.toml") == Path("elsewhere/nothing.toml")


def test_own_studies_folder_is_searched_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "studies").mkdir()
    mine = tmp_path / "studies" / "mine.toml"
    mine.write_text((BUILTIN_STUDY_DIR / "performer-mse.toml").read_text().replace("performer-mse", "mine"))
    monkeypatch.chdir(tmp_path)
    assert find_study("mine").resolve() == mine.resolve()
    assert find_study("performer-mse") == BUILTIN_STUDY_DIR / "performer-mse.toml"
    assert find_study(str(mine)) == mine


def test_misspelt_name_did_you_mean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StudyNotFoundError, match=r"did you mean 'performer-mse'\?"):
        find_study("performr-mse")
    with pytest.raises(FileNotFoundError, match="performer-mse"):  # StudyNotFoundError is a FileNotFoundError
        builtin_study("performer_mse")
    with pytest.raises(
        StudyNotFoundError, match=r"cannot read study file 'cexp-adaptiv.toml'.*'cexp-adaptive'"
    ):
        find_study("cexp-adaptiv.toml")
    with pytest.raises(StudyNotFoundError, match="the built-in studies are .*performer-mse"):
        find_study("zzzz")
    assert cli_main(["run", "performr-mse", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'performer-mse'?" in err and "Traceback" not in err


def test_a_folder_named_rfkit_does_not_shadow_the_package(tmp_path: Path) -> None:
    """The folder above a clone named ``rfkit``: ``import rfkit`` must still find the real package."""
    (tmp_path / "rfkit").mkdir()  # a clone: no __init__.py at its top
    (tmp_path / "rfkit" / "README.md").write_text("a clone\n")
    code = "import rfkit; print(rfkit.__file__)"
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    if res.stdout.strip() == "None":
        finders = [
            p
            for d in {sysconfig.get_paths()["purelib"]}
            for p in Path(d).glob("__editable__*rfkit*finder.py")
        ]
        if finders:
            pytest.skip(
                "this environment's rfkit is a default editable install (an import hook), which a folder "
                "named rfkit in the working directory shadows; an editable install of this repository "
                "(pyproject.toml: package-dir) puts the repository on sys.path instead, which is not "
                "affected (README, 'Installing with pip')"
            )
    assert res.returncode == 0 and res.stdout.strip() not in ("", "None"), res.stdout + res.stderr


def test_own_file_named_like_a_builtin_study_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A local studies/performer-mse.toml is what runs, by path and by name (docs/studies.md)."""
    import re

    import rfkit.study as st

    (tmp_path / "studies").mkdir()
    mine = tmp_path / "studies" / "performer-mse.toml"
    text = (BUILTIN_STUDY_DIR / "performer-mse.toml").read_text()
    mine.write_text(re.sub(r"(?m)^trials = \d+$", "trials = 7", text, count=1))
    monkeypatch.chdir(tmp_path)
    for ref in ("studies/performer-mse.toml", "performer-mse", "./studies/performer-mse.toml"):
        assert find_study(ref).resolve() == mine.resolve(), ref
        assert st.load_design(find_study(ref)).trials == 7, ref
    assert st.load_design(BUILTIN_STUDY_DIR / "performer-mse.toml").trials != 7
    assert (
        find_study("studies/concentration.toml") == BUILTIN_STUDY_DIR / "concentration.toml"
    )  # no local file
