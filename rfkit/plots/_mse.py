"""MSE against the number of random features, log-log, with MCSE bands and theory lines."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from ..exceptions import InvalidParameterError
from ._axes import one_axes
from ._mcse_bars import mcse_note
from ._names import figure_names
from ._reference import reference_styles
from ._registry import FigureInputs
from ._style import (
    WIDE_LEGEND_MAX,
    dodged,
    label_axes,
    legend_for,
    legend_height,
    log_interval,
    paper_style,
    wide_legend_height,
)

__all__ = ["prepare_mse_vs_features", "plot_mse_vs_features", "at_cost"]

#: the columns that count a map's size: the one on the x axis is the cost, the other follows it
_BUDGETS = ("n_features", "feature_dim")


#: columns of a study's summary / theory table that hold values, not settings: every other column
#: (but ``metric``) is a key of the point, a grid axis or the ``cell`` that stands for them all
_VALUE_COLUMNS = frozenset(
    {
        "estimate",
        "mcse",
        "ci_low",
        "ci_high",
        "n_trials",
        "n_failed",
        "n_nonfinite",
        "n_nan_rows",
        "status",
        "cost",
        "predicted",
        "measured",
        "z",
    }
)


def _keys(frame: pd.DataFrame) -> list[str]:
    """The columns of ``frame`` that say which point a row is (estimator, cell, grid axes)."""
    return [c for c in frame.columns if c != "metric" and c not in _VALUE_COLUMNS]


def prepare_mse_vs_features(
    summary: pd.DataFrame, theory: pd.DataFrame | None = None, metric: str = "mse", x: str = "n_features"
) -> pd.DataFrame:
    """The frame drawn by :func:`plot_mse_vs_features`.

    One row per summary row of ``metric``. Columns: ``estimator``, then every other grid axis
    whose value varies among those rows (e.g. ``dim``; each value is a series of its own), ``x``,
    ``estimate``, ``lower``, ``upper`` (the ±2 MCSE interval of the log, :func:`log_interval`,
    drawn on log axes), ``predicted`` (the closed form; NaN without theory) and, where ``x`` is
    ``feature_dim`` and the summary has ``n_features`` too, ``directions`` (the number of random
    directions m behind the D columns: one map's D is m, another's 2m; never a series of its own).

    Theory is joined on every key column the two tables share (the estimator, the cell and each
    grid axis), so a point only ever meets the prediction for its own setting; it needs the
    ``estimator`` column and ``x`` or ``cell``. A ``theory`` with more than one prediction for a
    point raises :class:`~rfkit.exceptions.InvalidParameterError` (a ``ValueError``).

    Parameters
    ----------
    summary : pandas.DataFrame
        A study summary (``StudyResult.summary()``): one row per (cell, estimator, metric).
    theory : pandas.DataFrame, optional
        The theory comparison (``StudyResult.compare_theory()``); None: no predictions.
    metric : str, default="mse"
        The metric drawn.
    x : str, default="n_features"
        The column on the x axis.

    Returns
    -------
    pandas.DataFrame
        The frame, as described above.
    """
    s = summary[summary["metric"] == metric]
    if s.empty:
        raise ValueError(f"summary has no rows for metric {metric!r}")
    if x not in s.columns:
        raise ValueError(f"summary has no column {x!r} to put on the x axis")
    keys = _keys(s)
    skip = {"cell", "estimator", x, *(_BUDGETS if x in _BUDGETS else ())}  # the other count follows x
    axes = [c for c in keys if c not in skip and s[c].nunique(dropna=False) > 1]
    lower, upper = log_interval(s["estimate"], s["mcse"])
    frame = pd.DataFrame(
        {
            "estimator": s["estimator"].to_numpy(),
            **{a: s[a].to_numpy() for a in axes},
            "x": s[x].to_numpy(),
            "estimate": s["estimate"].to_numpy(),
            "lower": lower,
            "upper": upper,
            "predicted": np.nan,
        }
    )
    if x == "feature_dim" and "n_features" in s.columns:
        frame["directions"] = s["n_features"].to_numpy()
    if theory is not None and not theory.empty:
        on = [c for c in keys if c in theory.columns]
        if "estimator" not in on or not {x, "cell"} & set(on):
            raise InvalidParameterError(
                f"theory must have the columns 'estimator' and {x!r} (or 'cell') to pair its predictions "
                f"with the summary's points; got columns {list(theory.columns)}"
            )
        t = theory[theory["metric"] == metric]
        if t.duplicated(on).any():
            raise InvalidParameterError(
                f"theory must hold at most one prediction per point (key columns {on}); "
                f"got {int(t.duplicated(on).sum())} repeated rows for metric {metric!r}"
            )
        pred = s[on].merge(t[[*on, "predicted"]], on=on, how="left", validate="many_to_one")
        frame["predicted"] = pred["predicted"].to_numpy(dtype=float)
    return frame.sort_values(["estimator", *axes, "x"], kind="stable").reset_index(drop=True)


_FRAME_VALUES = ("estimator", "x", "estimate", "lower", "upper", "predicted", "directions")


def _per_direction(frame: pd.DataFrame, series: pd.Series) -> dict[str, str]:
    """``{series: ", D = 2m"}`` for the series whose columns D are a fixed multiple (not 1) of their
    random directions m (the sin/cos maps): said in the legend, where the x axis is D."""
    if "directions" not in frame.columns:
        return {}
    out = {}
    for lab, g in frame.assign(series=series).groupby("series", sort=False):
        ratio = (g["x"].to_numpy(dtype=float) / g["directions"].to_numpy(dtype=float)).round(6)
        if np.unique(ratio).size == 1 and ratio[0] != 1 and np.isfinite(ratio[0]):
            out[str(lab)] = f", D = {ratio[0]:g}m"
    return out


def at_cost(inputs: FigureInputs) -> FigureInputs:
    """``inputs`` with each map's feature columns ``feature_dim`` (its cost per query) beside its
    directions ``n_features`` in the summary and theory, from the saved ``pairs`` table.

    The sin/cos maps (Trig, Hyperbolic) have 2m columns for m random directions, the positive
    maps m: a figure against m compares them at unequal cost, one against D at equal cost.
    Unchanged where the summary has ``feature_dim`` already, or the pairs table has no
    ``feature_dim`` for every point.

    Parameters
    ----------
    inputs : FigureInputs
        The design and the saved tables (display names shown).

    Returns
    -------
    FigureInputs
        The same inputs, the summary and theory with a ``feature_dim`` column where it is known.
    """
    pairs = inputs.table("pairs")
    need = {"cell", "estimator", "feature_dim"}
    if "feature_dim" in inputs.summary.columns or pairs is None or not need <= set(pairs.columns):
        return inputs
    names = dict(zip(inputs.design.labels, figure_names(inputs.design.estimators)))
    cols = pairs[["cell", "estimator", "feature_dim"]].drop_duplicates(["cell", "estimator"])
    cols = cols.assign(estimator=cols["estimator"].map(lambda lab: names.get(lab, lab)))

    def joined(frame: pd.DataFrame) -> pd.DataFrame | None:
        if frame is None or frame.empty or not {"cell", "estimator"} <= set(frame.columns):
            return frame
        out = frame.merge(cols, on=["cell", "estimator"], how="left", validate="many_to_one")
        return None if out["feature_dim"].isna().any() else out.set_axis(frame.index)

    summary, theory = joined(inputs.summary), joined(inputs.theory)
    if summary is None or theory is None:
        return inputs
    return dataclasses.replace(inputs, summary=summary, theory=theory)


def _series(frame: pd.DataFrame) -> pd.Series:
    """A label per row: the estimator, with the values of the other grid axes where the frame has any."""
    axes = [c for c in frame.columns if c not in _FRAME_VALUES]
    labels = frame["estimator"].astype(str)
    if not axes:
        return labels
    setting = frame[axes].astype(str).apply(lambda r: ", ".join(f"{a}={v}" for a, v in zip(axes, r)), axis=1)
    return labels + " (" + setting + ")"


def plot_mse_vs_features(
    summary: pd.DataFrame,
    theory: pd.DataFrame | None = None,
    *,
    metric: str = "mse",
    x: str = "n_features",
    ax: Any = None,
    title: str | None = None,
    size: str | None = None,
) -> Any:
    """Log-log plot of a metric against the feature count: points with ±2 MCSE bars, theory lines.

    Each estimator has its own colour, marker and line style (:func:`series_styles`); its
    closed form, where it has one, is a line in that style, and its simulated points are
    markers shifted slightly sideways (by at most a tenth of an octave) so that estimators
    with equal values do not hide each other. Where another grid axis varies among the rows
    (e.g. ``dim``), each (estimator, value) is a series of its own, labelled
    ``"positive (dim=4)"``, with its own theory line: settings are never pooled into one line
    (:func:`prepare_mse_vs_features`). Against ``x="feature_dim"`` (the cost: feature columns
    per query) a series whose D is a multiple of its random directions says so in the legend
    (``"Trig (ORF), D = 2m"``); ``x="n_features"`` draws against the directions m instead.

    Parameters
    ----------
    summary : DataFrame
        ``StudyResult.summary()``.
    theory : DataFrame, optional
        ``StudyResult.compare_theory()`` (predicted values drawn as lines).
    metric : str, default="mse"
        The metric drawn.
    x : str, default="n_features"
        The column on the x axis.
    ax : matplotlib.axes.Axes, optional
        The axes to draw on; None: a new figure.
    title : str, optional
        The axes title.
    size : {"one-column", "two-column"}, optional
        Figure width (default: :func:`set_paper_size`'s choice).

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on (``ax`` where it is given).

    Raises
    ------
    InvalidParameterError
        For ``ax`` that is not a matplotlib Axes, or a ``theory`` that cannot be paired with
        the summary (:func:`prepare_mse_vs_features`).
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    ax = one_axes(ax, "plot_mse_vs_features")
    frame = prepare_mse_vs_features(summary, theory, metric=metric, x=x)
    frame = frame.assign(series=_series(frame))  # the estimator, and the other axes' values where they vary
    order = [lab for lab in dict.fromkeys(summary["estimator"]) if lab in set(frame["estimator"])]
    labels = [ser for lab in order for ser in dict.fromkeys(frame.loc[frame["estimator"] == lab, "series"])]
    with paper_style(size) as st:
        if ax is None:
            w, h = st["figsize"]
            if st["size"] == "one-column":  # the legend goes below: room for it
                h = 2.5 + legend_height(labels, title_lines=3)
            elif len(labels) > WIDE_LEGEND_MAX:  # many series: the legend goes below, in columns
                h = 2.6 + wide_legend_height(labels, title_lines=3)
            _, ax = plt.subplots(figsize=(w, h))
        styles = reference_styles(labels)  # a reference: grey, open markers
        per_direction = _per_direction(frame, frame["series"])
        handles = []
        for i, lab in enumerate(labels):  # in the study's order, then by the other axes' values
            g = frame[frame["series"] == lab]
            sty = styles[lab]
            yerr = np.vstack([g["estimate"] - g["lower"], g["upper"] - g["estimate"]])
            ax.errorbar(
                dodged(g["x"], i, len(labels), log=True),  # side by side: equal values stay visible
                g["estimate"],
                yerr=yerr,
                fmt=sty["marker"],
                color=sty["color"],
                markerfacecolor=sty["markerfacecolor"],
                label=lab,
                capsize=1.5,
                ms=3,
                elinewidth=0.8,
            )
            has_theory = bool(g["predicted"].notna().any())
            if has_theory:
                ax.plot(g["x"], g["predicted"], sty["linestyle"], color=sty["color"], alpha=0.8, lw=1)
            handles.append(
                Line2D(
                    [],
                    [],
                    color=sty["color"],
                    marker=sty["marker"],
                    markerfacecolor=sty["markerfacecolor"],
                    ms=3,
                    linestyle=sty["linestyle"] if has_theory else "None",  # type: ignore[arg-type]
                    label=lab + per_direction.get(lab, ""),
                )
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ylabel = {
            "mse": "MSE of the kernel estimate",
            "rel_mse": "relative MSE  E[(K̂-K)²]/K²",
            "median_rel_sq_err": "E[median over pairs of (K̂-K)²/K²]",
        }.get(metric, metric)
        xlabel = {
            "n_features": "number of random directions m",
            "feature_dim": "feature columns D per query (the cost)",
        }.get(x, x)
        # theory lines far beyond the simulated points (heavy tails) must not squash them: clip
        lo, hi = float(np.nanmin(frame["lower"])), float(np.nanmax(frame["upper"]))
        if np.isfinite(lo) and np.isfinite(hi) and lo > 0:
            pred = frame["predicted"].to_numpy(dtype=float)
            if np.any(pred[np.isfinite(pred)] > 100 * hi) or np.any(pred[np.isfinite(pred)] < lo / 100):
                ax.set_ylim(lo / 10, hi * 10)
        label_axes(ax, xlabel, ylabel)
        if title:
            ax.set_title(title)
        any_theory = bool(frame["predicted"].notna().any())
        legend_for(
            ax.figure,
            ax,
            handles,
            [h.get_label() for h in handles],
            title="markers: simulation; "
            + mcse_note(ax)  # says where a bar hides behind its marker
            + ("\nlines: closed-form theory" if any_theory else "")  # at most 3 lines, as the height allows
            + (" (none: no closed form)" if any_theory and not frame["predicted"].notna().all() else ""),
            axes_legend=True,
        )
    return ax
