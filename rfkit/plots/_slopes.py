"""Log-log slopes of a metric against the feature count, fitted by weighted least squares."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["fit_slopes"]


def fit_slopes(
    summary: pd.DataFrame, metric: str = "mse", x: str = "n_features", confidence: float = 0.95
) -> pd.DataFrame:
    r"""Slope of :math:`\log(\text{metric})` on :math:`\log(x)` per estimator, with a confidence interval.

    Weighted least squares with weights :math:`1/\mathrm{se}^2`,
    :math:`\mathrm{se} = \mathrm{MCSE}/\text{estimate}` (delta method on the log), and a t
    interval on ``n_points - 2`` degrees of freedom (the numbers of ``statsmodels.api.WLS`` and
    its ``conf_int``, computed here with NumPy: importing statsmodels costs about a second). For an
    unbiased random-feature estimator the MSE is exactly :math:`\propto 1/m` (slope -1).

    Parameters
    ----------
    summary : pandas.DataFrame
        A study summary (``StudyResult.summary()``): one row per (cell, estimator, metric).
    metric : str, default="mse"
        The metric regressed.
    x : str, default="n_features"
        The column regressed on.
    confidence : float, default=0.95
        The level of the slope's interval.

    Returns
    -------
    DataFrame
        ``estimator``, ``slope``, ``ci_low``, ``ci_high``, ``intercept``, ``n_points``.
    """
    from scipy.special import stdtrit  # the t quantile (what scipy.stats.t.ppf computes)

    s = summary[(summary["metric"] == metric) & (summary["estimate"] > 0)]
    rows = []
    for lab, g in s.groupby("estimator", sort=False):
        g = g[np.isfinite(g["mcse"]) & (g["mcse"] > 0)]
        if g[x].nunique() < 2:
            continue
        params, half = _wls_line(
            np.log(g[x].to_numpy(dtype=float)),
            np.log(g["estimate"].to_numpy(dtype=float)),
            (g["estimate"] / g["mcse"]).to_numpy(dtype=float) ** 2,
            confidence,
            stdtrit,
        )
        rows.append(
            {
                "estimator": lab,
                "slope": float(params[1]),
                "ci_low": float(params[1] - half),
                "ci_high": float(params[1] + half),
                "intercept": float(params[0]),
                "n_points": len(g),
            }
        )
    return pd.DataFrame(rows)


def _wls_line(
    u: np.ndarray, y: np.ndarray, w: np.ndarray, confidence: float, stdtrit: Any
) -> tuple[np.ndarray, float]:
    """Intercept and slope of ``y ~ 1 + u`` weighted by ``w``, and the half-width of the slope's t interval."""
    sw = np.sqrt(w)
    Xw = np.column_stack([np.ones_like(u), u]) * sw[:, None]
    yw = y * sw
    pinv = np.linalg.pinv(Xw)
    params = pinv @ yw
    df = len(y) - 2
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = float(np.sum((yw - Xw @ params) ** 2)) / df if df > 0 else np.nan
        se = np.sqrt(scale * (pinv @ pinv.T)[1, 1])
        q = float(stdtrit(df, 1.0 - (1.0 - confidence) / 2.0)) if df > 0 else np.nan
    return params, float(q * se)
