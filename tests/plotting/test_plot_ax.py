"""Every plot draws into the axes it is given and returns what it drew on.

Each public ``rfkit.plots.plot_*`` function and ``StudyResult.plot`` take ``ax=``: one matplotlib
Axes for a single-panel figure, a sequence (or array) of Axes, one per panel, for a multi-panel
one. Given axes, the drawing lands in them and no figure is created. The return value follows
one rule: the Axes of a single-panel figure, the 1-D array of Axes (one per panel, in panel
order) of a multi-panel one. A multi-panel figure given the wrong number of axes is refused with
an :class:`~rfkit.exceptions.InvalidParameterError` saying how many it needs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

import rfkit.plots as rkp  # noqa: E402
import rfkit.study as st  # noqa: E402
from rfkit.exceptions import InvalidParameterError  # noqa: E402


@pytest.fixture(scope="module")
def tiny_result() -> st.StudyResult:
    """A kernel study of two estimators over two feature counts and two data sets (a second's work)."""
    design = st.Design(
        name="tiny-ax",
        trials=3,
        seed=5,
        data={"source": "pairs", "n_pairs": 3, "dim": 3},
        grid={"n_features": [2, 4], "dataset": [0, 1]},
        estimators=[{"label": "positive", "map": "Positive"}, {"label": "trig", "map": "Trig"}],
        metrics=["mse", "rel_mse"],
        outputs={"figures": ["mse_vs_features", "kernel_scatter"]},
    )
    return st.run(design, rng=0)


def _heads() -> pd.DataFrame:
    """A summary over (layer, head) for two estimators."""
    return pd.DataFrame(
        {
            "estimator": ["a"] * 4 + ["b"] * 4,
            "cell": [0, 1, 2, 3] * 2,
            "layer": [0, 0, 1, 1] * 2,
            "head": [0, 1, 0, 1] * 2,
            "metric": "mse",
            "estimate": [1e-3, 2e-3, 5e-2, 1e-1, 2e-3, 3e-3, 4e-2, 3e-2],
            "mcse": 1e-4,
        }
    )


def _cost_points() -> pd.DataFrame:
    """Points of an MSE-vs-cost figure in two panels."""
    return pd.DataFrame(
        {
            "family": ["RFA", "RFA", "RA", "RA"] * 2,
            "cost": [8.0, 16.0, 8.0, 16.0] * 2,
            "estimate": [1e-2, 5e-3, 2e-2, 1e-2, 3e-2, 1e-2, 4e-2, 2e-2],
            "col": ["encoder"] * 4 + ["decoder"] * 4,
        }
    )


def _damage_summary() -> pd.DataFrame:
    """A drop-in summary: KL against the budget at two context lengths."""
    return pd.DataFrame(
        {
            "estimator": ["x", "x", "y", "y"] * 2,
            "cell": range(8),
            "feature_dim": [16, 32] * 4,
            "n_tokens": [64] * 4 + [128] * 4,
            "metric": "kl",
            "estimate": [0.4, 0.2, 0.5, 0.3, 0.6, 0.3, 0.7, 0.4],
            "mcse": 0.01,
        }
    )


def _layer_pairs() -> pd.DataFrame:
    """A drop-in pairs table: KL and its MCSE per replaced layer."""
    return pd.DataFrame(
        {
            "model": ["smollm2"] * 4 + ["minilm"] * 4,
            "estimator": ["x", "x", "y", "y"] * 2,
            "layer": [0, 1] * 4,
            "kl": [0.1, 0.2, 0.15, 0.25, 0.05, 0.06, 0.07, 0.08],
            "kl_mcse": 0.01,
        }
    )


def _proxy_points() -> pd.DataFrame:
    """Proxy points of two models."""
    return pd.DataFrame(
        {
            "model": ["smollm2"] * 4 + ["minilm"] * 4,
            "estimator": ["x", "x", "y", "y"] * 2,
            "feature_dim": [16, 32] * 4,
            "proxy": [1e-3, 5e-4, 2e-3, 1e-3, 3e-3, 1e-3, 4e-3, 2e-3],
            "proxy_mcse": 1e-5,
            "damage": [0.4, 0.2, 0.5, 0.3, 0.06, 0.03, 0.07, 0.04],
            "damage_mcse": 0.01,
            "n_trials": 3,
        }
    )


def _attention() -> tuple[np.ndarray, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    exact = rng.dirichlet(np.ones(6), size=6)
    return exact, {"estimate": rng.dirichlet(np.ones(6), size=6)}


#: (name, panels, draw(result, ax)): every public plot, the number of panels it draws here
PLOTS: list[tuple[str, int, Callable[[Any, Any], Any]]] = [
    (
        "plot_mse_vs_features",
        0,
        lambda r, ax: rkp.plot_mse_vs_features(r.summary(), r.compare_theory(), ax=ax),
    ),
    ("plot_metric_boxplot", 0, lambda r, ax: rkp.plot_metric_boxplot(r.summary(), "mse", ax=ax)),
    ("plot_ratio_to_reference", 0, lambda r, ax: rkp.plot_ratio_to_reference(_heads(), "a", ax=ax)),
    ("plot_kernel_scatter", 2, lambda r, ax: rkp.plot_kernel_scatter(r.pairs, ax=ax)),
    (
        "plot_metric_lines",
        2,
        lambda r, ax: rkp.plot_metric_lines(_heads(), "mse", "head", col="layer", ax=ax),
    ),
    ("plot_head_heatmap", 2, lambda r, ax: rkp.plot_head_heatmap(_heads(), ax=ax)),
    ("plot_attention_matrices", 2, lambda r, ax: rkp.plot_attention_matrices(*_attention(), ax=ax)),
    ("plot_mse_vs_cost", 2, lambda r, ax: rkp.plot_mse_vs_cost(_cost_points(), ax=ax)),
    ("plot_damage_vs_budget", 2, lambda r, ax: rkp.plot_damage_vs_budget(_damage_summary(), "kl", ax=ax)),
    (
        "plot_layer_damage",
        2,
        lambda r, ax: rkp.plot_layer_damage(_layer_pairs(), [("smollm2", "kl"), ("minilm", "kl")], ax=ax),
    ),
    ("plot_proxy_vs_damage", 2, lambda r, ax: rkp.plot_proxy_vs_damage(_proxy_points(), ax=ax)),
]


def test_every_public_plot_is_covered():
    """A new public plot function joins the table above (and so takes ``ax=``)."""
    public = {name for name in rkp.__all__ if name.startswith("plot_")}
    assert public == {name for name, _, _ in PLOTS}


def _artists(ax: Any) -> int:
    return len(ax.lines) + len(ax.collections) + len(ax.patches) + len(ax.images)


@pytest.mark.parametrize(("name", "panels", "draw"), PLOTS, ids=[p[0] for p in PLOTS])
def test_a_plot_draws_into_the_given_axes(tiny_result, name, panels, draw):
    """Given axes, the drawing lands in them, no figure is created, and they are returned."""
    plt.close("all")
    fig, grid = plt.subplots(1, max(panels, 1), squeeze=False)
    given = grid[0][0] if panels == 0 else grid[0]
    before = plt.get_fignums()
    out = draw(tiny_result, given)
    assert plt.get_fignums() == before, f"{name} created a figure of its own"
    if panels == 0:
        assert out is given
        assert _artists(given) > 0
    else:
        assert isinstance(out, np.ndarray) and out.ndim == 1 and len(out) == panels
        assert all(a is b for a, b in zip(out, given))
        assert all(_artists(a) > 0 for a in out)
    plt.close("all")


@pytest.mark.parametrize(("name", "panels", "draw"), PLOTS, ids=[p[0] for p in PLOTS])
def test_a_plot_without_axes_returns_what_it_drew(tiny_result, name, panels, draw):
    """Without ``ax`` a plot makes its own figure and returns its Axes (one, or one per panel)."""
    plt.close("all")
    out = draw(tiny_result, None)
    assert len(plt.get_fignums()) == 1
    if panels == 0:
        assert isinstance(out, Axes) and _artists(out) > 0
    else:
        assert isinstance(out, np.ndarray) and out.ndim == 1 and len(out) == panels
        assert all(isinstance(a, Axes) and _artists(a) > 0 for a in out)
    plt.close("all")


MULTI = [p for p in PLOTS if p[1] > 0]


@pytest.mark.parametrize(("name", "panels", "draw"), MULTI, ids=[p[0] for p in MULTI])
def test_a_multi_panel_plot_refuses_the_wrong_number_of_axes(tiny_result, name, panels, draw):
    """Too few or too many axes: refused, naming ``ax``, the number needed and the number given."""
    plt.close("all")
    for n in (panels - 1, panels + 1):
        _, grid = plt.subplots(1, n, squeeze=False)
        with pytest.raises(InvalidParameterError, match=rf"`ax`.*{name}.*{panels} Axes.*got {n}"):
            draw(tiny_result, grid[0])
    plt.close("all")


@pytest.mark.parametrize(("name", "panels", "draw"), PLOTS, ids=[p[0] for p in PLOTS])
def test_a_plot_refuses_what_is_not_an_axes(tiny_result, name, panels, draw):
    """``ax`` that holds something other than matplotlib Axes is refused, naming what it got."""
    bad = "left" if panels == 0 else ["left"] * panels
    with pytest.raises(InvalidParameterError, match=rf"`ax`.*{name}.*Axes.*'left'"):
        draw(tiny_result, bad)
    plt.close("all")


def test_a_study_result_plots_into_the_given_axes(tiny_result):
    """``result.plot(name, ax=ax)`` draws the figure into ``ax`` and returns it, creating no figure."""
    plt.close("all")
    fig, ax = plt.subplots()
    before = plt.get_fignums()
    out = tiny_result.plot("mse_vs_features_rel_mse", ax=ax)
    assert plt.get_fignums() == before
    assert out is ax and _artists(ax) > 0
    assert ax.get_yscale() == "log" and "relative MSE" in ax.get_ylabel()
    plt.close("all")


def test_a_study_result_plots_a_multi_panel_figure_into_the_given_axes(tiny_result):
    """A figure of several panels takes one Axes per panel and returns them, in panel order."""
    plt.close("all")
    fig, grid = plt.subplots(1, 2)
    before = plt.get_fignums()
    out = tiny_result.plot("kernel_scatter", ax=grid)
    assert plt.get_fignums() == before
    assert isinstance(out, np.ndarray) and [a is b for a, b in zip(out, grid)] == [True, True]
    assert all(_artists(a) > 0 for a in out)
    titles = rkp.display_names(tiny_result.design.estimators)  # the panels show display names
    assert [a.get_title().splitlines()[0] for a in out] == list(titles)
    plt.close("all")
    _, three = plt.subplots(1, 3)
    with pytest.raises(InvalidParameterError, match=r"`ax`.*2 Axes.*got 3"):
        tiny_result.plot("kernel_scatter", ax=three)
    plt.close("all")


def test_a_study_result_returns_its_axes_without_ax(tiny_result):
    """Without ``ax``, ``result.plot`` draws a new figure and returns its Axes, one per panel."""
    plt.close("all")
    ax = tiny_result.plot("mse_vs_features")
    assert isinstance(ax, Axes) and len(plt.get_fignums()) == 1 and _artists(ax) > 0
    axes = tiny_result.plot("kernel_scatter")
    assert isinstance(axes, np.ndarray) and len(axes) == 2
    assert axes[0].figure is axes[1].figure and len(plt.get_fignums()) == 2
    plt.close("all")


def test_a_study_result_passes_the_size_on(tiny_result):
    """``result.plot(name, size=...)`` still picks the paper width of a new figure."""
    ax = tiny_result.plot("mse_vs_features", size="one-column")
    assert ax.figure.get_figwidth() == pytest.approx(rkp.PAPER_SIZES["one-column"])
    plt.close("all")


def test_a_registered_short_form_figure_draws_into_the_given_axes(tiny_result):
    """A record's ``draw(frame, ax)`` gets the given axes; a whole-figure record refuses ``ax``."""

    def draw(frame: pd.DataFrame, ax: Any) -> None:
        ax.plot(frame["n_features"], frame["estimate"], "o")

    record = rkp.FigureRecord(
        name="ax_spread",
        prepare=lambda inputs: inputs.summary[inputs.summary["metric"] == "mse"],
        draw=draw,
    )
    whole = rkp.FigureRecord(
        name="ax_whole",
        figures=lambda inputs: [("ax_whole", lambda size: plt.figure())],
    )
    rkp.register_figure(record, replace=True)
    rkp.register_figure(whole, replace=True)
    try:
        plt.close("all")
        fig, ax = plt.subplots()
        before = plt.get_fignums()
        assert tiny_result.plot("ax_spread", ax=ax) is ax
        assert plt.get_fignums() == before and len(ax.lines) == 1
        with pytest.raises(InvalidParameterError, match=r"`ax`.*ax_whole.*draw\(size\)"):
            tiny_result.plot("ax_whole", ax=ax)
    finally:
        rkp.unregister_figure("ax_spread")
        rkp.unregister_figure("ax_whole")
        plt.close("all")
