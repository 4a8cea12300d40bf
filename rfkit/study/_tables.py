"""Tables computed from a study's summary: facets of varying settings, rankings, heavy-tail flags.

These read ``StudyResult.summary()`` / ``compare_theory()`` frames and compute; the report
(:mod:`rfkit.report`) and the command line show what they return.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._mcse import format_mcse, mcse_summary
from ._metric_sources import metric_column, metric_ddof, metric_is_proportion

__all__ = ["facets", "ranking_table", "heavy_tailed", "HEAVY_TAIL_RATIO", "summarize", "row_status", "not_ok"]

#: prediction / measurement above which a z-score is flagged as not testing the formula
HEAVY_TAIL_RATIO = 3.0


def row_status(n_failed: int, n_nonfinite: int, n_nan_rows: int = 0, inf_mcse: bool = False) -> str:
    """The status of a summary row: ``"ok"``, or the reasons it is not, joined by ``","``.

    ``"failed"``: some trials raised (counted in ``n_failed``, left out); ``"nonfinite"``: some
    trial values are NaN or infinite (``n_nonfinite``, kept: the estimate is then non-finite);
    ``"nan_rows"``: attention outputs with NaN rows (``n_nan_rows``, summed over trials);
    ``"inf_mcse"``: the MCSE is infinite (finite values never give one: :func:`mcse_summary` scales them).

    >>> row_status(0, 0), row_status(2, 3), row_status(0, 0, 31), row_status(0, 0, inf_mcse=True)
    ('ok', 'failed,nonfinite', 'nan_rows', 'inf_mcse')
    """
    counts = {"failed": n_failed, "nonfinite": n_nonfinite, "nan_rows": n_nan_rows, "inf_mcse": inf_mcse}
    return ",".join(r for r, k in counts.items() if k) or "ok"


def summarize(
    trials: pd.DataFrame,
    keys: list[str],
    metrics: list[str],
    confidence: float = 0.95,
    cost_columns: dict[str, str] | None = None,
) -> pd.DataFrame:
    """One row per (``keys``, metric): estimate, MCSE, interval, counts and status (``StudyResult.summary``).

    Trials that raised (status other than ``"ok"``) are left out and counted in ``n_failed``;
    every other trial's value counts, finite or not (``n_nonfinite``: see :func:`mcse_summary`).
    Each metric's record says how: a proportion (``proportion``,
    :func:`~rfkit.study._metric_sources.metric_is_proportion`) gets a Wilson interval, and a
    metric with ``ddof`` > 0 (the variance: ddof 1) has its estimate, MCSE and interval
    multiplied by n / (n - ddof) where n > ddof.
    Attention trials with NaN output rows add ``n_nan_rows`` (summed over the trials), and
    attention designs carry ``cost``, the estimator's cost per query in the cell (exact keys plus
    features, :mod:`rfkit.study._cost`), beside the keys. ``cost_columns`` (drop-in designs: a
    metric -> the trials column of the cost on the model it measures) gives a metric's rows the
    mean over the kept trials of that column as ``cost`` (NaN where none is finite).
    """
    rows = []
    nan_rows = "n_nan_rows" in trials
    for key, grp in trials.groupby(keys, sort=False):
        ok = grp[grp["status"] == "ok"]
        n_failed = int((grp["status"] != "ok").sum())
        n_nan = int(ok["n_nan_rows"].sum()) if nan_rows else 0
        base = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        if "cost" in trials:  # attention designs: cost per query of the (cell, estimator)
            base["cost"] = float(grp["cost"].iloc[0])
        for metric in metrics:
            s = mcse_summary(
                ok[metric_column(metric)].to_numpy(), confidence, proportion=metric_is_proportion(metric)
            )
            stats = {k: s[k] for k in ("estimate", "mcse", "ci_low", "ci_high")}
            ddof = metric_ddof(metric)
            if ddof and s["n"] > ddof:
                f = s["n"] / (s["n"] - ddof)
                stats = {k: v * f for k, v in stats.items()}
            cost = {}
            if cost_columns and cost_columns.get(metric) in ok:  # drop-in: the cost on the metric's model
                c = ok[cost_columns[metric]].to_numpy(dtype=float)
                cost["cost"] = float(np.mean(c[np.isfinite(c)])) if np.isfinite(c).any() else float("nan")
            row = {**base, **cost, "metric": metric, **stats, "n_trials": s["n"], "n_failed": n_failed}
            row["n_nonfinite"] = s["n_nonfinite"]
            if nan_rows:
                row["n_nan_rows"] = n_nan
            row["status"] = row_status(n_failed, s["n_nonfinite"], n_nan, s["mcse"] == np.inf)
            rows.append(row)
    return pd.DataFrame(rows)


def not_ok(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary rows whose status is not ``"ok"`` (none for a summary saved before statuses).

    Parameters
    ----------
    summary : pandas.DataFrame
        A summary table.

    Returns
    -------
    pandas.DataFrame
        Its rows whose ``status`` is not ``"ok"``.
    """
    if "status" not in summary:
        return summary.iloc[:0]
    return summary[summary["status"] != "ok"]


