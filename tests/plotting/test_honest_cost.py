"""Figures compare estimators at honest cost.

* MSE against the feature count: the x axis is the cost, feature columns D per query (2m for the
  sin/cos maps, m for the positive ones), the directions m said in the legend.
* The drop-in damage figure: its legend fits the figure's width (below the panels) and its log
  axes read plain numbers (``6``, not ``6×10⁰``).
* A reference (Hybrid with the oracle scorer, which pays every key's logit) is drawn apart, grey
  and dashed with open markers, labelled "(reference)", at its measured cost: never one of the
  competitors at the budget.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.container import ErrorbarContainer  # noqa: E402

import rfkit.plots as rkp  # noqa: E402
import rfkit.study as st  # noqa: E402
from rfkit.plots._reference import REFERENCE_COLOR  # noqa: E402

ORACLE = {"estimator": "Hybrid", "window": 2, "n_global": 1, "scorer": "oracle", "remainder": "none"}


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _bars(ax) -> dict[str, ErrorbarContainer]:
    return {c.get_label(): c for c in ax.containers if isinstance(c, ErrorbarContainer)}


def _is_reference_style(line) -> bool:
    return (
        to_rgba(line.get_color()) == to_rgba(REFERENCE_COLOR)
        and line.get_linestyle() == "--"
        and to_rgba(line.get_markerfacecolor()) == to_rgba("white")
    )


# ----------------------------------------------------------------------------- MSE against the cost


def test_mse_figure_puts_feature_columns_on_the_x_axis():
    """Trig has 2m columns for m directions, PRF m: the points sit at D, the legend says D = 2m."""
    design = st.Design(
        name="cost-axis",
        trials=3,
        seed=5,
        data={"source": "pairs", "n_pairs": 3, "dim": 3},
        grid={"n_features": [2, 4]},
        estimators=[{"label": "positive", "map": "Positive"}, {"label": "trig", "map": "Trig"}],
        metrics=["mse"],
        outputs={"figures": ["mse_vs_features"]},
    )
    res = st.run(design, rng=0)
    ax = res.plot("mse_vs_features")
    assert "feature columns D" in ax.get_xlabel()
    bars = _bars(ax)
    assert set(bars) == {"PRF (iid)", "Trig (iid)"}
    for name, want in (("PRF (iid)", [2, 4]), ("Trig (iid)", [4, 8])):
        x = np.asarray(bars[name].lines[0].get_data()[0], dtype=float)
        # the markers are dodged sideways by at most a tenth of an octave
        np.testing.assert_allclose(np.log2(x), np.log2(want), atol=0.1)
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "Trig (iid), D = 2m" in texts and "PRF (iid)" in texts


def test_prepare_keeps_directions_beside_the_cost():
    """With x = feature_dim, n_features follows it: a column of the frame, never a series of its own."""
    summary = pd.DataFrame(
        {
            "cell": [0, 0, 1, 1],
            "estimator": ["a", "b", "a", "b"],
            "n_features": [4, 4, 8, 8],
            "feature_dim": [8, 4, 16, 8],
            "metric": "mse",
            "estimate": [1.0, 2.0, 0.5, 1.0],
            "mcse": 0.01,
        }
    )
    theory = summary.drop(columns=["feature_dim", "estimate", "mcse"]).assign(predicted=[1.1, 2.1, 0.6, 1.1])
    frame = rkp.prepare_mse_vs_features(summary, theory, x="feature_dim")
    assert list(frame.columns) == ["estimator", "x", "estimate", "lower", "upper", "predicted", "directions"]
    assert frame["x"].tolist() == [8, 16, 4, 8] and frame["directions"].tolist() == [4, 8, 4, 8]
    assert frame["predicted"].tolist() == [1.1, 0.6, 2.1, 1.1]  # paired through the cell


# ----------------------------------------------------------------------------- the drop-in damage figure


def _long_damage_summary(oracle: bool = False) -> pd.DataFrame:
    """KL of eight estimators with long display names, at two contexts, within one decade (3-6)."""
    names = [f"Hybrid (w = {w}, sinks = 4, Quest top-k, uniform rest, per head)" for w in range(1, 8)]
    names.append(
        "Hybrid (w = 4, sinks = 4, oracle top-k, no rest) (reference)" if oracle else "RFA, PRF (ORF)"
    )
    rows = []
    for i, name in enumerate(names):
        for n_tokens in (64, 512):
            for D in (32, 64, 128):
                rows.append(
                    {
                        "cell": 0,
                        "estimator": name,
                        "n_tokens": n_tokens,
                        "feature_dim": D,
                        "metric": "kl",
                        "estimate": 3.0 + 0.4 * i - D / 128,
                        "mcse": 0.05,
                    }
                )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("size", ["two-column", "one-column"])
def test_dropin_legend_fits_below_the_panels_and_ticks_are_plain(size):
    axes = rkp.plot_damage_vs_budget(_long_damage_summary(), "kl", size=size)
    fig = axes[0].figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = [*fig.legends, *(a.get_legend() for a in axes if a.get_legend() is not None)]
    assert len(legends) == 1
    box, page = legends[0].get_window_extent(renderer), fig.bbox
    assert page.x0 - 1 <= box.x0 and box.x1 <= page.x1 + 1 and page.y0 - 1 <= box.y0
    assert box.y1 <= min(a.get_window_extent(renderer).y0 for a in axes) + 1  # below the panels
    assert len(legends[0].get_texts()) == 8
    labels = [
        t.get_text()
        for a in axes
        for axis in (a.xaxis, a.yaxis)
        for t in [*axis.get_majorticklabels(), *axis.get_minorticklabels()]
        if t.get_text()
    ]
    assert labels and not [t for t in labels if "×" in t or "10" in t and any(c in t for c in "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")]
    assert {"32", "64", "128"} <= set(labels)  # the budgets, as numbers
    assert "4" in labels or "5" in labels  # a minor tick of the y axis, within its decade


# ----------------------------------------------------------------------------- references


def test_figure_names_mark_the_oracle_only():
    entries = [{"estimator": "RFA"}, {"label": "o", **ORACLE}]
    names = rkp.figure_names(entries)
    assert names[0] == rkp.display_names(entries)[0] and not names[0].endswith("(reference)")
    assert names[1] == rkp.display_names(entries)[1] + " (reference)"
    assert [rkp.is_reference(e) for e in entries] == [False, True]


def test_dropin_reference_is_styled_apart():
    axes = rkp.plot_damage_vs_budget(_long_damage_summary(oracle=True), "kl")
    for ax in axes:
        bars = _bars(ax)
        refs = [name for name in bars if name.endswith("(reference)")]
        assert len(refs) == 1 and _is_reference_style(bars[refs[0]].lines[0])
        assert not any(_is_reference_style(c.lines[0]) for n, c in bars.items() if n not in refs)


def test_dropin_layer_and_proxy_figures_style_the_reference_apart():
    ref = "oracle (reference)"
    pairs = pd.DataFrame(
        {
            "model": "smollm2",
            "estimator": ["x", "x", ref, ref],
            "layer": [0, 1] * 2,
            "kl": [0.1, 0.2, 0.01, 0.02],
            "kl_mcse": 0.001,
        }
    )
    points = pd.DataFrame(
        {
            "model": "smollm2",
            "estimator": ["x", "x", ref, ref],
            "feature_dim": [16, 32] * 2,
            "proxy": [0.1, 0.05, 0.01, 0.005],
            "proxy_mcse": 0.001,
            "damage": [1.0, 0.5, 0.1, 0.05],
            "damage_mcse": 0.01,
            "n_trials": 4,
        }
    )
    for axes in (rkp.plot_layer_damage(pairs, [("smollm2", "kl")]), rkp.plot_proxy_vs_damage(points)):
        bars = _bars(axes[0])  # the proxy figure draws points only: grey, open markers
        for name, want in ((ref, True), ("x", False)):
            line = bars[name].lines[0]
            assert (to_rgba(line.get_color()) == to_rgba(REFERENCE_COLOR)) is want
            assert (to_rgba(line.get_markerfacecolor()) == to_rgba("white")) is want


def test_attention_figures_draw_the_oracle_as_a_reference_at_its_cost(tmp_path):
    """mse_vs_cost: the oracle at its measured cost (above its budget), grey and dashed; the ratio
    figure: apart from the ranked estimators, its tick label with its cost."""
    design = st.Design(
        name="oracle-ref",
        kind="attention",
        trials=2,
        seed=3,
        data={"source": "sequence", "n_tokens": 24, "dim": 4, "structure": "local"},
        grid={"dataset": [0, 1], "feature_dim": [8, 12]},
        estimators=[
            {"label": "favor+", "estimator": "RFA", "projection": "orthogonal"},
            {"label": "window", "estimator": "Hybrid", "window": 2, "projection": "orthogonal"},
            {"label": "oracle", **ORACLE},
        ],
        outputs={"figures": ["mse_vs_cost", "ratio_to_reference"], "reference": "favor+"},
    )
    res = st.run(design, out=tmp_path / "o")
    names = rkp.figure_names(design.estimators)
    s = res.summary()
    oracle = s[(s.metric == "mse") & (s.estimator == "oracle")]
    assert (oracle["cost"] > oracle["feature_dim"]).all()  # it pays every key's logit on top

    ax = np.atleast_1d(res.plot("mse_vs_cost"))[0]
    bars = _bars(ax)
    assert list(bars) == names and names[2].endswith("(reference)")
    line = bars[names[2]].lines[0]
    assert _is_reference_style(line)
    x = np.asarray(line.get_data()[0], dtype=float)
    np.testing.assert_allclose(x, oracle.groupby("feature_dim")["cost"].median())
    assert not _is_reference_style(bars[names[0]].lines[0])

    ratio_names = [n for n in res.figure_names() if "ratio_to_reference" in n and "feature_dim-8" in n]
    assert len(ratio_names) == 1
    ax = res.plot(ratio_names[0])
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks[0] == names[1]  # the ranked competitor first, the reference last
    assert ticks[-1] == names[2].removesuffix(" (reference)")  # the note above it says so
    assert any(line.get_label() == "_divider" for line in ax.lines)
    cost = np.median(oracle.loc[oracle["feature_dim"] == 8, "cost"])
    assert [" ".join(t.get_text().split()) for t in ax.texts] == [f"reference cost {cost:.0f} per query"]


# ----------------------------------------------------------------------------- the demo table


def test_demo_table_compares_at_equal_cost():
    """Every row of ``make demo``'s table at one cost has the same feature columns D per query."""
    path = Path(__file__).resolve().parents[2] / "scripts" / "demo.py"
    spec = importlib.util.spec_from_file_location("rfkit_demo_script", path)
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    for cost in demo.COSTS:
        dims = {name: make(cost).feature_dim(16) for name, make in demo.ESTIMATORS.items()}
        assert set(dims.values()) == {cost}, dims
