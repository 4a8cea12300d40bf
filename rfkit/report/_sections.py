"""Sections of the Markdown report beyond the metric tables: rankings, ratios to a reference,
hard heads, fitted slopes and the rows with non-finite or failed trials."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..plots import fit_slopes, prepare_ratio_to_reference
from ..study import ranking_table
from ..study.outputs import atomic_csv
from ..study.summaries import metric_words, not_ok, spearman
from ..tables import md_escape, to_markdown
from ._shown import shown_estimators

__all__ = [
    "COST_WORDS",
    "md_table",
    "ranking_section",
    "ratio_section",
    "hard_heads",
    "slopes_section",
    "finite_rows",
    "nonfinite_section",
]


def md_table(df: pd.DataFrame, names: Mapping[str, str] | None = None) -> str:
    """A Markdown table of ``df`` (every cell escaped: :func:`rfkit.tables.to_markdown`), no final newline.

    ``names`` (study label -> display name) shows the estimators by display name
    (:func:`~rfkit.report._shown.shown_estimators`).
    """
    return to_markdown(shown_estimators(df, names)).rstrip("\n")


def finite_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary rows with a finite estimate and no infinite MCSE (those a figure can draw)."""
    est, se = summary["estimate"].to_numpy(dtype=float), summary["mcse"].to_numpy(dtype=float)
    return summary[np.isfinite(est) & (se != np.inf)]


def nonfinite_section(
    summary: pd.DataFrame, grid_cols: list[str], names: Mapping[str, str] | None = None
) -> list[str]:
    """The summary rows whose status is not ``ok``: non-finite trial values, failed trials, NaN rows."""
    bad = not_ok(summary)
    if bad.empty:
        return []
    counts = [c for c in ("n_trials", "n_failed", "n_nonfinite", "n_nan_rows") if c in bad]
    n_nf = int(bad["n_nonfinite"].sum()) if "n_nonfinite" in bad else 0
    undrawn = len(bad) - len(finite_rows(bad))
    return [
        "## Non-finite and failed trials",
        "",
        f"{len(bad)} of {len(summary)} summary rows are not `ok` ({n_nf} non-finite trial values in all). "
        "A non-finite trial value (an estimate that overflowed, a NaN output row) is kept: the row's "
        "estimate is the mean of every trial, so it is inf or NaN, and its MCSE is NaN; failed trials are "
        "left out and counted; `inf_mcse`: the MCSE is infinite (finite values, computed scaled, "
        f"never give one). {undrawn} rows with a non-finite estimate or MCSE are not drawn in the figures.",
        "",
        md_table(
            bad[["estimator", *[c for c in grid_cols if c in bad], "metric", "estimate", *counts, "status"]],
            names,
        ),
        "",
    ]


def ranking_section(
    summary: pd.DataFrame,
    grid_cols: list[str],
    out: Path,
    metric: str | None = None,
    names: Mapping[str, str] | None = None,
) -> list[str]:
    if metric is None:
        metric = "rel_mse" if not summary[summary["metric"] == "rel_mse"].empty else "mse"
    lines = [
        f"## Ranking by {metric}",
        "",
        f"Estimators ranked by {metric} ({metric_words(metric)}) within each data setting: the "
        "geometric mean over feature counts of each estimator's value divided by the best one's "
        "(1 = best at every count), then the values with their Monte Carlo standard errors.",
        "",
    ]
    frames = []
    for name, table in ranking_table(summary, grid_cols, metric):
        lines += [f"### {md_escape(name.replace('_', ', ')) or 'all cells'}", "", md_table(table, names), ""]
        frames.append(table.assign(setting=name))
    if frames:
        atomic_csv(pd.concat(frames, ignore_index=True), out / f"ranking_{metric}.csv")
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


