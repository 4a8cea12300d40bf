"""Study harness: designs, runner, executors, resume, failures, theory agreement."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rfkit as rk
import rfkit.study as st
from rfkit.exceptions import InvalidParameterError, StudyError

ROOT = Path(__file__).resolve().parents[2]
PERFORMER = ROOT / "studies" / "performer-mse.toml"


def small_design(**over):
    kw = dict(
        name="small",
        estimators=[
            {"label": "positive", "map": "Positive"},
            {"label": "trig", "map": "Trig", "projection": "orthogonal"},
            {"label": "hcexp", "map": "HCEXP", "A": "variance"},
        ],
        grid={"n_features": [4, 16], "dim": [3, 6]},
        data={"source": "pairs", "n_pairs": 5, "norm_x": 0.5, "norm_y": 0.7},
        trials=60,
        chunk_trials=25,
        seed=123,
    )
    kw.update(over)
    return st.Design(**kw)


def test_tables_and_summary():
    res = st.run(small_design())
    assert len(res.trials) == 4 * 3 * 60  # cells x estimators x trials
    assert set(res.trials.columns) >= {"cell", "estimator", "n_features", "dim", "trial", "status", "sq_err"}
    assert res.trials.groupby(["cell", "estimator", "trial"]).size().max() == 1
    s = res.summary()
    from rfkit.study._design import DEFAULT_METRICS

    assert set(s["metric"]) == set(DEFAULT_METRICS["kernel"])  # a design that names none gets these
    assert (s["n_trials"] == 60).all() and (s["n_failed"] == 0).all()
    row = s[(s.metric == "mse") & (s.estimator == "positive") & (s.cell == 0)].iloc[0]
    raw = res.trials[(res.trials.cell == 0) & (res.trials.estimator == "positive")]["sq_err"]
    assert row["estimate"] == pytest.approx(raw.mean())
    assert row["mcse"] == pytest.approx(raw.std(ddof=1) / np.sqrt(60))
    assert row["ci_low"] < row["estimate"] < row["ci_high"]


def test_same_seed_same_numbers_and_crn():
    a = st.run(small_design(), rng=7).trials
    b = st.run(small_design(), rng=7).trials
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    c = st.run(small_design(), rng=8).trials
    assert not np.array_equal(a["sq_err"], c["sq_err"])


def test_trial_numbers_do_not_depend_on_chunking():
    a = st.run(small_design(chunk_trials=60), rng=3).trials
    b = st.run(small_design(chunk_trials=7), rng=3).trials
    np.testing.assert_allclose(a["sq_err"], b["sq_err"], rtol=1e-12)


@pytest.mark.slow
def test_executors_bit_identical():
    d = small_design()
    serial = st.run(d, rng=11, executor="serial").summary()
    procs = st.run(d, rng=11, executor="processes", workers=2).summary()
    pd.testing.assert_frame_equal(serial, procs, check_exact=True)
    dask = st.run(d, rng=11, executor="dask", workers=2).summary()
    pd.testing.assert_frame_equal(serial, dask, check_exact=True)


def test_failing_trial_raises_with_replay_info(monkeypatch):
    from rfkit.study import _eval_kernel

    real = _eval_kernel.kernel_ratios

    def flaky(fm, X, Y, lt, streams, **kw):
        if any(s.spawn_key[-1] == 3 for s in streams) and type(fm).__name__ == "Trig":
            raise FloatingPointError("boom")
        return real(fm, X, Y, lt, streams, **kw)

    monkeypatch.setattr(_eval_kernel, "kernel_ratios", flaky)
    with pytest.raises(StudyError, match="trial 3 of cell 0 \\('trig'") as info:
        st.run(small_design())
    assert info.value.cell == 0 and info.value.trial == 3
    res = st.run(small_design(), on_error="record")
    bad = res.trials[res.trials.status != "ok"]
    assert set(bad["estimator"]) == {"trig"} and set(bad["trial"]) == {3} and len(bad) == 4  # once per cell
    s = res.summary()
    assert (s[s.estimator == "trig"]["n_failed"] == 1).all()
    assert (s[s.estimator == "trig"]["n_trials"] == 59).all()


def test_run_trial_replays_a_trial():
    d = small_design()
    res = st.run(d, rng=5)
    root = np.random.SeedSequence(5)
    rep = st.run_trial(d, cell=2, trial=17, entropy=int(root.entropy))
    row = res.trials[(res.trials.cell == 2) & (res.trials.trial == 17) & (res.trials.estimator == "positive")]
    r = rep[rep.estimator == "positive"]["ratio"].to_numpy()
    assert row["rel_sq_err"].iloc[0] == pytest.approx(np.mean((r - 1) ** 2), rel=1e-12)


def test_performer_mse_quick_agrees_with_theory():
    res = st.run(PERFORMER, quick=True, rng=20261122)
    cmp = res.compare_theory()
    closed = [
        e["label"] for e in res.design.estimators if e.get("projection", "iid") in ("iid", "orthogonal")
    ]
    assert set(cmp["estimator"]) == set(closed)  # every estimator with a closed form is compared
    assert len(cmp[cmp.metric == "mse"]) == len(res.design.cells()) * len(closed)
    assert (cmp["z"].abs() <= 5).all(), cmp.sort_values("z")


def test_orthogonal_theory_rejects_iid_formula():
    """In performer-mse, the measured ORF MSE is far from the iid formula (the data tell them apart)."""
    res = st.run(PERFORMER, quick=True, rng=20261122)
    pairs = res.pairs
    orth = (
        res.summary().query("metric == 'mse' and estimator == 'trig-orthogonal' and n_features == 32").iloc[0]
    )
    iid_pred = pairs.query("estimator == 'trig' and n_features == 32")["theory_mse"].mean()
    assert abs(orth["estimate"] - iid_pred) > 20 * orth["mcse"]


# ---------------------------------------------------------------------- designs and files
def _write(tmp_path, text):
    p = tmp_path / "s.toml"
    p.write_text(textwrap.dedent(text))
    return p


GOOD = """
name = "t"
trials = 10
[data]
source = "pairs"
n_pairs = 3
dim = 4
[grid]
n_features = [4]
[[estimators]]
map = "Positive"
"""


def test_load_design_from_toml(tmp_path):
    d = st.load_design(_write(tmp_path, GOOD))
    assert d.cells() == [{"n_features": 4}] and d.labels == ["Positive"]


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda s: s + "\n[[[bad", "malformed TOML"),
        (
            lambda s: s.replace('map = "Positive"', 'map = "Gaussian"'),
            r"`estimators\[0\].map` must name a feature map",
        ),
        (
            lambda s: s.replace("n_features = [4]", "n_features = [0]"),
            "`grid.n_features` must hold positive integers",
        ),
        (
            lambda s: s.replace("n_features = [4]", "n_features = [4]\nwidth = [2]"),
            "`grid.width` is not a known axis",
        ),
        (lambda s: s.replace('source = "pairs"', 'source = "imagenet"'), "`data.source` must be one of"),
        (
            lambda s: s.replace("trials = 10", "trials = 0"),
            r"`trials` must be an int in the range \[1, inf\)",
        ),
        (lambda s: s.replace("trials = 10", "trials = 10\ncolour = 1"), "`colour` is not a design key"),
        (
            lambda s: s.replace('map = "Positive"', 'map = "Positive"\nprojection = "sobol"'),
            "The `projection` parameter of Positive",
        ),
        (
            lambda s: s.replace('map = "Positive"', 'map = "Positive"\nwidth = 3'),
            "Positive has no parameter `width`",
        ),
        (lambda s: s.replace("dim = 4\n", ""), "`data.dim` must be given"),
    ],
)
def test_bad_design_files(tmp_path, edit, match):
    p = _write(tmp_path, edit(GOOD))
    with pytest.raises(InvalidParameterError, match=match) as info:
        st.load_design(p)
    assert str(p) in str(info.value)


# ---------------------------------------------------------------------- output folders and resume
def test_out_folder_written_and_not_overwritten(tmp_path):
    out = tmp_path / "res"
    res = st.run(small_design(), out=out)
    for f in ("trials.parquet", "pairs.parquet", "summary.parquet", "summary.csv", "manifest.json"):
        assert (out / f).exists()
    back = st.StudyResult.load(out)
    pd.testing.assert_frame_equal(back.trials, res.trials, check_exact=True)
    meta = json.loads(
        pd.read_parquet(out / "summary.parquet").attrs["rfkit"]
    )  # provenance in Parquet metadata
    assert meta["design_hash"] == small_design().hash() and meta["entropy"] == str(123)
    assert {"rfkit", "numpy", "pandas"} <= set(meta["versions"]) and "cpus" in meta["machine"]
    assert back.provenance["design_hash"] == small_design().hash()
    stamp = (out / "trials.parquet").stat().st_mtime_ns
    with pytest.raises(StudyError, match="already holds results"):
        st.run(small_design(), out=out)
    with pytest.raises(StudyError, match="different design, seed or backend"):
        st.run(small_design(trials=61), out=out, resume=True)
    assert (out / "trials.parquet").stat().st_mtime_ns == stamp  # nothing destroyed


def test_unwritable_out(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StudyError, match="not writable"):
        st.run(small_design(), out=blocker / "sub")


@pytest.mark.slow
def test_resume_after_sigkill_gives_identical_tables(tmp_path):
    """A run with worker processes killed (SIGKILL) mid-way, resumed serially: identical tables."""
    design = small_design(grid={"n_features": [4, 8, 16], "dim": [8, 16]}, trials=200, chunk_trials=50)
    ref = st.run(design, rng=99)
    out = tmp_path / "killed"
    marker = tmp_path / "marker"
    code = textwrap.dedent(
        f"""
        import rfkit.study as st
        if __name__ == "__main__":
            d = st.Design(**{design.to_dict()!r})
            st.run(d, rng=99, out={str(out)!r}, executor="processes", workers=2)
        """
    )
    script = tmp_path / "run.py"
    script.write_text(code)
    env = {**os.environ, "RFKIT_STUDY_HOOK": "after-unit:7", "RFKIT_STUDY_HOOK_FILE": str(marker)}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen([sys.executable, str(script)], env=env)
    deadline = time.time() + 120
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # kill -9 at a known point: 7 of 24 work units recorded
    proc.wait()
    manifest = json.loads((out / "run.json").read_text())
    assert len(manifest["units"]) == 7
    resumed = st.run(design, rng=99, out=out, resume=True)
    assert resumed.provenance["units_resumed"] == 7 and resumed.provenance["units"] == 24
    pd.testing.assert_frame_equal(resumed.trials, ref.trials, check_exact=True)
    pd.testing.assert_frame_equal(resumed.summary(), ref.summary(), check_exact=True)
    assert resumed.trials.groupby(["cell", "estimator", "trial"]).size().eq(1).all()
    assert len(resumed.trials) == len(design.cells()) * len(design.estimators) * design.trials


def test_bad_run_arguments():
    with pytest.raises(InvalidParameterError, match="`executor` must be one of"):
        st.run(small_design(), executor="threads")
    with pytest.raises(InvalidParameterError, match="`on_error` must be"):
        st.run(small_design(), on_error="ignore")
    with pytest.raises(InvalidParameterError, match="`resume=True` needs `out`"):
        st.run(small_design(), resume=True)
    with pytest.raises(InvalidParameterError, match="cannot read study file"):
        st.run("no/such/file.toml")


def test_quick_profile_and_hash():
    d = st.load_design(PERFORMER)
    q = d.quick_profile()
    assert q.trials < d.trials and len(q.cells()) < len(d.cells())
    assert q.hash() != d.hash()
    assert isinstance(rk.study.Design, type)


# ---------------------------------------------------------------------- attention designs
def attention_design(**over):
    kw = dict(
        name="attn",
        kind="attention",
        estimators=[
            {"label": "rfa", "estimator": "RFA", "map": "Positive"},
            {"label": "ra", "estimator": "RA"},
            {"label": "lara", "estimator": "LARA", "weights": "balance"},
        ],
        grid={"samples": [4, 8]},
        data={
            "source": "sequence",
            "n_tokens": 16,
            "dim": 4,
            "d_v": 3,
            "structure": "local",
            "n_clusters": 4,
        },
        trials=12,
        seed=5,
    )
    kw.update(over)
    return st.Design(**kw)


def test_attention_design_runs_and_is_reproducible():
    a = st.run(attention_design())
    b = st.run(attention_design(), executor="processes", workers=2)
    pd.testing.assert_frame_equal(a.summary(), b.summary(), check_exact=True)
    assert len(a.trials) == 2 * 3 * 12
    assert set(a.summary()["metric"]) == set(st.METRICS_BY_KIND["attention"])
    assert a.timings is not None and (a.timings["seconds_median"] > 0).all()
    assert a.compare_theory().empty  # no closed forms for attention outputs


def test_equal_estimators_of_a_cell_are_run_once_with_the_same_results(monkeypatch):
    """Two estimators equal in a cell (a "causal-fit" map on a bidirectional cell is the plain one; a
    repeated RA) make the same calls on the same streams: the harness runs the first only and
    gives the second its results, exactly the numbers the second would compute."""
    from rfkit.study import _eval_attention as ev
    from rfkit.study._estimators import build_attention_estimator

    oprf = {"estimator": "RFA", "map": "OPRF", "projection": "orthogonal"}
    design = attention_design(
        estimators=[
            {"label": "oprf", **oprf},
            {"label": "oprf causal-fit", **oprf, "fit_pairs": "causal"},
            {"label": "ra", "estimator": "RA"},
            {"label": "ra again", "estimator": "RA"},
            {"label": "lara", "estimator": "LARA", "weights": "balance"},
        ],
        grid={"samples": [4, 8]},
        trials=6,
        on_error="record",
    )
    calls = []
    real_call = rk.attention.RA.__call__

    def counted(self, *a, **k):  # RA with 8 samples fails: its trials are recorded as failed
        calls.append(1)
        if self.n_samples == 8:
            raise FloatingPointError("a failure to record")
        return real_call(self, *a, **k)

    monkeypatch.setattr(rk.attention.RA, "__call__", counted)
    reused = st.run(design)
    n_reused = len(calls)
    same_call = ev._same_call
    monkeypatch.setattr(ev, "_same_call", lambda record, estimator, device: None)  # every estimator computed
    calls.clear()
    computed = st.run(design)
    assert n_reused * 2 == len(calls) > 0
    cols = ["cell", "trial", "err", "sq_err", "abs_err", "max_abs_err", "sq_dev", "status"]
    for res in (reused, computed):
        t = res.trials.set_index("estimator")
        for a, b in (("oprf", "oprf causal-fit"), ("ra", "ra again")):
            rows_a, rows_b = (t.loc[e, cols].reset_index(drop=True) for e in (a, b))
            pd.testing.assert_frame_equal(rows_a, rows_b, check_exact=True)
        assert not np.array_equal(t.loc["ra", "sq_err"], t.loc["lara", "sq_err"])
        assert t.loc["ra again", "status"].str.startswith("error:").sum() == 6  # the 8-sample cell
    pd.testing.assert_frame_equal(reused.summary(), computed.summary(), check_exact=True)
    pd.testing.assert_frame_equal(reused.trials, computed.trials, check_exact=True)
    # on causal data (a decoder) the causal fit is another map: the two are not the same call
    cell = design.cells()[0]

    def key(est, causal):
        params = ev.cell_estimator_params(design, est, cell, causal)
        return same_call(
            st.attention_estimator_record(params["estimator"]), build_attention_estimator(params), None
        )

    plain, causal_fit = design.estimators[:2]
    assert key(plain, False) == key(causal_fit, False)
    assert None not in (key(plain, True), key(causal_fit, True)) and key(plain, True) != key(causal_fit, True)


def test_ra_is_unbiased_in_the_harness():
    """RA's per-query mean output equals exact attention: bias^2 is within noise (variance/T)."""
    res = st.run(attention_design(trials=400, grid={"samples": [4]}))
    q = res.pairs[res.pairs.estimator == "ra"]
    # E[bias2_hat] = bias^2 + variance / T; an unbiased estimator has bias2_hat ~ variance / T
    ratio = (q["bias2"] / (q["variance"] / 400)).mean()
    assert ratio < 1.6, ratio


