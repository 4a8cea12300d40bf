"""The figures of a study, drawn from its saved tables with :mod:`rfkit.plots` (nothing is recomputed).

Every figure kind is a record (:class:`rfkit.plots.FigureRecord`) in one registry; rfkit's own
kinds are registered at the end of this module with :func:`rfkit.plots.register_figure`, exactly
as a user's module registers one. A study declares kinds in ``[outputs] figures = [...]``;
:func:`study_figures` draws the figures of one kind as ``(name, matplotlib Figure)`` pairs, the
name being the file stem under ``figures/``, and :func:`figure_plan` lists those names (with a
function drawing each) without drawing anything: both ask the kind's record, never the kind's
name. Different settings of the grid are never pooled into one figure. Every figure has a
caption line naming its fixed settings, and its legends and tick labels show the estimators'
display names (:func:`rfkit.plots.display_names`), not the study's labels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from ..plots import (
    add_caption,
    figure_names,
    legend_for,
    paper_style,
    plot_head_heatmap,
    plot_kernel_scatter,
    plot_metric_boxplot,
    plot_metric_lines,
    plot_mse_vs_cost,
    plot_mse_vs_features,
    plot_ratio_to_reference,
    prepare_mse_vs_cost,
)
from ..plots._axes import one_axes
from ..plots._mcse_bars import mcse_note
from ..plots._mse import at_cost
from ..plots._registry import FigureInputs, FigureRecord, figure_record, figure_records, register_figure
from ..study import FIGURE_KINDS as STUDY_FIGURE_KINDS
from ..study import resolve_figure_kind
from ..study.summaries import facets
from ._captions import caption
from ._dropin import DROPIN_FIGURES, dropin_figure_plan

__all__ = ["FIGURE_KINDS", "Figures", "Plan", "declared_kinds", "figure_plan", "record_plan", "study_figures"]

#: rfkit's own figure kinds, in the order they are drawn: the study layer's names (a design is
#: checked against them when it is built), each registered below as a :class:`FigureRecord`
FIGURE_KINDS = STUDY_FIGURE_KINDS


#: ``(name, matplotlib Figure)`` pairs; the name is the file stem under ``figures/``
Figures = list[tuple[str, Any]]

#: ``(name, draw)`` pairs: ``draw(size)`` draws the figure of that name (``size``: paper size or None)
Plan = list[tuple[str, Callable[[str | None], Any]]]


def declared_kinds(design: Any) -> list[str]:
    """The figure kinds a design declares (old names as the kinds' names now), in drawing order.

    Parameters
    ----------
    design : Design
        A study's design.

    Returns
    -------
    list of str
        The registered kinds among ``[outputs] figures``, in registration order.
    """
    wanted = {resolve_figure_kind(k) for k in design.outputs.get("figures", [])}
    return [r.name for r in figure_records() if r.name in wanted]


def _shown(summary: pd.DataFrame, design: Any) -> pd.DataFrame:
    """``summary`` with the study's labels replaced by the estimators' display names."""
    names = dict(zip(design.labels, figure_names(design.estimators)))  # references marked
    if summary is None or summary.empty or "estimator" not in summary.columns:
        return summary
    return summary.assign(estimator=summary["estimator"].map(lambda lab: names.get(lab, lab)))


def study_figures(
    kind: str,
    design: Any,
    summary: pd.DataFrame,
    theory: pd.DataFrame,
    table: Callable[[str], Any],
    size: str | None = None,
) -> Figures:
    """The figures of one kind, as ``(name, matplotlib Figure)`` pairs (empty where the kind does not apply).

    ``summary`` and ``theory`` are ``StudyResult.summary()`` / ``compare_theory()`` (as saved);
    ``table(name)`` gives another saved table (``"pairs"``, ``"timings"``) or None. Plots read
    these tables only: nothing is recomputed. ``size`` is ``"one-column"`` or ``"two-column"``
    (default: :func:`rfkit.plots.set_paper_size`'s choice).

    Parameters
    ----------
    kind : str
        A registered figure kind (:func:`rfkit.plots.figure_records`; an old name is warned).
    design : Design
        The study's design.
    summary : pandas.DataFrame
        ``StudyResult.summary()`` as saved.
    theory : pandas.DataFrame
        ``StudyResult.compare_theory()`` as saved.
    table : callable
        ``table(name)`` gives another saved table (``"pairs"``, ``"timings"``) or None.
    size : {"one-column", "two-column"}, optional
        The figure width; None: :func:`rfkit.plots.set_paper_size`'s choice.

    Returns
    -------
    list of tuple of (str, matplotlib.figure.Figure)
        The figures by name (empty where the kind does not apply).
    """
    return [(name, draw(size)) for name, draw in figure_plan(kind, design, summary, theory, table)]


def figure_plan(
    kind: str, design: Any, summary: pd.DataFrame, theory: pd.DataFrame, table: Callable[[str], Any]
) -> Plan:
    """The figures :func:`study_figures` draws for one kind, as ``(name, draw)`` pairs, none drawn yet.

    Parameters
    ----------
    kind : str
        A registered figure kind (:func:`rfkit.plots.figure_records`; an old name is warned).
    design : Design
        The study's design.
    summary : pandas.DataFrame
        ``StudyResult.summary()`` as saved.
    theory : pandas.DataFrame
        ``StudyResult.compare_theory()`` as saved.
    table : callable
        ``table(name)`` gives another saved table (``"pairs"``, ``"timings"``) or None.

    Returns
    -------
    list of tuple of (str, callable)
        ``(name, draw)`` pairs; ``draw(size)`` draws the figure and returns it.
    """
    record = figure_record(kind)
    inputs = FigureInputs(design, _shown(summary, design), _shown(theory, design), table)
    return record_plan(record, inputs)


def record_plan(record: FigureRecord, inputs: FigureInputs) -> Plan:
    """The figures of one record for one result, as ``(name, draw)`` pairs, none drawn yet.

    A record's ``figures`` gives them; else one figure named as the record, when it applies to
    the design and ``prepare`` gives a frame with rows: ``draw(frame, ax)`` on a new paper-sized
    figure, captioned with the record's caption (else the study's caption line).

    Parameters
    ----------
    record : FigureRecord
        The figure kind's record.
    inputs : FigureInputs
        The design and the saved tables (display names shown).

    Returns
    -------
    list of tuple of (str, callable)
        ``(name, draw)`` pairs; ``draw(size)`` draws the figure and returns it.
    """
    if not record.applies(inputs.design):
        return []
    if record.figures is not None:
        return record.figures(inputs)
    assert record.prepare is not None and record.draw is not None  # FigureRecord checks it
    frame = record.prepare(inputs)
    if frame is None or len(frame) == 0:
        return []
    draw_frame = record.draw

    def draw(size: str | None, *, ax: Any = None) -> Any:
        import matplotlib.pyplot as plt

        given = one_axes(ax, f"the figure {record.name!r}")
        with paper_style(size) as style:
            if given is not None:  # the caller's axes and figure: drawn into, no caption
                draw_frame(frame, given)
                return given.figure
            fig, ax = plt.subplots(figsize=style["figsize"])
            draw_frame(frame, ax)
            text = record.caption_text(inputs.design, frame)
            add_caption(fig, text if text is not None else caption(inputs.design, frame, record.shown))
        return fig

    return [(record.name, draw)]


def _stem(kind: str, metric: str, *, own: str | None = None, suffix: str = "") -> str:
    """A figure's name: ``kind``, ``_metric`` unless it is the metric named by the kind (``own``), ``suffix``."""
    return kind + ("" if metric == own else f"_{metric}") + suffix


def _captioned(
    fig: Any, design: Any, rows: pd.DataFrame | None, shown: tuple[str, ...], ax: Any = None
) -> Any:
    """``fig`` with the study's caption line; drawn into given axes (``ax``), the figure is the
    caller's and gets no caption."""
    if ax is None:
        add_caption(fig, caption(design, rows, shown))
    return fig


def _groups(frame: pd.DataFrame, axes: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """``(name suffix, rows)`` per combination of values of ``axes`` (one group without axes)."""
    if not axes:
        return [("", frame)]
    out = []
    for key, rows in frame.groupby(axes, sort=False):
        vals = key if isinstance(key, tuple) else (key,)
        out.append(("".join(f"_{a}-{v}" for a, v in zip(axes, vals)), rows))
    return out


def _ratio_figures(design: Any, summary: pd.DataFrame, grid_cols: list[str], reference: str) -> Plan:
    """Per-cell MSE ratio to the reference estimator, one figure per value of the non-head axes."""
    plan: Plan = []
    cell_axes = [c for c in grid_cols if c not in ("layer", "head", "dataset")]
    for suffix, rows in _groups(summary, cell_axes):

        def draw(size: str | None, rows: pd.DataFrame = rows, *, ax: Any = None) -> Any:
            drawn = plot_ratio_to_reference(
                rows,
                reference,
                metric="mse",
                ylabel=f"attention-output MSE\n/ MSE of {reference}",
                ax=ax,
                size=size,
            )
            return _captioned(drawn.figure, design, rows, ("layer", "head", "dataset"), ax)

        plan.append((f"ratio_to_reference{suffix}", draw))
    return plan


def _mse_figures(design: Any, summary: pd.DataFrame, theory: pd.DataFrame, grid_cols: list[str]) -> Plan:
    """MSE against the cost D (else the directions m), a figure per setting of the other varying axes."""
    x = "feature_dim" if "feature_dim" in summary.columns else "n_features"  # at_cost: D where known
    plan: Plan = []
    for suffix, rows in facets(summary, grid_cols):
        th = theory[theory["cell"].isin(rows["cell"])] if not theory.empty else theory
        for metric in ("mse", "rel_mse", "median_rel_sq_err"):
            if rows[rows["metric"] == metric].empty:
                continue

            def draw(
                size: str | None,
                rows: pd.DataFrame = rows,
                th: pd.DataFrame = th,
                metric: str = metric,
                *,
                ax: Any = None,
            ) -> Any:
                drawn = plot_mse_vs_features(
                    rows, th if not th.empty else None, metric=metric, x=x, ax=ax, size=size
                )
                return _captioned(drawn.figure, design, rows, (x,), ax)

            plan.append((_stem("mse_vs_features", metric, own="mse", suffix=suffix), draw))
    return plan


def _scatter_figure(design: Any, pairs: pd.DataFrame, grid_cols: list[str]) -> Plan:
    plan: Plan = []
    for suffix, rows in facets(pairs, grid_cols):

        def draw(size: str | None, rows: pd.DataFrame = rows, *, ax: Any = None) -> Any:
            axes = plot_kernel_scatter(rows, ax=ax, size=size)  # the facet's first cell
            first = rows[rows["cell"] == rows["cell"].min()]
            return _captioned(axes[0].figure, design, first, (), ax)

        plan.append((f"kernel_scatter{suffix}", draw))
    return plan


def _box_figures(design: Any, summary: pd.DataFrame, grid_cols: list[str]) -> Plan:
    plan: Plan = []
    for metric in ("mse", "max_rel_err"):
        if metric not in design.metrics:
            continue
        for suffix, rows in facets(summary, grid_cols):

            def draw(
                size: str | None, rows: pd.DataFrame = rows, metric: str = metric, *, ax: Any = None
            ) -> Any:
                drawn = plot_metric_boxplot(rows, metric, ax=ax, size=size)
                return _captioned(drawn.figure, design, rows, ("dataset",), ax)

            plan.append((_stem("boxplots", metric, suffix=suffix), draw))
    return plan


_YLABELS = {
    "mse": "MSE",
    "max_abs_err": "E[max |Â - A|]",
    "rel_mse": "relative MSE  E[(K̂-K)²/K²]",
    "max_rel_err": "E[max relative error]",
    "mean_rel_err": "mean relative error",
}


_ATTENTION_YLABELS = {
    "mse": "attention-output MSE  E[(Â - A)²]",
    "max_abs_err": "E[max |Â - A|] over queries, dims",
}


#: what the "samples" axis counts for each estimator family (a budget, not always random samples)
_SAMPLES_LABEL = "random samples S (RFA: features m)"


#: panel titles for the facet axes of the built-in studies ("{}" is the value)
_PANEL_TITLES = {"norm": "‖x‖ = ‖y‖ = {}", "n_pairs": "s = {} query/key pairs", "structure": "{} tokens"}


def _lines_figures(
    kind: str,
    design: Any,
    summary: pd.DataFrame,
    x: str,
    col: str | None,
    logx: bool = False,
    only: tuple[str, ...] = ("rel_mse", "max_rel_err"),
    own: str | None = None,
) -> Plan:
    plan: Plan = []
    labels = {**_YLABELS, **(_ATTENTION_YLABELS if design.kind == "attention" else {})}
    for metric in only:
        if metric not in design.metrics:
            continue
        xlabel = {"degree": "degree n", "samples": _SAMPLES_LABEL}.get(x, x)

        def draw(size: str | None, metric: str = metric, xlabel: str = xlabel, *, ax: Any = None) -> Any:
            axes = plot_metric_lines(
                summary,
                metric,
                x,
                col=col,
                logx=logx,
                xlabel=xlabel,
                ylabel=labels.get(metric, metric),
                col_title=_PANEL_TITLES.get(col or ""),
                ax=ax,
                size=size,
            )
            return _captioned(axes[0].figure, design, summary, (x, col or ""), ax)

        plan.append((_stem(kind, metric, own=own), draw))
    return plan


def _cost_figure(design: Any, timings: pd.DataFrame, grid_cols: list[str]) -> Plan:
    col = next((c for c in grid_cols if c != "samples"), None)
    frame = timings.rename(columns={"seconds_median": "estimate"}).assign(metric="seconds", mcse=0.0)

    def draw(size: str | None, *, ax: Any = None) -> Any:
        axes = plot_metric_lines(
            frame,
            "seconds",
            "samples",
            col=col,
            logx=True,
            xlabel=_SAMPLES_LABEL,
            ylabel="median seconds per call",
            col_title=_PANEL_TITLES.get(col or ""),
            ax=ax,
            size=size,
        )
        return _captioned(axes[0].figure, design, frame, ("samples", col or ""), ax)

    return [("cost_vs_samples", draw)]


def _heatmap_figure(design: Any, summary: pd.DataFrame, grid_cols: list[str]) -> Plan:
    """One (layer, head) heatmap per value of the other grid axes (model, budget): never pooled."""
    other = [c for c in grid_cols if c not in ("layer", "head")]
    plan: Plan = []
    for suffix, rows in _groups(summary, other):

        def draw(size: str | None, rows: pd.DataFrame = rows, *, ax: Any = None) -> Any:
            axes = plot_head_heatmap(
                rows, "mse", colorbar_label="log10 attention-output MSE", ax=ax, size=size
            )
            return _captioned(axes[0].figure, design, rows, ("layer", "head"), ax)

        plan.append((f"head_heatmap{suffix}", draw))
    return plan


def _coverage_figures(design: Any, summary: pd.DataFrame, grid_cols: list[str]) -> Plan:
    """Coverage of the chi-squared bound against p (with the diagonal the theorem promises) and its
    tightness (max RMS relative error / bound), at the largest feature count."""
    col = "n_pairs" if "n_pairs" in grid_cols else None
    sub = summary[summary["metric"].isin(["coverage", "rms_over_bound"])]
    if "n_features" in grid_cols:  # one figure per m would repeat; show the largest m
        sub = sub[sub["n_features"] == sub["n_features"].max()]
    plan: Plan = []
    for name, metric, logy, ylabel in (
        ("coverage", "coverage", False, "coverage of the bound"),
        ("coverage_tightness", "rms_over_bound", True, "max RMS relative error / bound"),
    ):

        def draw(
            size: str | None, metric: str = metric, logy: bool = logy, ylabel: str = ylabel, *, ax: Any = None
        ) -> Any:
            axes = plot_metric_lines(
                sub,
                metric,
                "p",
                col=col,
                logy=logy,
                xlabel="target probability p",
                ylabel=ylabel,
                col_title=_PANEL_TITLES.get(col or ""),
                ax=ax,
                size=size,
            )
            fig = axes[0].figure
            if metric == "coverage":
                for panel in axes:
                    panel.plot([0, 1], [0, 1], color="0.4", ls=(0, (1, 1)), lw=0.8, label="_diagonal")
                    panel.set_xlim(0.0, 1.02)
                    panel.set_ylim(0.0, 1.05)
                old = fig.legends[0] if fig.legends else next(a.get_legend() for a in axes if a.get_legend())
                old.remove()
                handles, labels = axes[0].get_legend_handles_labels()
                handles.append(axes[0].lines[-1])
                labels.append("coverage = p (the theorem: at least this)")
                owner = axes[len(axes) - 1 if len(axes) < 3 else 2]
                legend_for(fig, owner, handles, labels, title=mcse_note(axes))  # after the limits are set
            return _captioned(fig, design, sub, ("p", col or ""), ax)

        plan.append((name, draw))
    return plan


#: grid axes a cost figure draws as points of a line (budgets) or takes medians over (heads, data sets)
_BUDGET_AXES = ("feature_dim", "samples", "n_features")
_OVER_AXES = ("layer", "head", "dataset")


def _cost_lines_figure(design: Any, summary: pd.DataFrame, grid_cols: list[str]) -> Plan:
    """Output MSE against the cost per query, one line per estimator, one panel per setting of the other axes.

    A point is the median over the heads (data sets) of a budget; the bars are the quartiles.
    """
    point = [c for c in grid_cols if c in _BUDGET_AXES]
    panel_axes = [c for c in grid_cols if c not in _BUDGET_AXES and c not in _OVER_AXES]
    s, col = summary, None
    if panel_axes:
        col = "panel"
        titles = [
            ", ".join(_setting(a, r[a]) for a in panel_axes) for r in summary[panel_axes].to_dict("records")
        ]
        s = summary.assign(panel=titles)
    points = prepare_mse_vs_cost(s, point=point, col=col)
    over = [c for c in _OVER_AXES if c in grid_cols]

    what = {"layer": "heads", "head": "heads", "dataset": "data sets"}
    ylabel = "output MSE" + (f" (median over {what[over[0]]})" if over else "")

    def draw(size: str | None, *, ax: Any = None) -> Any:
        axes = plot_mse_vs_cost(points, ylabel=ylabel, ax=ax, size=size)
        return _captioned(axes[0].figure, design, summary, (*point, *panel_axes, *over), ax)

    return [("mse_vs_cost", draw)]


def _setting(axis: str, value: Any) -> str:
    """A panel title's words for one setting: the encoder / decoder, n = 1024, or ``axis = value``."""
    if axis == "causal":
        return "decoder (causal)" if bool(value) else "encoder"
    if axis in ("max_len", "n_tokens"):
        return f"n = {value}"
    return f"{axis} = {value}"


# ----------------------------------------------------------------------------- rfkit's own figure kinds
# Each is registered below as a user's would be; the condition on the grid, the design kind or the
# saved tables under which a kind draws anything is its own, in its `figures` function.


def _grid(inputs: FigureInputs) -> list[str]:
    return list(inputs.design.grid)


def _mse_vs_features(inputs: FigureInputs) -> Plan:
    grid_cols = _grid(inputs)
    if not {"n_features", "feature_dim"} & set(grid_cols):
        return []
    inputs = at_cost(inputs)  # each map's feature columns D (2m for Trig, m for PRF): the x axis
    return _mse_figures(inputs.design, inputs.summary, inputs.theory, grid_cols)


def _kernel_scatter(inputs: FigureInputs) -> Plan:
    pairs = inputs.table("pairs")
    if pairs is None or not {"truth", "est_trial0"} <= set(pairs.columns):
        return []
    return _scatter_figure(inputs.design, _shown(pairs, inputs.design), _grid(inputs))


def _error_vs_degree(inputs: FigureInputs) -> Plan:
    grid_cols = _grid(inputs)
    if "degree" not in grid_cols:
        return []
    col = "norm" if "norm" in grid_cols else None
    return _lines_figures(
        "error_vs_degree", inputs.design, inputs.summary, "degree", col, only=("rel_mse", "max_rel_err")
    )


def _mse_vs_samples(inputs: FigureInputs) -> Plan:
    grid_cols = _grid(inputs)
    if "samples" not in grid_cols:
        return []
    col = next((c for c in grid_cols if c not in ("samples",)), None)
    return _lines_figures(  # draws those of mse and max_abs_err that the design measures
        "mse_vs_samples", inputs.design, inputs.summary, "samples", col, True, ("mse", "max_abs_err"), "mse"
    )


def _cost_vs_samples(inputs: FigureInputs) -> Plan:
    timings = inputs.table("timings")
    if timings is None or "seconds_median" not in timings.columns or "samples" not in timings.columns:
        return []
    return _cost_figure(inputs.design, _shown(timings, inputs.design), _grid(inputs))


def _head_heatmap(inputs: FigureInputs) -> Plan:
    grid_cols = _grid(inputs)
    if not {"layer", "head"} <= set(grid_cols):
        return []
    return _heatmap_figure(inputs.design, inputs.summary, grid_cols)


def _coverage(inputs: FigureInputs) -> Plan:
    grid_cols = _grid(inputs)
    return _coverage_figures(inputs.design, inputs.summary, grid_cols) if "p" in grid_cols else []


def _boxplots(inputs: FigureInputs) -> Plan:
    grid_cols = _grid(inputs)
    return _box_figures(inputs.design, inputs.summary, grid_cols) if "dataset" in grid_cols else []


def _ratio_to_reference(inputs: FigureInputs) -> Plan:
    design = inputs.design
    if not design.outputs.get("reference"):
        return []
    ref = str(design.outputs["reference"])
    ref = dict(zip(design.labels, figure_names(design.estimators))).get(ref, ref)
    return _ratio_figures(design, inputs.summary, _grid(inputs), ref)


def _mse_vs_cost(inputs: FigureInputs) -> Plan:
    summary = inputs.summary
    if "cost" not in summary.columns or not summary["cost"].notna().any():
        return []
    return _cost_lines_figure(inputs.design, summary, _grid(inputs))


def _dropin(kind: str) -> Callable[[FigureInputs], Plan]:
    def figures(inputs: FigureInputs) -> Plan:
        return dropin_figure_plan(kind, inputs.design, inputs.summary, inputs.table)

    figures.__name__ = figures.__qualname__ = f"_{kind}"
    return figures


_BUILTIN: dict[str, tuple[Callable[[FigureInputs], Plan], tuple[str, ...], str]] = {
    "mse_vs_features": (_mse_vs_features, (), "MSE and relative errors against the cost D, with theory"),
    "kernel_scatter": (_kernel_scatter, ("kernel",), "estimated against exact kernel values, one trial"),
    "error_vs_degree": (_error_vs_degree, (), "relative MSE and max relative error against the degree"),
    "mse_vs_samples": (_mse_vs_samples, (), "MSE and max absolute error against the sample budget"),
    "cost_vs_samples": (_cost_vs_samples, (), "median seconds per call against the sample budget"),
    "head_heatmap": (_head_heatmap, (), "log10 attention-output MSE per (layer, head)"),
    "coverage": (_coverage, (), "coverage and tightness of the concentration bound against p"),
    "boxplots": (_boxplots, (), "MSE and max relative error over data sets, per estimator"),
    "ratio_to_reference": (_ratio_to_reference, (), "per-head MSE ratio to the reference estimator"),
    "mse_vs_cost": (_mse_vs_cost, ("attention",), "output MSE against the cost per query"),
    **{
        kind: (_dropin(kind), ("drop-in",), "damage of estimators put into pretrained models")
        for kind in DROPIN_FIGURES
    },
}

for _name in FIGURE_KINDS:  # the study layer's order is the drawing order
    _plan_of, _for_kinds, _description = _BUILTIN[_name]
    register_figure(
        FigureRecord(name=_name, figures=_plan_of, applies_to=_for_kinds, description=_description)
    )
