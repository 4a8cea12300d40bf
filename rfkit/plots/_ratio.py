"""Each estimator's error relative to a reference estimator, one point per cell (e.g. per head)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ._axes import one_axes
from ._names import REFERENCE_MARK
from ._reference import is_reference_name, reference_styles
from ._style import _wrapped, label_axes, paper_style

__all__ = ["prepare_ratio_to_reference", "plot_ratio_to_reference"]

#: the least height of the axes of a figure of our own, in inches, after a caption above takes its room
AXES_MIN = 1.5
#: the room a caption of up to two lines takes above the axes (a report adds one after drawing)
CAPTION_ROOM = 0.4


def prepare_ratio_to_reference(
    summary: pd.DataFrame, reference: str, metric: str = "mse", by: tuple[str, ...] = ()
) -> pd.DataFrame:
    """The frame drawn by :func:`plot_ratio_to_reference`.

    One row per (cell, estimator other than ``reference``): the columns ``by`` (e.g. a budget
    axis), ``cell``, ``estimator`` and ``ratio`` = the estimator's ``metric`` divided by the
    reference's in the same cell (< 1: better than the reference).

    Parameters
    ----------
    summary : pandas.DataFrame
        A study summary (``StudyResult.summary()``): one row per (cell, estimator, metric).
    reference : str
        The reference estimator.
    metric : str, default="mse"
        The metric compared.
    by : tuple of str, default=()
        Further columns kept (e.g. a budget axis).

    Returns
    -------
    pandas.DataFrame
        The frame, as described above.
    """
    s = summary[summary["metric"] == metric]
    if s.empty:
        raise ValueError(f"summary has no rows for metric {metric!r}")
    if reference not in set(s["estimator"]):
        raise ValueError(f"summary has no estimator {reference!r} to divide by")
    ref = s[s["estimator"] == reference].set_index("cell")["estimate"]
    rows = s[s["estimator"] != reference].copy()
    rows["ratio"] = rows["estimate"].to_numpy() / ref.reindex(rows["cell"]).to_numpy()
    return rows[[*by, "cell", "estimator", "ratio"]].reset_index(drop=True)


def plot_ratio_to_reference(
    summary: pd.DataFrame,
    reference: str,
    *,
    metric: str = "mse",
    ax: Any = None,
    title: str | None = None,
    ylabel: str | None = None,
    size: str | None = None,
) -> Any:
    """Per-cell ratios of each estimator's ``metric`` to ``reference``'s: dots, median bar, log scale.

    Estimators are ordered by their median ratio (best first); the dotted line at 1 is the
    reference. A reference series (its name ends with ``" (reference)"``, e.g. Hybrid with the
    oracle scorer, which pays for every key's logit) is not ranked with them: it is drawn in
    grey after a dashed divider, under a note "reference" with its median ``cost`` per query
    where the summary has one. ``size`` is ``"one-column"`` or ``"two-column"`` (default: :func:`set_paper_size`).
    A new figure grows until its axes, below the estimator names and a caption's room, are
    1.5 in tall, and its y label is wrapped to their height.

    Parameters
    ----------
    summary : pandas.DataFrame
        A study summary (``StudyResult.summary()``): one row per (cell, estimator, metric).
    reference : str
        The reference estimator.
    metric : str, default="mse"
        The metric compared.
    ax : matplotlib.axes.Axes, optional
        The axes to draw on; None: a new figure.
    title : str, optional
        The axes title.
    ylabel : str, optional
        The y-axis label; None: one naming the metric and the reference.
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

    ax = one_axes(ax, "plot_ratio_to_reference")
    frame = prepare_ratio_to_reference(summary, reference, metric)
    med = frame.groupby("estimator", sort=False)["ratio"].median().sort_values(kind="stable")
    ranked = [lab for lab in med.index if not is_reference_name(lab)]
    order = ranked + [lab for lab in med.index if is_reference_name(lab)]  # references apart, last
    colors = {lab: sty["color"] for lab, sty in reference_styles(order).items()}
    ticks = [str(lab).removesuffix(REFERENCE_MARK) for lab in order]  # the note above says "reference"
    rng = np.random.default_rng(0)  # jitter only: fixed, so the figure is reproducible
    own = ax is None  # a figure of our own: its height and y label fit the tick labels and a caption
    with paper_style(size) as st:
        if ax is None:
            w, h = st["figsize"]
            longest = max((len(t) for t in ticks), default=0)
            if st["size"] == "one-column":  # upright tick labels below the axes: room for the longest
                h = 2.3 + 0.052 * longest
            _, ax = plt.subplots(figsize=(w, max(h, 2.8)))
        for i, lab in enumerate(order):
            y = frame.loc[frame["estimator"] == lab, "ratio"].to_numpy()
            x = i + rng.uniform(-0.18, 0.18, size=y.size)
            ax.scatter(x, y, s=5, color=colors[lab], alpha=0.6, lw=0)
            ax.plot([i - 0.3, i + 0.3], [med[lab]] * 2, color="k", lw=1.2)
        ax.axhline(1.0, color="k", ls=":", lw=0.8, label="_reference")
        if len(ranked) < len(order):  # the references stand apart from the ranked estimators
            ax.axvline(len(ranked) - 0.5, color=colors[order[-1]], ls="--", lw=0.8, label="_divider")
            for i in range(len(ranked), len(order)):
                ax.annotate(
                    _reference_note(summary, order[i], metric),
                    xy=(i, 0.98),
                    xycoords=ax.get_xaxis_transform(),  # x in data, y in axes fraction: the top
                    ha="center",
                    va="top",
                    fontsize="small",
                    color=colors[order[i]],
                )
        ax.set_yscale("log")
        ax.set_xticks(range(len(order)), ticks)
        narrow = st["size"] == "one-column"
        ax.tick_params(axis="x", rotation=90 if narrow else 35)
        for t, lab in zip(ax.get_xticklabels(), order):
            t.set_horizontalalignment("center" if narrow else "right")
            if is_reference_name(lab):
                t.set_color(colors[lab])
        label_axes(ax, None, ylabel or f"{metric} / {metric} of {reference}")
        if title:
            ax.set_title(title)
        if own:
            _fit_to_axes(ax)
    return ax


def _fit_to_axes(ax: Any) -> None:
    """Grow a figure of our own until its axes, laid out below a caption, are :data:`AXES_MIN` tall,
    and wrap the y label to their height: it is centred on them and would stick out above."""
    fig = ax.figure
    fig.draw_without_rendering()  # lay out: the tick labels below take what they need
    tall = ax.get_position().height * fig.get_figheight() - CAPTION_ROOM
    if tall < AXES_MIN:
        fig.set_figheight(fig.get_figheight() + AXES_MIN - tall)
        tall = AXES_MIN
    text = ax.get_ylabel().replace("\n", " ")
    ax.set_ylabel(_wrapped(text, 0.95 * tall, ax.yaxis.label.get_size()))


def _reference_note(summary: pd.DataFrame, label: str, metric: str) -> str:
    """The note over a reference: "reference", and its median cost per query where ``summary`` has one."""
    if "cost" not in summary.columns:
        return "reference"
    rows = summary[(summary["estimator"] == label) & (summary["metric"] == metric)]
    cost = rows["cost"].to_numpy(dtype=float)
    cost = cost[np.isfinite(cost)]
    return f"reference\ncost {np.median(cost):.0f}\nper query" if cost.size else "reference"
