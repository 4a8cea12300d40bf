"""Figures of a drop-in study: damage against budget, damage per replaced layer, proxy against damage.

Each plot takes the study's saved tables (the summary, the per-layer ``pairs`` table, the proxy
points of :func:`rfkit.study.summaries.dropin_points`) and draws them; the ``prepare_*``
functions return the exact frames drawn. Cosine similarities are drawn as the damage
``1 - cosine`` (log axes need a quantity that goes to zero when nothing changed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ._axes import panel_axes
from ._lines import plot_metric_lines
from ._mcse_bars import mcse_note
from ._reference import reference_styles, references_at_cost
from ._style import (
    WIDE_LEGEND_MAX,
    label_axes,
    legend_below,
    legend_for,
    legend_height,
    log_interval,
    paper_style,
    wide_legend_height,
)
from ._ticks import plain_number_ticks

__all__ = [
    "DAMAGE_LABELS",
    "prepare_damage_vs_budget",
    "plot_damage_vs_budget",
    "prepare_layer_damage",
    "plot_layer_damage",
    "prepare_proxy_vs_damage",
    "plot_proxy_vs_damage",
]

#: axis labels of the drop-in measures, as damage (larger = worse)
DAMAGE_LABELS = {
    "kl": "next-token KL(exact ‖ approx), nats",
    "top1_agree": "top-1 agreement",
    "ppl_ratio": "perplexity / exact perplexity",
    "emb_cos": "1 − cosine of sentence embeddings",
    "hidden_cos": "1 − cosine of last hidden states",
    "dec_head_mse": "per-head output MSE (decoder)",
    "enc_head_mse": "per-head output MSE (encoder)",
    "head_mse": "per-head output MSE",
}


def _as_damage(values: Any, metric: str) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    return 1.0 - v if metric.endswith("_cos") else v


def prepare_damage_vs_budget(summary: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The summary rows of ``metric`` with ``estimate`` as damage (``1 - cosine`` for the cosines).

    A reference's rows (a name ending with ``" (reference)"``: Hybrid with the oracle scorer) with a
    measured ``cost`` per query have it as their ``feature_dim``: drawn at what they pay, not at
    the budget they are listed at (:func:`~rfkit.plots._reference.references_at_cost`).

    Parameters
    ----------
    summary : pandas.DataFrame
        A study summary (``StudyResult.summary()``): one row per (cell, estimator, metric).
    metric : str
        The damage metric.

    Returns
    -------
    pandas.DataFrame
        The summary rows of ``metric``.
    """
    s = summary[summary["metric"] == metric].copy()
    if s.empty:
        raise ValueError(f"summary has no rows for metric {metric!r}")
    s["estimate"] = _as_damage(s["estimate"], metric)
    return references_at_cost(s, "feature_dim")[0]


