"""Named study profiles ([profiles.NAME], Design.profile, rfkit run --profile) and excluded grid points."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import rfkit.study as st
from rfkit.cli import main as cli_main
from rfkit.exceptions import InvalidParameterError
from rfkit.study._profiles import matches

STUDY = """
name = "prof"
kind = "attention"
trials = 3
seed = 5
[data]
source = "sequence"
n_tokens = 16
dim = 4
[grid]
structure = ["iid", "local"]
feature_dim = [8]
[[estimators]]
label = "favor+"
estimator = "RFA"
projection = "orthogonal"
[quick]
trials = 2
[profiles.long]
description = "the long one"
trials = 4
grid = { n_tokens = [24, 32], feature_dim = [8, 16] }
data = { d_v = 3 }
exclude = [{ structure = "local", n_tokens = 32 }]
[[profiles.long.estimators]]
label = "favor+"
estimator = "RFA"
projection = "orthogonal"
[[profiles.long.estimators]]
label = "hybrid"
estimator = "Hybrid"
window = 2
n_global = 1
projection = "orthogonal"
[profiles.long.outputs]
notes = "long notes"
[profiles.long.quick]
trials = 2
grid = { feature_dim = [8] }
"""


@pytest.fixture
def study(tmp_path: Path) -> Path:
    p = tmp_path / "prof.toml"
    p.write_text(STUDY)
    return p


def test_profile_overrides_the_file(study):
    base = st.load_design(study)
    assert base.profile_names == ["quick", "long"] and base.applied_profile is None
    long = base.profile("long")
    assert long.applied_profile == "long" and long.name == "prof"
    assert long.trials == 4 and long.description == "the long one"
    assert long.labels == ["favor+", "hybrid"]  # estimators replaced as a whole
    # grid merged key by key; an axis the profile sets leaves [data]; a data value leaves the grid
    assert long.grid == {"structure": ["iid", "local"], "feature_dim": [8, 16], "n_tokens": [24, 32]}
    assert long.data == {"source": "sequence", "dim": 4, "d_v": 3}
    assert long.outputs["notes"] == "long notes"
    assert long.quick == {"trials": 2, "grid": {"feature_dim": [8]}} and long.profiles == {}
    assert long.source.endswith("[long]")
    # the excluded point is gone: 2 structures x 2 budgets x 2 lengths - (local, 32) x 2 budgets
    cells = long.cells()
    assert len(cells) == 6 and not any(c["structure"] == "local" and c["n_tokens"] == 32 for c in cells)
    assert st.load_design(study, profile="long").hash() == long.hash()


def test_quick_of_a_profile_in_one_step(study):
    base = st.load_design(study)
    a = base.profile("long").quick_profile()
    b = base.profile("long.quick")
    assert a.to_dict() == b.to_dict() and a.hash() == b.hash()
    assert b.applied_profile == "long.quick" and b.trials == 2 and b.grid["feature_dim"] == [8]
    assert b.source.endswith("[long] [quick]")  # reports recognise a quick run by this
    assert base.profile("quick").to_dict() == base.quick_profile().to_dict()
    assert base.quick_profile().applied_profile == "quick"


def test_profiles_leave_the_file_design_and_its_hash_alone(study, tmp_path):
    plain = tmp_path / "plain.toml"
    plain.write_text(STUDY.split("[profiles.long]")[0])
    with_profiles, without = st.load_design(study), st.load_design(plain)
    assert with_profiles.hash() == without.hash()
    assert "profiles" not in without.to_dict() and "applied_profile" not in without.to_dict()
    assert "exclude" not in without.to_dict()
    # the profile is part of the identity: same values under another profile name are another run
    long = with_profiles.profile("long")
    assert long.to_dict()["applied_profile"] == "long"
    renamed = st.Design(**{**long.to_dict(), "applied_profile": "other"})
    assert renamed.hash() != long.hash()


def test_unknown_profile_says_did_you_mean(study):
    base = st.load_design(study)
    with pytest.raises(InvalidParameterError, match=r"no profile 'lnog' \(did you mean 'long'\?\)") as err:
        base.profile("lnog")
    assert "['quick', 'long']" in str(err.value)
    with pytest.raises(InvalidParameterError, match="no profile 'zzz'; its profiles"):
        base.profile("zzz")
    with pytest.raises(InvalidParameterError, match="no profile 'long.slow'"):
        base.profile("long.slow")


@pytest.mark.parametrize(
    ("snippet", "match"),
    [
        ("[profiles.quick]\ntrials = 2\n", "write it as \\[quick\\]"),
        ("[profiles.big]\nname = 'x'\n", "profiles.big.name` is not a key a profile overrides"),
        ("[profiles.big]\ngrid = 3\n", "profiles.big.grid` must be a table"),
        ("[profiles.'a b']\ntrials = 2\n", "must be a safe file name"),
    ],
)
def test_bad_profiles_are_refused_when_the_file_is_read(tmp_path, snippet, match):
    p = tmp_path / "bad.toml"
    p.write_text(STUDY.split("[profiles.long]")[0] + snippet)
    with pytest.raises(InvalidParameterError, match=match):
        st.load_design(p)


def _design(**kw):
    args = dict(
        name="ex",
        kind="attention",
        trials=2,
        seed=1,
        data={"source": "sequence", "n_tokens": 16, "dim": 4},
        grid={"structure": ["iid", "local"], "feature_dim": [4, 8]},
        estimators=[{"estimator": "RFA"}],
    )
    return st.Design(**{**args, **kw})


def test_exclude_rules():
    d = _design(exclude=[{"structure": "local", "feature_dim": 8}])
    assert d.cells() == [
        {"structure": "iid", "feature_dim": 4},
        {"structure": "iid", "feature_dim": 8},
        {"structure": "local", "feature_dim": 4},
    ]
    assert _design(exclude=[{"structure": "other"}]).cells() == _design().cells()  # matches none: no-op
    with pytest.raises(InvalidParameterError, match=r"exclude\[0\].layer` must name a grid axis"):
        _design(exclude=[{"layer": 1}])
    with pytest.raises(InvalidParameterError, match="leaves out every cell"):
        _design(exclude=[{"feature_dim": 4}, {"feature_dim": 8}])
    with pytest.raises(InvalidParameterError, match="must be one value of the axis"):
        _design(exclude=[{"feature_dim": [4, 8]}])
    with pytest.raises(InvalidParameterError, match="non-empty table"):
        _design(exclude=[{}])
    # a boolean axis value matches only a boolean
    assert matches({"causal": True, "max_len": 1024}, {"causal": True})
    assert not matches({"causal": 1}, {"causal": True}) and not matches({"max_len": 1}, {"causal": True})
    assert matches({"x": 2.0}, {"x": 2})


def test_run_records_the_profile(study, tmp_path):
    d = st.load_design(study, profile="long.quick")
    res = st.run(d, out=tmp_path / "o")
    assert res.provenance["design"]["applied_profile"] == "long.quick"
    run_json = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run_json["design_hash"] == d.hash() and run_json["design"]["applied_profile"] == "long.quick"
    again = st.load(tmp_path / "o")
    assert again.design.applied_profile == "long.quick" and len(again.design.cells()) == 3


def test_cli_profile(study, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli_main(["run", str(study), "--profile", "long", "--quick", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "prof (profile long.quick): 3 cells x 2 estimators x 2 trials" in out
    folder = Path("out") / "prof-long"  # a named profile's default folder
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["design"]["applied_profile"] == "long.quick"
    report = (folder / "report.md").read_text()
    assert "Quick profile" in report
    assert cli_main(["run", str(study), "--profile", "lnog", "--out", "o2"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'long'?" in err and "Traceback" not in err and not os.path.exists("o2")
