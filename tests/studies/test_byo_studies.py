"""Bring your own estimator: user maps and attention estimators in studies, under every
executor and through an interruption; the example study through `rfkit run` and the notebook API;
reopening, plotting and comparing results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rfkit as rk
import rfkit.study as st
from rfkit.exceptions import InvalidParameterError, StudyError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "studies" / "examples"
EXAMPLE = EXAMPLES / "rescaled-vs-prf.toml"


@pytest.fixture(autouse=True)
def _examples_importable(monkeypatch):
    """The example folder on sys.path here and (PYTHONPATH) in worker processes."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(ROOT), str(EXAMPLES), os.environ.get("PYTHONPATH", "")])
    )


def _rescaled():
    from rescaled import RescaledPositive

    return RescaledPositive


def small(estimators, **over):
    kw = dict(
        name="byo",
        estimators=estimators,
        grid={"n_features": [4, 8, 16]},
        data={"source": "gaussian", "n_pairs": 5, "dim": 4, "scale_q": 0.3, "scale_k": 0.1},
        trials=40,
        chunk_trials=20,
        seed=2026061301,
    )
    kw.update(over)
    return st.Design(**kw)


# ----------------------------------------------------------------------------- designs
def test_instances_are_stored_as_their_study_file_form():
    RescaledPositive = _rescaled()
    d = small(
        [
            RescaledPositive(8, scale=0.4),
            {"label": "orf", "map": rk.features.Positive(8, projection="orthogonal")},
        ]
    )
    assert d.estimators == [
        {"map": "rescaled:RescaledPositive", "label": "RescaledPositive", "scale": 0.4},
        {"label": "orf", "map": "Positive", "projection": "orthogonal"},
    ]  # n_features is a grid axis: the grid supplies it cell by cell
    same = small(
        [
            {"map": "rescaled:RescaledPositive", "label": "RescaledPositive", "scale": 0.4},
            {"label": "orf", "map": "Positive", "projection": "orthogonal"},
        ]
    )
    assert d.hash() == same.hash()  # the hash is that of the equivalent study file
    json.dumps(d.to_dict())  # plain data
    assert (
        small([{"map": RescaledPositive, "scale": 0.4}]).estimators[0]["map"] == "rescaled:RescaledPositive"
    )
    res = st.run(d)
    m = res.pairs.groupby("n_features")["m"].first()
    assert list(m) == [4, 8, 16]  # the grid reached the instance's class
    assert d.quick_profile().hash() and d.with_trials(3).trials == 3


