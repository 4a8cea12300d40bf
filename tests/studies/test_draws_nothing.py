"""Estimators that draw nothing are called once per work unit: every trial takes that call's results.

An estimator whose record's ``deterministic`` hook says it draws nothing (Hybrid with keys chosen
by content and no remainder; RFA and Hybrid with a deterministic map) gives every trial the same
output, so the harness calls it once per work unit. The tables must be those of calling it for
every trial (the hook off), apart from the measured times.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rfkit as rk
import rfkit.study as st
import rfkit.study._eval_attention as eval_attention
import rfkit.study._eval_dropin as eval_dropin
from rfkit.attention import Hybrid
from rfkit.study._builtin_attention_hooks import is_deterministic

STUDY = Path(__file__).resolve().parents[2] / "rfkit" / "studies" / "drop-in.toml"
TOP = {"estimator": "Hybrid", "window": 2, "n_global": 2, "remainder": "none"}
ESTIMATORS = [
    {"label": "favor+", "estimator": "RFA", "map": "Positive"},
    {"label": "proxy", **TOP, "scorer": "proxy"},
    {"label": "quest", **TOP, "scorer": "quest", "block_size": 4},
    {"label": "uniform", "estimator": "Hybrid", "window": 2, "n_global": 2, "remainder": "uniform"},
]
TIMES = ("seconds", "seconds_median", "time")


@pytest.mark.parametrize(
    ("kwargs", "random"),
    [
        ({"feature_map": rk.features.Positive(4)}, True),
        ({"feature_map": rk.features.Taylor(degree=2)}, False),
        ({"feature_map": rk.features.Taylor(degree=2), "lsh_buckets": 2}, True),
        ({"window": 2, "remainder": "none"}, False),
        ({"top_k": 3, "scorer": "quest", "remainder": "none"}, False),
        ({"top_k": 3, "scorer": "oracle", "remainder": "none"}, False),
        ({"top_k": 3, "scorer": "lsh", "remainder": "none"}, True),
        ({"top_k": 3, "scorer": "proxy", "remainder": "importance", "n_samples": 2}, True),
        ({"n_samples": 3, "remainder": "uniform"}, True),
        ({"n_samples": 3, "remainder": "stratified"}, True),
    ],
)
def test_hybrid_is_random_says_whether_the_output_depends_on_rng(kwargs, random) -> None:
    est = Hybrid(**kwargs)
    assert est.is_random is random and is_deterministic(est) is (not random)
    Q, K, V = 0.5 * np.random.default_rng(0).normal(size=(3, 2, 12, 4))
    a, b = est(Q, K, V, rng=1).output, est(Q, K, V, rng=2).output
    assert np.array_equal(a, b) is (not random)


def test_rfa_with_a_deterministic_map_draws_nothing() -> None:
    assert is_deterministic(rk.attention.RFA(rk.features.Taylor(degree=2)))
    assert not is_deterministic(rk.attention.RFA(rk.features.Positive(4)))


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count Hybrid's calls by its remainder and scorer."""
    calls: dict[str, int] = {}
    original = Hybrid.__call__

    def counted(self, *args, **kwargs):
        key = f"{self.scorer}/{self.remainder}"
        calls[key] = calls.get(key, 0) + 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Hybrid, "__call__", counted)
    return calls


def _same_tables(a: st.StudyResult, b: st.StudyResult) -> None:
    for name in ("trials", "pairs"):
        x, y = getattr(a, name), getattr(b, name)
        if x is None:
            assert y is None
            continue
        keep = [c for c in x.columns if c not in TIMES]
        pd.testing.assert_frame_equal(x[keep], y[keep])
    pd.testing.assert_frame_equal(a.summary(), b.summary())


def test_attention_cells_call_a_deterministic_estimator_once_per_unit(monkeypatch) -> None:
    d = st.Design(
        name="draws-nothing",
        kind="attention",
        trials=4,
        chunk_trials=2,  # two work units per cell: one call in each
        seed=3,
        metrics=["mse", "bias", "variance"],
        data={"source": "sequence", "n_tokens": 24, "dim": 4, "d_v": 3, "scale": 0.5},
        grid={"dim": [4], "feature_dim": [12]},
        estimators=[*ESTIMATORS, {**ESTIMATORS[1], "label": "proxy-causal", "causal": True}],
    )
    calls = _counting(monkeypatch)
    once = st.run(d)
    counted_once = dict(calls)
    calls.clear()
    monkeypatch.setattr(eval_attention, "draws_nothing", lambda record, est: False)
    every = st.run(d)
    _same_tables(once, every)
    # one call per unit instead of one per trial (besides the cell's cost measurement, one call each)
    units = 2
    assert calls["proxy/none"] - counted_once["proxy/none"] == 2 * (d.trials - units)  # two estimators
    assert calls["quest/none"] - counted_once["quest/none"] == d.trials - units
    assert counted_once["quest/none"] == units + 1
    assert counted_once["None/uniform"] == calls["None/uniform"]
    s = once.summary().set_index(["estimator", "metric"])
    for label in ("proxy", "proxy-causal", "quest"):  # no variance over draws: all trials the same
        assert np.all(s.loc[(label, "variance"), "estimate"] == 0), label
    assert np.all(s.loc[("uniform", "variance"), "estimate"] > 0)


@pytest.mark.filterwarnings("ignore::rfkit.exceptions.IllConditionedWarning")
def test_dropin_cells_call_a_deterministic_estimator_once(monkeypatch) -> None:
    d = st.load_design(STUDY).quick_profile().to_dict()
    d.pop("quick", None)
    d["estimators"] = ESTIMATORS[:4]
    d["trials"] = 3
    d["grid"] = {"n_tokens": [16], "feature_dim": [12]}
    d["data"] = {**d["data"], "layers": [0], "one_layer": {"n_tokens": [16]}}
    design = st.Design(**d)
    calls = _counting(monkeypatch)
    once = st.run(design)
    counted_once = dict(calls)
    calls.clear()
    monkeypatch.setattr(eval_dropin, "draws_nothing", lambda record, est: False)
    every = st.run(design)
    _same_tables(once, every)
    assert counted_once["proxy/none"] * design.trials == calls["proxy/none"] > 0
    assert counted_once["None/uniform"] == calls["None/uniform"] > 0
    t = once.trials
    for label in ("proxy", "quest"):
        rows = t[t["estimator"] == label]
        assert rows["kl"].nunique() == 1 and rows["emb_cos"].nunique() == 1, label
        assert (rows["seconds"] > 0).all() if "seconds" in rows else True
    assert t[t["estimator"] == "uniform"]["kl"].nunique() == design.trials


def test_a_failing_deterministic_estimator_fails_in_every_trial(monkeypatch) -> None:
    d = st.load_design(STUDY).quick_profile().to_dict()
    d.pop("quick", None)
    d.update(estimators=[ESTIMATORS[1]], trials=3, on_error="record")
    d["grid"] = {"n_tokens": [16], "feature_dim": [12]}
    d["data"] = {**d["data"], "layers": [0], "one_layer": {"n_tokens": [16]}}

    def broken(self, *args, **kwargs):
        raise FloatingPointError("boom")

    monkeypatch.setattr(Hybrid, "__call__", broken)
    res = st.run(st.Design(**d))
    assert (res.trials["status"] == "error:FloatingPointError").all() and len(res.trials) == 3
