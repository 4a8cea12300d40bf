"""A result in a notebook: its figures by name (:meth:`StudyResult.plot`) and its HTML display."""

from __future__ import annotations

import base64
import html
import inspect
import io
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..exceptions import InvalidParameterError
from ..plots._axes import figure_axes
from ..plots._registry import did_you_mean, figure_records
from ..study import resolve_figure_kind
from ..tables import format_mcse
from ._figures import Plan, figure_plan
from ._markdown import provenance_line
from ._shown import estimator_names, figure_alt, figure_caption, shown_estimators, smallest_font
from ._verdict import theory_verdict

if TYPE_CHECKING:
    from ..study import StudyResult

__all__ = ["applies", "figure_names", "plot_result", "result_html"]


def _plan(result: StudyResult, kind: str, summary: pd.DataFrame, theory: pd.DataFrame) -> Plan:
    """The figures of one kind for a result, as ``(name, draw)`` pairs (none drawn)."""
    extra = {
        "pairs": result.pairs,
        "timings": result.timings,
        "data_stats": result.data_stats,
        "trials": result.trials,
    }
    return figure_plan(kind, result.design, summary, theory, extra.get)


def _declared(result: StudyResult) -> list[str]:
    """The registered figure kinds a result's study declares, in its order (old names as the new)."""
    registered = [r.name for r in figure_records()]
    kinds = [resolve_figure_kind(k) for k in result.design.outputs.get("figures", [])]
    return [k for k in dict.fromkeys(kinds) if k in registered]


def _kinds(result: StudyResult) -> list[str]:
    """The figure kinds of a result: those its study declares, then the others, in drawing order."""
    declared = _declared(result)
    return declared + [r.name for r in figure_records() if r.name not in declared]


def applies(result: StudyResult, kind: str) -> bool:
    """Whether a figure kind draws at least one figure for a result (its grid axes, kind and saved tables)."""
    return bool(_plan(result, kind, result.summary(), result.compare_theory()))


def figure_names(result: StudyResult) -> list[str]:
    """The names of the figures a result draws: each kind's name, then its figures' (file stems).

    Those of the kinds its study declares come first, then those of any other kind that applies.
    A kind is listed by its own name (the one its study declares), followed by the file stems of
    the figures it draws when they differ (a kind drawing one figure per metric or per setting);
    every name is one :func:`plot_result` accepts, and every file stem one
    :func:`~rfkit.report.study_figures` draws.

    Parameters
    ----------
    result : StudyResult
        A study result.

    Returns
    -------
    list of str
        The figure names.
    """
    summary, theory = result.summary(), result.compare_theory()
    names: list[str] = []
    for kind in _kinds(result):
        stems = [name for name, _ in _plan(result, kind, summary, theory)]
        if stems:
            names += [kind, *stems] if kind not in stems else stems
    return list(dict.fromkeys(names))


def plot_result(
    result: StudyResult, name: str | None = None, size: str | None = None, *, ax: Any = None
) -> Any:
    """One figure of a result by kind or saved name; see :meth:`rfkit.study.StudyResult.plot`.

    ``size`` is ``"one-column"`` or ``"two-column"`` (default: :func:`rfkit.plots.set_paper_size`'s choice).

    Parameters
    ----------
    result : StudyResult
        A study result.
    name : str, optional
        A figure kind or saved figure name; None: the first figure of the study.
    size : {"one-column", "two-column"}, optional
        The figure width; None: :func:`rfkit.plots.set_paper_size`'s choice.
    ax : matplotlib.axes.Axes or sequence of Axes, optional
        The axes to draw into: one Axes for a figure of one panel, one per panel (in panel order)
        for a figure of several; the figure is the caller's and gets no caption line. None: a new,
        captioned, paper-sized figure.

    Returns
    -------
    matplotlib.axes.Axes or ndarray of matplotlib.axes.Axes
        What was drawn on: the Axes of a figure of one panel, the 1-D array of the panels' Axes
        of a figure of several (the given ones where ``ax`` is given); ``.figure`` is the Figure.

    Raises
    ------
    InvalidParameterError
        For a name that is not a figure of this result, ``ax`` that is not one Axes per panel,
        or ``ax`` given for a figure whose record draws whole figures only (``draw(size)``).
    """
    draw, shown = _figure_draw(result, name)
    if ax is None:
        return figure_axes(draw(size))
    if not _takes_ax(draw):
        raise InvalidParameterError(
            f"The `ax` parameter of StudyResult.plot cannot be used for the figure {shown!r}: its record's "
            "`figures` function draws whole figures (its draw(size) takes no `ax`). Got "
            f"{type(ax).__name__} {ax!r:.60}; call plot({shown!r}) without `ax`."
        )
    from matplotlib.axes import Axes

    draw(size, ax=ax)
    if isinstance(ax, Axes):
        return ax
    return np.asarray(ax, dtype=object).ravel()


