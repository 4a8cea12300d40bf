"""Monte Carlo standard errors: the mean of per-trial values with its MCSE, and its rounding.

:func:`mcse_summary` gives a metric's estimate, MCSE and t interval; :func:`format_mcse` writes
``estimate ± MCSE`` with the MCSE to 2 significant figures and the estimate to the same decimal
place (ArviZ's ``round_to="auto"``). Both read numbers only.
"""

from __future__ import annotations

import numpy as np

__all__ = ["mcse_summary", "format_mcse"]


def mcse_summary(values: np.ndarray, confidence: float = 0.95) -> dict[str, float]:
    """Mean of i.i.d. per-trial values with its Monte Carlo standard error and a t interval.

    The interval is ``statsmodels``' ``DescrStatsW(values).tconfint_mean``.

    Examples
    --------
    >>> s = mcse_summary(np.array([1.0, 2.0, 3.0, 4.0]))
    >>> s["estimate"], round(s["mcse"], 4), s["n"]
    (2.5, 0.6455, 4)
    """
    from statsmodels.stats.weightstats import DescrStatsW

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    n = v.size
    if n == 0:
        return {"estimate": np.nan, "mcse": np.nan, "ci_low": np.nan, "ci_high": np.nan, "n": 0}
    mean = float(v.mean())
    if n < 2:
        return {"estimate": mean, "mcse": np.nan, "ci_low": np.nan, "ci_high": np.nan, "n": n}
    se = float(v.std(ddof=1) / np.sqrt(n))
    if se == 0.0:
        lo = hi = mean
    else:
        lo, hi = DescrStatsW(v).tconfint_mean(alpha=1 - confidence)
    return {"estimate": mean, "mcse": se, "ci_low": float(lo), "ci_high": float(hi), "n": n}


def _decimals(mcse: float) -> int:
    return int(1 - np.floor(np.log10(mcse)))


def format_mcse(estimate: float, mcse: float, *, latex: bool = False) -> str:
    """``estimate ± mcse`` with the MCSE to 2 significant figures and the estimate to match.

    Very small or large values use a shared power of ten: ``(1.23 ± 0.04)e-5``
    (``\\times 10^{-5}`` in LaTeX).

    Examples
    --------
    >>> format_mcse(0.012345, 0.00021)
    '0.01235 ± 0.00021'
    >>> format_mcse(123456.0, 789.0)
    '(1.2346 ± 0.0079)e5'

    An MCSE below 1e-12 of the estimate is round-off (a deterministic estimator): the value is
    shown alone.

    >>> format_mcse(2.926002366940087e-05, 7.8e-23)
    '2.926e-05'
    """
    pm = r" \pm " if latex else " ± "
    if not np.isfinite(estimate):
        return "n/a"
    if not np.isfinite(mcse) or mcse <= 1e-12 * abs(estimate):  # zero, or round-off of an exact value
        return f"{estimate:.4g}"
    mag = abs(estimate) if estimate != 0 else mcse
    if mag >= 1e4 or mag < 1e-3:
        exp = int(np.floor(np.log10(mag)))
        scale = 10.0**exp
        dec = max(0, _decimals(mcse / scale))
        body = f"{estimate / scale:.{dec}f}{pm}{mcse / scale:.{dec}f}"
        return f"$({body}) \\times 10^{{{exp}}}$" if latex else f"({body})e{exp}"
    dec = max(0, _decimals(mcse))
    body = f"{estimate:.{dec}f}{pm}{mcse:.{dec}f}"
    return f"${body}$" if latex else body
