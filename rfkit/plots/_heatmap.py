"""Heatmaps: a metric over (layer, head) per estimator; exact vs estimated attention matrices."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ._axes import panel_axes
from ._style import paper_style

__all__ = ["prepare_head_heatmap", "plot_head_heatmap", "plot_attention_matrices"]


def prepare_head_heatmap(
    summary: pd.DataFrame, metric: str = "mse", rows: str = "layer", cols: str = "head"
) -> dict[str, pd.DataFrame]:
    """One (rows x cols) table of ``metric`` per estimator: the matrices drawn.

    Parameters
    ----------
    summary : pandas.DataFrame
        A study summary (``StudyResult.summary()``): one row per (cell, estimator, metric).
    metric : str, default="mse"
        The metric.
    rows, cols : str, default="layer", "head"
        The columns whose values are the tables' rows and columns.

    Returns
    -------
    dict of str to pandas.DataFrame
        One table per estimator.
    """
    s = summary[summary["metric"] == metric]
    if s.empty:
        raise ValueError(f"summary has no rows for metric {metric!r}")
    return {
        lab: g.pivot_table(index=rows, columns=cols, values="estimate", aggfunc="first")
        for lab, g in s.groupby("estimator", sort=False)
    }


def plot_head_heatmap(
    summary: pd.DataFrame,
    metric: str = "mse",
    *,
    estimators: Sequence[str] | None = None,
    rows: str = "layer",
    cols: str = "head",
    colorbar_label: str | None = None,
    ax: Any = None,
    size: str | None = None,
) -> Any:
    """Draw log10 of ``metric`` per (layer, head), one panel per estimator, on a shared colour scale.

    Axis labels and tick labels appear on the outer panels only (the bottom panel of each column,
    the first of each row); ``colorbar_label`` defaults to ``"log10 <metric>"``.
    Panels wrap into rows of up to 5 (3 on a one-column figure); ``size`` is ``"one-column"`` or
    ``"two-column"`` (default: :func:`set_paper_size`).

    Parameters
    ----------
    summary : pandas.DataFrame
        A study summary (``StudyResult.summary()``): one row per (cell, estimator, metric).
    metric : str, default="mse"
        The metric drawn (its log10).
    estimators : sequence of str, optional
        The estimators, in panel order; None: all.
    rows, cols : str, default="layer", "head"
        The columns whose values are the heatmap's rows and columns.
    colorbar_label : str, optional
        The colour bar's label; None: ``"log10 <metric>"``.
    ax : sequence of matplotlib.axes.Axes, optional
        The axes to draw on, one per estimator in panel order (every one gets its tick labels and
        axis labels; the colour bar takes room from them); None: a new figure.
    size : {"one-column", "two-column"}, optional
        The figure width; None: the one :func:`set_paper_size` chose.

    Returns
    -------
    ndarray of matplotlib.axes.Axes
        The panels' Axes, 1-D, one per estimator in panel order (the given ones where ``ax`` is
        given).

    Raises
    ------
    InvalidParameterError
        For ``ax`` that is not one Axes per estimator.
    """
    import matplotlib.pyplot as plt

    mats = prepare_head_heatmap(summary, metric, rows, cols)
    labels = list(mats) if estimators is None else list(estimators)
    logs = {lab: np.log10(mats[lab].to_numpy(dtype=float)) for lab in labels}
    finite = np.concatenate([v[np.isfinite(v)] for v in logs.values()])
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    given = None if ax is None else panel_axes(ax, len(labels), "plot_head_heatmap")
    with paper_style(size) as st:
        if given is None:
            ncol = min(3 if st["size"] == "one-column" else 4, len(labels))
            nrow = -(-len(labels) // ncol)
            shape = next(iter(mats.values())).shape if mats else (1, 1)
            panel_w = (st["width"] - 0.6) / ncol
            panel_h = min(panel_w * shape[0] / max(shape[1], 1), panel_w) + 0.5
            fig, axes = plt.subplots(nrow, ncol, figsize=(st["width"], panel_h * nrow + 0.4), squeeze=False)
        else:  # the given panels may lie anywhere: each has its own tick and axis labels
            fig, axes = given[0].figure, given
            ncol = nrow = 1
            panel_w = given[0].get_position().width * fig.get_figwidth()
        im = None
        for i, (ax, lab) in enumerate(zip(axes.ravel(), labels)):
            m = mats[lab]
            im = ax.imshow(logs[lab], vmin=vmin, vmax=vmax, cmap="viridis", aspect="auto")
            chars = max(10, int(0.85 * panel_w * 72 / (0.62 * ax.title.get_size())))
            ax.set_title("\n".join(textwrap.wrap(str(lab), chars)))
            ax.set_xticks(range(m.shape[1]), [str(c) for c in m.columns])
            ax.set_yticks(range(m.shape[0]), [str(r) for r in m.index])
            bottom = (
                given is not None or i // ncol == nrow - 1 or i + ncol >= len(labels)
            )  # bottom of its column
            if bottom:
                ax.set_xlabel(cols)
            else:  # every panel has the same axes: tick labels on the outer panels only
                ax.tick_params(labelbottom=False)
            if given is not None or i % ncol == 0:
                ax.set_ylabel(rows)
            else:
                ax.tick_params(labelleft=False)
        for ax in axes.ravel()[len(labels) :]:
            ax.set_visible(False)
        if im is not None:
            fig.colorbar(im, ax=axes.ravel().tolist(), label=colorbar_label or f"log10 {metric}", shrink=0.8)
    return axes.ravel()[: len(labels)]


def plot_attention_matrices(exact: np.ndarray, estimates: dict[str, np.ndarray], *, ax: Any = None) -> Any:
    """Exact attention probabilities next to estimated ones (rows: queries, columns: keys).

    ``exact`` and each estimate are (n, n) matrices computed beforehand (e.g. with
    ``rk.attention.softmax(Q, K, np.eye(n))`` and an estimator called on the same ``V``).

    Parameters
    ----------
    exact : ndarray of shape (n, n)
        The exact attention probabilities.
    estimates : dict of str to ndarray of shape (n, n)
        The estimated ones, by label.
    ax : sequence of matplotlib.axes.Axes, optional
        The axes to draw on, one per matrix, the exact one first (``1 + len(estimates)``); None: a
        new figure.

    Returns
    -------
    ndarray of matplotlib.axes.Axes
        One Axes per matrix, 1-D, the exact one first (the given ones where ``ax`` is given).

    Raises
    ------
    InvalidParameterError
        For ``ax`` that is not one Axes per matrix.
    """
    import matplotlib.pyplot as plt

    panels = {"exact": np.asarray(exact), **{k: np.asarray(v) for k, v in estimates.items()}}
    vmax = float(np.nanmax(panels["exact"]))
    given = None if ax is None else panel_axes(ax, len(panels), "plot_attention_matrices")
    with paper_style() as st:
        if given is None:
            w = st["width"]
            fig, axes = plt.subplots(1, len(panels), figsize=(w, w / len(panels) + 0.5), squeeze=False)
        else:
            fig, axes = given[0].figure, given.reshape(1, len(panels))
        im = None
        for ax, (lab, mat) in zip(axes[0], panels.items()):
            im = ax.imshow(mat, vmin=0.0, vmax=vmax, cmap="magma")
            ax.set_title(lab)
            ax.set_xlabel("key")
        axes[0][0].set_ylabel("query")
        if im is not None:
            fig.colorbar(im, ax=axes[0].tolist(), label="attention probability", shrink=0.8)
    return axes[0]
