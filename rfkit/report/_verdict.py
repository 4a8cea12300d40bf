"""A result in a few lines: the theory-vs-simulation verdict and which estimator wins where.

``rfkit run`` prints these lines last and a result's notebook display (:func:`result_html`) leads
with the verdict, so the console and the notebook say the same thing from the same code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..study.summaries import heavy_tailed
from ..tables import format_mcse
from ._shown import estimator_names

if TYPE_CHECKING:
    from ..study import StudyResult

__all__ = ["theory_verdict", "winner_lines"]

#: |z| within which a measured MSE agrees with its closed form (the project's 5-MCSE rule)
VERDICT_Z = 5.0

#: metrics where lower is better, in the order a winner is named by (the study's first of them)
LOWER_IS_BETTER = (
    "mse",
    "rel_mse",
    "kl",
    "median_rel_sq_err",
    "mean_rel_err",
    "mean_abs_err",
    "dec_head_mse",
    "enc_head_mse",
)

_METRIC_NAMES = {"mse": "MSE", "rel_mse": "relative MSE", "kl": "KL"}

#: settings listed one per line below the winners' count; more are summed up in the count only
MAX_SETTING_LINES = 8


def theory_verdict(result: StudyResult) -> str | None:
    """The line comparing simulation with theory, as ``rfkit run`` prints it.

    ``theory vs simulation (MSE): 18 of 18 within 5 MCSE; max |z| = 2.10``: the rows of
    :meth:`~rfkit.study.StudyResult.compare_theory` for the MSE whose ``|z|`` is at most 5, out
    of those with a finite z; rows whose squared error is detectably heavy-tailed
    (:func:`rfkit.study.summaries.heavy_tailed`) are not counted and their number is said.

    Parameters
    ----------
    result : StudyResult
        A study result.

    Returns
    -------
    str or None
        The line; None when no estimator of the study has a closed form.
    """
    theory = result.compare_theory()
    if theory.empty:
        return None
    t = theory[theory["metric"] == "mse"]
    heavy = heavy_tailed(t)
    light = t[~heavy & t["z"].notna().to_numpy()]  # rows without a z (non-finite) are not counted
    within = int((light["z"].abs() <= VERDICT_Z).sum())
    line = f"theory vs simulation (MSE): {within} of {len(light)} within {VERDICT_Z:g} MCSE"
    if len(light):
        line += f"; max |z| = {light['z'].abs().max():.2f}"
    if heavy.any():
        line += f" ({int(heavy.sum())} heavy-tailed rows not counted: see the report)"
    return line


def _setting(values: dict[str, object]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in values.items()) or "the one setting"


def _varies(column: pd.Series) -> bool:
    try:
        return bool(column.nunique(dropna=False) > 1)
    except TypeError:  # unhashable grid values (lists): compared by their text
        return bool(column.astype(str).nunique() > 1)


def winner_lines(result: StudyResult) -> list[str]:
    """Which estimator has the lowest error in each grid setting, in a few lines.

    The metric is the first of the study's metrics where lower is better (``mse``, ``rel_mse``,
    ``kl``, ...). The first line counts the settings each estimator wins; below it, when there
    are at most ``MAX_SETTING_LINES`` settings, one line per setting (its values of the grid axes
    that vary) names the winner and the runner-up with their estimates and MCSEs, and says when
    the two are within 2 combined MCSEs (a tie at this number of trials). Rows with a non-finite
    estimate take no part. Estimators are named by their display names, as in the figures.

    Parameters
    ----------
    result : StudyResult
        A study result.

    Returns
    -------
    list of str
        The lines; empty when the study has no such metric or fewer than two estimators.
    """
    metric = next((m for m in result.design.metrics if m in LOWER_IS_BETTER), None)
    if metric is None or len(result.design.estimators) < 2:
        return []
    summ = result.summary()
    rows = summ[(summ["metric"] == metric) & np.isfinite(summ["estimate"].to_numpy(dtype=float))]
    if rows.empty:
        return []
    # the axes that vary name a setting (a single-valued axis is the same in every line)
    grid = [k for k in result.grid_columns if _varies(rows[k])]
    shown = estimator_names(result.design)
    rows = rows.assign(estimator=[shown.get(str(v), str(v)) for v in rows["estimator"]])
    wins: dict[str, int] = {}
    details = []
    for _, grp in rows.groupby("cell", sort=True):
        ranked = grp.sort_values("estimate", kind="stable")
        best = ranked.iloc[0]
        wins[str(best["estimator"])] = wins.get(str(best["estimator"]), 0) + 1
        text = (
            f"  {_setting({k: best[k] for k in grid})}: {best['estimator']} "
            f"{format_mcse(best['estimate'], best['mcse'])}"
        )
        if len(ranked) > 1:
            second = ranked.iloc[1]
            text += f"; next {second['estimator']} {format_mcse(second['estimate'], second['mcse'])}"
            gap = float(second["estimate"] - best["estimate"])
            if gap <= 2 * float(np.hypot(best["mcse"], second["mcse"])):
                text += " (within 2 MCSE: a tie)"
        details.append(text)
    name = _METRIC_NAMES.get(metric, metric)
    order = sorted(wins, key=lambda est: -wins[est])  # stable: ties keep the order of first win
    counts = [f"{est} in {wins[est]}" for est in order]
    counts[0] += f" of {len(details)} setting{'s' if len(details) != 1 else ''}"
    head = f"lowest {name}: {', '.join(counts)}"
    if len(details) > MAX_SETTING_LINES:
        return [head + " (per setting: summary.csv)"]
    return [head, *details]
