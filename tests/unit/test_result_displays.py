"""Results that display well: short reprs of attention results, a study's verdict first, the console's last lines."""

from __future__ import annotations

import dataclasses
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

import rfkit as rk
import rfkit.study as st
from rfkit.cli import main
from rfkit.report._verdict import theory_verdict, winner_lines

STUDY = """  # the same study as _design()
name = "two-maps"
trials = 40
seed = 3
[data]
source = "pairs"
n_pairs = 3
dim = 4
[grid]
n_features = [4, 16]
[[estimators]]
map = "Positive"
[[estimators]]
map = "Trig"
"""


def _design() -> st.Design:
    return st.Design(
        name="two-maps",
        trials=40,
        seed=3,
        data={"source": "pairs", "n_pairs": 3, "dim": 4},
        grid={"n_features": [4, 16]},
        estimators=[{"map": "Positive"}, {"map": "Trig"}],
    )


def _qkv(n: int = 64, d: int = 8) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    q, k, v = (0.3 * rng.normal(size=(n, d)) for _ in range(3))
    return q, k, v


ESTIMATORS = {
    "RFA": lambda: rk.attention.RFA(rk.features.Positive(16)),
    "RA": lambda: rk.attention.RA(n_samples=8),
    "LARA": lambda: rk.attention.LARA(8),
    "Hybrid": lambda: rk.attention.Hybrid(top_k=4, n_samples=8, remainder="uniform", scorer="oracle"),
}


@pytest.mark.parametrize("method", list(ESTIMATORS))
def test_attention_result_repr_is_short_and_names_shapes(method: str) -> None:
    """Printing a result of a 64 x 8 output shows the method, shapes and dtype, never the numbers."""
    res = ESTIMATORS[method]()(*_qkv(), rng=0)
    text = repr(res)
    assert len(text) < 500, text
    assert text.startswith(f"AttentionResult(method={method!r}, output=array(shape=(64, 8), dtype=float64)")
    assert type(res.estimator).__name__ + "(" in text
    assert "array([" not in text and "\n" not in text
    if res.cost is not None:
        assert "cost=QueryCost(4 counts of shape (64,)" in text


def test_query_cost_repr_names_shapes() -> None:
    res = ESTIMATORS["Hybrid"]()(*_qkv(), rng=0)
    text = repr(res.cost)
    assert text.startswith("QueryCost(exact_logits=array(shape=(64,), dtype=float64), ") and len(text) < 300


def test_estimator_shown_by_its_non_default_parameters() -> None:
    res = ESTIMATORS["Hybrid"]()(*_qkv(), rng=0)
    assert "estimator=Hybrid(top_k=4, scorer='oracle', remainder='uniform', n_samples=8)" in repr(res)


def test_study_html_leads_with_the_theory_verdict() -> None:
    """The notebook display opens with the same line ``rfkit run`` prints."""
    res = st.run(_design(), rng=0)
    verdict = theory_verdict(res)
    assert verdict is not None and re.match(
        r"theory vs simulation \(MSE\): \d+ of \d+ within 5 MCSE", verdict
    )
    html = res._repr_html_()
    first = html.split("\n")[1]  # the line after the opening <div>
    assert first == f"<p><b>{verdict}</b></p>", html[:400]


def test_winner_lines_name_the_lowest_mse_per_setting() -> None:
    res = st.run(_design(), rng=0)
    lines = winner_lines(res)
    summ = res.summary().query("metric == 'mse'")
    best = summ.loc[summ.groupby("cell")["estimate"].idxmin(), ["n_features", "estimator"]]
    names = {"Positive": "PRF (iid)", "Trig": "Trig (iid)"}  # display names, as the figures show them
    one = r"(PRF|Trig) \(iid\)"
    # Trig has 2m feature columns, PRF m: at n_features = 4 and 16 no D is shared, so the cells are
    # ranked as they are and the first line says their costs differ
    assert re.fullmatch(
        rf"lowest MSE: {one} in [12] of 2 settings(, {one} in 1)? \(feature columns per query differ "
        r"within each setting: not at equal cost\)",
        lines[0],
    ), lines
    for (_, row), line in zip(best.iterrows(), lines[1:]):
        assert line.startswith(f"  n_features = {row['n_features']}: {names[row['estimator']]} "), lines
    assert len(lines) == 3


def test_winner_lines_compare_at_equal_feature_columns() -> None:
    """Trig (D = 2m columns) meets PRF (D = m) where their feature columns per query are equal."""
    design = dataclasses.replace(_design(), grid={"n_features": [8, 16]})
    res = st.run(design, rng=0)
    lines = winner_lines(res)
    assert lines[0].startswith("lowest MSE at equal cost (feature_dim = feature columns per query): "), lines
    assert "of 1 setting" in lines[0] and len(lines) == 2, lines
    # the one shared D: PRF at m = 16 against Trig at m = 8, both 16 columns per query
    summ = res.summary().query("metric == 'mse'")
    prf = summ.query("estimator == 'Positive' and n_features == 16")["estimate"].item()
    trig = summ.query("estimator == 'Trig' and n_features == 8")["estimate"].item()
    best, other = ("PRF (iid)", "Trig (iid)") if prf < trig else ("Trig (iid)", "PRF (iid)")
    assert lines[1].startswith(f"  feature_dim = 16: {best} ") and f"; next {other} " in lines[1], lines


def test_run_ends_with_the_winners_and_names_the_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = tmp_path / "s.toml"
    study.write_text(textwrap.dedent(STUDY) + '[outputs]\nfigures = ["mse_vs_features"]\n')
    out = tmp_path / "o"
    assert main(["run", str(study), "--out", str(out), "--no-progress"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = st.load(out)
    assert theory_verdict(result) in lines
    tail = lines[-4:]
    assert tail[:3] == winner_lines(result), lines
    assert tail[-1].startswith(f"wrote {out}/summary.parquet") and ", figures/, report: " in tail[-1]
    assert (out / "figures").is_dir()
