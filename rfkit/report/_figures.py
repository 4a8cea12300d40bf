"""The figures of a study, drawn from its saved tables with :mod:`rfkit.plots` (nothing is recomputed).

A study declares figure kinds in ``[outputs] figures = [...]``; :func:`study_figures` draws the
figures of one kind as ``(name, matplotlib Figure)`` pairs, the name being the file stem under
``figures/``. Different settings of the grid are never pooled into one figure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from ..plots import (
    plot_head_heatmap,
    plot_kernel_scatter,
    plot_metric_boxplot,
    plot_metric_lines,
    plot_mse_vs_features,
    plot_ratio_to_reference,
)
from ..study._tables import facets

__all__ = ["FIGURE_KINDS", "Figures", "study_figures"]

#: figure kinds a study may declare in ``[outputs] figures = [...]``, in the order they are drawn
FIGURE_KINDS = (
    "mse_vs_features",
    "kernel_scatter",
    "error_vs_degree",
    "mse_vs_samples",
    "cost",
    "head_heatmap",
    "coverage",
    "boxplots",
    "ratio_to_reference",
)


#: ``(name, matplotlib Figure)`` pairs; the name is the file stem under ``figures/``
Figures = list[tuple[str, Any]]


def study_figures(
    kind: str, design: Any, summary: pd.DataFrame, theory: pd.DataFrame, table: Callable[[str], Any]
) -> Figures:
    """The figures of one kind, as ``(name, matplotlib Figure)`` pairs (empty where the kind does not apply).

    ``summary`` and ``theory`` are ``StudyResult.summary()`` / ``compare_theory()`` (as saved);
    ``table(name)`` gives another saved table (``"pairs"``, ``"timings"``) or None. Plots read
    these tables only: nothing is recomputed.
    """
    grid_cols = list(design.grid)
    if kind == "mse_vs_features" and ({"n_features", "feature_dim"} & set(grid_cols)):
        return _mse_figures(summary, theory, grid_cols)
    if kind == "kernel_scatter":
        pairs = table("pairs")
        return _scatter_figure(pairs, grid_cols) if pairs is not None else []
    if kind == "error_vs_degree" and "degree" in grid_cols:
        return _lines_figures(
            summary, design.metrics, "degree", "norm" if "norm" in grid_cols else None, kind=design.kind
        )
    if kind == "mse_vs_samples" and "samples" in grid_cols:
        col = next((c for c in grid_cols if c not in ("samples",)), None)
        return _lines_figures(  # draws those of mse and max_abs_err that the design measures
            summary, design.metrics, "samples", col, logx=True, only=("mse", "max_abs_err"), kind=design.kind
        )
    if kind == "cost":
        timings = table("timings")
        return _cost_figure(timings, grid_cols) if timings is not None else []
    if kind == "head_heatmap" and {"layer", "head"} <= set(grid_cols):
        return _heatmap_figure(summary, grid_cols)
    if kind == "coverage" and "p" in grid_cols:
        return _coverage_figures(summary, grid_cols)
    if kind == "boxplots" and "dataset" in grid_cols:
        return _box_figures(summary, design.metrics, grid_cols)
    if kind == "ratio_to_reference" and design.outputs.get("reference"):
        return _ratio_figures(summary, grid_cols, str(design.outputs["reference"]))
    return []


def _ratio_figures(summary: pd.DataFrame, grid_cols: list[str], reference: str) -> Figures:
    """Per-cell MSE ratio to the reference estimator, one figure per value of the non-head axes."""
    figs: Figures = []
    cell_axes = [c for c in grid_cols if c not in ("layer", "head", "dataset")]
    groups = summary.groupby(cell_axes, sort=False) if cell_axes else [((), summary)]
    for key, rows in groups:
        vals = key if isinstance(key, tuple) else (key,)
        suffix = "".join(f"_{a}-{v}" for a, v in zip(cell_axes, vals))
        title = ", ".join(f"{a} = {v}" for a, v in zip(cell_axes, vals)) or None
        ax = plot_ratio_to_reference(
            rows,
            reference,
            metric="mse",
            title=title,
            ylabel=f"attention-output MSE / that of {reference}",
        )
        figs.append((f"mse_ratio_to_reference{suffix}", ax.figure))
    return figs


def _mse_figures(summary: pd.DataFrame, theory: pd.DataFrame, grid_cols: list[str]) -> Figures:
    """MSE against the feature count (``feature_dim`` columns, else ``n_features`` directions), one
    figure per value of the other grid axes that vary (e.g. a data ``set``): never pooled."""
    x = "feature_dim" if "feature_dim" in grid_cols else "n_features"
    figs: Figures = []
    for suffix, rows in facets(summary, grid_cols):
        th = theory[theory["cell"].isin(rows["cell"])] if not theory.empty else theory
        title = suffix.lstrip("_").replace("_", ", ").replace("-", " = ", 1) if suffix else None
        for metric in ("mse", "rel_mse", "median_rel_sq_err"):
            if rows[rows["metric"] == metric].empty:
                continue
            ax = plot_mse_vs_features(rows, th if not th.empty else None, metric=metric, x=x, title=title)
            figs.append((f"{metric}_vs_features{suffix}", ax.figure))
    return figs


def _scatter_figure(pairs: pd.DataFrame, grid_cols: list[str]) -> Figures:
    figs: Figures = []
    for suffix, rows in facets(pairs, grid_cols):
        axes = plot_kernel_scatter(rows)  # the facet's first cell
        figs.append((f"kernel_scatter{suffix}", axes[0].figure))
    return figs


def _box_figures(summary: pd.DataFrame, metrics: list[str], grid_cols: list[str]) -> Figures:
    figs: Figures = []
    for metric in ("mse", "max_rel_err"):
        if metric not in metrics:
            continue
        for suffix, rows in facets(summary, grid_cols):
            ax = plot_metric_boxplot(rows, metric)
            figs.append((f"boxplot_{metric}{suffix}", ax.figure))
    return figs


_YLABELS = {
    "mse": "MSE",
    "max_abs_err": "E[max |Â - A|]",
    "rel_mse": "relative MSE  E[(K̂-K)²/K²]",
    "max_rel_err": "E[max relative error]",
    "mean_rel_err": "mean relative error",
}


_ATTENTION_YLABELS = {
    "mse": "attention-output MSE  E[(Â - A)²]",
    "max_abs_err": "E[max |Â - A|] over queries, dims",
}


#: what the "samples" axis counts for each estimator family (a budget, not always random samples)
_SAMPLES_LABEL = "random samples S (RFA: features m)"


#: panel titles for the facet axes of the built-in studies ("{}" is the value)
_PANEL_TITLES = {"norm": "‖x‖ = ‖y‖ = {}", "n_pairs": "s = {} query/key pairs", "structure": "{} tokens"}


def _lines_figures(
    summary: pd.DataFrame,
    metrics: list[str],
    x: str,
    col: str | None,
    logx: bool = False,
    only: tuple[str, ...] = ("rel_mse", "max_rel_err"),
    kind: str = "kernel",
) -> Figures:
    figs: Figures = []
    labels = {**_YLABELS, **(_ATTENTION_YLABELS if kind == "attention" else {})}
    for metric in only:
        if metric not in metrics:
            continue
        xlabel = {"degree": "degree n", "samples": _SAMPLES_LABEL}.get(x, x)
        axes = plot_metric_lines(
            summary,
            metric,
            x,
            col=col,
            logx=logx,
            xlabel=xlabel,
            ylabel=labels.get(metric, metric),
            col_title=_PANEL_TITLES.get(col or ""),
        )
        figs.append((f"{metric}_vs_{x}", axes[0].figure))
    return figs


def _cost_figure(timings: pd.DataFrame, grid_cols: list[str]) -> Figures:
    col = next((c for c in grid_cols if c != "samples"), None)
    frame = timings.rename(columns={"seconds_median": "estimate"}).assign(metric="seconds", mcse=0.0)
    axes = plot_metric_lines(
        frame,
        "seconds",
        "samples",
        col=col,
        logx=True,
        xlabel=_SAMPLES_LABEL,
        ylabel="median seconds per call",
        col_title=_PANEL_TITLES.get(col or ""),
    )
    return [("cost_vs_samples", axes[0].figure)]


def _heatmap_figure(summary: pd.DataFrame, grid_cols: list[str]) -> Figures:
    """One (layer, head) heatmap per value of the other grid axes (model, budget): never pooled."""
    other = [c for c in grid_cols if c not in ("layer", "head")]
    groups = summary.groupby(other, sort=False) if other else [((), summary)]
    figs: Figures = []
    for key, rows in groups:
        vals = key if isinstance(key, tuple) else (key,)
        suffix = "".join(f"_{a}-{v}" for a, v in zip(other, vals))
        axes = plot_head_heatmap(rows, "mse", colorbar_label="log10 attention-output MSE")
        fig = axes.ravel()[0].figure
        if other:
            fig.suptitle(", ".join(f"{a} = {v}" for a, v in zip(other, vals)), y=1.0)
        figs.append((f"mse_by_layer_head{suffix}", fig))
    return figs


def _coverage_figures(summary: pd.DataFrame, grid_cols: list[str]) -> Figures:
    """Coverage of the chi-squared bound against p (with the diagonal the theorem promises) and its
    tightness (max RMS relative error / bound), at the largest feature count."""
    col = "n_pairs" if "n_pairs" in grid_cols else None
    sub = summary[summary["metric"].isin(["coverage", "rms_over_bound"])]
    if "n_features" in grid_cols:  # one figure per m would repeat; show the largest m
        sub = sub[sub["n_features"] == sub["n_features"].max()]
    figs: Figures = []
    for name, metric, logy, ylabel in (
        ("coverage_vs_p", "coverage", False, "coverage of the bound"),
        ("tightness_vs_p", "rms_over_bound", True, "max RMS relative error / bound"),
    ):
        axes = plot_metric_lines(
            sub,
            metric,
            "p",
            col=col,
            logy=logy,
            xlabel="target probability p",
            ylabel=ylabel,
            col_title=_PANEL_TITLES.get(col or ""),
        )
        if metric == "coverage":
            for ax in axes:
                ax.plot([0, 1], [0, 1], "k:", lw=0.8, label="coverage = p (the theorem: at least this)")
                ax.set_xlim(0.0, 1.02)
                ax.set_ylim(0.0, 1.05)
            axes[-1].legend(frameon=False, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7)
        figs.append((name, axes[0].figure))
    return figs
