"""Log-log slopes of a metric against the feature count, fitted with statsmodels (WLS)."""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["fit_slopes"]


def fit_slopes(
    summary: pd.DataFrame, metric: str = "mse", x: str = "n_features", confidence: float = 0.95
) -> pd.DataFrame:
    r"""Slope of :math:`\log(\text{metric})` on :math:`\log(x)` per estimator, with a confidence interval.

    Weighted least squares (``statsmodels.api.WLS``) with weights :math:`1/\mathrm{se}^2`,
    :math:`\mathrm{se} = \mathrm{MCSE}/\text{estimate}` (delta method on the log). For an
    unbiased random-feature estimator the MSE is exactly :math:`\propto 1/m` (slope -1).

    Returns
    -------
    DataFrame
        ``estimator``, ``slope``, ``ci_low``, ``ci_high``, ``intercept``, ``n_points``.
    """
    import statsmodels.api as sm

    s = summary[(summary["metric"] == metric) & (summary["estimate"] > 0)]
    rows = []
    for lab, g in s.groupby("estimator", sort=False):
        g = g[np.isfinite(g["mcse"]) & (g["mcse"] > 0)]
        if g[x].nunique() < 2:
            continue
        X = sm.add_constant(np.log(g[x].to_numpy(dtype=float)))
        y = np.log(g["estimate"].to_numpy())
        w = (g["estimate"] / g["mcse"]).to_numpy() ** 2
        fit = sm.WLS(y, X, weights=w).fit()
        lo, hi = fit.conf_int(alpha=1 - confidence)[1]
        rows.append(
            {
                "estimator": lab,
                "slope": float(fit.params[1]),
                "ci_low": float(lo),
                "ci_high": float(hi),
                "intercept": float(fit.params[0]),
                "n_points": len(g),
            }
        )
    return pd.DataFrame(rows)
