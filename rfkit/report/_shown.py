"""What the console, the report and the notebook display show of a study's estimators and figures.

One name per estimator everywhere a person reads it: the estimator's display name
(:func:`rfkit.plots.display_names`, ``"Trig (ORF)"``), as the figures' legends show it, in the
console's lines, the report's Markdown tables and the notebook display. The study's label
(``"trig-orthogonal"``) stays the estimator's key in the files meant for programs
(``summary.parquet``, ``summary.csv``, the CSV and LaTeX tables) and in code
(``result.summary()``, ``reference = ...``); the report and the notebook display list each
label beside its display name once.

A figure's caption is the line drawn above it (its fixed settings); its alt text says what it
shows, from its axes' labels (``"MSE of the kernel estimate against number of random
directions m"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from ..plots._names import display_names

__all__ = ["estimator_names", "shown_estimators", "figure_caption", "figure_alt", "smallest_font"]


def estimator_names(design: Any) -> dict[str, str]:
    """The display name of each of a design's estimators, by study label."""
    return dict(zip(design.labels, display_names(design.estimators)))


def shown_estimators(frame: pd.DataFrame, names: Mapping[str, str] | None) -> pd.DataFrame:
    """``frame`` with its ``estimator`` values (and label columns) shown by display name.

    A column named by a study label (a table with one column per estimator) is renamed too;
    ``names`` None leaves the frame as it is.
    """
    if not names:
        return frame
    out = frame
    if "estimator" in frame.columns:
        out = out.assign(estimator=[names.get(str(v), v) for v in frame["estimator"]])
    renamed = {c: names[c] for c in frame.columns if isinstance(c, str) and c in names}
    return out.rename(columns=renamed) if renamed else out


def figure_caption(fig: Any) -> str:
    """The caption line drawn above a figure (:func:`rfkit.plots.add_caption`), as one line."""
    return " ".join(str(fig.get_suptitle()).split())


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def figure_alt(fig: Any, name: str) -> str:
    """What a figure shows, in words for its alt text: its y axis against its x axis, and its panels.

    Falls back to the figure's name where its axes have no labels.
    """
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    ys = [_one_line(ax.get_ylabel()) for ax in axes if ax.get_ylabel()]
    xs = [_one_line(ax.get_xlabel()) for ax in axes if ax.get_xlabel()]
    if not ys and not xs:
        return f"figure {name}"
    text = ys[0] if ys else name.replace("_", " ")
    if xs:
        text += f" against {xs[0]}"
    if len(axes) > 1:
        text += f", {len(axes)} panels"
    return text


def smallest_font(fig: Any) -> float:
    """The smallest font size (points) of the text a figure draws (visible, non-empty text only)."""
    from matplotlib.text import Text  # lazy: matplotlib is an optional dependency

    sizes: list[float] = []

    def walk(artist: Any) -> None:
        if not artist.get_visible():
            return
        if isinstance(artist, Text) and artist.get_text().strip():
            sizes.append(float(artist.get_fontsize()))
        for child in artist.get_children():
            walk(child)

    walk(fig)
    return min(sizes) if sizes else 10.0