def facets(frame: pd.DataFrame, grid_cols: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """Split a table by the grid axes that vary, so figures never pool different settings.

    The axes are those other than ``dataset``, ``n_features`` and ``feature_dim`` with more than
    one value in ``frame`` (e.g. a data ``regime``).

    Parameters
    ----------
    frame : pandas.DataFrame
        A summary or trial table.
    grid_cols : list of str
        The design's grid axes.

    Returns
    -------
    list of tuple of (str, pandas.DataFrame)
        ``(name suffix, rows)`` per value of those axes (suffix ``"_axis-value..."``); one
        facet ``("", frame)`` when none varies.
    """
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


def ranking_table(
    summary: pd.DataFrame, grid_cols: list[str], metric: str = "rel_mse"
) -> list[tuple[str, pd.DataFrame]]:
    """Rank the estimators by a metric, one table per value of the grid axes other than the feature count.

    Each table has one row per estimator: its rank, the geometric mean over feature counts of its
    ``metric`` divided by the best estimator's at that count (1 = best everywhere), and the metric
    at every feature count (estimate with its MCSE). Rows are ordered by that mean ratio.

    Parameters
    ----------
    summary : pandas.DataFrame
        A summary table (``StudyResult.summary()``).
    grid_cols : list of str
        The design's grid axes.
    metric : str, default="rel_mse"
        The metric ranked by.

    Returns
    -------
    list of tuple of (str, pandas.DataFrame)
        ``(name suffix, table)`` per facet (:func:`facets`).
    """
    x = "feature_dim" if "feature_dim" in grid_cols else "n_features"
    s = summary[summary["metric"] == metric]
    out = []
    for suffix, rows in facets(s, grid_cols):
        # dropna=False: an estimator whose every estimate is NaN (all trials non-finite) keeps its row
        est = rows.pivot_table(index="estimator", columns=x, values="estimate", aggfunc="first", dropna=False)
        se = rows.pivot_table(index="estimator", columns=x, values="mcse", aggfunc="first", dropna=False)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            ratio = est / est.where(np.isfinite(est)).min(axis=0)
            gm = np.exp(np.log(ratio).mean(axis=1))  # NaN or inf where an estimate is: ranked last
        order = gm.sort_values(kind="stable", na_position="last").index
        table = pd.DataFrame({"rank": range(1, len(order) + 1), "estimator": list(order)})
        table[f"{metric} / best (geom. mean)"] = [f"{gm[e]:.3g}" for e in order]
        bad = (
            rows.pivot_table(
                index="estimator", columns=x, values="n_nonfinite", aggfunc="first", dropna=False
            )
            if "n_nonfinite" in rows
            else None
        )
        num = (
            rows.pivot_table(index="estimator", columns=x, values="n_trials", aggfunc="first", dropna=False)
            if bad is not None
            else None
        )
        for col in est.columns:
            table[f"{x}={col}"] = [
                format_mcse(
                    est.loc[e, col],
                    se.loc[e, col],
                    n_nonfinite=0
                    if bad is None or not np.isfinite(bad.loc[e, col])
                    else int(bad.loc[e, col]),
                    n=None if num is None or not np.isfinite(num.loc[e, col]) else int(num.loc[e, col]),
                )
                for e in order
            ]
        out.append((suffix.lstrip("_"), table))
    return out


def heavy_tailed(t: pd.DataFrame) -> np.ndarray:
    """Theory rows whose predicted MSE exceeds the measured one more than ``HEAVY_TAIL_RATIO`` times.

    There the squared error is heavy-tailed: the sample MSE and its MCSE miss the rare large
    draws that carry the mean, so the row's z-score does not test the formula.

    Parameters
    ----------
    t : pandas.DataFrame
        A theory comparison (``StudyResult.compare_theory()``) with the columns ``predicted``
        and ``measured``.

    Returns
    -------
    ndarray of bool
        One flag per row.
    """
    return (t["predicted"] > HEAVY_TAIL_RATIO * t["measured"]).to_numpy()