def plot_damage_vs_budget(
    summary: pd.DataFrame,
    metric: str,
    *,
    col: str | None = "n_tokens",
    ax: Any = None,
    size: str | None = None,
) -> Any:
    """Damage against the cost per query (``feature_dim``), one line per estimator, a panel per context.

    Log-log axes with ±2 MCSE bars (over draws; the legend says where a bar is shorter than its
    marker and hidden by it), tick labels as plain numbers (``0.1``, ``1``,
    ``6``, ``32``). On a new figure the legend is below the panels, in as many columns as fit the
    figure's width, so it never makes the figure wider than its panels. A reference (a name
    ending with ``" (reference)"``, e.g. Hybrid with the oracle scorer, which computes every key's
    logit on top of its budget) is drawn grey and dashed with open markers, at its measured cost
    per query where the summary has one (its ``cost`` column; the x axis label says so): it is
    not a competitor at that budget. Returns the panels' Axes.

    Parameters
    ----------
    summary : pandas.DataFrame
        A study summary (``StudyResult.summary()``): one row per (cell, estimator, metric).
    metric : str
        The damage metric drawn.
    col : str or None, default="n_tokens"
        The column whose values are the panels (the context length); None: one panel.
    ax : sequence of matplotlib.axes.Axes, optional
        The axes to draw on, one per panel in panel order (a single Axes for one panel); None: a
        new figure.
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
    frame = prepare_damage_vs_budget(summary, metric)
    moved = references_at_cost(summary[summary["metric"] == metric], "feature_dim")[1]
    col = col if col is not None and col in frame.columns and frame[col].nunique() > 1 else None
    if ax is not None:
        ax = panel_axes(ax, 1 if col is None else frame[col].nunique(dropna=False), "plot_damage_vs_budget")
    axes = plot_metric_lines(
        frame,
        metric,
        "feature_dim",
        col=col,
        logx=True,
        logy=metric != "top1_agree",
        xlabel="D per query (reference: its measured cost)" if moved else "D per query",
        ylabel=DAMAGE_LABELS.get(metric, metric),
        col_title="{} tokens" if col == "n_tokens" else None,
        ax=ax,
        size=size,
    )
    for panel in axes:
        plain_number_ticks(panel)
    if ax is None:  # our own figure: the legend below the panels, within the figure's width
        _legend_below(axes[0].figure, axes)
    return axes


def _legend_below(fig: Any, axes: Any) -> None:
    """Move the legend of ``fig`` below its panels, in the most columns (up to 3) whose width fits
    the figure's, the figure taller by the legend's rows."""
    old = list(fig.legends) + [a.get_legend() for a in axes if a.get_legend() is not None]
    if not old:
        return
    handles, labels = [], []
    for panel in axes:  # every series once, in order, from whichever panel has it
        for h, lab in zip(*panel.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    title = next((t for t in (leg.get_title().get_text() for leg in old) if t), None)  # the bars' line
    for leg in old:
        leg.remove()
    legend_below(fig, handles, labels, title)


def prepare_layer_damage(pairs: pd.DataFrame, column: str) -> pd.DataFrame:
    """Return the rows drawn per (model, estimator, layer): ``damage``, ``lower``, ``upper`` (±2 MCSE, log scale).

    ``column`` is a per-layer column of the drop-in ``pairs`` table (``kl``, ``emb_cos``,
    ``head_mse``, ...); rows where it was not measured (NaN) are left out.

    Parameters
    ----------
    pairs : pandas.DataFrame
        The drop-in study's ``pairs`` table.
    column : str
        A per-layer column of it.

    Returns
    -------
    pandas.DataFrame
        The rows, as described above.
    """
    if column not in pairs.columns:
        raise ValueError(f"pairs has no column {column!r}")
    p = pairs[np.isfinite(pairs[column].to_numpy(dtype=float))]
    dmg = _as_damage(p[column], column)
    lo, hi = log_interval(dmg, p[f"{column}_mcse"].fillna(0.0).to_numpy(dtype=float))
    return pd.DataFrame(
        {
            "model": p["model"].to_numpy(),
            "estimator": p["estimator"].to_numpy(),
            "layer": p["layer"].to_numpy(dtype=int),
            "damage": dmg,
            "lower": lo,
            "upper": hi,
        }
    )


def plot_layer_damage(
    pairs: pd.DataFrame,
    panels: list[tuple[str, str]],
    *,
    ax: Any = None,
    size: str | None = None,
    titles: Mapping[str, str] | None = None,
) -> Any:
    """Damage per layer, one panel per ``(model, column)``, with ±2 MCSE bars.

    The legend says where a bar is shorter than its marker and hidden by it.

    Parameters
    ----------
    pairs : pandas.DataFrame
        The drop-in study's ``pairs`` table.
    panels : list of tuple of (str, str)
        The ``(model, column)`` of each panel.
    ax : sequence of matplotlib.axes.Axes, optional
        The axes to draw on, one per panel drawn (a ``(model, column)`` with measured rows), in
        order; None: a new figure.
    size : {"one-column", "two-column"}, optional
        The figure width; None: the one :func:`set_paper_size` chose.
    titles : mapping of str to str, optional
        Panel titles by model (the ``model`` column), e.g. a model a data source brought by its
        name; the built-in models are ``"SmolLM2 (decoder)"`` and ``"MiniLM (encoder)"``, any
        other model is its key.

    Returns
    -------
    ndarray of matplotlib.axes.Axes
        The panels' Axes, 1-D, in panel order (the given ones where ``ax`` is given).

    Raises
    ------
    InvalidParameterError
        For ``ax`` that is not one Axes per panel.
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    frames = [(m, c, prepare_layer_damage(pairs[pairs["model"] == m], c)) for m, c in panels]
    frames = [(m, c, f) for m, c, f in frames if not f.empty]
    labels = list(dict.fromkeys(pairs["estimator"]))
    styles = reference_styles(labels)  # a reference: grey, open markers
    names = {"smollm2": "SmolLM2 (decoder)", "minilm": "MiniLM (encoder)", **(titles or {})}
    given = None if ax is None else panel_axes(ax, len(frames), "plot_layer_damage")
    with paper_style(size) as st:
        ncol = min(2, max(1, len(frames)))
        if given is None:
            nrow = -(-len(frames) // ncol)
            fig, axes = plt.subplots(nrow, ncol, figsize=(st["width"], 2.0 * nrow + 0.6), squeeze=False)
            flat = axes.ravel()
            owner = flat[min(ncol, len(frames)) - 1]
        else:
            flat, fig, owner = given, given[0].figure, given[-1]
        for ax, (model, column, f) in zip(flat, frames):
            for lab, g in f.groupby("estimator", sort=False):
                sty = styles[lab]
                ax.errorbar(
                    g["layer"],
                    g["damage"],
                    yerr=np.vstack([g["damage"] - g["lower"], g["upper"] - g["damage"]]),
                    color=sty["color"],
                    linestyle=sty["linestyle"],
                    marker=sty["marker"],
                    markerfacecolor=sty["markerfacecolor"],
                    ms=2.5,
                    capsize=1.2,
                    elinewidth=0.7,
                    label=lab,
                )
            ax.set_yscale("log")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # layers are whole numbers
            ax.set_title(names.get(model, model))
            label_axes(ax, "layer", DAMAGE_LABELS.get(column, column))
        for ax in flat[len(frames) :]:
            ax.set_visible(False)
        handles, hl = flat[0].get_legend_handles_labels()
        note = mcse_note(flat[: len(frames)])  # hidden bars said
        legend_for(fig, owner, handles, hl, title=note)
        narrow = fig.get_figwidth() < 5
        if given is None and (narrow or len(hl) > WIDE_LEGEND_MAX):  # a legend below: taller by it
            lines = note.count("\n") + 1
            extra = legend_height(hl, lines) if narrow else wide_legend_height(hl, lines, fig.get_figwidth())
            fig.set_figheight(fig.get_figheight() + extra)
    return flat[: len(frames)]


def prepare_proxy_vs_damage(points: pd.DataFrame, titles: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The proxy points (:func:`rfkit.study.summaries.dropin_points`) with a ``panel`` name each.

    Parameters
    ----------
    points : pandas.DataFrame
        The proxy points (:func:`rfkit.study.summaries.dropin_points`).
    titles : mapping of str to str, optional
        The first line of a panel's name by model (the ``model`` column); the built-in models are
        ``"SmolLM2, KL"`` and ``"MiniLM, 1 − cos"``, any other model is its key.

    Returns
    -------
    pandas.DataFrame
        A copy of ``points`` with a ``panel`` column.
    """
    setting = [c for c in points.columns if c not in _POINT_COLUMNS]
    names = {"smollm2": "SmolLM2, KL", "minilm": "MiniLM, 1 − cos", **(titles or {})}
    out = points.copy()
    out["panel"] = [
        "\n".join(
            [names.get(r["model"], r["model"])]
            + [f"{r[c]} tokens" if c == "n_tokens" else f"{c} = {r[c]}" for c in setting]
        )
        for _, r in points.iterrows()
    ]
    return out


_POINT_COLUMNS = {
    "model",
    "estimator",
    "feature_dim",
    "proxy",
    "proxy_mcse",
    "damage",
    "damage_mcse",
    "n_trials",
}


def plot_proxy_vs_damage(
    points: pd.DataFrame,
    correlation: pd.DataFrame | None = None,
    *,
    ax: Any = None,
    size: str | None = None,
    titles: Mapping[str, str] | None = None,
) -> Any:
    """End-to-end damage against the per-head output MSE, one point per (estimator, budget).

    Each point has ±2 MCSE bars in both directions; the legend says where a bar is shorter than
    its marker and hidden by it.

    Parameters
    ----------
    points : pandas.DataFrame
        The proxy points (:func:`rfkit.study.summaries.dropin_points`).
    correlation : pandas.DataFrame, optional
        The rank correlations (:func:`rfkit.study.summaries.proxy_correlation`) quoted in the titles.
    ax : sequence of matplotlib.axes.Axes, optional
        The axes to draw on, one per panel (model and setting) in panel order; None: a new figure.
    size : {"one-column", "two-column"}, optional
        The figure width; None: the one :func:`set_paper_size` chose.
    titles : mapping of str to str, optional
        The first line of a panel's title by model (:func:`prepare_proxy_vs_damage`).

    Returns
    -------
    ndarray of matplotlib.axes.Axes
        The panels' Axes, 1-D, in panel order (the given ones where ``ax`` is given).

    Raises
    ------
    InvalidParameterError
        For ``ax`` that is not one Axes per panel.
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, NullFormatter

    frame = prepare_proxy_vs_damage(points, titles)
    panels = list(dict.fromkeys(frame["panel"]))
    labels = list(dict.fromkeys(frame["estimator"]))
    styles = reference_styles(labels)  # a reference: grey, open markers
    setting = [c for c in points.columns if c not in _POINT_COLUMNS]
    given = None if ax is None else panel_axes(ax, len(panels), "plot_proxy_vs_damage")
    with paper_style(size) as st:
        narrow = st["size"] == "one-column"
        if given is None:
            ncol = min(2, len(panels))
            nrow = -(-len(panels) // ncol)
            legend_h = 0.13 * (len(labels) if narrow else -(-len(labels) // 2)) + 0.15
            fig, axes = plt.subplots(
                nrow, ncol, figsize=(st["width"], 2.3 * nrow + 0.6 + legend_h), squeeze=False
            )
            flat = axes.ravel()
        else:
            flat, fig = given, given[0].figure
        for ax, name in zip(flat, panels):
            g0 = frame[frame["panel"] == name]
            for lab, g in g0.groupby("estimator", sort=False):
                sty = styles[lab]
                ax.errorbar(
                    g["proxy"],
                    g["damage"],
                    xerr=2 * g["proxy_mcse"].fillna(0.0),
                    yerr=2 * g["damage_mcse"].fillna(0.0),
                    color=sty["color"],
                    marker=sty["marker"],
                    markerfacecolor=sty["markerfacecolor"],
                    linestyle="none",
                    ms=3,
                    capsize=1.2,
                    elinewidth=0.6,
                    label=lab,
                )
            ax.set_xscale("log")
            ax.set_yscale("log")
            for axis in (ax.xaxis, ax.yaxis):  # labels at 1, 2, 5 x 10^k: some in any range, never crowded
                axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                axis.set_minor_formatter(NullFormatter())
            title = name
            if correlation is not None and not correlation.empty:
                first = g0.iloc[0]
                c = correlation[correlation["model"] == first["model"]]
                for col in setting:
                    c = c[c[col] == first[col]]
                if len(c):
                    r = c.iloc[0]
                    title += (
                        f"\nρ = {r['rho']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]\np = {r['p_value']:.2g}"
                        if np.isfinite(r["rho"])
                        else f"\nρ: n/a ({int(r['n_points'])} points)"
                    )
            ax.set_title(title)
            label_axes(ax, "per-head MSE", "damage")
        for ax in flat[len(panels) :]:
            ax.set_visible(False)
        handles, hl = flat[0].get_legend_handles_labels()
        # below the panels, whatever the width: the panels keep the whole width for their axes
        note = mcse_note(flat[: len(panels)])  # hidden bars said
        if given is None:  # our own figure: taller by the note's lines
            fig.set_figheight(fig.get_figheight() + 0.13 * (note.count("\n") + 1))
        fig.legend(
            handles,
            hl,
            loc="outside lower center",
            ncol=1 if narrow else 2,
            frameon=False,
            title=note,
            title_fontsize=plt.rcParams["legend.fontsize"],
        )
    return flat[: len(panels)]
