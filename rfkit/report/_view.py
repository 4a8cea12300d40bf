"""A result in a notebook: its figures by name (:meth:`StudyResult.plot`) and its HTML display."""

from __future__ import annotations

import base64
import html
import io
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..exceptions import InvalidParameterError
from ..tables import format_mcse
from ._figures import FIGURE_KINDS, Figures, study_figures
from ._markdown import provenance_line

if TYPE_CHECKING:
    from ..study._results import StudyResult

__all__ = ["applies", "figure_names", "plot_result", "result_html"]


def applies(result: StudyResult, kind: str) -> bool:
    """Whether a figure kind fits a result's design (its grid axes, kind and saved tables)."""
    grid = set(result.grid_columns)
    need = {
        "mse_vs_features": "n_features" in grid,
        "kernel_scatter": result.design.kind == "kernel",
        "error_vs_degree": "degree" in grid,
        "mse_vs_samples": "samples" in grid,
        "cost": result.timings is not None,
        "head_heatmap": {"layer", "head"} <= grid,
        "coverage": "p" in grid,
        "boxplots": "dataset" in grid,
    }
    return bool(need.get(kind, False))


def figure_names(result: StudyResult) -> list[str]:
    """Figure kinds a result can draw: those its study declares, then any other that applies."""
    declared = [k for k in result.design.outputs.get("figures", []) if k in FIGURE_KINDS]
    return declared + [k for k in FIGURE_KINDS if k not in declared and applies(result, k)]


def _figures(result: StudyResult, kind: str, summary: pd.DataFrame, theory: pd.DataFrame) -> Figures:
    """The figures of one kind, drawn from the result's tables (none where the kind does not apply)."""
    if not applies(result, kind):
        return []
    extra = {"pairs": result.pairs, "timings": result.timings, "data_stats": result.data_stats}
    return study_figures(kind, result.design, summary, theory, extra.get)


def _close(figs: list[Any]) -> None:
    if not figs:
        return
    import matplotlib.pyplot as plt

    for f in figs:
        plt.close(f)


def plot_result(result: StudyResult, name: str | None = None) -> Any:
    """One figure of a result by kind or saved name; see :meth:`rfkit.study.StudyResult.plot`."""
    names = figure_names(result)
    if name is None:
        if not names:
            raise InvalidParameterError(
                f"study {result.design.name!r} has no figure to draw (its grid fits none of {list(FIGURE_KINDS)})."
            )
        name = names[0]
    kinds = [name] if name in FIGURE_KINDS else names
    summary, theory = result.summary(), result.compare_theory()
    chosen = None
    made: list[Any] = []
    for kind in kinds:
        figs = _figures(result, kind, summary, theory)
        made += [f for _, f in figs]
        for stem, fig in figs:
            if chosen is None and (stem == name or kind == name):
                chosen = fig
        if chosen is not None:
            break
    _close([f for f in made if f is not chosen])
    if chosen is None:
        stems = set()
        for kind in names:  # names of each kind's figures (drawn and closed again), for the message
            figs = _figures(result, kind, summary, theory)
            _close([f for _, f in figs])
            stems |= {stem for stem, _ in figs}
        raise InvalidParameterError(
            f"The `name` parameter of StudyResult.plot must be a figure of study {result.design.name!r}: "
            f"one of {sorted(stems | set(names))}. Got {name!r} instead."
        )
    return chosen


def result_html(result: StudyResult) -> str:
    """Notebook display: the design, the provenance line, the summary table and the first figure."""
    d = result.design
    esc = html.escape
    desc = d.description.strip().split("\n\n")[0].replace("\n", " ")
    ests = []
    for est, label in zip(d.estimators, d.labels):
        what = est.get("map", est.get("estimator"))
        ests.append(f"<code>{esc(label)}</code> ({esc(str(what))})")
    grid = "; ".join(f"{esc(k)} = {esc(str(v))}" for k, v in d.grid.items())
    data = ", ".join(f"{esc(k)}={esc(str(v))}" for k, v in d.data.items())
    prov = esc(provenance_line(result)).replace("`", "")
    summ = result.summary()
    keys = ["estimator", *result.grid_columns]
    summ = summ.assign(value=[format_mcse(e, m) for e, m in zip(summ["estimate"], summ["mcse"])])
    table = summ.pivot_table(index=keys, columns="metric", values="value", aggfunc="first", sort=False)
    table = table[[m for m in d.metrics if m in table.columns]]
    table.columns.name = None
    n_rows = len(table)
    shown = table.head(40).to_html(border=0)
    more = (
        f"<p><small>{n_rows - 40} more rows: <code>result.summary()</code></small></p>" if n_rows > 40 else ""
    )
    failed = int((result.trials["status"] != "ok").sum())
    parts = [
        '<div class="rfkit-study-result">',
        f"<h4>rfkit study <code>{esc(d.name)}</code> ({esc(d.kind)}, {d.trials} trials per cell, "
        f"{len(d.cells())} cells)</h4>",
        f"<p>{esc(desc)}</p>" if desc else "",
        f"<p><b>Estimators</b>: {', '.join(ests)}<br><b>Grid</b>: {grid}<br><b>Data</b>: {data}</p>",
        f"<p><small>{prov}" + (f" Failed trials: {failed}." if failed else "") + "</small></p>",
        "<p><b>Summary</b> (estimate ± MCSE; <code>result.summary()</code>):</p>",
        shown,
        more,
        _first_figure_html(result),
        "</div>",
    ]
    return "\n".join(p for p in parts if p)


def _first_figure_html(result: StudyResult) -> str:
    """The study's first figure as an inline PNG (empty when there is none or matplotlib is missing)."""
    declared = [k for k in result.design.outputs.get("figures", []) if applies(result, k)]
    if not declared:
        return ""
    try:
        fig = plot_result(result, declared[0])
    except ImportError:  # pragma: no cover - matplotlib is an optional dependency
        return "<p><small>(install matplotlib to see the figures)</small></p>"
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    _close([fig])
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return (
        f'<p><img alt="{declared[0]}" src="data:image/png;base64,{data}"/><br><small>'
        f"<code>result.plot({declared[0]!r})</code>; all figures: <code>result.figure_names()</code></small></p>"
    )
