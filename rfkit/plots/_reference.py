"""Reference series in figures: drawn apart (grey, dashed, open markers), never as a competitor.

A series is a reference when its name ends with :data:`~rfkit.plots._names.REFERENCE_MARK`
(:func:`~rfkit.plots._names.figure_names` gives that name to a study's reference entries, e.g.
Hybrid with the ``"oracle"`` scorer, which pays for every key's logit). The competitors keep the
colours, line styles and markers :func:`series_styles` gives them without the references.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from ._names import REFERENCE_MARK
from ._style import series_styles

__all__ = ["is_reference_name", "reference_styles", "references_at_cost", "REFERENCE_COLOR"]

#: the colour of reference series (a mid grey: apart from the palette of the competitors)
REFERENCE_COLOR = "0.45"
_REFERENCE_MARKERS = ["o", "s", "^", "D"]


def is_reference_name(label: Any) -> bool:
    """Whether a series name marks a reference (it ends with ``" (reference)"``)."""
    return str(label).endswith(REFERENCE_MARK)


def reference_styles(labels: Iterable[Any]) -> dict[Any, dict[str, Any]]:
    """:func:`series_styles` of the competitors among ``labels``, and a reference style for the others.

    A reference is grey, dashed, with open (white-filled) markers; each style has the keys
    ``color``, ``linestyle``, ``marker`` and ``markerfacecolor`` (None: the line's colour).

    Parameters
    ----------
    labels : iterable
        The series names of one figure, in order.

    Returns
    -------
    dict
        ``{label: {"color", "linestyle", "marker", "markerfacecolor"}}``.
    """
    labels = list(dict.fromkeys(labels))
    competitors = [lab for lab in labels if not is_reference_name(lab)]
    styles: dict[Any, dict[str, Any]] = {
        lab: {**sty, "markerfacecolor": None} for lab, sty in series_styles(competitors).items()
    }
    refs = [lab for lab in labels if is_reference_name(lab)]
    for i, lab in enumerate(refs):
        styles[lab] = {
            "color": REFERENCE_COLOR,
            "linestyle": "--",
            "marker": _REFERENCE_MARKERS[i % len(_REFERENCE_MARKERS)],
            "markerfacecolor": "white",
        }
    return {lab: styles[lab] for lab in labels}


def references_at_cost(frame: pd.DataFrame, x: str, cost: str = "cost") -> tuple[pd.DataFrame, bool]:
    """``frame`` with the budget ``x`` of each reference row replaced by its measured cost per query.

    A reference (:func:`is_reference_name`: Hybrid with the ``"oracle"`` scorer) is listed at a
    budget it does not keep (it pays every visible key's logit on top); where its row has a finite
    ``cost`` (the summary's cost per query), it is drawn there instead. The other rows are unchanged.

    Parameters
    ----------
    frame : pandas.DataFrame
        Rows with ``estimator`` (display names) and ``x``, optionally ``cost``.
    x : str
        The column of the budget on the x axis.
    cost : str, default="cost"
        The column of the measured cost per query.

    Returns
    -------
    tuple of (pandas.DataFrame, bool)
        The rows (a copy where any moved) and whether any reference moved.
    """
    if cost not in frame.columns or x not in frame.columns:
        return frame, False
    c = frame[cost].to_numpy(dtype=float)
    moved = np.isfinite(c) & np.array([is_reference_name(e) for e in frame["estimator"]], dtype=bool)
    if not moved.any():
        return frame, False
    out = frame.copy()
    out[x] = np.where(moved, c, out[x].to_numpy(dtype=float))
    return out, True
