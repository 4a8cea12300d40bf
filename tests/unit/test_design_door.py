"""The door of a study: allow_large, the size estimate, and what a design records can be passed back."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from bad_input_kit import GOOD_TOML, _design

import rfkit.study as st
from rfkit.cli import main
from rfkit.exceptions import InvalidParameterError
from rfkit.study._design_checks import MAX_NAME_BYTES
from rfkit.study._design_limits import MAX_WORK, estimate_size


def test_allow_large_builds_a_large_design_and_keeps_the_hash() -> None:
    with pytest.raises(st.StudyTooLargeError, match="allow_large"):
        _design(trials=10**13)
    big = _design(trials=10**13, allow_large=True)
    assert estimate_size(big).table_bytes > 2**40
    small, flagged = _design(), _design(allow_large=True)
    assert small.hash() == flagged.hash()
    assert "allow_large" not in small.to_dict() and flagged.to_dict()["allow_large"] is True
    assert st.Design(**flagged.to_dict()).allow_large  # recorded values go back into the API
    assert big.with_trials(5).allow_large and big.quick_profile().allow_large


def test_load_design_allow_large(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(textwrap.dedent(GOOD_TOML).replace("trials = 4", "trials = 10_000_000_000_000"))
    with pytest.raises(st.StudyTooLargeError, match=str(path)):
        st.load_design(path)
    assert st.load_design(path, allow_large=True).trials == 10**13
    path.write_text(
        textwrap.dedent(GOOD_TOML).replace("trials = 4", "trials = 10_000_000_000_000\nallow_large = true")
    )
    assert st.load_design(path).allow_large


def test_size_estimate_grows_with_every_axis() -> None:
    base = estimate_size(_design())
    assert base.work < MAX_WORK and base.cells == 1
    assert estimate_size(_design(trials=40)).work == pytest.approx(10 * base.work)
    assert estimate_size(_design(grid={"n_features": [2, 4]})).cells == 2
    wide = estimate_size(_design(grid={"n_features": [20]}))
    assert wide.unit_bytes == pytest.approx(10 * base.unit_bytes)


def test_a_study_file_in_utf8_with_a_bom_and_unicode_names_loads(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    text = (
        textwrap.dedent(GOOD_TOML)
        .replace('name = "t"', 'name = "études"')
        .replace('map = "Positive"', 'map = "Positive"\nlabel = "positif (α = 1)"')
    )
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    d = st.load_design(path)
    assert d.name == "études" and d.labels == ["positif (α = 1)"]


def test_cli_allow_large_is_passed_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.toml"
    path.write_text(textwrap.dedent(GOOD_TOML))
    argv = ["run", str(path), "--allow-large", "--out", str(tmp_path / "o"), "--no-progress"]
    assert main(argv) == 0
    assert "x 4 trials" in capsys.readouterr().out


def test_the_longest_names_make_a_run_folder_of_name_and_profile(tmp_path: Path) -> None:
    """Names are capped in bytes of UTF-8 so that ``<study>-<profile>`` is still a file name."""
    name = "é" * (MAX_NAME_BYTES // 2)  # 60 characters, 120 bytes: accepted
    d = _design(name=name, profiles={name: {"trials": 2}})
    assert d.name == name and len(name.encode("utf-8")) == MAX_NAME_BYTES
    with pytest.raises(InvalidParameterError, match="122 bytes"):
        _design(name=name + "é")
    folder = tmp_path / f"{d.name}-{name}"  # the folder `rfkit run --profile NAME` makes
    folder.mkdir()
    (folder / ".write-test-12345-140000000000000.rfkit-tmp").write_text("ok")
