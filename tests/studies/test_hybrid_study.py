"""Hybrid named in a study file: built from its record, budget split, run end to end by the command line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rfkit.study as st
from rfkit.cli import main as cli_main
from rfkit.exceptions import InvalidParameterError

STUDY = """
name = "hybrid-tiny"
kind = "attention"
trials = 3
seed = 9
[data]
source = "sequence"
n_tokens = 32
dim = 4
structure = "local"
[grid]
feature_dim = [16, 32]
[[estimators]]
label = "favor+"
estimator = "RFA"
projection = "orthogonal"
[[estimators]]
label = "plain"
estimator = "Hybrid"
window = 2
n_global = 1
projection = "orthogonal"
[[estimators]]
label = "ratio"
estimator = "Hybrid"
variant = "ratio"
window = 2
causal = true
[[estimators]]
label = "lsh"
estimator = "Hybrid"
lsh_buckets = 4
n_features = 8
[outputs]
figures = ["mse_vs_cost"]
tables = ["summary"]
"""


def test_hybrid_study_runs_end_to_end(tmp_path, capsys):
    path = tmp_path / "h.toml"
    path.write_text(STUDY)
    d = st.load_design(path)
    cell = d.cells()[0]
    assert d.estimator_params(d.estimators[1], cell)["samples"] == 16 - 5 - 1
    assert d.estimator_params(d.estimators[2], cell)["samples"] == 16 - 3  # causal window: w + 1 keys
    assert "samples" not in d.estimator_params(d.estimators[3], cell)  # LSH: its own n_features
    out = tmp_path / "o"
    assert cli_main(["run", str(path), "--out", str(out), "--no-progress"]) == 0
    assert "2 cells x 4 estimators x 3 trials" in capsys.readouterr().out
    s = pd.read_parquet(out / "summary.parquet")
    mse = s[s.metric == "mse"]
    assert (mse["status"] == "ok").all() and mse["estimate"].gt(0).all()
    cost = mse.set_index(["estimator", "feature_dim"])["cost"]
    assert cost[("favor+", 16)] == 16 and cost[("favor+", 32)] == 32
    assert 15 < cost[("plain", 16)] <= 16 and 31 < cost[("plain", 32)] <= 32
    assert 8 < cost[("lsh", 16)] < 8 + 32  # its buckets' keys plus 8 features
    report = (out / "report.md").read_text()
    assert "figures/mse_vs_cost.png" in report and "| cost |" in report


def test_lsh_without_features_and_too_small_budgets_are_refused(tmp_path):
    path = tmp_path / "h.toml"
    path.write_text(STUDY.replace("n_features = 8\n", ""))
    with pytest.raises(InvalidParameterError, match=r"estimators\[3\].*give the map's `n_features`"):
        st.load_design(path)
    path.write_text(STUDY.replace("feature_dim = [16, 32]", "feature_dim = [6, 32]"))
    with pytest.raises(InvalidParameterError, match=r"estimators\[1\].*a budget .* of 6 per query leaves no"):
        st.load_design(path)


def test_keys_by_content_profile_has_equal_cost_per_query():
    """real-attention's `content` profile: every estimator of a cell costs the cell's budget per query
    (its measured cost column: exact logits + random features), but for what no estimator can spend
    and what Quest's whole pages add; the oracle scorer pays every key's logit (a reference line)."""
    path = Path(__file__).resolve().parents[2] / "rfkit" / "studies" / "real-attention.toml"
    d = st.load_design(path, profile="content.quick")
    res = st.run(d, rng=d.seed)
    mse = res.summary()
    mse = mse[mse.metric == "mse"]
    quest = {d.label(e): e.get("block_size", 16) for e in d.estimators if e.get("scorer") == "quest"}
    for (causal, n, budget), cell in mse.groupby(["causal", "max_len", "feature_dim"]):
        cost = cell.set_index("estimator")["cost"]
        # a causal query i sees i + 1 keys: an estimator that computes only exact logits spends min(c, i + 1)
        capped = np.minimum(np.arange(1, n + 1), budget).mean() if causal else float(budget)
        assert cost["favor+"] == budget
        assert cost["oracle top-k"] > n / 2  # every visible key's logit, besides its support
        for label, c in cost.drop(["favor+", "oracle top-k"]).items():
            over = quest.get(label, 1) - 1  # Quest adds whole pages: at most block_size - 1 keys over
            # 1 key of slack: windows hold fewer keys at the ends of the text
            assert capped - 1 <= c <= budget + over, (label, causal, budget, c)
