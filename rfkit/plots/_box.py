"""Distributions of a metric across data sets, one box per estimator (Blackwelder (2024), Figures 2-3)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ._axes import one_axes
from ._style import label_axes, paper_style, series_styles

__all__ = ["prepare_metric_boxplot", "plot_metric_boxplot"]


def prepare_metric_boxplot(summary: pd.DataFrame, metric: str, by: str = "dataset") -> pd.DataFrame:
    """The rows :func:`plot_metric_boxplot` draws.

    Parameters
    ----------
    summary : pandas.DataFrame
        A study summary (``StudyResult.summary()``): one row per (cell, estimator, metric).
    metric : str
        The metric drawn.
    by : str, default="dataset"
        The column whose values are the dots.

    Returns
    -------
    pandas.DataFrame
        One row per data set and estimator: ``estimator``, the ``by`` value, ``value``.
    """
    s = summary[summary["metric"] == metric]
    if s.empty:
        raise ValueError(f"summary has no rows for metric {metric!r}")
    if by not in s.columns:
        raise ValueError(f"summary has no column {by!r} (the data-set axis)")
    return pd.DataFrame(
        {"estimator": s["estimator"].to_numpy(), by: s[by].to_numpy(), "value": s["estimate"].to_numpy()}
    )


def plot_metric_boxplot(
    summary: pd.DataFrame,
    metric: str,
    *,
    by: str = "dataset",
    log: bool = True,
    ax: Any = None,
    size: str | None = None,
) -> Any:
    """Boxplot of ``metric`` over data sets per estimator, with the individual data sets as dots.

    ``size`` is ``"one-column"`` or ``"two-column"`` (default: :func:`set_paper_size`).

    Parameters
    ----------
    summary : pandas.DataFrame
        A study summary (``StudyResult.summary()``): one row per (cell, estimator, metric).
    metric : str
        The metric drawn.
    by : str, default="dataset"
        The column whose values are the dots (one per data set).
    log : bool, default=True
        Logarithmic value axis.
    ax : matplotlib.axes.Axes, optional
        The axes to draw on; None: a new figure.
    size : {"one-column", "two-column"}, optional
        The figure width; None: the one :func:`set_paper_size` chose.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on (``ax`` where it is given).

    Raises
    ------
    InvalidParameterError
        For ``ax`` that is not a matplotlib Axes.
    """
    import matplotlib.pyplot as plt
    import seaborn as sns

    ax = one_axes(ax, "plot_metric_boxplot")
    frame = prepare_metric_boxplot(summary, metric, by)
    order = list(dict.fromkeys(frame["estimator"]))
    pal = {lab: sty["color"] for lab, sty in series_styles(order).items()}
    with paper_style(size) as st:
        if ax is None:
            w, h = st["figsize"]
            _, ax = plt.subplots(figsize=(w, max(h, 2.6)))
        # matplotlib's boxplot (seaborn 0.13's passes the deprecated `vert` to matplotlib >= 3.11)
        data = [frame.loc[frame["estimator"] == lab, "value"].to_numpy() for lab in order]
        bp = ax.boxplot(data, positions=range(len(order)), widths=0.6, showfliers=False, patch_artist=True)
        for patch, lab in zip(bp["boxes"], order):
            patch.set_facecolor(pal[lab])
            patch.set_alpha(0.8)
        for med in bp["medians"]:
            med.set_color("k")
        sns.stripplot(
            data=frame,
            x="estimator",
            y="value",
            order=order,
            color="k",
            size=2.5,
            alpha=0.8,
            ax=ax,
            jitter=0.15,
        )
        ax.set_xticks(range(len(order)), order)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("")
        names = {
            "mse": "MSE per data set",
            "max_rel_err": "max relative error per data set",
            "rel_mse": "relative MSE per data set",
        }
        label_axes(ax, None, names.get(metric, metric))
        ax.tick_params(axis="x", rotation=30)
        for lab in ax.get_xticklabels():
            lab.set_horizontalalignment("right")
    return ax
