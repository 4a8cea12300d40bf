"""Shared fixtures. Seeds are large literals (SciPy style) so tests are reproducible."""

from __future__ import annotations

import contextlib
import sys
import types

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(2442101192988600726)


@pytest.fixture(params=[np.float32, np.float64], ids=["float32", "float64"])
def float_dtype(request: pytest.FixtureRequest) -> type:
    return request.param


def layout_problems(fig, dpi: float = 200) -> list[str]:
    """Legends drawn over plotting areas in ``fig``'s (saved) layout, as messages (empty: none).

    A figure legend must not meet any panel (its box, ticks, labels and title: the tight box);
    an axes legend must not meet the box of another panel. rfkit never places a legend inside a
    panel, so either is a layout fault (a legend the layout did not make room for). Extents are
    taken at ``dpi``, that of the saved files and of their layout (text extents do not scale
    exactly with the resolution).
    """
    with _saved_resolution(fig, dpi) as renderer:
        return _legend_overlaps(fig, renderer)


def legend_gap(fig, dpi: float = 200) -> float:
    """Pixels at ``dpi`` from the top of ``fig``'s figure legends down to the lowest panel's tight
    box (negative: they overlap)."""
    with _saved_resolution(fig, dpi) as renderer:
        top = max(leg.get_window_extent(renderer).y1 for leg in fig.legends)
        return min(ax.get_tightbbox(renderer).y0 for ax in fig.get_axes()) - top


@contextlib.contextmanager
def _saved_resolution(fig, dpi: float):
    """An Agg renderer of ``fig`` at ``dpi``; the figure's dpi and canvas are put back after."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    old_dpi, old_canvas = fig.get_dpi(), fig.canvas
    fig.set_dpi(dpi)
    try:
        yield FigureCanvasAgg(fig).get_renderer()
    finally:
        fig.set_dpi(old_dpi)
        fig.set_canvas(old_canvas)


def _legend_overlaps(fig, renderer) -> list[str]:
    panels = [ax for ax in fig.get_axes() if ax.get_visible()]
    problems = []

    def meets(a, b) -> bool:  # more than a pixel of overlap
        return min(a.x1, b.x1) - max(a.x0, b.x0) > 1 and min(a.y1, b.y1) - max(a.y0, b.y0) > 1

    for leg in fig.legends:
        box = leg.get_window_extent(renderer)
        for ax in panels:
            if meets(box, ax.get_tightbbox(renderer)):
                problems.append(f"a figure legend meets the panel {ax.get_title()!r}")
    for ax in panels:
        leg = ax.get_legend()
        if leg is None or not leg.get_visible():
            continue
        box = leg.get_window_extent(renderer)
        for other in panels:
            if meets(box, other.get_window_extent(renderer)):
                problems.append(f"the legend of panel {ax.get_title()!r} meets panel {other.get_title()!r}")
    return problems


@pytest.fixture
def figure_layout():
    """The layout checks of saved figures: ``problems(fig)`` (:func:`layout_problems`) and
    ``legend_gap(fig)`` (:func:`legend_gap`), measured at the saved files' 200 dpi."""
    return types.SimpleNamespace(problems=layout_problems, legend_gap=legend_gap)


@pytest.fixture
def checked_figures(monkeypatch):
    """Checks every figure a report saves in this process (``layout_problems``): the names of the
    figures saved and the problems found, as ``{"saved": [...], "problems": [...]}``."""
    import rfkit.report._markdown as markdown
    import rfkit.report._parallel_figures as parallel

    found: dict[str, list[str]] = {"saved": [], "problems": []}
    save = parallel.save_figure
    # the figures are drawn here, where the check sees them, not in worker processes (which
    # `rfkit run` uses by default); the workers draw the same files (tests/unit/test_fixed_cost.py)
    monkeypatch.setattr(markdown, "MIN_PARALLEL", sys.maxsize)

    def checked(fig, path):
        out = save(fig, path)
        found["saved"].append(out[0].stem)
        found["problems"] += [f"{out[0].stem}: {p}" for p in layout_problems(fig)]
        return out

    monkeypatch.setattr(parallel, "save_figure", checked)
    return found
