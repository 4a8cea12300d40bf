"""The output-MSE-against-cost figure: the points it draws (prepare_mse_vs_cost) and its rendering."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.container import ErrorbarContainer  # noqa: E402

import rfkit.plots as rkp  # noqa: E402
import rfkit.report as rp  # noqa: E402
import rfkit.study as st  # noqa: E402


def _summary() -> pd.DataFrame:
    """A tidy summary: 2 panels x 2 families x 2 budgets x 5 heads, costs and MSEs known."""
    rows = []
    for panel in ("encoder", "decoder"):
        for fam, base in (("FAVOR+", 1.0), ("Hybrid", 0.25)):
            for budget in (64, 128):
                for head in range(5):
                    cost = budget - (3.5 if fam == "Hybrid" else 0.0) + 0.1 * head  # varies by head
                    mse = base * (64 / budget) * (head + 1) * (2 if panel == "decoder" else 1)
                    for metric, value in (("mse", mse), ("bias", -mse)):
                        rows.append(
                            {
                                "panel": panel,
                                "estimator": fam,
                                "feature_dim": budget,
                                "head": head,
                                "cost": cost,
                                "metric": metric,
                                "estimate": value,
                            }
                        )
    return pd.DataFrame(rows)


def test_points_are_medians_over_heads():
    pts = rkp.prepare_mse_vs_cost(_summary(), point=["feature_dim"], col="panel")
    assert list(pts.columns) == ["col", "family", "cost", "estimate", "q25", "q75", "n"]
    assert len(pts) == 8 and (pts["n"] == 5).all()
    hyb = pts[(pts.col == "decoder") & (pts.family == "Hybrid")]
    # heads 0..4: costs budget - 3.5 + 0.1 h (median h = 2); MSEs 0.25 * 64/budget * (h + 1) * 2
    np.testing.assert_allclose(hyb["cost"], [60.7, 124.7])
    np.testing.assert_allclose(hyb["estimate"], [0.25 * 3 * 2, 0.25 * 0.5 * 3 * 2])
    np.testing.assert_allclose(hyb["q25"], [0.25 * 2 * 2, 0.25 * 0.5 * 2 * 2])
    np.testing.assert_allclose(hyb["q75"], [0.25 * 4 * 2, 0.25 * 0.5 * 4 * 2])
    assert list(pts["col"].unique()) == ["encoder", "decoder"]  # panels in order of appearance
    # another metric, no panels: the two panels' rows are pooled per point
    pooled = rkp.prepare_mse_vs_cost(_summary(), metric="bias", point=["feature_dim"])
    assert pooled["col"].isna().all() and (pooled["n"] == 10).all()


def test_bad_tables_are_refused():
    with pytest.raises(ValueError, match=r"no column\(s\) \['cost'\]"):
        rkp.prepare_mse_vs_cost(_summary().drop(columns="cost"))
    with pytest.raises(ValueError, match="no finite rows for metric 'rel_mse'"):
        rkp.prepare_mse_vs_cost(_summary(), metric="rel_mse")
    with pytest.raises(ValueError, match="points has no column 'cost'"):
        rkp.plot_mse_vs_cost(pd.DataFrame({"family": ["a"], "estimate": [1.0]}))
    with pytest.raises(ValueError, match="points is empty"):
        rkp.plot_mse_vs_cost(pd.DataFrame(columns=["family", "cost", "estimate"]))


@pytest.mark.parametrize("size", ["two-column", "one-column"])
def test_one_line_per_family_per_panel(size):
    pts = rkp.prepare_mse_vs_cost(_summary(), point=["feature_dim"], col="panel")
    axes = rkp.plot_mse_vs_cost(pts, col_title="{} heads", size=size)
    try:
        assert [ax.get_title() for ax in axes] == ["encoder heads", "decoder heads"]
        fig = axes[0].figure
        assert fig.get_figwidth() == pytest.approx(rkp.PAPER_SIZES[size])
        for ax, panel in zip(axes, ("encoder", "decoder")):
            bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
            assert [c.get_label() for c in bars] == ["FAVOR+", "Hybrid"]
            for c in bars:  # the line goes through the family's points in order of cost
                want = pts[(pts.col == panel) & (pts.family == c.get_label())]
                x, y = (np.asarray(a, dtype=float) for a in c.lines[0].get_data())
                np.testing.assert_allclose(x, want["cost"].to_numpy(dtype=float))
                np.testing.assert_allclose(y, want["estimate"].to_numpy(dtype=float))
            styles = {
                (c.lines[0].get_color(), c.lines[0].get_linestyle(), c.lines[0].get_marker()) for c in bars
            }
            assert len(styles) == 2
            assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
            assert "log" in ax.get_xlabel() and "cost per query" in ax.get_xlabel()
        assert "log" in axes[0].get_ylabel()
        legends = [*fig.legends, *(ax.get_legend() for ax in axes)]
        assert [t.get_text() for leg in legends if leg for t in leg.get_texts()] == ["FAVOR+", "Hybrid"]
    finally:
        plt.close("all")


def test_a_study_draws_it_from_its_summary(tmp_path):
    """An attention study declaring mse_vs_cost draws it from its saved summary: medians over data sets."""
    d = st.Design(
        name="costfig",
        kind="attention",
        trials=2,
        seed=3,
        data={"source": "sequence", "n_tokens": 24, "dim": 4, "structure": "local"},
        grid={"dataset": [0, 1, 2], "feature_dim": [12, 24]},
        estimators=[
            {"label": "favor+", "estimator": "RFA", "projection": "orthogonal"},
            {"label": "hybrid", "estimator": "Hybrid", "window": 2, "projection": "orthogonal"},
        ],
        outputs={"figures": ["mse_vs_cost"]},
    )
    res = st.run(d, out=tmp_path / "o")
    assert res.figure_names()[0] == "mse_vs_cost"  # the declared figure first
    fig = np.atleast_1d(res.plot("mse_vs_cost"))[0].figure  # the Axes drawn on (one per panel)
    try:
        ax = fig.axes[0]
        assert "median over data sets" in " ".join(ax.get_ylabel().split())
        bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        assert [c.get_label() for c in bars] == rkp.display_names(d.estimators)
        s = res.summary()
        hyb = s[(s.metric == "mse") & (s.estimator == "hybrid")]
        x, y = (np.asarray(a, dtype=float) for a in bars[1].lines[0].get_data())
        np.testing.assert_allclose(x, hyb.groupby("feature_dim")["cost"].median())
        np.testing.assert_allclose(y, hyb.groupby("feature_dim")["estimate"].median())
    finally:
        plt.close("all")
    report = rp.write_report(res, tmp_path / "o").read_text()
    assert "figures/mse_vs_cost.png" in report and "| cost |" in report


# ----------------------------------------------------------------------------- layout of three panels

#: the panel titles and the estimator names of the real-attention study's content profile
PANELS = ("encoder, n = 512", "decoder (causal), n = 512", "decoder (causal), n = 1024")
LONG_NAMES = [
    "RFA, PRF (ORF)",
    "Hybrid (plain, w = 8, sinks = 4)",
    "Hybrid (w = 4, sinks = 4, uniform rest)",
    "Hybrid (w = 4, sinks = 4, proxy top-k, no rest)",
    "Hybrid (w = 4, sinks = 4, proxy top-k, IS rest)",
    "Hybrid (w = 4, sinks = 4, Quest top-k, no rest)",
    "Hybrid (w = 4, sinks = 4, Quest top-k, uniform rest)",
    "Hybrid (w = 4, sinks = 4, oracle top-k, no rest) (reference)",
]
SHORT_NAMES = ["FAVOR+", "Hybrid", "RA"]


def _three_panel_points(names: list[str]) -> pd.DataFrame:
    """Points of ``names`` at three budgets in each of :data:`PANELS` (a reference at 16x the cost)."""
    rows = []
    for panel in PANELS:
        for i, name in enumerate(names):
            for budget in (32, 64, 128):
                cost = budget * (16 if name.endswith("(reference)") else 1)
                est = 0.05 / (i + 1) * 32 / budget
                rows.append({"col": panel, "family": name, "cost": float(cost), "estimate": est})
    return pd.DataFrame(rows)


def _apart(a, b) -> bool:
    """Whether two display boxes are disjoint (touching within a pixel counts as apart)."""
    return a.x1 <= b.x0 + 1 or b.x1 <= a.x0 + 1 or a.y1 <= b.y0 + 1 or b.y1 <= a.y0 + 1


def _x_labels(fig, axes) -> list:
    """The x-axis label texts a figure shows: the panels' own and the figure's shared one."""
    texts = [a.xaxis.label for a in axes if a.get_xlabel().strip()]
    shared = getattr(fig, "_supxlabel", None)
    return texts + ([shared] if shared is not None and shared.get_text().strip() else [])


@pytest.mark.parametrize("size", ["two-column", "one-column"])
@pytest.mark.parametrize("names", [LONG_NAMES, SHORT_NAMES], ids=["long", "short"])
def test_three_panels_keep_titles_labels_and_legend_apart(size, names):
    """Three panels with the real study's titles and, as a report draws them, a caption: no two
    panel titles and no two x labels overlap, the legend overlaps no panel (with its labels) and
    no x label, everything stays on the canvas, and the smallest text is the paper size's smallest
    font. A legend wider than a third of a two-column figure stands below the panels."""
    from matplotlib.text import Text

    from rfkit.plots._style import add_caption

    axes = rkp.plot_mse_vs_cost(
        _three_panel_points(names), ylabel="output MSE (median over heads)", size=size
    )
    fig = axes[0].figure
    add_caption(
        fig, "real-attention: MiniLM / SmolLM2 attention heads, texts = long, 1 texts, 8 trials per cell"
    )
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    titles = [a.title.get_window_extent(renderer) for a in axes]
    assert [" ".join(a.get_title().split()) for a in axes] == list(PANELS)
    caption = fig._suptitle.get_window_extent(renderer)
    for i, box in enumerate(titles):
        assert _apart(box, caption), (i, box, caption)
        for j in range(i):
            assert _apart(box, titles[j]), (axes[i].get_title(), axes[j].get_title(), box, titles[j])
    xlabels = _x_labels(fig, axes)
    assert xlabels and all("cost per query" in " ".join(t.get_text().split()) for t in xlabels)
    boxes = [t.get_window_extent(renderer) for t in xlabels]
    for i, box in enumerate(boxes):
        for j in range(i):
            assert _apart(box, boxes[j]), (i, j, box, boxes[j])
    legends = [*fig.legends, *(a.get_legend() for a in axes if a.get_legend() is not None)]
    assert len(legends) == 1 and [t.get_text() for t in legends[0].get_texts()] == names
    legend = legends[0].get_window_extent(renderer)
    for a in axes:  # the panel with its title, tick labels and axis labels, not the legend it may own
        assert _apart(legend, a.get_tightbbox(renderer, bbox_extra_artists=[])), (a.get_title(), legend)
    for box in boxes:
        assert _apart(legend, box), (legend, box)
    if size == "two-column" and legend.width > fig.bbox.width / 3:
        assert legend.y1 <= min(a.get_window_extent(renderer).y0 for a in axes) + 1  # below the panels
    tight, (w, h) = fig.get_tightbbox(renderer), fig.get_size_inches()
    assert tight.x0 >= -0.02 and tight.y0 >= -0.02 and tight.x1 <= w + 0.02 and tight.y1 <= h + 0.02, (
        tight,
        (w, h),
    )
    with rkp.paper_style(size):
        smallest = min(
            matplotlib.rcParams[k]
            for k in ("font.size", "legend.fontsize", "xtick.labelsize", "ytick.labelsize")
        )
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert min(sizes) >= smallest, (min(sizes), smallest)
