"""MSE against the number of random features, log-log, with MCSE bands and theory lines."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ._style import dodged, estimator_colors, estimator_markers, log_interval, paper_style

__all__ = ["prepare_mse_vs_features", "plot_mse_vs_features"]


def prepare_mse_vs_features(
    summary: pd.DataFrame, theory: pd.DataFrame | None = None, metric: str = "mse", x: str = "n_features"
) -> pd.DataFrame:
    """The frame drawn by :func:`plot_mse_vs_features`.

    Columns: ``estimator``, ``x``, ``estimate``, ``lower``, ``upper`` (the ±2 MCSE interval of
    the log, :func:`log_interval`, drawn on log axes) and ``predicted`` (the closed form; NaN
    without theory).
    """
    s = summary[summary["metric"] == metric]
    if s.empty:
        raise ValueError(f"summary has no rows for metric {metric!r}")
    if x not in s.columns:
        raise ValueError(f"summary has no column {x!r} to put on the x axis")
    frame = pd.DataFrame(
        {
            "estimator": s["estimator"].to_numpy(),
            "x": s[x].to_numpy(),
            "estimate": s["estimate"].to_numpy(),
            "lower": log_interval(s["estimate"], s["mcse"])[0],
            "upper": log_interval(s["estimate"], s["mcse"])[1],
        }
    )
    frame["predicted"] = np.nan
    if theory is not None and not theory.empty:
        t = theory[theory["metric"] == metric][["estimator", x, "predicted"]].rename(columns={x: "x"})
        frame = frame.drop(columns="predicted").merge(t, on=["estimator", "x"], how="left")
    return frame.sort_values(["estimator", "x"], kind="stable").reset_index(drop=True)


def plot_mse_vs_features(
    summary: pd.DataFrame,
    theory: pd.DataFrame | None = None,
    *,
    metric: str = "mse",
    x: str = "n_features",
    ax: Any = None,
    title: str | None = None,
) -> Any:
    """Log-log plot of a metric against the feature count: points with +-2 MCSE bars, theory lines.

    Each estimator has its own colour and marker; points are shifted slightly sideways (by at
    most a tenth of an octave) so that estimators with equal values do not hide each other.

    Parameters
    ----------
    summary : DataFrame
        ``StudyResult.summary()``.
    theory : DataFrame, optional
        ``StudyResult.compare_theory()`` (predicted values drawn as dashed lines).
    metric : str, default="mse"
    x : str, default="n_features"
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
    """
    import matplotlib.pyplot as plt

    frame = prepare_mse_vs_features(summary, theory, metric=metric, x=x)
    with paper_style() as st:
        if ax is None:
            _, ax = plt.subplots(figsize=st["figsize"])
        labels = list(frame["estimator"].unique())
        colors, markers = estimator_colors(labels), estimator_markers(labels)
        for i, (lab, g) in enumerate(frame.groupby("estimator", sort=False)):
            ls = "--" if lab.endswith("orthogonal") or "orth" in lab else "-"
            yerr = np.vstack([g["estimate"] - g["lower"], g["upper"] - g["estimate"]])
            ax.errorbar(
                dodged(g["x"], i, len(labels), log=True),  # side by side: equal values stay visible
                g["estimate"],
                yerr=yerr,
                fmt=markers[lab],
                color=colors[lab],
                label=lab,
                capsize=1.5,
                ms=3,
            )
            if g["predicted"].notna().any():
                ax.plot(g["x"], g["predicted"], ls, color=colors[lab], alpha=0.7, lw=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(
            {
                "n_features": "number of random directions m",
                "feature_dim": "feature columns D (equal cost)",
            }.get(x, x)
        )
        ylabel = {
            "mse": "MSE of the kernel estimate",
            "rel_mse": "relative MSE  E[(K̂-K)²]/K²",
            "median_rel_sq_err": "E[median over pairs of (K̂-K)²/K²]",
        }.get(metric, metric)
        # theory lines far beyond the simulated points (heavy tails) must not squash them: clip
        lo, hi = float(np.nanmin(frame["lower"])), float(np.nanmax(frame["upper"]))
        if np.isfinite(lo) and np.isfinite(hi) and lo > 0:
            pred = frame["predicted"].to_numpy(dtype=float)
            if np.any(pred[np.isfinite(pred)] > 100 * hi) or np.any(pred[np.isfinite(pred)] < lo / 100):
                ax.set_ylim(lo / 10, hi * 10)
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        ax.legend(
            frameon=False,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            title="points: simulation, ±2 MCSE (log scale),\nshifted sideways to stay visible\n"
            "lines: closed-form theory (dashed: orthogonal)",
            title_fontsize=6,
        )
    return ax
