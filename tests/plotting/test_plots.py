"""Plots are tested on the frames they draw (prepare_*) and by rendering on the Agg backend."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import rfkit as rk  # noqa: E402
import rfkit.plots as rkp  # noqa: E402
import rfkit.study as st  # noqa: E402


@pytest.fixture(scope="module")
def kernel_result():
    d = st.Design(
        name="p",
        estimators=[{"label": "positive", "map": "Positive"}, {"label": "trig", "map": "Trig"}],
        grid={"n_features": [4, 16, 64], "dataset": [0, 1]},
        data={"source": "pairs", "n_pairs": 6, "dim": 4, "norm": 0.5},
        trials=200,
        seed=1,
    )
    return st.run(d)


def test_mse_vs_features_frame_and_render(kernel_result):
    summ = kernel_result.summary()
    cmp = kernel_result.compare_theory()
    frame = rkp.prepare_mse_vs_features(summ[summ.dataset == 0], cmp[cmp.dataset == 0])
    assert list(frame.columns) == ["estimator", "x", "estimate", "lower", "upper", "predicted"]
    assert len(frame) == 2 * 3 and frame["predicted"].notna().all()
    assert (frame["lower"] < frame["estimate"]).all() and (frame["estimate"] < frame["upper"]).all()
    ax = rkp.plot_mse_vs_features(summ[summ.dataset == 0], cmp[cmp.dataset == 0])
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_xlabel() and ax.get_ylabel()
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"positive", "trig"}
    plt.close("all")


@pytest.fixture(scope="module")
def two_dim_result():
    """A kernel study whose grid has two dims: theory differs by dim at every feature count."""
    d = st.Design(
        name="two-dims",
        estimators=[{"label": "positive", "map": "Positive"}, {"label": "trig", "map": "Trig"}],
        grid={"dim": [4, 8], "n_features": [4, 8, 16, 32]},
        data={"source": "pairs", "n_pairs": 4, "norm": 0.5},
        trials=50,
        seed=3,
        metrics=["mse"],
    )
    return st.run(d)


def test_mse_vs_features_pairs_theory_on_every_grid_axis(two_dim_result):
    """Each simulated point meets the theory of its own cell (its dim too), never another dim's."""
    summ, cmp = two_dim_result.summary(), two_dim_result.compare_theory()
    frame = rkp.prepare_mse_vs_features(summ, cmp)
    assert len(frame) == len(summ[summ.metric == "mse"]) == 2 * 2 * 4  # one row per point
    assert list(frame.columns) == ["estimator", "dim", "x", "estimate", "lower", "upper", "predicted"]
    want = cmp[cmp.metric == "mse"].set_index(["estimator", "dim", "n_features"])["predicted"]
    got = frame.set_index(["estimator", "dim", "x"])["predicted"]
    np.testing.assert_array_equal(got.to_numpy(), want.reindex(got.index).to_numpy())
    assert frame["predicted"].notna().all()
    # theory that does not identify one prediction per point is refused, not paired at random
    with pytest.raises(ValueError, match="theory"):
        rkp.prepare_mse_vs_features(summ, pd.concat([cmp, cmp]))


def test_mse_vs_features_draws_each_dim_as_its_own_series(two_dim_result):
    """The figure tells the dims apart: one labelled series and one theory line per (estimator, dim)."""
    ax = rkp.plot_mse_vs_features(two_dim_result.summary(), two_dim_result.compare_theory())
    labels = {t.get_text() for t in ax.get_legend().get_texts()}
    assert labels == {f"{e} (dim={d})" for e in ("positive", "trig") for d in (4, 8)}
    points = {c.get_label(): c.lines[0] for c in ax.containers}
    assert set(points) == labels and all(len(p.get_xdata()) == 4 for p in points.values())
    drawn_by_errorbar = {ln for c in ax.containers for ln in (c.lines[0], *c.lines[1])}  # points, caps
    theory_lines = [ln for ln in ax.lines if ln not in drawn_by_errorbar]
    assert len(theory_lines) == 4 and all(len(ln.get_xdata()) == 4 for ln in theory_lines)
    cmp = two_dim_result.compare_theory()
    want = {tuple(g["predicted"]) for _, g in cmp[cmp.metric == "mse"].groupby(["estimator", "dim"])}
    assert {tuple(ln.get_ydata()) for ln in theory_lines} == want  # each line is one dim's theory
    plt.close("all")


