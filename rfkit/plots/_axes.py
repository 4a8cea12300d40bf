"""The ``ax=`` argument of every plot: checked, and the rule for what a plot returns.

A single-panel plot takes one matplotlib Axes and returns it; a multi-panel plot takes a sequence
(or array, of any shape) of Axes, one per panel in panel order, and returns them as a 1-D array.
Without ``ax`` a plot makes its own figure and returns the same: its Axes, or the 1-D array of its
panels' Axes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exceptions import InvalidParameterError

__all__ = ["one_axes", "panel_axes", "figure_axes"]


def _shown(value: Any) -> str:
    return f"{type(value).__name__} {value!r:.80}"


def one_axes(ax: Any, func: str) -> Any:
    """``ax`` checked to be one matplotlib Axes (None stays None: the plot makes a figure).

    Parameters
    ----------
    ax : matplotlib.axes.Axes or None
        The ``ax`` argument of a single-panel plot.
    func : str
        The plot's name, for the message.

    Returns
    -------
    matplotlib.axes.Axes or None
        ``ax``.

    Raises
    ------
    InvalidParameterError
        For anything but an Axes or None.
    """
    from matplotlib.axes import Axes

    if ax is None or isinstance(ax, Axes):
        return ax
    raise InvalidParameterError(
        f"The `ax` parameter of {func} must be one matplotlib Axes (the figure has one panel) or None. "
        f"Got {_shown(ax)} instead."
    )


def panel_axes(ax: Any, n: int, func: str) -> np.ndarray:
    """``ax`` as a 1-D array of exactly ``n`` matplotlib Axes, one per panel.

    Parameters
    ----------
    ax : matplotlib.axes.Axes or sequence of Axes
        The ``ax`` argument of a multi-panel plot (a sequence, or an array of any shape, read in
        row-major order; one Axes is accepted where there is one panel).
    n : int
        The number of panels drawn.
    func : str
        The plot's name, for the message.

    Returns
    -------
    ndarray of matplotlib.axes.Axes
        The Axes, one per panel.

    Raises
    ------
    InvalidParameterError
        For a number of Axes other than ``n``, or an element that is not an Axes.
    """
    from matplotlib.axes import Axes

    if isinstance(ax, Axes):
        flat = np.empty(1, dtype=object)
        flat[0] = ax
    else:
        try:
            items = list(np.asarray(ax, dtype=object).ravel()) if not isinstance(ax, (str, bytes)) else None
        except (TypeError, ValueError):
            items = None
        if items is None or np.ndim(ax) == 0:
            raise InvalidParameterError(
                f"The `ax` parameter of {func} must be a sequence of {n} matplotlib Axes (one per panel) "
                f"or None. Got {_shown(ax)} instead."
            )
        flat = np.empty(len(items), dtype=object)
        flat[:] = items
    bad = [a for a in flat if not isinstance(a, Axes)]
    if bad:
        raise InvalidParameterError(
            f"The `ax` parameter of {func} must hold matplotlib Axes only, one per panel. "
            f"Got {_shown(bad[0])} among them."
        )
    if len(flat) != n:
        raise InvalidParameterError(
            f"The `ax` parameter of {func} must hold {n} Axes (one per panel, in panel order) for this "
            f"figure; got {len(flat)}."
        )
    return flat


def first_in_row(axes: np.ndarray) -> list[Any]:
    """The Axes of ``axes`` that begin a row of their grid (all of them share one y label there)."""
    firsts = []
    for a in axes:
        spec = a.get_subplotspec()
        if spec is None or spec.is_first_col():
            firsts.append(a)
    return firsts or [axes[0]]


def sharey_panels(
    given: Any, nrow: int, ncol: int, n_panels: int, figsize: tuple[float, float]
) -> tuple[Any, Any, list[Any], Any]:
    """``(flat Axes, Figure, the first Axes of each row, the Axes that owns the legend)`` of a figure
    of ``n_panels`` panels sharing their y axis: a new ``nrow`` x ``ncol`` grid of size ``figsize``
    where ``given`` is None, else the panels given (:func:`panel_axes`)."""
    if given is not None:
        return given, given[0].figure, first_in_row(given), given[-1]
    import matplotlib.pyplot as plt  # lazy: pyplot only when a figure is made

    fig, axes = plt.subplots(nrow, ncol, figsize=figsize, squeeze=False, sharey=True)
    flat = axes.ravel()
    owner = axes[0][ncol - 1] if ncol <= n_panels else flat[n_panels - 1]
    return flat, fig, [axes[r][0] for r in range(nrow)], owner


def figure_axes(fig: Any) -> Any:
    """What a figure shows, by the plots' rule: its one panel's Axes, or the 1-D array of its panels'.

    The panels are the figure's visible Axes that are not colour bars.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        A figure.

    Returns
    -------
    matplotlib.axes.Axes or ndarray of matplotlib.axes.Axes
        Its panels' Axes.
    """
    panels = [a for a in fig.axes if a.get_visible() and a.get_label() != "<colorbar>"]
    if len(panels) == 1:
        return panels[0]
    out = np.empty(len(panels), dtype=object)
    out[:] = panels
    return out
