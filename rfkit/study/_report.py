"""Markdown report, tables and figures of a finished study (plots read the saved tables only)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from ..tables import format_mcse
from ._results import METRIC_SOURCES, StudyResult

__all__ = ["write_report", "study_figures", "provenance_line", "FIGURE_KINDS", "metric_description"]

#: figure kinds a study may declare in ``[outputs] figures = [...]``, in the order they are drawn
FIGURE_KINDS = (
    "mse_vs_features",
    "kernel_scatter",
    "error_vs_degree",
    "mse_vs_samples",
    "cost",
    "head_heatmap",
    "coverage",
    "boxplots",
    "ratio_to_reference",
)
#: ``(name, matplotlib Figure)`` pairs; the name is the file stem under ``figures/``
Figures = list[tuple[str, Any]]

#: attention designs measure the error of the attention *output* against exact softmax attention
_ATTENTION_METRICS = {
    "mse": "mean over queries and value dimensions of E[(A_hat - A)^2], the squared error of the "
    "estimated attention output A_hat against exact softmax attention A",
    "bias": "mean over queries and value dimensions of E[A_hat - A] (signed: errors of opposite sign cancel)",
    "variance": "mean over queries and value dimensions of Var[A_hat] (divisor T-1)",
}


def metric_description(metric: str, kind: str) -> str:
    """What a summary metric measures, in words fit for this kind of design (kernel or attention)."""
    if kind == "attention" and metric in _ATTENTION_METRICS:
        return _ATTENTION_METRICS[metric]
    return METRIC_SOURCES[metric][1]


def _save(fig: object, out: Path, name: str) -> Path:
    """Save a figure as PDF and PNG under ``out/figures`` (Agg backend), close it, return the PNG."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from ..plots import save_figure

    saved = save_figure(fig, out / "figures" / name)
    plt.close(fig)  # type: ignore[arg-type]
    return saved[1]


def provenance_line(result: StudyResult) -> str:
    """One line: trials, cells, seed entropy, design hash, time, executor, versions."""
    d, prov = result.design, result.provenance
    machine = prov.get("machine", {})
    versions = prov.get("versions", {})
    return (
        f"Trials per cell: {d.trials}; cells: {prov.get('cells', len(d.cells()))} "
        f"({prov.get('cells_resumed', 0)} resumed); seed entropy {prov.get('entropy')}; design hash "
        f"`{prov.get('design_hash', d.hash())}`; {float(prov.get('seconds', float('nan'))):.1f} s on "
        f"{machine.get('cpus', '?')} CPUs with executor `{prov.get('executor', '?')}`; "
        f"backend {prov.get('backend', 'numpy')}"
        + (
            f" on {prov['device_name']}"
            if prov.get("backend", "numpy") != "numpy" and prov.get("device_name")
            else ""
        )
        + f"; rfkit {versions.get('rfkit', '?')}, numpy {versions.get('numpy', '?')}."
    )


def study_figures(
    kind: str, design: Any, summary: pd.DataFrame, theory: pd.DataFrame, table: Callable[[str], Any]
) -> Figures:
    """The figures of one kind, as ``(name, matplotlib Figure)`` pairs (empty where the kind does not apply).

    ``summary`` and ``theory`` are ``StudyResult.summary()`` / ``compare_theory()`` (as saved);
    ``table(name)`` gives another saved table (``"pairs"``, ``"timings"``) or None. Plots read
    these tables only: nothing is recomputed.
    """
    grid_cols = list(design.grid)
    if kind == "mse_vs_features" and ({"n_features", "feature_dim"} & set(grid_cols)):
        return _mse_figures(summary, theory, grid_cols)
    if kind == "kernel_scatter":
        pairs = table("pairs")
        return _scatter_figure(pairs, grid_cols) if pairs is not None else []
    if kind == "error_vs_degree" and "degree" in grid_cols:
        return _lines_figures(
            summary, design.metrics, "degree", "norm" if "norm" in grid_cols else None, kind=design.kind
        )
    if kind == "mse_vs_samples" and "samples" in grid_cols:
        col = next((c for c in grid_cols if c not in ("samples",)), None)
        return _lines_figures(  # draws those of mse and max_abs_err that the design measures
            summary, design.metrics, "samples", col, logx=True, only=("mse", "max_abs_err"), kind=design.kind
        )
    if kind == "cost":
        timings = table("timings")
        return _cost_figure(timings, grid_cols) if timings is not None else []
    if kind == "head_heatmap" and {"layer", "head"} <= set(grid_cols):
        return _heatmap_figure(summary, grid_cols)
    if kind == "coverage" and "p" in grid_cols:
        return _coverage_figures(summary, grid_cols)
    if kind == "boxplots" and "dataset" in grid_cols:
        return _box_figures(summary, design.metrics, grid_cols)
    if kind == "ratio_to_reference" and design.outputs.get("reference"):
        return _ratio_figures(summary, grid_cols, str(design.outputs["reference"]))
    return []


