"""``rk.advise`` and ``rfkit advise``: shapes, table, reproducibility, a case whose answer is known, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

import rfkit as rk
from rfkit.advice import Advice
from rfkit.advice._advise import COLUMNS
from rfkit.cli import main

N, D = 64, 16


def _heads(n_heads: int = 2, n: int = N, d: int = D, scale: float = 0.25, seed: int = 0):
    rng = np.random.default_rng(seed)
    Q, K = scale * rng.normal(size=(2, n_heads, n, d))
    V = rng.normal(size=(n_heads, n, 4))
    return Q, K, V


def _local(n_heads: int = 2, n: int = N, d: int = 32, strength: float = 9.0, seed: int = 1):
    """Strongly local heads: each query's own key has logit ``strength``, the others about 0."""
    rng = np.random.default_rng(seed)
    E = rng.normal(size=(n_heads, n, d))
    E /= np.linalg.norm(E, axis=-1, keepdims=True)
    Q = np.sqrt(strength) * E
    K = np.sqrt(strength) * E
    V = rng.normal(size=(n_heads, n, 4))
    return Q, K, V


@pytest.fixture(scope="module")
def advice() -> Advice:
    Q, K, V = _heads()
    return rk.advise(Q, K, V, budget=16, rng=3, n_theory_queries=4)


def test_table_columns_ranks_and_candidates(advice):
    t = advice.table
    assert tuple(t.columns) == COLUMNS
    assert list(t["rank"]) == list(range(1, len(t) + 1))
    assert np.all(np.diff(t["simulated MSE"].to_numpy()) >= 0)
    assert (t["MCSE"] >= 0).all() and (t["simulated MSE"] > 0).all()
    # a deterministic estimator (top-k, nothing sampled) has no Monte Carlo error; the others do
    sampled = ~t["estimator"].str.contains("no remainder")
    assert (t.loc[sampled, "MCSE"] > 0).all()
    fams = set(t["family"])
    assert {"RFA", "Hybrid", "keys by content", "SNIS", "LARA"} <= fams
    names = set(t["estimator"])
    assert "FAVOR+ (RFA, Positive orthogonal)" in names and "RFA OPRF" in names and "RFA SADERF" in names
    # signed and deterministic maps are left out, each with a reason
    for name in ("Trig", "Taylor", "Limit", "RandomMaclaurin", "TensorSketch"):
        assert name in advice.skipped and advice.skipped[name]
    assert advice.recommendation == t["estimator"].iloc[0]
    assert advice.rests_on in ("simulation", "simulation and theory")
    # theory: a prediction in its domain or a stated reason, never a silent blank
    for status, pred in zip(t["theory"], t["predicted MSE"], strict=True):
        assert status in ("in domain", "out of domain") or status.startswith("none: ")
        if status == "in domain":
            assert np.isfinite(pred)
        if status.startswith("none"):
            assert np.isnan(pred)


def test_shapes_per_head_and_repr(advice):
    ph = advice.per_head
    assert set(ph["head"]) == {0, 1}
    assert len(ph) == 2 * len(advice.table)
    assert set(advice.first_choice_per_head()) == {0, 1}
    text = repr(advice)
    assert text.startswith("Advice(budget=16, heads=2") and len(text) < 300
    assert "±" in advice.to_text()
    json.dumps(advice.as_dict())


def test_cost_per_query_is_the_budget(advice):
    t = advice.table.set_index("estimator")
    assert t.loc["FAVOR+ (RFA, Positive orthogonal)", "cost per query"] == 16
    # measured costs: never above the budget by more than Quest's whole blocks (block 4: 3 keys)
    assert (t["cost per query"] <= 16 + 3).all()


def test_prediction_in_domain_agrees_with_simulation_on_gentle_heads(advice):
    t = advice.table
    inside = t[t["theory"] == "in domain"]
    assert len(inside) >= 5
    ratio = inside["predicted MSE"] / inside["simulated MSE, theory queries"]
    # 4 draws x 2 heads x 4 theory queries: a loose check that the prediction is the right quantity
    assert ratio.between(0.2, 5).all(), inside[
        ["estimator", "predicted MSE", "simulated MSE, theory queries"]
    ]


