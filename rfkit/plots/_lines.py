"""A metric against a design axis, one line per estimator, optionally faceted by another axis."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ._style import DOUBLE_WIDTH, dodged, estimator_colors, estimator_markers, log_interval, paper_style

__all__ = ["prepare_metric_lines", "plot_metric_lines"]


def prepare_metric_lines(summary: pd.DataFrame, metric: str, x: str, col: str | None = None) -> pd.DataFrame:
    """Rows drawn: ``estimator``, ``x``, ``col`` (or None), ``estimate``, ``lower``, ``upper``.

    ``lower``/``upper`` are the ±2 MCSE interval of the log (:func:`log_interval`).
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
) -> Any:
    """Lines of ``metric`` against ``x`` per estimator (±2 MCSE bars), one panel per ``col`` value.

    Each estimator has its own colour and marker, and its points are shifted slightly sideways
    so that estimators with equal values do not hide each other. ``col_title`` formats each
    panel's title from its ``col`` value (``"{}"`` is replaced; default ``"<col> = {}"``).
    """
    import matplotlib.pyplot as plt

    frame = prepare_metric_lines(summary, metric, x, col)
    panels = [None] if col is None else list(dict.fromkeys(frame["col"]))
    labels = list(dict.fromkeys(frame["estimator"]))
    colors, markers = estimator_colors(labels), estimator_markers(labels)
    with paper_style("double"):
        fig, axes = plt.subplots(1, len(panels), figsize=(DOUBLE_WIDTH, 2.4), squeeze=False, sharey=True)
        for ax, pv in zip(axes[0], panels):
            g0 = frame if pv is None else frame[frame["col"] == pv]
            for lab, g in g0.groupby("estimator", sort=False):
                yerr = np.vstack([g["estimate"] - g["lower"], g["upper"] - g["estimate"]])
                ax.errorbar(
                    dodged(g["x"], labels.index(lab), len(labels), log=logx),  # equal values stay visible
                    g["estimate"],
                    yerr=yerr,
                    marker=markers[lab],
                    ms=3,
                    capsize=1.5,
                    color=colors[lab],
                    label=lab,
                )
            if logx:
                ax.set_xscale("log", base=2)
            if logy:
                ax.set_yscale("log")
            ax.set_xlabel(xlabel or x)
            if pv is not None:
                ax.set_title((col_title or f"{col} = {{}}").replace("{}", str(pv)))
        axes[0][0].set_ylabel(ylabel or metric)
        axes[0][-1].legend(frameon=False, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return axes[0]