def _takes_ax(draw: Callable[..., Any]) -> bool:
    """Whether a figure's ``draw`` takes the keyword ``ax`` (rfkit's own and short-form records do)."""
    try:
        params = inspect.signature(draw).parameters.values()
    except (TypeError, ValueError):  # pragma: no cover - a builtin without a signature
        return False
    return any(p.name == "ax" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _figure_draw(result: StudyResult, name: str | None) -> tuple[Callable[..., Any], str]:
    """The ``draw`` of one figure of a result by kind or saved name (None: the first), and its name."""
    summary, theory = result.summary(), result.compare_theory()
    plans = [(kind, _plan(result, kind, summary, theory)) for kind in _kinds(result)]
    plans = [(kind, plan) for kind, plan in plans if plan]
    if name is None:
        if not plans:
            raise InvalidParameterError(
                f"study {result.design.name!r} has no figure to draw (none of the registered figure "
                f"kinds {[r.name for r in figure_records()]} applies to it)."
            )
        return plans[0][1][0][1], plans[0][1][0][0]
    if isinstance(name, str):
        name = resolve_figure_kind(name)  # an old kind name: warned, drawn under its new one
    for kind, plan in plans:
        for stem, draw in plan:
            if stem == name or kind == name:
                return draw, stem
    names = [stem for _, plan in plans for stem, _ in plan]
    valid = sorted(set(names) | {k for k, _ in plans})
    raise InvalidParameterError(
        f"The `name` parameter of StudyResult.plot must be a figure of study {result.design.name!r}: "
        f"one of {valid}. Got {name!r} instead{did_you_mean(name, valid)}."
    )


def _close(figs: list[Any]) -> None:
    if not figs:
        return
    import matplotlib.pyplot as plt

    for f in figs:
        plt.close(f)


def result_html(result: StudyResult) -> str:
    """Notebook display: the verdict, the design, the provenance line, the summary table and the first figure.

    It leads with the theory-vs-simulation line ``rfkit run`` prints (:func:`theory_verdict`),
    or says that no estimator of the study has a closed form.

    Parameters
    ----------
    result : StudyResult
        A study result.

    Returns
    -------
    str
        The HTML.
    """
    d = result.design
    esc = html.escape
    desc = d.description.strip().split("\n\n")[0].replace("\n", " ")
    names = estimator_names(d)  # the display names the figure, the table and the console show
    ests = []
    for est, label in zip(d.estimators, d.labels):
        what = est.get("map", est.get("estimator"))
        ests.append(f"{esc(names[label])} (<code>{esc(label)}</code>: {esc(str(what))})")
    grid = "; ".join(f"{esc(k)} = {esc(str(v))}" for k, v in d.grid.items())
    data = ", ".join(f"{esc(k)}={esc(str(v))}" for k, v in d.data.items())
    prov = esc(provenance_line(result)).replace("`", "")
    summ = result.summary()
    keys = ["estimator", *result.grid_columns]
    summ = summ.assign(value=[format_mcse(e, m) for e, m in zip(summ["estimate"], summ["mcse"])])
    summ = shown_estimators(summ, names)
    table = summ.pivot_table(index=keys, columns="metric", values="value", aggfunc="first", sort=False)
    table = table[[m for m in d.metrics if m in table.columns]]
    table.columns.name = None
    n_rows = len(table)
    shown = table.head(40).to_html(border=0)
    more = (
        f"<p><small>{n_rows - 40} more rows: <code>result.summary()</code></small></p>" if n_rows > 40 else ""
    )
    failed = int((result.trials["status"] != "ok").sum())
    verdict = theory_verdict(result) or "theory vs simulation: no estimator of this study has a closed form"
    parts = [
        '<div class="rfkit-study-result">',
        f"<p><b>{esc(verdict)}</b></p>",
        f"<h4>rfkit study <code>{esc(d.name)}</code> ({esc(d.kind)}, {d.trials} trials per cell, "
        f"{len(d.cells())} cells)</h4>",
        f"<p>{esc(desc)}</p>" if desc else "",
        f"<p><b>Estimators</b> (display name, study label): {', '.join(ests)}<br><b>Grid</b>: {grid}<br><b>Data</b>: {data}</p>",
        f"<p><small>{prov}" + (f" Failed trials: {failed}." if failed else "") + "</small></p>",
        "<p><b>Summary</b> (estimate ± MCSE; <code>result.summary()</code>):</p>",
        shown,
        more,
        _first_figure_html(result),
        "</div>",
    ]
    return "\n".join(p for p in parts if p)


#: the smallest font a figure shows in the notebook display, in points at display size
MIN_DISPLAY_PT = 8.0
#: PNG pixels per CSS pixel of the notebook display's figure (sharp on high-density screens)
PIXEL_RATIO = 2


def figure_png_html(fig: Any, name: str) -> str:
    """A figure as an inline PNG whose every text is at least :data:`MIN_DISPLAY_PT` points as shown.

    The rule: a figure drawn ``w`` inches wide shows its text at the size it was drawn when it is
    ``96 w`` CSS pixels wide (1 pt = 1/72 in = 4/3 CSS px); it is shown ``scale`` times that
    width, ``scale = max(1, MIN_DISPLAY_PT / smallest font)``, so its smallest text reads as
    ``MIN_DISPLAY_PT`` points. The PNG holds :data:`PIXEL_RATIO` pixels per CSS pixel: it is drawn
    at ``dpi = 96 * scale * PIXEL_RATIO`` and the ``<img>`` is ``PNG width / PIXEL_RATIO`` CSS
    pixels wide (and never shrunk to its container). Below it, its caption; its alt text says
    what it shows. The figure is closed.
    """
    scale = max(1.0, MIN_DISPLAY_PT / smallest_font(fig))
    dpi = 96.0 * scale * PIXEL_RATIO
    cap, alt = figure_caption(fig), figure_alt(fig, name)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    _close([fig])
    png = buf.getvalue()
    width_px = int.from_bytes(png[16:20], "big")  # the IHDR chunk: width, then height
    css = round(width_px / PIXEL_RATIO)
    data = base64.b64encode(png).decode("ascii")
    esc = html.escape
    return (
        f'<figure style="margin:0"><img alt="{esc(alt)}" width="{css}" '
        f'style="width:{css}px;max-width:none;height:auto" src="data:image/png;base64,{data}"/>'
        + (f"<figcaption><small>{esc(cap)}</small></figcaption>" if cap else "")
        + "</figure>"
    )


def _first_figure_html(result: StudyResult) -> str:
    """The study's first figure as an inline PNG (empty when there is none or matplotlib is missing)."""
    summary, theory = result.summary(), result.compare_theory()
    declared = [k for k in _declared(result) if _plan(result, k, summary, theory)]
    if not declared:
        return ""
    try:
        fig = _figure_draw(result, declared[0])[0](None)
    except ImportError:  # pragma: no cover - matplotlib is an optional dependency
        return "<p><small>(install matplotlib to see the figures)</small></p>"
    return (
        figure_png_html(fig, declared[0])
        + f"<p><small><code>result.plot({declared[0]!r})</code>; all figures: "
        "<code>result.figure_names()</code></small></p>"
    )
