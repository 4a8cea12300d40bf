"""True vs estimated kernel values from one feature draw (as in Blackwelder (2024), Figure 1)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..exceptions import InvalidParameterError
from ._axes import panel_axes
from ._style import paper_style, series_styles

__all__ = ["prepare_kernel_scatter", "plot_kernel_scatter"]


def prepare_kernel_scatter(
    pairs: pd.DataFrame, *, cell: int | None = None, estimators: Sequence[str] | None = None
) -> pd.DataFrame:
    """Return the rows drawn: ``estimator``, ``truth``, ``estimate`` (trial 0's estimate of each pair).

    Parameters
    ----------
    pairs : DataFrame
        ``StudyResult.pairs`` (columns ``cell``, ``estimator``, ``truth``, ``est_trial0``).
    cell : int, optional
        Which cell (default: the first).
    estimators : sequence of str, optional
        Which estimators, in panel order (default: all, design order).

    Returns
    -------
    pandas.DataFrame
        The rows drawn.
    """
    c = int(pairs["cell"].min()) if cell is None else cell
    p = pairs[pairs["cell"] == c]
    if p.empty:
        raise ValueError(f"no pairs for cell {c}")
    labels = list(dict.fromkeys(p["estimator"])) if estimators is None else list(estimators)
    p = p[p["estimator"].isin(labels)]
    out = pd.DataFrame(
        {
            "estimator": p["estimator"].to_numpy(),
            "truth": p["truth"].to_numpy(),
            "estimate": p["est_trial0"].to_numpy(),
        }
    )
    out["estimator"] = pd.Categorical(out["estimator"], categories=labels, ordered=True)
    return out.sort_values("estimator", kind="stable").reset_index(drop=True)


def plot_kernel_scatter(
    pairs: pd.DataFrame,
    *,
    cell: int | None = None,
    estimators: Sequence[str] | None = None,
    ax: Any = None,
    axes: Any = None,
    size: str | None = None,
) -> Any:
    """One panel per estimator: one draw's estimate against the true :math:`\\exp(x^\\top y)`.

    Linear axes with equal limits (the range of the true values and of the central 96% of
    all estimates) and the identity line dashed; points outside the limits are counted in
    the panel title, not hidden silently (the figure of Blackwelder (2024) leaves its outliers out).
    The panels wrap into a near-square grid (rows of up to 4 on a two-column figure, 2 on a
    one-column one).

    Parameters
    ----------
    pairs : pandas.DataFrame
        ``StudyResult.pairs`` (columns ``cell``, ``estimator``, ``truth``, ``est_trial0``).
    cell : int, optional
        Which cell (default: the first).
    estimators : sequence of str, optional
        Which estimators, in panel order (default: all, design order).
    ax : sequence of matplotlib.axes.Axes, optional
        The axes to draw on, one per estimator in panel order; None: a new figure.
    axes : sequence of matplotlib.axes.Axes, optional
        The old name of ``ax``, still accepted.
    size : {"one-column", "two-column"}, optional
        The figure width; None: the one :func:`set_paper_size` chose.

    Returns
    -------
    ndarray of matplotlib.axes.Axes
        One Axes per estimator, 1-D, in panel order (the given ones where ``ax`` is given).

    Raises
    ------
    InvalidParameterError
        For ``ax`` that is not one Axes per estimator, or both ``ax`` and ``axes``.
    """
    import matplotlib.pyplot as plt

    if ax is not None and axes is not None:
        raise InvalidParameterError(
            "The `ax` parameter of plot_kernel_scatter and its old name `axes` cannot both be given. "
            f"Got ax={ax!r:.60} and axes={axes!r:.60}."
        )
    ax = ax if ax is not None else axes
    frame = prepare_kernel_scatter(pairs, cell=cell, estimators=estimators)
    labels = list(frame["estimator"].cat.categories)
    given = None if ax is None else panel_axes(ax, len(labels), "plot_kernel_scatter")
    styles = series_styles(labels)
    est = frame["estimate"].to_numpy(dtype=float)
    est = est[np.isfinite(est)]
    q_lo, q_hi = np.quantile(est, [0.02, 0.98]) if est.size else (np.nan, np.nan)
    lo = float(np.nanmin([np.nanmin(frame["truth"]), q_lo]))
    hi = float(np.nanmax([np.nanmax(frame["truth"]), q_hi]))
    pad = 0.05 * (hi - lo) if hi > lo else 0.1 * abs(hi) + 1e-12
    lim = (lo - pad, hi + pad)
    with paper_style(size) as st:
        if given is None:
            n = max(len(labels), 1)
            most = 2 if st["size"] == "one-column" else 4
            nrow = -(-n // most)
            ncol = -(-n // nrow)  # rows as full as they can be: 5 panels are 3 + 2, not 4 + 1
            side = st["width"] / ncol
            fig, grid = plt.subplots(
                nrow, ncol, figsize=(st["width"], side * nrow + 0.5), squeeze=False, sharex=True, sharey=True
            )
            for ax in grid.ravel()[n:]:
                ax.set_visible(False)
            axes = grid.ravel()[:n]
            for i, ax in enumerate(axes):
                if i % ncol == 0:
                    ax.set_ylabel("estimate (one draw)")
                if i + ncol >= n:  # the lowest panel of its column
                    ax.set_xlabel("true exp(x·y)")
                    ax.xaxis.set_tick_params(labelbottom=True)
        else:
            axes = given
            axes[0].set_ylabel("estimate (one draw)")
            for ax in axes:
                ax.set_xlabel("true exp(x·y)")
        for ax, lab in zip(axes, labels):
            g = frame[frame["estimator"] == lab]
            inside = (g["estimate"] >= lim[0]) & (g["estimate"] <= lim[1])
            ax.scatter(
                g.loc[inside, "truth"],
                g.loc[inside, "estimate"],
                s=4,
                alpha=0.6,
                color=styles[lab]["color"],
                marker=styles[lab]["marker"],
                linewidths=0,
            )
            ax.plot(lim, lim, "k--", lw=0.8)
            ax.set_xlim(lim)
            ax.set_ylim(lim)
            ax.set_aspect("equal", adjustable="box")
            n_out = int((~inside).sum())
            spec = ax.get_subplotspec()
            ncols = spec.get_gridspec().ncols if spec is not None else 1
            chars = max(10, int(0.9 * ax.figure.get_figwidth() / ncols * 72 / 4.4))  # 7 pt, 0.6 em a char
            name = "\n".join(textwrap.wrap(str(lab), chars))
            ax.set_title(name + (f"\n{n_out} of {len(g)} outside" if n_out else ""))
            ax.locator_params(nbins=3)
    return axes