def _ratio_figures(summary: pd.DataFrame, grid_cols: list[str], reference: str) -> Figures:
    """Per-cell MSE ratio to the reference estimator, one figure per value of the non-head axes."""
    from ..plots import plot_ratio_to_reference

    figs: Figures = []
    cell_axes = [c for c in grid_cols if c not in ("layer", "head", "dataset")]
    groups = summary.groupby(cell_axes, sort=False) if cell_axes else [((), summary)]
    for key, rows in groups:
        vals = key if isinstance(key, tuple) else (key,)
        suffix = "".join(f"_{a}-{v}" for a, v in zip(cell_axes, vals))
        title = ", ".join(f"{a} = {v}" for a, v in zip(cell_axes, vals)) or None
        ax = plot_ratio_to_reference(
            rows,
            reference,
            metric="mse",
            title=title,
            ylabel=f"attention-output MSE / that of {reference}",
        )
        figs.append((f"mse_ratio_to_reference{suffix}", ax.figure))
    return figs


def _md_table(df: pd.DataFrame) -> str:
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(str(v) for v in r.tolist()) + " |")
    return "\n".join(lines)


def write_report(result: StudyResult, out: str | Path) -> Path:
    """Write ``report.md`` (+ figures) for a saved study; returns the report path.

    Figures are drawn from the saved ``summary.parquet`` / ``theory.csv`` (compute -> save -> plot).
    """
    out = Path(out)
    summary = pd.read_parquet(out / "summary.parquet")
    theory_path = out / "theory.csv"
    theory = pd.read_csv(theory_path) if theory_path.exists() else pd.DataFrame()
    d = result.design
    grid_cols = list(d.grid)
    lines = [f"# {d.name}", "", d.description.strip(), ""]
    lines += [provenance_line(result), ""]
    quick = d.source.endswith("[quick]")
    if quick:
        lines += [
            "**Quick profile**: the design's `[quick]` overrides (fewer trials, a smaller grid, less "
            "data) for a smoke run. The numbers below are not the study's result, and where the "
            "description or the notes give sizes or numbers, they are those of the full profile "
            "(`rfkit run` without `--quick`).",
            "",
        ]

    def table(name: str) -> pd.DataFrame | None:
        path = out / f"{name}.parquet"
        return pd.read_parquet(path) if path.exists() else None

    figures = []
    wanted = d.outputs.get("figures", [])
    for kind in FIGURE_KINDS:  # drawn in this order, as before
        if kind in wanted:
            figures += [_save(fig, out, name) for name, fig in study_figures(kind, d, summary, theory, table)]
    for f in figures:
        lines += [f"![{f.stem}](figures/{f.name})", ""]
    if d.kind == "attention" and "samples" in grid_cols:
        lines += [
            "`samples` is each estimator's budget of random draws: the number of random features m for RFA, "
            "of samples for RA and SNIS, of proposals x samples per proposal for LARA.",
            "",
        ]
    for metric in d.metrics:
        s = summary[summary["metric"] == metric].copy()
        if s.empty:
            continue
        s["value"] = [format_mcse(e, m) for e, m in zip(s["estimate"], s["mcse"])]
        other = [c for c in grid_cols if c != "n_features"]
        if "n_features" in grid_cols:
            piv = s.pivot_table(
                index=["estimator", *other], columns="n_features", values="value", aggfunc="first", sort=False
            )
            piv.columns = [f"m={c}" for c in piv.columns]
            table = piv.reset_index()
        else:
            table = s[["estimator", *grid_cols, "value"]]
        lines += [
            f"## {metric}",
            "",
            f"{metric_description(metric, d.kind)} (estimate ± MCSE).",
            "",
            _md_table(table),
            "",
        ]
    if not theory.empty:
        lines += _theory_section(theory[theory["metric"] == "mse"].copy(), grid_cols)
    if "ranking" in d.outputs.get("tables", []):
        chosen = d.outputs.get("ranking_metric")
        ranked: list[str | None] = [chosen] if chosen is None or isinstance(chosen, str) else list(chosen)
        for rank_by in ranked:
            lines += _ranking_section(summary, grid_cols, out, rank_by)
    lines += _slopes_section(summary, grid_cols)
    lines += _latex_tables(summary, out, d.metrics, grid_cols, d.kind)
    stats_path = out / "data_stats.parquet"
    if "ratio_to_reference" in d.outputs.get("tables", []) and d.outputs.get("reference"):
        stats = pd.read_parquet(stats_path) if stats_path.exists() else None
        lines += _ratio_section(summary, stats, grid_cols, str(d.outputs["reference"]), out)
    if "hard_heads" in d.outputs.get("tables", []) and stats_path.exists():
        lines += _hard_heads(summary, pd.read_parquet(stats_path), d.labels)
    notes = d.outputs.get("notes")
    if notes:
        lines += ["## Notes", ""]
        if quick:
            lines += ["*Written for the full profile: the numbers in this quick report differ.*", ""]
        lines += [notes.strip(), ""]
    failed = int((result.trials["status"] != "ok").sum())
    lines += [f"Failed trials: {failed}.", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


#: prediction / measurement above which a z-score is flagged as not testing the formula
_HEAVY_TAIL_RATIO = 3.0


def heavy_tailed(t: pd.DataFrame) -> Any:
    """Theory rows whose predicted MSE exceeds the measured one more than ``_HEAVY_TAIL_RATIO`` times.

    There the squared error is heavy-tailed: the sample MSE and its MCSE miss the rare large
    draws that carry the mean, so the row's z-score does not test the formula (boolean array).
    """
    return (t["predicted"] > _HEAVY_TAIL_RATIO * t["measured"]).to_numpy()


def _theory_section(t: pd.DataFrame, grid_cols: list[str]) -> list[str]:
    """Measured vs closed-form MSE; rows whose prediction far exceeds the measurement are flagged.

    With heavy-tailed squared errors (positive features at large ||x+y||, for instance) the MSE is
    carried by draws too rare to occur in the trials: the sample MSE falls far below the true one
    and its MCSE, estimated from the same trials, is far too small, so z is meaningless there.
    """
    n = len(t)
    if not n:
        return []
    heavy = heavy_tailed(t)
    light = t[~heavy]
    text = f"{n} (cell, estimator) comparisons of the measured MSE with its closed form (rfkit.theory, or the map's own mse)"
    if len(light):
        worst = light.loc[light["z"].abs().idxmax()]
        where = ", ".join(f"{c}={worst[c]}" for c in grid_cols if c in worst.index)
        text += (
            f"; {int((light['z'].abs() <= 5).sum())} of the {len(light)} unflagged ones within 5 MCSE; "
            f"largest unflagged |z| = {abs(worst['z']):.2f} ({worst['estimator']}, {where})."
        )
    else:
        text += "."
    out = ["## Theory vs simulation", "", text, ""]
    if heavy.any():
        out += [
            f"† {int(heavy.sum())} rows have a predicted MSE more than {_HEAVY_TAIL_RATIO:g} times the "
            "measured one. That is what heavy-tailed squared errors do: most of the MSE comes from draws "
            "too rare to occur in these trials, so the sample MSE falls short of it and its MCSE (estimated "
            "from the same trials) is far too small. Their z-scores do not test the formula; more trials, "
            "or smaller norms, would.",
            "",
        ]

    def fmt_z(v: float, flag: bool) -> str:
        body = f"{v:+.2f}" if abs(v) < 1e4 else f"{v:+.2e}"
        return body + (" †" if flag else "")

    out += [
        _md_table(
            t.assign(
                predicted=t["predicted"].map(lambda v: f"{v:.4g}"),
                measured=[format_mcse(a, b) for a, b in zip(t["measured"], t["mcse"])],
                z=[fmt_z(v, f) for v, f in zip(t["z"], heavy)],
            )[["estimator", *grid_cols, "predicted", "measured", "z"]]
        ),
        "",
    ]
    return out


def _mse_figures(summary: pd.DataFrame, theory: pd.DataFrame, grid_cols: list[str]) -> Figures:
    """MSE against the feature count (``feature_dim`` columns, else ``n_features`` directions), one
    figure per value of the other grid axes that vary (e.g. a data ``set``): never pooled."""
    from ..plots import plot_mse_vs_features

    x = "feature_dim" if "feature_dim" in grid_cols else "n_features"
    figs: Figures = []
    for suffix, rows in _facets(summary, grid_cols):
        th = theory[theory["cell"].isin(rows["cell"])] if not theory.empty else theory
        title = suffix.lstrip("_").replace("_", ", ").replace("-", " = ", 1) if suffix else None
        for metric in ("mse", "rel_mse", "median_rel_sq_err"):
            if rows[rows["metric"] == metric].empty:
                continue
            ax = plot_mse_vs_features(rows, th if not th.empty else None, metric=metric, x=x, title=title)
            figs.append((f"{metric}_vs_features{suffix}", ax.figure))
    return figs


def _facets(frame: pd.DataFrame, grid_cols: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """``(name suffix, rows)`` per value of the grid axes other than ``dataset`` / ``n_features`` that vary
    (e.g. a data ``regime``), so figures never pool different settings; one facet ``("", frame)`` otherwise."""
    axes = [
        c
        for c in grid_cols
        if c not in ("dataset", "n_features", "feature_dim") and c in frame and frame[c].nunique() > 1
    ]
    if not axes:
        return [("", frame)]
    out = []
    for key, rows in frame.groupby(axes, sort=False):
        vals = key if isinstance(key, tuple) else (key,)
        out.append(("_" + "_".join(f"{a}-{v}" for a, v in zip(axes, vals)), rows))
    return out


def _scatter_figure(pairs: pd.DataFrame, grid_cols: list[str]) -> Figures:
    from ..plots import plot_kernel_scatter

    figs: Figures = []
    for suffix, rows in _facets(pairs, grid_cols):
        axes = plot_kernel_scatter(rows)  # the facet's first cell
        figs.append((f"kernel_scatter{suffix}", axes[0].figure))
    return figs


def _box_figures(summary: pd.DataFrame, metrics: list[str], grid_cols: list[str]) -> Figures:
    from ..plots import plot_metric_boxplot

    figs: Figures = []
    for metric in ("mse", "max_rel_err"):
        if metric not in metrics:
            continue
        for suffix, rows in _facets(summary, grid_cols):
            ax = plot_metric_boxplot(rows, metric)
            figs.append((f"boxplot_{metric}{suffix}", ax.figure))
    return figs


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
    summary: pd.DataFrame,
    metrics: list[str],
    x: str,
    col: str | None,
    logx: bool = False,
    only: tuple[str, ...] = ("rel_mse", "max_rel_err"),
    kind: str = "kernel",
) -> Figures:
    from ..plots import plot_metric_lines

    figs: Figures = []
    labels = {**_YLABELS, **(_ATTENTION_YLABELS if kind == "attention" else {})}
    for metric in only:
        if metric not in metrics:
            continue
        xlabel = {"degree": "degree n", "samples": _SAMPLES_LABEL}.get(x, x)
        axes = plot_metric_lines(
            summary,
            metric,
            x,
            col=col,
            logx=logx,
            xlabel=xlabel,
            ylabel=labels.get(metric, metric),
            col_title=_PANEL_TITLES.get(col or ""),
        )
        figs.append((f"{metric}_vs_{x}", axes[0].figure))
    return figs


def _cost_figure(timings: pd.DataFrame, grid_cols: list[str]) -> Figures:
    from ..plots import plot_metric_lines

    col = next((c for c in grid_cols if c != "samples"), None)
    frame = timings.rename(columns={"seconds_median": "estimate"}).assign(metric="seconds", mcse=0.0)
    axes = plot_metric_lines(
        frame,
        "seconds",
        "samples",
        col=col,
        logx=True,
        xlabel=_SAMPLES_LABEL,
        ylabel="median seconds per call",
        col_title=_PANEL_TITLES.get(col or ""),
    )
    return [("cost_vs_samples", axes[0].figure)]


def _heatmap_figure(summary: pd.DataFrame, grid_cols: list[str]) -> Figures:
    """One (layer, head) heatmap per value of the other grid axes (model, budget): never pooled."""
    from ..plots import plot_head_heatmap

    other = [c for c in grid_cols if c not in ("layer", "head")]
    groups = summary.groupby(other, sort=False) if other else [((), summary)]
    figs: Figures = []
    for key, rows in groups:
        vals = key if isinstance(key, tuple) else (key,)
        suffix = "".join(f"_{a}-{v}" for a, v in zip(other, vals))
        axes = plot_head_heatmap(rows, "mse", colorbar_label="log10 attention-output MSE")
        fig = axes.ravel()[0].figure
        if other:
            fig.suptitle(", ".join(f"{a} = {v}" for a, v in zip(other, vals)), y=1.0)
        figs.append((f"mse_by_layer_head{suffix}", fig))
    return figs


def ranking_table(
    summary: pd.DataFrame, grid_cols: list[str], metric: str = "rel_mse"
) -> list[tuple[str, pd.DataFrame]]:
    """Estimators ranked by a metric, one table per value of the grid axes other than the feature count.

    Each table has one row per estimator: its rank, the geometric mean over feature counts of its
    ``metric`` divided by the best estimator's at that count (1 = best everywhere), and the metric
    at every feature count (estimate with its MCSE). Rows are ordered by that mean ratio.
    """
    import numpy as np

    x = "feature_dim" if "feature_dim" in grid_cols else "n_features"
    s = summary[summary["metric"] == metric]
    out = []
    for suffix, rows in _facets(s, grid_cols):
        est = rows.pivot_table(index="estimator", columns=x, values="estimate", aggfunc="first")
        se = rows.pivot_table(index="estimator", columns=x, values="mcse", aggfunc="first")
        ratio = est / est.min(axis=0)
        gm = np.exp(np.log(ratio).mean(axis=1))
        order = gm.sort_values(kind="stable").index
        table = pd.DataFrame({"rank": range(1, len(order) + 1), "estimator": list(order)})
        table[f"{metric} / best (geom. mean)"] = [f"{gm[e]:.3g}" for e in order]
        for col in est.columns:
            table[f"{x}={col}"] = [format_mcse(est.loc[e, col], se.loc[e, col]) for e in order]
        out.append((suffix.lstrip("_"), table))
    return out


def _ranking_section(
    summary: pd.DataFrame, grid_cols: list[str], out: Path, metric: str | None = None
) -> list[str]:
    if metric is None:
        metric = "rel_mse" if not summary[summary["metric"] == "rel_mse"].empty else "mse"
    lines = [
        f"## Ranking by {metric}",
        "",
        f"Estimators ranked by {metric} ({METRIC_SOURCES[metric][1]}) within each data setting: the "
        "geometric mean over feature counts of each estimator's value divided by the best one's "
        "(1 = best at every count), then the values with their Monte Carlo standard errors.",
        "",
    ]
    frames = []
    for name, table in ranking_table(summary, grid_cols, metric):
        lines += [f"### {name.replace('_', ', ') or 'all cells'}", "", _md_table(table), ""]
        frames.append(table.assign(setting=name))
    if frames:
        pd.concat(frames, ignore_index=True).to_csv(out / f"ranking_{metric}.csv", index=False)
    return lines


#: head statistics the ratios are correlated with: column or (numerator, denominator) -> words
_RATIO_STATS = {
    "entropy_mean": "attention entropy",
    "qk_sum_sq_mean": "mean ||q+k||^2",
    "logit_max": "max logit",
    ("q_var_max", "q_var_mean"): "anisotropy of q (max / mean per-dimension variance)",
    ("k_var_max", "k_var_mean"): "anisotropy of k",
    "q_mean_norm": "||mean of q|| (offset)",
}


def _ratio_section(
    summary: pd.DataFrame, stats: pd.DataFrame | None, grid_cols: list[str], reference: str, out: Path
) -> list[str]:
    """Each estimator's output MSE relative to the reference, over cells (heads): median, range, wins,
    and the Spearman correlation of the log ratio with the heads' statistics (rk.data.describe)."""
    import numpy as np

    from ..plots import prepare_ratio_to_reference

    cell_axes = [c for c in grid_cols if c not in ("layer", "head", "dataset")]
    frame = prepare_ratio_to_reference(summary, reference, "mse", tuple(cell_axes))
    frame.to_csv(out / "mse_ratio_to_reference.csv", index=False)
    lines = [
        f"## Output MSE relative to {reference}",
        "",
        f"Per cell (head): each estimator's attention-output MSE divided by `{reference}`'s on the same "
        "head, the same data and common random numbers (< 1: better). Median and range over heads, the "
        "share of heads where it beats the reference, and the Spearman correlation across heads of the "
        "log ratio with the heads' statistics (rk.data.describe, averaged over texts). Per-head values: "
        "`mse_ratio_to_reference.csv`.",
        "",
    ]
    st = None
    if stats is not None:
        st = stats.set_index("cell")
    groups = frame.groupby(cell_axes, sort=False) if cell_axes else [((), frame)]
    for key, rows in groups:
        vals = key if isinstance(key, tuple) else (key,)
        if cell_axes:
            lines += ["### " + ", ".join(f"{a} = {v}" for a, v in zip(cell_axes, vals)), ""]
        table = []
        for est, g in rows.groupby("estimator", sort=False):
            r = g["ratio"].to_numpy(dtype=float)
            row = {
                "estimator": est,
                "median": f"{np.nanmedian(r):.3g}",
                "range": f"{np.nanmin(r):.3g} - {np.nanmax(r):.3g}",
                "beats reference": f"{int(np.sum(r < 1))} of {int(np.sum(np.isfinite(r)))}",
            }
            if st is not None:
                lr = pd.Series(np.log(r), index=g["cell"].to_numpy())
                for col, words in _RATIO_STATS.items():
                    if isinstance(col, tuple):
                        if not set(col) <= set(st.columns):
                            continue
                        x = st[col[0]] / st[col[1]]
                    elif col in st.columns:
                        x = st[col]
                    else:
                        continue
                    rho = lr.corr(x.reindex(lr.index), method="spearman")
                    row[f"rho({words})"] = f"{rho:+.2f}"
            table.append(row)
        lines += [_md_table(pd.DataFrame(table).sort_values("median", key=lambda c: c.astype(float))), ""]
    return lines


def _hard_heads(summary: pd.DataFrame, stats: pd.DataFrame, labels: list[str], top: int = 8) -> list[str]:
    """Which heads are hard, and why: heads ranked by the first estimator's MSE, with their statistics."""
    mse = summary[summary["metric"] == "mse"].pivot_table(
        index="cell", columns="estimator", values="estimate"
    )
    ref = labels[0]
    budget = ""
    if "feature_dim" in stats.columns and stats["feature_dim"].nunique() > 1:
        # one row per head: rank the heads at the largest feature budget
        top_d = stats["feature_dim"].max()
        stats = stats[stats["feature_dim"] == top_d]
        budget = f" at feature_dim = {top_d}"
    lead = [c for c in ("causal",) if c in stats.columns and stats[c].nunique() > 1]
    cols = lead + ["layer", "head", "logit_max", "qk_sum_sq_mean", "entropy_mean", "attention_max_mean"]
    cols = [c for c in cols if c in stats.columns]
    table = stats.set_index("cell")[cols].join(mse[[c for c in labels if c in mse.columns]])
    table = table.sort_values(ref, ascending=False)
    corr = table[[ref, "logit_max", "qk_sum_sq_mean", "entropy_mean"]].corr(method="spearman")[ref]
    show = table.head(top).reset_index(drop=True)
    for c in show.columns:
        if c not in ("causal", "layer", "head"):
            show[c] = show[c].map(lambda v: f"{v:.3g}")
    return [
        "## Which heads are hard, and why",
        "",
        f"Heads ranked by the MSE of `{ref}`{budget} (top {min(top, len(table))} of {len(table)}), with the "
        "statistics of their queries "
        "and keys averaged over texts (rk.data.describe): max logit, mean ||q+k||^2 over pairs, attention "
        "entropy (nats) and mean largest attention weight.",
        "",
        _md_table(show),
        "",
        f"Spearman rank correlation of `{ref}`'s MSE across heads with: max logit "
        f"{corr.get('logit_max', float('nan')):+.2f}, mean ||q+k||^2 {corr.get('qk_sum_sq_mean', float('nan')):+.2f}, "
        f"attention entropy {corr.get('entropy_mean', float('nan')):+.2f}.",
        "",
    ]


def _coverage_figures(summary: pd.DataFrame, grid_cols: list[str]) -> Figures:
    from ..plots import plot_metric_lines

    col = "n_pairs" if "n_pairs" in grid_cols else None
    sub = summary[summary["metric"].isin(["coverage", "rms_over_bound"])]
    if "n_features" in grid_cols:  # one figure per m would repeat; show the largest m
        sub = sub[sub["n_features"] == sub["n_features"].max()]
    figs: Figures = []
    axes = plot_metric_lines(
        sub,
        "coverage",
        "p",
        col=col,
        logy=False,
        xlabel="target probability p",
        ylabel="coverage of the bound",
        col_title=_PANEL_TITLES.get(col or ""),
    )
    for ax in axes:
        ax.plot([0, 1], [0, 1], "k:", lw=0.8, label="coverage = p (the theorem: at least this)")
        ax.set_xlim(0.0, 1.02)
        ax.set_ylim(0.0, 1.05)
    axes[-1].legend(frameon=False, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7)
    figs.append(("coverage_vs_p", axes[0].figure))
    axes = plot_metric_lines(
        sub,
        "rms_over_bound",
        "p",
        col=col,
        logy=True,
        xlabel="target probability p",
        ylabel="max RMS relative error / bound",
        col_title=_PANEL_TITLES.get(col or ""),
    )
    figs.append(("tightness_vs_p", axes[0].figure))
    return figs


def _slopes_section(summary: pd.DataFrame, grid_cols: list[str]) -> list[str]:
    """Fitted log-log slopes of the MSE against m (statsmodels WLS), when m is the only varying axis."""
    if "n_features" not in grid_cols or any(summary[c].nunique() > 1 for c in grid_cols if c != "n_features"):
        return []
    if summary[summary["metric"] == "mse"].empty or summary["n_features"].nunique() < 3:
        return []
    from ..plots import fit_slopes

    sl = fit_slopes(summary, "mse")
    if sl.empty:
        return []
    show = pd.DataFrame(
        {
            "estimator": sl["estimator"],
            "slope": sl["slope"].map(lambda v: f"{v:.3f}"),
            "95% CI": [f"[{a:.3f}, {b:.3f}]" for a, b in zip(sl["ci_low"], sl["ci_high"])],
            "points": sl["n_points"],
        }
    )
    return [
        "## Slopes",
        "",
        "Weighted least-squares fit of log MSE on log m (statsmodels, weights from the MCSE). An unbiased "
        "random-feature estimator has MSE exactly proportional to 1/m for iid directions (slope -1); block-"
        "orthogonal directions add a term that changes at m = d (THEORY.md §3).",
        "",
        _md_table(show),
        "",
    ]


def _latex_tables(
    summary: pd.DataFrame, out: Path, metrics: list[str], grid_cols: list[str], kind: str
) -> list[str]:
    """One booktabs table per metric in ``tables/`` (estimate ± MCSE)."""
    from ..tables import summary_table, to_latex

    tdir = out / "tables"
    tdir.mkdir(exist_ok=True)
    written = []
    for metric in metrics:
        if summary[summary["metric"] == metric].empty:
            continue
        other = [c for c in grid_cols if c != "n_features"]
        if "n_features" in grid_cols:
            t = summary_table(summary, metric, rows=["estimator", *other], columns="n_features", latex=True)
        else:
            t = summary_table(summary, metric, rows=["estimator", *grid_cols], columns=None, latex=True)
        (tdir / f"{metric}.tex").write_text(
            to_latex(t, caption=metric_description(metric, kind), label=f"tab:{metric}")
        )
        written.append(f"tables/{metric}.tex")
    return [f"LaTeX (booktabs) tables: {', '.join(written)}.", ""] if written else []