def ratio_section(
    summary: pd.DataFrame,
    stats: pd.DataFrame | None,
    grid_cols: list[str],
    reference: str,
    out: Path,
    names: Mapping[str, str] | None = None,
) -> list[str]:
    """Each estimator's output MSE relative to the reference, over cells (heads): median, range, wins,
    and the Spearman correlation of the log ratio with the heads' statistics (rk.data.describe)."""
    cell_axes = [c for c in grid_cols if c not in ("layer", "head", "dataset")]
    frame = prepare_ratio_to_reference(summary, reference, "mse", tuple(cell_axes))
    atomic_csv(frame, out / "mse_ratio_to_reference.csv")
    ref_name = (names or {}).get(reference, reference)
    lines = [
        f"## Output MSE relative to {md_escape(ref_name)}",
        "",
        f"Per cell (head): each estimator's attention-output MSE divided by {md_escape(ref_name)}'s on the same "
        "head, the same data and common random numbers (< 1: better). Median and range over heads, the "
        "share of heads where it beats the reference, and the Spearman correlation across heads of the "
        "log ratio with the heads' statistics (rk.data.describe, averaged over texts). Per-head values: "
        "`mse_ratio_to_reference.csv`.",
        "",
    ]
    st = None
    if stats is not None:
        st = stats.set_index("cell")
    cost = _median_cost(summary, cell_axes)
    if cost is not None:
        lines[-2] += (
            " `cost`: the estimator's median cost per query over the heads, keys computed exactly plus "
            'random features or samples (docs page *Studies*, section "Cost per query").'
        )
    groups = frame.groupby(cell_axes, sort=False) if cell_axes else [((), frame)]
    for key, rows in groups:
        vals = key if isinstance(key, tuple) else (key,)
        if cell_axes:
            lines += ["### " + md_escape(", ".join(f"{a} = {v}" for a, v in zip(cell_axes, vals))), ""]
        table = []
        for est, g in rows.groupby("estimator", sort=False):
            r = g["ratio"].to_numpy(dtype=float)
            fin = r[
                np.isfinite(r)
            ]  # heads with a non-finite MSE (theirs or the reference's) are counted apart
            row = {"estimator": est}
            if cost is not None:
                row["cost"] = f"{cost.get((*vals, est), float('nan')):.4g}"
            row |= {
                "median": f"{np.median(fin):.3g}" if fin.size else "n/a",
                "range": f"{fin.min():.3g} - {fin.max():.3g}" if fin.size else "n/a",
                "beats reference": f"{int(np.sum(fin < 1))} of {fin.size}",
                "non-finite heads": str(r.size - fin.size),
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
                    rho = spearman(lr.to_numpy(), x.reindex(lr.index).to_numpy(dtype=float))
                    row[f"rho({words})"] = f"{rho:+.2f}"
            table.append(row)
        shown = pd.DataFrame(table)
        if (shown["non-finite heads"] == "0").all():
            shown = shown.drop(columns="non-finite heads")
        order = pd.to_numeric(shown["median"], errors="coerce")  # "n/a" last
        if cost is not None:
            ref_cost = cost.get((*vals, reference), float("nan"))
            lines += [f"{md_escape(ref_name)}: cost {ref_cost:.4g} per query.", ""]
        lines += [md_table(shown.iloc[np.argsort(order.to_numpy(), kind="stable")], names), ""]
    return lines


#: how the reports define the cost column
COST_WORDS = (
    "`cost`: the estimator's cost per query, keys computed exactly (averaged over queries) plus random "
    'features or samples (docs page *Studies*, section "Cost per query").'
)


def _median_cost(summary: pd.DataFrame, axes: list[str]) -> dict[tuple[Any, ...], float] | None:
    """Median cost per query over heads, by (``axes`` values..., estimator); None without costs."""
    if "cost" not in summary or summary["cost"].isna().all():
        return None
    s = summary[summary["metric"] == "mse"]
    med = s.groupby([*axes, "estimator"], sort=False)["cost"].median()
    return {k if isinstance(k, tuple) else (k,): float(v) for k, v in med.items()}


def hard_heads(
    summary: pd.DataFrame,
    stats: pd.DataFrame,
    labels: list[str],
    top: int = 8,
    names: Mapping[str, str] | None = None,
) -> list[str]:
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
    cost = ""
    if "cost" in summary and summary["cost"].notna().any():
        c = summary[(summary["estimator"] == ref) & (summary["metric"] == "mse")]["cost"]
        cost = f" (cost per query {c.min():.4g}" + ("" if c.nunique() <= 1 else f" to {c.max():.4g}") + ")"
    for c in show.columns:
        if c not in ("causal", "layer", "head"):
            show[c] = show[c].map(lambda v: f"{v:.3g}")
    ref_name = (names or {}).get(ref, ref)
    return [
        "## Which heads are hard, and why",
        "",
        f"Heads ranked by the MSE of {md_escape(ref_name)}{cost}{budget} (top {min(top, len(table))} of {len(table)}), with the "
        "statistics of their queries "
        "and keys averaged over texts (rk.data.describe): max logit, mean ||q+k||^2 over pairs, attention "
        "entropy (nats) and mean largest attention weight.",
        "",
        md_table(show, names),
        "",
        f"Spearman rank correlation of {md_escape(ref_name)}'s MSE across heads with: max logit "
        f"{corr.get('logit_max', float('nan')):+.2f}, mean ||q+k||^2 {corr.get('qk_sum_sq_mean', float('nan')):+.2f}, "
        f"attention entropy {corr.get('entropy_mean', float('nan')):+.2f}.",
        "",
    ]


def slopes_section(
    summary: pd.DataFrame, grid_cols: list[str], names: Mapping[str, str] | None = None
) -> list[str]:
    """Fitted log-log slopes of the MSE against m (weighted least squares), when m is the only varying axis."""
    if "n_features" not in grid_cols or any(summary[c].nunique() > 1 for c in grid_cols if c != "n_features"):
        return []
    if summary[summary["metric"] == "mse"].empty or summary["n_features"].nunique() < 3:
        return []
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
        "Weighted least-squares fit of log MSE on log m (weights from the MCSE). An unbiased "
        "random-feature estimator has MSE exactly proportional to 1/m for iid directions (slope -1); block-"
        "orthogonal directions add a term that changes at m = d (docs page *Theory*, section 1).",
        "",
        md_table(show, names),
        "",
    ]