def test_bad_estimator_entries_are_clear_errors(tmp_path, monkeypatch):
    (tmp_path / "boom.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    RescaledPositive = _rescaled()
    cases = [
        ({"map": "nosuchmodule_xyz:Map"}, r"cannot import module 'nosuchmodule_xyz'.*PYTHONPATH"),
        ({"map": "rescaled:Nope"}, r"module 'rescaled' has no attribute 'Nope'"),
        (
            {"map": "rescaled.RescaledPositive"},
            r"or be 'package.module:ClassName'.*'rescaled.RescaledPositive'",
        ),
        ({"map": "boom:Map"}, r"importing module 'boom' raised RuntimeError: boom at import"),
        ({"map": "numpy:ndarray"}, r"must be a subclass of rk.features.FeatureMap.*numpy.ndarray"),
        ({"map": "rescaled:RescaledPositive", "width": 3}, r"RescaledPositive has no parameter `width`"),
        (
            {"map": "rescaled:RescaledPositive", "scale": -1.0},
            r"`scale` parameter of RescaledPositive must be > 0",
        ),
        (
            {"map": lambda: 0},
            r"must be a name, 'package.module:ClassName'.*a class, or a dataclass instance.*Got function",
        ),
    ]
    for est, match in cases:
        with pytest.raises(InvalidParameterError, match=match):
            small([est])

    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Doubling(RescaledPositive):  # changes a field on construction: not a plain round trip
        def __post_init__(self):
            object.__setattr__(self, "scale", 2 * self.scale)

    with pytest.raises(InvalidParameterError, match="defined inside a function"):
        small([Doubling(4)])


def test_protocol_violations_are_raised_when_the_run_starts(tmp_path, monkeypatch):
    """Loading a design checks names and values only; the protocol probes (which run the map) are
    run by ``rk.study.check_design(design, probe=True)`` and at the start of every run, before
    any work unit or output folder, with the same named error."""
    (tmp_path / "badmaps.py").write_text(
        textwrap.dedent(
            """
            import dataclasses
            import numpy as np
            import rfkit as rk
            from rescaled import RescaledPositive, RescaledPositiveDraw

            @dataclasses.dataclass(frozen=True)
            class Frozen(RescaledPositive):  # ignores rng: every trial would repeat one draw
                def sample_one(self, dim, *, rng):
                    return RescaledPositiveDraw(self, dim, np.ones((self.n_features, dim)))

            @dataclasses.dataclass(frozen=True)
            class Doubling(RescaledPositive):
                def __post_init__(self):
                    object.__setattr__(self, "scale", 2 * self.scale)

            @dataclasses.dataclass(frozen=True)
            class NoDim(rk.features.FeatureMap):  # lacks feature_dim
                n_features: int = 4

                def sample_one(self, dim, *, rng):
                    return RescaledPositiveDraw(RescaledPositive(4), dim, rng.standard_normal((4, dim)))

            @dataclasses.dataclass(frozen=True)
            class BadTheory(RescaledPositive):
                def mse(self, x, y):
                    return -1.0 * super().mse(x, y)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    study = tmp_path / "s.toml"
    study.write_text(
        textwrap.dedent(
            """
            name = "bad"
            trials = 4
            [data]
            source = "pairs"
            dim = 3
            [grid]
            n_features = [4]
            [[estimators]]
            label = "frozen"
            map = "badmaps:Frozen"
            """
        )
    )
    design = st.load_design(study)  # names and values are fine: nothing is run yet
    for call in (
        lambda: st.check_design(design, probe=True),
        lambda: st.check_design(study),
        lambda: st.run(design, out=tmp_path / "out"),
    ):
        with pytest.raises(InvalidParameterError) as info:
            call()
        msg = str(info.value)
        assert str(study) in msg and "'frozen'" in msg and "Frozen" in msg and "ignores `rng`" in msg
    assert not (tmp_path / "out").exists()  # refused before the run folder is made
    assert st.check_design(design, probe=False) is design
    from badmaps import Doubling

    with pytest.raises(InvalidParameterError, match="does not survive the round trip"):
        small([Doubling(4)])
    with pytest.raises(InvalidParameterError, match=r"NoDim does not implement \['feature_dim'\]"):
        small([{"map": "badmaps:NoDim"}], grid={"dim": [3]})
    bad_theory = small([{"map": "badmaps:BadTheory"}])
    with pytest.raises(
        InvalidParameterError, match=r"BadTheory .*mse\(x, y\) must return one finite value >= 0"
    ):
        st.run(bad_theory)


# ----------------------------------------------------------------------------- executors, interruption
FLAKY = """
import os
import dataclasses
from rescaled import RescaledPositive, RescaledPositiveDraw


class FlakyDraw(RescaledPositiveDraw):
    def _log_features(self, X, side):
        # fails on the study's data (5 pairs), not on the protocol probes of a run's start (3, 8, 256 rows)
        if os.environ.get("BYO_FAIL_AT") == str(self.spec.n_features) and X.shape[-2] == 5:
            raise RuntimeError("interrupted")
        return super()._log_features(X, side)


@dataclasses.dataclass(frozen=True)
class Flaky(RescaledPositive):
    def sample_one(self, dim, *, rng):
        return FlakyDraw(self, dim, rng.standard_normal((self.n_features, dim)))
"""


def test_user_map_under_two_workers_resumes_after_an_interruption(tmp_path, monkeypatch):
    (tmp_path / "flaky.py").write_text(FLAKY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ["PYTHONPATH"]]))
    ests = [{"label": "flaky", "map": "flaky:Flaky", "scale": 0.5}, {"label": "oprf", "map": "OPRF"}]
    design = small(ests)  # 3 cells x 2 chunks = 6 work units
    reference = st.run(design)  # serial, uninterrupted
    out = tmp_path / "out"
    monkeypatch.setenv("BYO_FAIL_AT", "16")  # the last cell's units fail: the run stops there
    with pytest.raises(StudyError, match="cell 2 .*interrupted"):
        st.run(design, executor="processes", workers=2, out=out)
    assert not (out / "trials.parquet").exists()
    monkeypatch.delenv("BYO_FAIL_AT")
    resumed = st.run(design, executor="processes", workers=2, out=out, resume=True)
    prov = resumed.provenance
    assert 1 <= prov["units_resumed"] < prov["units"] == 6 and prov["worker_processes"] >= 1
    for name in ("trials", "pairs"):
        pd.testing.assert_frame_equal(getattr(resumed, name), getattr(reference, name), check_exact=True)
    again = st.load(out)
    pd.testing.assert_frame_equal(again.summary(), reference.summary(), check_exact=True)
    from dask.distributed import Client, LocalCluster

    # a random dashboard port: another run on this machine may hold the default one
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        with Client(cluster) as client:
            dask = st.run(design, executor=client)
    pd.testing.assert_frame_equal(dask.trials, reference.trials, check_exact=True)


def test_classes_of_an_interactive_session_are_refused_for_worker_processes(monkeypatch):
    import types

    RescaledPositive = _rescaled()
    main = types.ModuleType("__main__")  # like a notebook kernel: no __file__
    main.Session = type("Session", (RescaledPositive,), {"__module__": "__main__"})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "__main__", main)
    d = small([{"map": "__main__:Session"}], grid={"n_features": [4]})
    with pytest.raises(InvalidParameterError, match="interactive session.*executor='serial'"):
        st.run(d, executor="processes", workers=2)
    assert len(st.run(d).trials) == 40  # serial works


# ----------------------------------------------------------------------------- the example study
def test_example_study_through_the_cli_and_the_notebook_api(tmp_path):
    out = tmp_path / "cli"
    cmd = [
        sys.executable,
        "-m",
        "rfkit.cli",
        "run",
        str(EXAMPLE),
        "--quick",
        "--out",
        str(out),
        "--no-progress",
    ]
    env = dict(os.environ)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "6 of 6 within 5 MCSE" in proc.stdout  # RescaledPositive's own mse is compared too
    assert (out / "figures" / "mse_vs_features.png").exists()
    result = st.load(out)
    theory = result.compare_theory()
    assert set(theory["estimator"]) == {"rescaled", "positive", "oprf"}
    # the notebook API gives the same numbers
    same = st.run(EXAMPLE, quick=True)
    pd.testing.assert_frame_equal(same.trials, result.trials, check_exact=True)
    mse = same.summary().query("metric == 'mse'").set_index(["estimator", "n_features"])["estimate"]
    assert mse["rescaled"].lt(mse["positive"]).all()  # the balanced rescaling wins on this data
    fig = result.plot("mse_vs_features").figure  # plot returns the Axes drawn on
    assert type(fig).__name__ == "Figure" and fig.axes[0].get_xscale() == "log"
    html = result._repr_html_()
    assert "rescaled:RescaledPositive" in html and "data:image/png;base64," in html and "± " in html
    assert result.design.hash() in html and "<table" in html
    with pytest.raises(
        InvalidParameterError,
        match=r"one of \['kernel_scatter', 'mse_vs_features', 'mse_vs_features_rel_mse'\]",
    ):
        result.plot("mse_vs_samples")
    # without the example folder on the path: a clear error, no table
    env["PYTHONPATH"] = str(ROOT)
    bad = subprocess.run(
        cmd[:-3] + ["--out", str(tmp_path / "no")], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert (
        bad.returncode == 2 and "cannot import module 'rescaled'" in bad.stderr and "PYTHONPATH" in bad.stderr
    )
    assert not (tmp_path / "no" / "trials.parquet").exists()


# ----------------------------------------------------------------------------- compare
BUGGY = """
import dataclasses
import numpy as np
from rescaled import RescaledPositive, RescaledPositiveDraw


class Draw(RescaledPositiveDraw):
    def _log_features(self, X, side):
        sign, logphi = super()._log_features(X, side)
        return sign, logphi + np.log(self.spec.bug) * (side == "query")


@dataclasses.dataclass(frozen=True)
class Buggy(RescaledPositive):
    bug = 1.0  # a class attribute, not a parameter: "a change to the estimator's code"

    def sample_one(self, dim, *, rng):
        return Draw(self, dim, rng.standard_normal((self.n_features, dim)))
"""


def test_compare_flags_a_change_to_an_estimator(tmp_path, monkeypatch):
    (tmp_path / "buggy.py").write_text(BUGGY)
    monkeypatch.syspath_prepend(str(tmp_path))
    import buggy

    design = small(
        [{"label": "mine", "map": "buggy:Buggy"}, {"label": "prf", "map": "Positive"}],
        trials=200,
        chunk_trials=100,
    )
    before = st.run(design)
    same_seed = st.compare(before, st.run(design))
    assert same_seed["paired"].all() and (same_seed["diff"] == 0).all() and not same_seed["flagged"].any()
    unpaired = st.compare(before, st.run(design), paired=False)  # independent formula, on request
    row = unpaired.iloc[0]
    assert (
        row["mcse"] == pytest.approx(np.hypot(row["mcse_a"], row["mcse_b"])) and not unpaired["paired"].any()
    )
    monkeypatch.setattr(buggy.Buggy, "bug", 1.05)  # a 5% bias slipped into the estimator
    after = st.run(design)
    c = st.compare(before, after)
    mine = c[c.estimator == "mine"].set_index(["n_features", "metric"])
    assert mine.loc[(slice(None), "rel_bias"), "flagged"].all()  # paired: the bias is seen at every m
    assert not c[c.estimator == "prf"]["flagged"].any() and (c[c.estimator == "prf"]["diff"] == 0).all()
    np.testing.assert_allclose(mine.loc[(slice(None), "rel_bias"), "diff"], 0.05, atol=5e-3)
    assert c.attrs["z"] == st.COMPARE_Z == 5.0
    other_seed = st.run(design, rng=99)  # other data: not comparable as Monte Carlo noise
    with pytest.raises(InvalidParameterError, match="different data sets"):
        st.compare(before, other_seed)
    with pytest.raises(InvalidParameterError, match="`grid` differs"):
        st.compare(before, st.run(design.__class__(**{**design.to_dict(), "grid": {"n_features": [4]}})))
    with pytest.raises(InvalidParameterError, match="`z` parameter of compare"):
        st.compare(before, after, z=0)
    with pytest.raises(InvalidParameterError, match="paired=True"):
        st.compare(before, other_seed, paired=True)
    with pytest.raises(InvalidParameterError, match="same seed.*200 and 100 trials"):
        st.compare(before, st.run(design.with_trials(100)))


# ----------------------------------------------------------------------------- attention estimators
ESTIMATORS = """
import dataclasses
import numpy as np
import rfkit as rk


def uniform_keys(Q, K, V, *, rng, n_draws=None, samples=4):
    # attention from `samples` keys drawn uniformly (biased; a toy of your own)
    g = np.random.default_rng(rng)
    idx = g.integers(0, K.shape[-2], size=samples)
    logits = Q @ K[..., idx, :].swapaxes(-1, -2)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    out = (w / w.sum(-1, keepdims=True)) @ V[..., idx, :]
    return rk.attention.AttentionResult(output=out, method="uniform-keys")


@dataclasses.dataclass(frozen=True)
class Transposed:
    samples: int = 4

    def __call__(self, Q, K, V, *, rng, n_draws=None):
        out = uniform_keys(Q, K, V, rng=rng, samples=self.samples).output
        return rk.attention.AttentionResult(output=out.swapaxes(-1, -2), method="bad")


def bare(Q, K, V, *, rng, n_draws=None):
    return np.zeros((Q.shape[-2], V.shape[-1]))
"""


def test_attention_estimators_of_your_own(tmp_path, monkeypatch):
    (tmp_path / "myattn.py").write_text(ESTIMATORS)
    monkeypatch.syspath_prepend(str(tmp_path))
    base = dict(
        name="attn-byo",
        kind="attention",
        grid={"samples": [2, 4]},
        data={"source": "sequence", "n_tokens": 6, "dim": 3, "d_v": 2},
        trials=6,
        seed=7,
    )
    d = st.Design(
        estimators=[
            {"label": "mine", "estimator": "myattn:uniform_keys"},
            {"label": "rfa-mine", "estimator": "RFA", "map": "rescaled:RescaledPositive"},
            {"label": "ra", "estimator": "RA"},
        ],
        **base,
    )
    res = st.run(d)
    assert (
        set(res.summary()["estimator"]) == {"mine", "rfa-mine", "ra"} and (res.trials["status"] == "ok").all()
    )
    assert res.pairs.query("estimator == 'rfa-mine'")["cell"].nunique() == 2
    transposed = st.Design(estimators=[{"estimator": "myattn:Transposed"}], **base)  # not run yet
    for call in (lambda: st.run(transposed), lambda: st.check_design(transposed)):
        with pytest.raises(
            InvalidParameterError,
            match=r"Transposed .*shape of exact attention \(6, 2\).*Got shape \(2, 6\)",
        ):
            call()
    with pytest.raises(InvalidParameterError, match=r"bare .*AttentionResult.*Got ndarray"):
        st.run(st.Design(estimators=[{"estimator": "myattn:bare"}], **base))
    with pytest.raises(
        InvalidParameterError, match=r"`estimators\[0\].estimator` must be one of .* or 'package.module:Name'"
    ):
        st.Design(estimators=[{"estimator": "Performer"}], **base)


# ----------------------------------------------------------------------------- records and registration
def _docs_examples():
    """The `# file:` examples and the study file of the docs section on registration."""
    import re

    text = (ROOT / "docs" / "bring-your-own.md").read_text()
    sec = text[
        text.index("## One file plus one registration") : text.index("## Reopening and comparing runs")
    ]
    files = dict(re.findall(r"```python\n# file: (\w+)\.py\n(.*?)```", sec, re.S))
    study = re.search(r"```toml\n(.*?)```", sec, re.S)
    assert study is not None
    return files, study.group(1)


@pytest.fixture
def registry(tmp_path, monkeypatch):
    """The docs' example modules importable here and in workers; the registries restored afterwards."""
    from rfkit.study import _records

    files, _ = _docs_examples()
    for name, code in files.items():
        (tmp_path / f"{name}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(ROOT), str(tmp_path), os.environ.get("PYTHONPATH", "")])
    )
    saved = {k: dict(v) for k, v in _records._REGISTRIES.items()}
    yield tmp_path
    for k, v in saved.items():
        _records._REGISTRIES[k].clear()
        _records._REGISTRIES[k].update(v)
    from rfkit.plots import unregister_figure

    unregister_figure("my_rel_mse")
    for name in files:
        sys.modules.pop(name, None)


def test_docs_examples_are_one_file_plus_one_registration_each(registry):
    files, study_text = _docs_examples()
    import re

    assert set(files) == {"my_maps", "my_attention", "my_metrics", "my_data", "my_closed_forms", "my_figures"}
    for name, code in files.items():  # one registration per file
        assert len(re.findall(r"^(?:st\.)?register_\w+\(", code, re.M)) == 1, name
    study = registry / "mine.toml"
    study.write_text(study_text)
    design = st.load_design(study).with_trials(30)  # imports the modules: their names resolve
    assert design.imports == ["my_maps", "my_metrics", "my_data", "my_closed_forms", "my_figures"]
    serial = st.run(design, rng=4)
    procs = st.run(design, rng=4, executor="processes", workers=2)  # workers import them too
    pd.testing.assert_frame_equal(serial.summary(), procs.summary(), check_exact=True)
    s = serial.summary()
    assert set(s["metric"]) == {"rel_mse", "rms_rel_err"} and set(s["estimator"]) == {
        "OrthogonalTrig",
        "Taylor",
    }
    t = serial.trials
    rel = np.sqrt(t["rel_sq_err"])
    assert (t["rms_rel_err"] >= 0).all() and np.allclose(t["rms_rel_err"], rel)  # the metric's own column
    p = serial.pairs
    taylor = p[p.estimator == "Taylor"]  # deterministic: the closed form is the measured MSE
    # squared errors of ~1e-6 relative: equal to the rounding of the estimate against exp(x.y)
    np.testing.assert_allclose(taylor["theory_mse"], taylor["mse"], rtol=1e-3)
    assert taylor["theory_mse"].notna().all()  # rfkit.theory has none for Taylor: the registered one
    assert p.loc[p.estimator == "OrthogonalTrig", "theory_mse"].notna().all()  # rfkit.theory's (a Trig)
    rec = st.feature_map_record("OrthogonalTrig")
    assert rec.factory.__module__ == "my_maps" and rec.reference.startswith("Yu et al.")
    assert rec in st.records("feature map") and "OrthogonalTrig" in st.FEATURE_MAPS
    assert "sphere" in st.DATA_SOURCES and "rms_rel_err" in st.METRICS_BY_KIND["kernel"]
    assert "rms_rel_err" not in st.METRICS_BY_KIND["attention"]
    assert "my_rel_mse" in serial.figure_names()  # the figure of my_figures.py, declared in [outputs]
    fig = serial.plot("my_rel_mse").figure
    assert fig.axes[0].get_ylabel() == "relative MSE"
    assert fig._suptitle.get_text() == "mine: relative MSE of 2 estimators"


def test_docs_attention_estimator_runs_under_its_name_and_its_budget(registry):
    import my_attention  # noqa: F401 - registers UniformKeys

    design = st.Design(
        name="uk",
        kind="attention",
        estimators=[{"estimator": "UniformKeys"}, {"estimator": "RA"}],
        grid={"samples": [3, 6]},
        data={"source": "sequence", "n_tokens": 12, "dim": 4, "d_v": 2},
        trials=8,
        seed=3,
    )
    assert design.estimator_params(design.estimators[0], design.cells()[1]) == {
        "estimator": "UniformKeys",
        "samples": 6,
    }
    built = st.attention_estimator_record("UniformKeys").build({"estimator": "UniformKeys", "samples": 6})
    assert built.keywords == {"n_keys": 6}  # the record's from_budget
    serial = st.run(design)
    procs = st.run(design, executor="processes", workers=2)  # the registering module travels to workers
    pd.testing.assert_frame_equal(serial.summary(), procs.summary(), check_exact=True)
    assert set(serial.trials["estimator"]) == {"UniformKeys", "RA"}


def test_a_taken_name_is_refused_unless_replaced_on_purpose(registry):
    rec = st.feature_map_record("Positive")
    with pytest.raises(InvalidParameterError, match="already registered; pass replace=True"):
        st.register_feature_map(rec)
    assert st.register_feature_map(rec, replace=True) is rec
    with pytest.raises(InvalidParameterError, match="without ':' or '.'"):
        st.register_feature_map(st.FeatureMapRecord("pkg.Mine", rk.features.Positive))
    with pytest.raises(InvalidParameterError, match="must be a subclass of rk.features.FeatureMap"):
        st.FeatureMapRecord("Mine", dict)
    with pytest.raises(InvalidParameterError, match="`better` must be"):
        st.MetricRecord("m", ("kernel",), "sq_err", better="smaller")
    with pytest.raises(InvalidParameterError, match="expected a MetricRecord"):
        st.register_metric(rec)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="`imports`: importing module 'no_such_mod_xyz' failed"):
        small([{"map": "Positive"}], imports=["no_such_mod_xyz"])


def test_builtin_records_say_what_the_harness_needs():
    """rfkit's own records: every map of rfkit.features, the five estimators, budgets and capabilities."""
    maps = {r.name: r for r in st.records("feature map")}
    assert set(maps) == set(st.FEATURE_MAPS) and {"Positive", "Taylor", "SDERF"} <= set(maps)
    assert maps["Positive"].capabilities.positive and not maps["Trig"].capabilities.positive
    assert maps["CEXP"].capabilities.data_dependent and not maps["Positive"].capabilities.data_dependent
    assert maps["Positive"].capabilities.closed_form and not maps["Taylor"].capabilities.closed_form
    assert st.closed_form_record("Positive") is not None and st.closed_form_record("Taylor") is None
    est = {r.name: r for r in st.records("attention estimator")}
    assert list(est) == ["RFA", "RA", "SNIS", "LARA", "Hybrid"] and all(
        r.capabilities.causal for r in est.values()
    )
    assert est["RA"].from_budget(5, {}) == {"n_samples": 5}
    with pytest.raises(InvalidParameterError, match="not a multiple of samples_per_proposal"):
        est["LARA"].from_budget(5, {"samples_per_proposal": 2})
    # RFA: one list of own keys (its signature), the rest goes to its map
    assert est["RFA"].own_keys >= {
        "causal",
        "shared_across_heads",
        "chunk_size",
        "n_threads",
        "map",
        "samples",
    }
    assert est["RFA"].map_spec({"map": "Trig", "n_threads": 2, "projection": "orthogonal"}) == (
        "Trig",
        {"projection": "orthogonal"},
    )
    for m in st.records("metric"):
        assert m.better in ("lower", "higher", "zero") and m.kinds
    assert st.metric_record("coverage").better == "higher" and st.metric_record("bias").better == "zero"
    assert st.data_source_record("minilm").plural_axes == {"layers": "layer", "heads": "head"}


#: parameters besides the budget that a map needs to be built (the rest build from their budget alone)
_EXTRA = {"Taylor": {"degree": 2}, "Limit": {"n": 2}, "TensorSketch": {"degree": 2}}


@pytest.mark.parametrize("name", list(st.FEATURE_MAPS))
def test_every_registered_map_builds_from_its_budget_and_follows_the_protocol(name):
    rec = st.feature_map_record(name)
    params = {**(rec.from_budget(4) if "n_features" in rec.params else {}), **_EXTRA.get(name, {})}
    fm = rec.build(params)
    assert isinstance(fm, rec.factory)
    rk.features.check_feature_map(fm, 3)
    assert fm.needs_data <= rec.capabilities.data_dependent  # a map fitted to data says so


@pytest.mark.parametrize("name", ["RFA", "RA", "SNIS", "LARA"])
def test_every_registered_attention_estimator_builds_from_a_budget_and_follows_the_protocol(name):
    est = st.attention_estimator_record(name).build({"estimator": name, "samples": 4})
    st.check_attention_estimator(est, 3)