@pytest.mark.parametrize(
    "over, match",
    [
        ({"estimators": [{"estimator": "Performer"}]}, "`estimators\\[0\\].estimator` must be one of"),
        ({"data": {"source": "pairs", "dim": 4}}, "must be a sequence source"),
        ({"metrics": ["rel_mse"]}, "must be a non-empty list from"),
        ({"estimators": [{"estimator": "RA", "n_proposals": 3}]}, "RA has no parameter `n_proposals`"),
    ],
)
def test_bad_attention_designs(over, match):
    with pytest.raises(InvalidParameterError, match=match):
        attention_design(**over)


def test_concentration_design_checks():
    base = dict(
        name="c",
        kind="concentration",
        estimators=[{"map": "HCEXP", "A": "identity"}],
        grid={"p": [0.9], "n_pairs": [4], "n_features": [16]},
        data={"source": "gaussian", "dim": 3, "mean_q": 0.1, "cov_q": 0.01, "mean_k": 0.0, "cov_k": 0.01},
        trials=30,
        seed=1,
    )
    res = st.run(st.Design(**base))
    s = res.summary()
    cov = s[s.metric == "coverage"].iloc[0]
    assert cov["estimate"] >= 0.9 - 5 * max(cov["mcse"], np.sqrt(0.9 * 0.1 / 30))
    with pytest.raises(InvalidParameterError, match="must give the probability levels p"):
        st.Design(**{**base, "grid": {"n_pairs": [4], "n_features": [16]}})
    with pytest.raises(InvalidParameterError, match="must be 'gaussian' for kind 'concentration'"):
        st.Design(**{**base, "data": {"source": "pairs", "dim": 3}})


