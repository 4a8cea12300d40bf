"""The door of a study: allow_large, the size estimate, and what a design records can be passed back."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
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


# ----------------------------------------------------------------------------- names against the registries
@pytest.mark.parametrize(
    ("over", "key", "hint"),
    [
        (
            {"outputs": {"figures": ["mse_vs_features", "mse_vs_featurez"]}},
            "outputs.figures",
            "mse_vs_features",
        ),
        ({"outputs": {"figures": ["kernel_scater"]}}, "outputs.figures", "kernel_scatter"),
        ({"estimators": [{"map": "Positve"}]}, "estimators[0].map", "Positive"),
        ({"metrics": ["rel_mse", "rel_mes"]}, "metrics", "rel_mse"),
        ({"data": {"source": "gausian", "n_pairs": 3, "dim": 2}}, "data.source", "gaussian"),
    ],
)
def test_a_misspelt_name_is_refused_with_the_closest_registered_one(over, key, hint) -> None:
    with pytest.raises(InvalidParameterError, match=rf"`{re.escape(key)}` .*did you mean '{hint}'\?"):
        _design(**over)


def test_an_attention_estimator_name_gets_a_suggestion() -> None:
    with pytest.raises(InvalidParameterError, match=r"`estimators\[0\].estimator` .*did you mean 'SNIS'\?"):
        st.Design(
            name="a",
            kind="attention",
            estimators=[{"estimator": "SNSI"}],
            grid={"feature_dim": [8]},
            data={"source": "sequence", "n_tokens": 8, "dim": 4},
            trials=2,
            seed=1,
        )


def test_the_figure_kinds_designs_name_today_are_accepted() -> None:
    """Every built-in study loads with its figures, and the report draws exactly the kinds a design may name."""
    import rfkit.report as rp

    for name in st.builtin_studies():
        d = st.load_design(st.find_study(name))
        assert set(d.outputs.get("figures", [])) <= set(st.FIGURE_KINDS), name
    assert tuple(rp.FIGURE_KINDS) == tuple(st.FIGURE_KINDS)
    assert "cost_vs_samples" in st.FIGURE_KINDS  # one name: the kind is its file's name
    assert "cost" not in st.FIGURE_KINDS  # the old name is only an alias (warned)
    d = _design(outputs={"figures": list(st.FIGURE_KINDS)})
    assert d.outputs["figures"] == list(st.FIGURE_KINDS)


# ----------------------------------------------------------------------------- validation is pure
#: the modules that run estimators on data (the evaluation of each kind, its data per cell, the runner)
_EVALUATION = re.compile(r"rfkit\.study\.(_eval_\w+|_cell_data|_cell|_probes|_runner|_executors|_units)$")


def _modules_after(code: str) -> list[str]:
    root = Path(__file__).resolve().parents[2]
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env, cwd=root
    ).stdout
    return [m for m in json.loads(out.strip().splitlines()[-1]) if _EVALUATION.match(m)]


@pytest.mark.parametrize("study", ["performer-mse", "attention-estimators", "concentration", "drop-in"])
def test_validating_a_design_imports_no_evaluation_module(study: str) -> None:
    code = f"import rfkit as rk\nd = rk.study.load_design(rk.study.find_study({study!r}))\nd.quick_profile()"
    assert _modules_after(code) == []


def test_validating_a_study_file_imports_no_evaluation_module(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(textwrap.dedent(GOOD_TOML))
    code = f"import rfkit.study as st\nst.load_design({str(path)!r}).with_trials(2)"
    assert _modules_after(code) == []
    # the runner and rfkit.study.check_design (its probes call estimators on data) load them when asked
    assert "rfkit.study._cell_data" in _modules_after("import rfkit as rk\nrk.study.check_design")
    assert "rfkit.study._runner" in _modules_after("import rfkit as rk\nrk.study.run")
