"""A metric against a design axis, one line per estimator, optionally faceted by another axis."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ._axes import panel_axes, sharey_panels
from ._mcse_bars import mcse_note
from ._reference import reference_styles
from ._style import dodged, label_axes, legend_for, legend_height, log_interval, paper_style

__all__ = ["prepare_metric_lines", "plot_metric_lines", "panel_grid"]


def prepare_metric_lines(summary: pd.DataFrame, metric: str, x: str, col: str | None = None) -> pd.DataFrame:
    """Return the rows drawn: ``estimator``, ``x``, ``col`` (or None), ``estimate``, ``lower``, ``upper``.

    ``lower``/``upper`` are the ±2 MCSE interval of the log (:func:`log_interval`).

    Parameters
    ----------
    summary : pandas.DataFrame
        A study summary (``StudyResult.summary()``): one row per (cell, estimator, metric).
    metric : str
        The metric drawn.
    x : str
        The column on the x axis.
    col : str, optional
        The column whose values are the panels.

    Returns
    -------
    pandas.DataFrame
        The rows drawn.
    """
    s = summary[summary["metric"] == metric]
    if s.empty:
        raise ValueError(f"summary has no rows for metric {metric!r}")
    for c in [x] + ([col] if col else []):
        if c not in s.columns:
            raise ValueError(f"summary has no column {c!r}")
    mc = s["mcse"].fillna(0.0).to_numpy()
    lo, hi = log_interval(s["estimate"], mc)
    return pd.DataFrame(
        {
            "estimator": s["estimator"].to_numpy(),
            "x": s[x].to_numpy(),
            "col": s[col].to_numpy() if col else None,
            "estimate": s["estimate"].to_numpy(),
            "lower": lo,
            "upper": hi,
        }
    )


def panel_grid(n: int, narrow: bool) -> tuple[int, int]:
    """``(rows, columns)`` for ``n`` panels: one row of up to 3 (2 on a one-column figure), then wrap."""
    ncol = min(n, 2 if narrow else 3)
    return -(-n // ncol), ncol


def plot_metric_lines(
    summary: pd.DataFrame,
    metric: str,
    x: str,
    *,
    col: str | None = None,
    logx: bool = False,
    logy: bool = True,
    xlabel: str | None = None,
    ylabel: str | None = None,
    col_title: str | None = None,
    ax: Any = None,
    size: str | None = None,
) -> Any:
    """Draw lines of ``metric`` against ``x`` per estimator (±2 MCSE bars), one panel per ``col`` value.

    Each estimator has its own colour, line style and marker (:func:`series_styles`; a reference,
    whose name ends with ``" (reference)"``, is grey and dashed with open markers), and its
    points are shifted slightly sideways so that estimators with equal values do not hide each
    other. ``col_title`` formats each panel's title from its ``col`` value (``"{}"`` is
    replaced; default ``"<col> = {}"``). Panels wrap into rows of three (two on a one-column
    figure); ``size`` is ``"one-column"`` or ``"two-column"`` (default: :func:`set_paper_size`).

    Returns the array of the panels' Axes.

    Parameters
    ----------
    summary : pandas.DataFrame
        A study summary (``StudyResult.summary()``): one row per (cell, estimator, metric).
    metric : str
        The metric drawn.
    x : str
        The column on the x axis.
    col : str, optional
        The column whose values are the panels; None: one panel.
    logx : bool, default=False
        Logarithmic x axis.
    logy : bool, default=True
        Logarithmic y axis.
    xlabel, ylabel : str, optional
        The axis labels; None: the column and metric names.
    col_title : str, optional
        The panels' title format.
    ax : sequence of matplotlib.axes.Axes, optional
        The axes to draw on, one per panel (``col`` value) in panel order (a single Axes for one
        panel); the y label goes on those beginning a row. None: a new figure.
    size : {"one-column", "two-column"}, optional
        The figure width; None: the one :func:`set_paper_size` chose.

    Returns
    -------
    ndarray of matplotlib.axes.Axes
        The panels' Axes, 1-D, in panel order (the given ones where ``ax`` is given).

    Raises
    ------
    InvalidParameterError
        For ``ax`` that is not one Axes per panel.
    """

    frame = prepare_metric_lines(summary, metric, x, col)
    panels = [None] if col is None else list(dict.fromkeys(frame["col"]))
    labels = list(dict.fromkeys(frame["estimator"]))
    styles = reference_styles(labels)
    given = None if ax is None else panel_axes(ax, len(panels), "plot_metric_lines")
    with paper_style(size) as st:
        narrow = st["size"] == "one-column"
        nrow, ncol = panel_grid(len(panels), narrow)
        panel_h = (1.9 if narrow else 2.2) if nrow == 1 else (1.6 if narrow else 1.9)
        legend_h = legend_height(labels) if narrow else 0.0  # the legend goes below
        figsize = (st["width"], panel_h * nrow + 0.6 + legend_h)  # a new figure's (unused with `ax`)
        flat, fig, firsts, owner = sharey_panels(given, nrow, ncol, len(panels), figsize)
        for ax, pv in zip(flat, panels):
            g0 = frame if pv is None else frame[frame["col"] == pv]
            for lab, g in g0.groupby("estimator", sort=False):
                yerr = np.vstack([g["estimate"] - g["lower"], g["upper"] - g["estimate"]])
                sty = styles[lab]
                ax.errorbar(
                    dodged(g["x"], labels.index(lab), len(labels), log=logx),  # equal values stay visible
                    g["estimate"],
                    yerr=yerr,
                    marker=sty["marker"],
                    linestyle=sty["linestyle"],
                    ms=3,
                    capsize=1.5,
                    elinewidth=0.8,
                    color=sty["color"],
                    markerfacecolor=sty["markerfacecolor"],
                    label=lab,
                )
            if logx:
                ax.set_xscale("log", base=2)
            if logy:
                ax.set_yscale("log")
            label_axes(ax, xlabel or x, None)
            if pv is not None:
                ax.set_title((col_title or f"{col} = {{}}").replace("{}", str(pv)))
        for ax in flat[len(panels) :]:
            ax.set_visible(False)
        for first in firsts:
            label_axes(first, None, ylabel or metric)
        handles, names = flat[0].get_legend_handles_labels()
        legend_for(fig, owner, handles, names, title=mcse_note(flat[: len(panels)]))  # hidden bars said
    return flat[: len(panels)]