def test_unreachable_scheduler_is_a_clear_error(tmp_path):
    out = tmp_path / "o"
    with pytest.raises(StudyError, match="cannot reach the Dask scheduler"):
        st.run(small_design(), scheduler="tcp://127.0.0.1:9", out=out)
    st.run(small_design(), out=out)  # nothing was computed: the same folder can be used again


def test_rfa_study_keys_are_one_list():
    """RFA's own keys (``n_threads`` among them) go to RFA, never to its feature map, in every path.

    Regression: the keys the design used to size RFA's map and those the builder passed to RFA
    were two lists that disagreed on ``n_threads``, so this design failed to build.
    """
    d = attention_design(
        estimators=[{"label": "rfa", "estimator": "RFA", "samples": 8, "n_threads": 2}], grid={}
    )
    params = d.estimator_params(d.estimators[0], d.cells()[0])
    assert params["n_threads"] == 2 and params["samples"] == 8
    res = st.run(d.with_trials(3))
    assert (res.trials["status"] == "ok").all()
    # the budget axis feature_dim sizes the map from the same list of RFA keys
    d2 = attention_design(
        estimators=[{"label": "rfa", "estimator": "RFA", "map": "Trig", "n_threads": 2}],
        grid={"feature_dim": [8]},
    )
    assert d2.estimator_params(d2.estimators[0], d2.cells()[0])["samples"] == 4  # Trig: 2 columns each
