"""Tables computed from a study's summary: facets of varying settings, rankings, heavy-tail flags.

These read ``StudyResult.summary()`` / ``compare_theory()`` frames and compute; the report
(:mod:`rfkit.report`) and the command line show what they return.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._mcse import format_mcse

__all__ = ["facets", "ranking_table", "heavy_tailed", "HEAVY_TAIL_RATIO"]

#: prediction / measurement above which a z-score is flagged as not testing the formula
HEAVY_TAIL_RATIO = 3.0


def facets(frame: pd.DataFrame, grid_cols: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """``(name suffix, rows)`` per value of the grid axes other than ``dataset`` / ``n_features`` that vary
    (e.g. a data ``regime``), so figures never pool different settings; one facet ``("", frame)`` otherwise.
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
    """Estimators ranked by a metric, one table per value of the grid axes other than the feature count.

    Each table has one row per estimator: its rank, the geometric mean over feature counts of its
    ``metric`` divided by the best estimator's at that count (1 = best everywhere), and the metric
    at every feature count (estimate with its MCSE). Rows are ordered by that mean ratio.
    """
    x = "feature_dim" if "feature_dim" in grid_cols else "n_features"
    s = summary[summary["metric"] == metric]
    out = []
    for suffix, rows in facets(s, grid_cols):
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


def heavy_tailed(t: pd.DataFrame) -> np.ndarray:
    """Theory rows whose predicted MSE exceeds the measured one more than ``HEAVY_TAIL_RATIO`` times.

    There the squared error is heavy-tailed: the sample MSE and its MCSE miss the rare large
    draws that carry the mean, so the row's z-score does not test the formula (boolean array).
    """
    return (t["predicted"] > HEAVY_TAIL_RATIO * t["measured"]).to_numpy()
