"""What a legend says about the ±2 MCSE bars: drawn with caps, and said to hide behind a marker where they do.

With many trials the ±2 MCSE interval of a point is often shorter than its marker (3 pt), so no
bar shows and a reader cannot tell a precise point from one drawn without its error. Where some
bar of an axes is shorter than :data:`HIDDEN_SLACK` times its marker at the size the axes has
when the figure is drawn (before its layout moves the legend outside, which only shrinks the
axes a little), the legend says that such bars are hidden by their markers: the statement holds
for every figure it is written on, and a figure without it shows every bar.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BARS", "HIDDEN", "HIDDEN_SLACK", "bars_hidden", "mcse_note"]

#: a bar shorter than this many marker diameters (before layout) counts as hidden
HIDDEN_SLACK = 1.5
#: the legend's words for the bars
BARS = "bars: ±2 MCSE"
#: the legend's words where some bar is hidden
HIDDEN = "(a bar shorter than its marker is hidden by it)"


def bars_hidden(axes: Any) -> bool:
    """Whether some error bar of ``axes`` (one Axes or several) may hide behind its marker.

    A vertical bar is measured by its height, a horizontal one (``xerr``) by its width.

    Parameters
    ----------
    axes : matplotlib.axes.Axes or iterable of Axes
        The axes drawn on (their error bars are :class:`~matplotlib.container.ErrorbarContainer`).

    Returns
    -------
    bool
        True where some bar is shorter than :data:`HIDDEN_SLACK` times its marker's size.
    """
    from matplotlib.axes import Axes  # lazy: matplotlib is an optional dependency
    from matplotlib.container import ErrorbarContainer

    for ax in [axes] if isinstance(axes, Axes) else list(axes):
        _ = (ax.get_xlim(), ax.get_ylim())  # the view limits of the data drawn: transData is up to date
        to_px = ax.figure.dpi / 72.0
        for c in ax.containers:
            if not isinstance(c, ErrorbarContainer) or not (c.has_xerr or c.has_yerr) or not ax.get_visible():
                continue
            data_line, _caps, bars = c.lines
            marker = (data_line.get_markersize() if data_line is not None else 3.0) * to_px
            for coll in bars:
                for seg in coll.get_segments():
                    if len(seg) < 2:
                        continue
                    pts = ax.transData.transform(seg)
                    length = max(abs(pts[-1][0] - pts[0][0]), abs(pts[-1][1] - pts[0][1]))  # along the bar
                    if length < HIDDEN_SLACK * marker:
                        return True
    return False


def mcse_note(axes: Any) -> str:
    """The legend's line about the bars: :data:`BARS`, and :data:`HIDDEN` where :func:`bars_hidden`.

    Parameters
    ----------
    axes : matplotlib.axes.Axes or iterable of Axes
        The axes drawn on.

    Returns
    -------
    str
        ``"bars: ±2 MCSE"``, with a second line where some bar may hide behind its marker.
    """
    return BARS + ("\n" + HIDDEN if bars_hidden(axes) else "")