def test_slopes_are_minus_one_for_unbiased_estimators(kernel_result):
    slopes = rkp.fit_slopes(kernel_result.summary()[lambda s: s.dataset == 0])
    assert set(slopes["estimator"]) == {"positive", "trig"}
    for _, r in slopes.iterrows():
        assert r["ci_low"] < r["slope"] < r["ci_high"]
        assert r["ci_low"] - 0.15 < -1.0 < r["ci_high"] + 0.15  # MSE ~ 1/m


def test_scatter_frame(kernel_result):
    frame = rkp.prepare_kernel_scatter(kernel_result.pairs, cell=0)
    assert list(frame["estimator"].cat.categories) == ["positive", "trig"]
    np.testing.assert_allclose(
        frame["truth"], np.tile(kernel_result.pairs.query("cell == 0 and estimator == 'trig'")["truth"], 2)
    )
    axes = rkp.plot_kernel_scatter(kernel_result.pairs, cell=0)
    assert len(axes) == 2 and axes[0].get_xlim() == axes[0].get_ylim()
    plt.close("all")


def test_boxplot_frame(kernel_result):
    frame = rkp.prepare_metric_boxplot(kernel_result.summary(), "mse")
    assert len(frame) == 2 * 3 * 2  # estimators x m x datasets
    ax = rkp.plot_metric_boxplot(kernel_result.summary(), "mse")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["positive", "trig"]
    plt.close("all")


def test_metric_lines_and_heatmap():
    summ = pd.DataFrame(
        {
            "estimator": ["a"] * 4 + ["b"] * 4,
            "layer": [0, 0, 1, 1] * 2,
            "head": [0, 1, 0, 1] * 2,
            "metric": "mse",
            "estimate": [1e-3, 2e-3, 5e-2, 1e-1, 2e-3, 3e-3, 4e-2, 3e-2],
            "mcse": 1e-4,
        }
    )
    mats = rkp.prepare_head_heatmap(summ)
    assert mats["a"].loc[1, 1] == pytest.approx(0.1) and mats["b"].shape == (2, 2)
    axes = rkp.plot_head_heatmap(summ)
    assert axes.ravel()[0].get_title() == "a"
    # tick labels on the outer panels only: 'b' (second column) shares the first panel's rows
    a, b = axes.ravel()[:2]
    a.figure.canvas.draw()
    assert [t.get_text() for t in a.get_yticklabels() if t.get_visible()] == ["0", "1"]
    assert not b.yaxis.get_tick_params()["labelleft"]
    assert a.xaxis.get_tick_params()["labelbottom"] and b.xaxis.get_tick_params()["labelbottom"]
    # six estimators in rows of four: the first row's panels above an empty slot keep their x labels
    many = pd.concat([summ.assign(estimator=f"e{i}") for i in range(6)])
    grid = rkp.plot_head_heatmap(many).ravel()
    assert [bool(ax.xaxis.get_tick_params()["labelbottom"]) for ax in grid[:6]] == [
        False,
        False,
        True,
        True,
        True,
        True,
    ]
    assert [bool(ax.yaxis.get_tick_params()["labelleft"]) for ax in grid[:6]] == [
        True,
        False,
        False,
        False,
        True,
        False,
    ]
    frame = rkp.prepare_metric_lines(summ, "mse", "head", col="layer")
    assert set(frame["col"]) == {0, 1}
    rkp.plot_metric_lines(summ, "mse", "head", col="layer")
    plt.close("all")


def test_attention_matrices_render():
    rng = np.random.default_rng(0)
    Q, K = 0.5 * rng.normal(size=(2, 12, 4))
    exact = rk.attention.softmax(Q, K, np.eye(12))
    est = rk.attention.RFA(rk.features.Positive(32))(Q, K, np.eye(12), rng=0).output
    axes = rkp.plot_attention_matrices(exact, {"RFA (m=32)": est})
    assert [a.get_title() for a in axes] == ["exact", "RFA (m=32)"]
    plt.close("all")


def test_estimator_colors_stable_and_distinct():
    c1 = rkp.estimator_colors(["trig", "positive", "positive-orthogonal"])
    c2 = rkp.estimator_colors(["positive", "hyperbolic"])
    assert c1["positive"] == c2["positive"]  # same family, same colour across figures
    assert len(set(c1.values())) == 3


def test_save_figure_writes_pdf_and_png(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    paths = rkp.save_figure(fig, tmp_path / "f")
    assert [p.suffix for p in paths] == [".pdf", ".png"] and all(p.stat().st_size > 0 for p in paths)
    plt.close(fig)


def test_import_rfkit_loads_no_matplotlib_or_pandas():
    import subprocess
    import sys

    code = "import sys, rfkit, rfkit.theory, rfkit.attention, rfkit.features; print('matplotlib' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "False"]
