"""The ratio figure keeps its y label beside its axes and everything on the canvas.

Its estimator names stand below the axes (slanted on a two-column figure, upright on a
one-column one) and a caption stands above it, so the axes can be much shorter than the figure:
the y label is wrapped to the axes' height, and the figure grows so that its axes keep a
readable height, however long the names.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import rfkit.plots as rkp  # noqa: E402
from rfkit.plots._style import add_caption  # noqa: E402

#: a caption of two lines at the two-column size (three at the one-column size), as a report draws
CAPTION = (
    "real-attention (quick profile): MiniLM / SmolLM2 attention heads, texts = long, 1 texts, "
    "encoder, bidirectional attention, D = 32, 512 tokens per text, 2 trials per cell"
)


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _summary(names: list[str], reference: str) -> pd.DataFrame:
    """MSE of ``reference`` and ``names`` on four cells, the last name a reference series with a cost."""
    rows = []
    for cell in range(4):
        for i, name in enumerate([reference, *names]):
            rows.append(
                {"cell": cell, "estimator": name, "metric": "mse", "estimate": 0.5 + 0.3 * i, "cost": 64.0}
            )
    return pd.DataFrame(rows)


NAMES = [
    "Hybrid (plain, w = 8, sinks = 4)",
    "Hybrid (w = 4, sinks = 4, Quest top-k, no rest)",
    "Hybrid (w = 4, sinks = 4, uniform rest)",
    "Hybrid (w = 4, sinks = 4, Quest top-k, uniform rest)",
    "Hybrid (w = 4, sinks = 4, proxy top-k, no rest)",
    "Hybrid (w = 4, sinks = 4, proxy top-k, IS rest)",
    "Hybrid (w = 4, sinks = 4, oracle top-k, no rest) (reference)",
]


@pytest.mark.parametrize("size", ["two-column", "one-column"])
@pytest.mark.parametrize(
    "reference", ["RFA, PRF (ORF)", "RFA, positive random features (orthogonal, redrawn per head)"]
)
def test_ratio_figure_keeps_its_y_label_beside_its_axes(size, reference):
    """With long names below and a caption above: the y label is no taller than the axes (it is
    centred on them), the axes at least 1.2 in tall, and nothing leaves the canvas."""
    ax = rkp.plot_ratio_to_reference(_summary(NAMES, reference), reference, size=size)
    fig = ax.figure
    add_caption(fig, CAPTION)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = ax.get_window_extent(renderer)
    label = ax.yaxis.label.get_window_extent(renderer)
    assert box.height / fig.dpi >= 1.2, box.height / fig.dpi
    assert label.height <= box.height + 1, (ax.get_ylabel(), label.height / fig.dpi, box.height / fig.dpi)
    tight = fig.get_tightbbox(renderer)
    w, h = fig.get_size_inches()
    assert tight.x0 >= -0.02 and tight.y0 >= -0.02 and tight.x1 <= w + 0.02 and tight.y1 <= h + 0.02, (
        tight,
        (w, h),
    )