def test_reproducible_with_rng_and_subset_keeps_numbers():
    Q, K, V = _heads(n_heads=1)
    a = rk.advise(Q, K, V, budget=16, rng=7, estimators=["FAVOR+", "quest", "SNIS"])
    b = rk.advise(Q, K, V, budget=16, rng=7, estimators=["FAVOR+", "quest", "SNIS"])
    c = rk.advise(Q, K, V, budget=16, rng=7, estimators=["FAVOR+"])
    d = rk.advise(Q, K, V, budget=16, rng=8, estimators=["FAVOR+"])
    cols = ["estimator", "simulated MSE", "MCSE"]
    assert a.table[cols].equals(b.table[cols])
    fav = a.table.set_index("estimator").loc["FAVOR+ (RFA, Positive orthogonal)", "simulated MSE"]
    assert c.table["simulated MSE"].iloc[0] == fav
    assert d.table["simulated MSE"].iloc[0] != fav


def test_values_default_and_causal():
    Q, K, _ = _heads(n_heads=1)
    adv = rk.advise(Q[0], K[0], budget=16, causal=True, rng=0, estimators=["FAVOR+", "LARA", "window"])
    assert adv.n_heads == 1 and adv.causal
    assert (adv.table["simulated MSE"] > 0).all()


def test_strongly_local_heads_window_wins_by_a_wide_margin():
    Q, K, V = _local()
    adv = rk.advise(Q, K, V, budget=16, rng=0)
    t = adv.table
    assert "window" in adv.recommendation
    best = t.iloc[0]
    rfa_best = t[t["family"].isin(["RFA", "SNIS", "LARA"])]["simulated MSE"].min()
    # a wide margin: ten times smaller, far beyond both MCSEs
    assert best["simulated MSE"] + 5 * best["MCSE"] < 0.1 * rfa_best


def test_plot_accepts_ax(advice):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    out = advice.plot(ax=ax)
    assert out is ax and ax.get_yscale() == "log"
    assert ax.get_xlabel().startswith("cost per query")
    plt.close(fig)


def test_import_rfkit_does_not_load_pandas_for_advise():
    import subprocess
    import sys

    code = "import sys, rfkit; rfkit.advise; print('pandas' in sys.modules, 'matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[1] == "False"


# ----------------------------------------------------------------------------- command line
def _npz(tmp_path, **arrays):
    path = tmp_path / "qk.npz"
    np.savez(path, **arrays)
    return str(path)


def test_cli_advise_text_and_json(tmp_path, capsys):
    Q, K, V = _heads(n_heads=1)
    path = _npz(tmp_path, q=Q, k=K, v=V)
    assert main(["advise", path, "--budget", "16", "--estimators", "FAVOR+,quest"]) == 0
    out = capsys.readouterr().out
    assert "recommendation:" in out and "FAVOR+" in out
    assert main(["advise", path, "--budget", "16", "--estimators", "FAVOR+,quest", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["budget"] == 16 and data["recommendation"] == data["table"][0]["estimator"]
    assert {r["estimator"] for r in data["table"]} >= {"FAVOR+ (RFA, Positive orthogonal)"}


@pytest.mark.parametrize("budget", ["0", "-3", "2.5", "lots"])
def test_cli_bad_budget_exits_2(tmp_path, capsys, budget):
    Q, K, _ = _heads(n_heads=1)
    path = _npz(tmp_path, q=Q, k=K)
    assert main(["advise", path, f"--budget={budget}"]) == 2
    err = capsys.readouterr().err
    assert "--budget" in err and repr(budget) in err and "Traceback" not in err


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scorer", ["quest", "proxy"])
def test_row_supports_equal_the_hybrid_support(causal, scorer):
    """The theory's supports of a few queries are those Hybrid computes for every query."""
    from rfkit.advice._candidates import row_supports
    from rfkit.attention._common import check_qkv

    Q, K, V = (a[0] for a in _heads(n_heads=1, n=48))
    est = rk.attention.Hybrid(
        window=2,
        n_global=2,
        causal=causal,
        scorer=scorer,
        remainder="uniform",
        top_k=6,
        n_samples=4,
        block_size=4,
    )
    rows = np.array([3, 20, 47])
    got, _ = row_supports(est, Q, K, V, rows, causal)
    idx, valid = (np.asarray(a)[-1] for a in est.support(check_qkv(Q, K, V, "Hybrid", causal=causal), None))
    for i in rows:
        want = np.zeros(48, dtype=bool)
        want[idx[i][valid[i]]] = True
        np.testing.assert_array_equal(got[int(i)], want)
