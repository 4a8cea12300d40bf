"""An error metric against the cost per query (exact keys + features), one line per estimator family."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ._axes import panel_axes, sharey_panels
from ._lines import panel_grid
from ._reference import reference_styles
from ._style import _wrapped, label_axes, legend_below, legend_for, legend_rows, paper_style

__all__ = ["prepare_mse_vs_cost", "plot_mse_vs_cost"]

#: families a legend beside the panels holds; with more it goes below them, in columns
_BESIDE = 8
#: families up to which the quartile bars are drawn by default (beyond, they hide each other)
_BARS = 6


def prepare_mse_vs_cost(
    summary: pd.DataFrame,
    *,
    metric: str = "mse",
    family: str = "estimator",
    point: Sequence[str] = (),
    col: str | None = None,
) -> pd.DataFrame:
    """The points drawn by :func:`plot_mse_vs_cost`, from a tidy study summary.

    ``summary`` has one row per (cell, estimator, metric) with ``cost`` (the cost per query,
    :mod:`rfkit.study._cost`) and ``estimate``. Rows of ``metric`` are grouped by ``col`` (a
    panel), ``family`` (a line) and the columns ``point`` (one point of the line, e.g. the budget
    ``feature_dim``); over the other cells of a group (the heads) a point is the **median** of
    the cost and the median of the estimate, with the number of cells ``n`` and the quartiles of
    the estimate (``q25``, ``q75``).

    Returns columns ``col`` (None without panels), ``family``, ``cost``, ``estimate``, ``q25``,
    ``q75``, ``n``, sorted by panel, family (first appearance) and cost.

    Parameters
    ----------
    summary : pandas.DataFrame
        A study summary (``StudyResult.summary()``): one row per (cell, estimator, metric). It needs ``cost`` and ``estimate``.
    metric : str, default="mse"
        The metric drawn.
    family : str, default="estimator"
        The column whose values are the lines.
    point : sequence of str, default=()
        The columns whose values are the points of a line (e.g. ``("feature_dim",)``).
    col : str, optional
        The column whose values are the panels; None: one panel.

    Returns
    -------
    pandas.DataFrame
        The points, as described above.
    """
    need = {"metric", "estimate", "cost", family, *point} | ({col} if col else set())
    missing = sorted(need - set(summary.columns))
    if missing:
        raise ValueError(f"summary has no column(s) {missing} (an attention study's summary has `cost`)")
    s = summary[(summary["metric"] == metric) & np.isfinite(summary["estimate"]) & summary["cost"].notna()]
    if s.empty:
        raise ValueError(f"summary has no finite rows for metric {metric!r} with a cost")
    keys = ([col] if col else []) + [family, *point]
    rows = []
    for key, g in s.groupby(keys, sort=False):
        vals = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        est = g["estimate"].to_numpy(dtype=float)
        rows.append(
            {
                "col": vals[col] if col else None,
                "family": vals[family],
                "cost": float(np.median(g["cost"].to_numpy(dtype=float))),
                "estimate": float(np.median(est)),
                "q25": float(np.quantile(est, 0.25)),
                "q75": float(np.quantile(est, 0.75)),
                "n": int(est.size),
            }
        )
    out = pd.DataFrame(rows)
    order = {f: i for i, f in enumerate(dict.fromkeys(out["family"]))}
    panels = {p: i for i, p in enumerate(dict.fromkeys(out["col"]))}
    out = out.assign(_p=out["col"].map(panels), _f=out["family"].map(order))
    return (
        out.sort_values(["_p", "_f", "cost"], kind="stable").drop(columns=["_p", "_f"]).reset_index(drop=True)
    )


def plot_mse_vs_cost(
    points: pd.DataFrame,
    *,
    logx: bool = True,
    logy: bool = True,
    xlabel: str = "cost per query",
    ylabel: str = "output MSE (median)",
    col_title: str | None = None,
    spread: bool | None = None,
    ax: Any = None,
    size: str | None = None,
) -> Any:
    """An error against the cost per query: one line per family, one panel per ``col`` value.

    ``points`` is a tidy table with the columns ``family``, ``cost`` and ``estimate`` (and
    optionally ``col``, ``q25`` and ``q75``), as :func:`prepare_mse_vs_cost` returns. Each family
    is a line through its points in order of cost, with its own colour, line style and marker
    (:func:`series_styles`); a reference family (its name ends with ``" (reference)"``, e.g. a
    Hybrid with the oracle scorer) is grey and dashed with open markers, at its own cost; with ``spread`` and the quartile columns, a vertical bar shows the
    interquartile range of the estimate over the cells (heads) behind each median (default:
    with up to six families, where the bars stay readable). On a new figure the legend is beside
    the panels where it takes at most a third of the figure's width (measured), else below them
    in as many columns as fit (always below for more than eight families and on a one-column
    figure); a single row of an odd number of panels has one x label, below the middle panel,
    and the panel titles are wrapped to a panel's width. On given axes the legend is beside the
    last panel, or below the panels for more than eight families and on a one-column figure.
    ``col_title``
    formats each panel's title (``"{}"`` is replaced by the panel's value). ``size`` is
    ``"one-column"`` or ``"two-column"`` (default: :func:`set_paper_size`).

    Returns the array of the panels' Axes.

    Parameters
    ----------
    points : pandas.DataFrame
        The points (:func:`prepare_mse_vs_cost`).
    logx, logy : bool, default=True
        Logarithmic axes.
    xlabel : str, default="cost per query"
        The x-axis label.
    ylabel : str, default="output MSE (median)"
        The y-axis label.
    col_title : str, optional
        The panels' title format (``"{}"`` is replaced by the panel's value).
    spread : bool, optional
        Draw the interquartile bars; None: with up to six families.
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
    ValueError
        For ``points`` without the columns needed, or empty.
    InvalidParameterError
        For ``ax`` that is not one Axes per panel.
    """
    from matplotlib.ticker import FuncFormatter

    for c in ("family", "cost", "estimate"):
        if c not in points.columns:
            raise ValueError(f"points has no column {c!r} (see prepare_mse_vs_cost)")
    if points.empty:
        raise ValueError("points is empty: nothing to draw")
    frame = points if "col" in points.columns else points.assign(col=None)
    panels = list(dict.fromkeys(frame["col"]))
    families = list(dict.fromkeys(frame["family"]))
    styles = reference_styles(families)
    if spread is None:  # quartile bars where they stay readable
        spread = len(families) <= _BARS
    bars = spread and {"q25", "q75"} <= set(frame.columns)
    given = None if ax is None else panel_axes(ax, len(panels), "plot_mse_vs_cost")
    with paper_style(size) as st:
        narrow = st["size"] == "one-column"
        nrow, ncol = panel_grid(len(panels), narrow)
        panel_h = (1.9 if narrow else 2.3) if nrow == 1 else (1.6 if narrow else 1.9)
        below = narrow or len(families) > _BESIDE  # many families: the legend goes below, in columns
        figsize = (st["width"], panel_h * nrow + 0.6)  # a legend below adds its rows (legend_below)
        flat, fig, firsts, owner = sharey_panels(given, nrow, ncol, len(panels), figsize)
        # our own single row of 3 (5, ...) panels: one x label, below the middle panel (a figure-level
        # supxlabel would share the bottom margin with a legend below the panels, and overlap it)
        middle = len(panels) // 2 if given is None and nrow == 1 and len(panels) % 2 == 1 else None
        for ax, pv in zip(flat, panels):
            g0 = frame if pv is None else frame[frame["col"] == pv]
            for fam in families:
                g = g0[g0["family"] == fam].sort_values("cost", kind="stable")
                if g.empty:
                    continue
                sty = styles[fam]
                yerr = None
                if bars:
                    yerr = np.vstack([g["estimate"] - g["q25"], g["q75"] - g["estimate"]]).clip(min=0)
                ax.errorbar(
                    g["cost"],
                    g["estimate"],
                    yerr=yerr,
                    marker=sty["marker"],
                    linestyle=sty["linestyle"],
                    color=sty["color"],
                    markerfacecolor=sty["markerfacecolor"],
                    ms=3,
                    capsize=1.5,
                    elinewidth=0.6,
                    label=fam,
                )
            if logx:
                ax.set_xscale("log", base=2)
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
            if logy:
                ax.set_yscale("log")
            label_axes(ax, xlabel if middle is None or ax is flat[middle] else None, None)
        for ax in flat[len(panels) :]:
            ax.set_visible(False)
        for first in firsts:
            label_axes(first, None, ylabel)
        handles, names = [], []
        for ax in flat[: len(panels)]:  # every family once, in order, from whichever panel has it
            for h, n in zip(*ax.get_legend_handles_labels()):
                if n not in names:
                    handles.append(h)
                    names.append(n)
        order = [names.index(f) for f in families if f in names]
        handles, names = [handles[i] for i in order], [names[i] for i in order]
        beside = 0.0  # inches of the figure's width the legend takes right of the panels
        if given is None:  # measured: beside the panels only where it takes at most a third of the width
            legend = None if below else legend_for(fig, owner, handles, names)
            if legend is not None:
                beside = legend.get_window_extent(fig.canvas.get_renderer()).width / fig.dpi
                if beside > fig.get_figwidth() / 3:
                    legend.remove()
                    legend, beside = None, 0.0
            if legend is None:
                legend_below(fig, handles, names)
        elif below:
            longest = max(len(str(f)) for f in families)
            legend_cols = (
                (2 if legend_rows(families, True) < len(families) else 1)
                if narrow
                else (3 if longest <= 30 else 2)
            )
            fig.legend(
                handles,
                names,
                loc="outside lower center",
                ncol=legend_cols,
                frameon=False,
                fontsize=6 if narrow else 7,
            )
        else:
            legend_for(fig, owner, handles, names)
        spec = flat[0].get_subplotspec()
        cols = spec.get_gridspec().get_geometry()[1] if spec is not None else ncol
        width = 0.9 * (fig.get_figwidth() - beside) / cols  # a panel's width, about: titles wrap to it
        for ax, pv in zip(flat, panels):
            if pv is not None:
                title = (col_title or "{}").replace("{}", str(pv))
                ax.set_title(_wrapped(title, width, ax.title.get_size()))
    return flat[: len(panels)]
