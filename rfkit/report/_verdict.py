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


#: grid axes that count a kernel estimator's size (the number of directions or columns)
_BUDGET_AXES = ("n_features", "feature_dim")


def _with_feature_columns(result: StudyResult, rows: pd.DataFrame) -> pd.DataFrame | None:
    """``rows`` with each estimator's feature columns per query ``feature_dim`` (from the pairs
    table), or None where they are unknown or the same for every estimator of each cell."""
    pairs = result.pairs
    need = {"cell", "estimator", "feature_dim"}
    if pairs is None or "feature_dim" in rows.columns or not need <= set(pairs.columns):
        return None
    cols = pairs[["cell", "estimator", "feature_dim"]].drop_duplicates(["cell", "estimator"])
    out = rows.merge(cols, on=["cell", "estimator"], how="left", validate="many_to_one")
    if out["feature_dim"].isna().any() or (out.groupby("cell")["feature_dim"].nunique() <= 1).all():
        return None
    return out


def winner_lines(result: StudyResult) -> list[str]:
    """Which estimator has the lowest error in each grid setting, in a few lines.

    The metric is the first of the study's metrics where lower is better (``mse``, ``rel_mse``,
    ``kl``, ...). The first line counts the settings each estimator wins; below it, when there
    are at most ``MAX_SETTING_LINES`` settings, one line per setting (its values of the grid axes
    that vary) names the winner and the runner-up with their estimates and MCSEs, and says when
    the two are within 2 combined MCSEs (a tie at this number of trials). Rows with a non-finite
    estimate take no part. Estimators are named by their display names, as in the figures.

    Estimators are compared at equal cost. Where the estimators of one grid cell differ in their
    feature columns per query (``feature_dim`` in the pairs table: Trig and Hyperbolic PRF have
    D = 2m columns for m directions, PRF m), a setting is a value of D (with the other grid axes
    that vary) instead of a cell, and only settings where at least two estimators have that D
    are ranked. Where no D is shared, the cells are ranked as they are and the first line says
    that their costs differ.

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
    setting: str | list[str] = "cell"
    note = ""
    costed = _with_feature_columns(result, rows)
    if costed is not None:
        key = [k for k in result.grid_columns if k not in _BUDGET_AXES and _varies(costed[k])]
        shared = costed.groupby([*key, "feature_dim"], sort=True)["estimator"].transform("size") >= 2
        if shared.any():
            rows, setting = costed[shared], [*key, "feature_dim"]
        else:
            note = " (feature columns per query differ within each setting: not at equal cost)"
    # the axes that vary name a setting (a single-valued axis is the same in every line)
    grid = (
        [k for k in result.grid_columns if _varies(rows[k])]
        if setting == "cell"
        else [*setting[:-1], "feature_dim"]
    )
    shown = estimator_names(result.design)
    rows = rows.assign(estimator=[shown.get(str(v), str(v)) for v in rows["estimator"]])
    wins: dict[str, int] = {}
    details = []
    for _, grp in rows.groupby(setting, sort=True):
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
    cost = " at equal cost (feature_dim = feature columns per query)" if setting != "cell" else ""
    head = f"lowest {name}{cost}: {', '.join(counts)}{note}"
    if len(details) > MAX_SETTING_LINES:
        return [head + " (per setting: summary.csv)"]
    return [head, *details]
