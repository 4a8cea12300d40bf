"""Monte Carlo standard errors: the mean of per-trial values with its MCSE, and its rounding.

:func:`mcse_summary` gives a metric's estimate, MCSE and interval (a t interval; a Wilson
interval for a proportion) and counts the non-finite values; :func:`format_mcse` writes
``estimate ± MCSE`` with the MCSE to 2 significant figures and the estimate to the same decimal
place (ArviZ's ``round_to="auto"``). It is the one number format of the console, the Markdown
report and the LaTeX tables. Both read numbers only.

Non-finite values are never dropped: the statistics are computed on every value (so one
infinite value makes the estimate infinite, a NaN makes it NaN) and the count of non-finite
values is returned beside them (docs page *Studies*, section "Non-finite trials").
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from scipy.special import ndtri, stdtrit

from .._params import check_real
from ..exceptions import InvalidParameterError

__all__ = ["mcse_summary", "format_mcse", "format_interval"]


def _trial_values(values: Any) -> np.ndarray:
    """``values`` as a 1-D float array of real numbers, or InvalidParameterError naming ``values``."""
    try:
        arr = np.asarray(values)
    except Exception as exc:  # noqa: BLE001 - ragged nested lists and the like
        raise InvalidParameterError(
            f"The `values` parameter of mcse_summary must be a 1-D array of real numbers. Got {values!r:.80} "
            f"instead ({type(exc).__name__})."
        ) from exc
    if arr.dtype.kind not in "biuf" or arr.ndim > 1:
        raise InvalidParameterError(
            "The `values` parameter of mcse_summary must be a 1-D array of real numbers (one per trial). "
            f"Got an array of dtype {arr.dtype} and shape {arr.shape} instead."
        )
    return arr.astype(float).ravel()


def _proportion_interval(v: np.ndarray, confidence: float) -> tuple[float, float] | None:
    r"""Wilson score interval of a 0/1 sample; None if not 0/1.

    Wilson (JASA 1927): centre :math:`(\hat p + z^2/2n)/(1 + z^2/n)`, half-width
    :math:`z\sqrt{\hat p(1-\hat p)/n + z^2/4n^2}/(1 + z^2/n)`, clipped to [0, 1] against round-off,
    with :math:`z` the normal quantile at :math:`(1 + \text{confidence})/2`: the numbers of
    ``statsmodels``' ``proportion_confint(method="wilson")`` (tested), without importing it.
    """
    if v.size == 0 or not np.isin(v, (0.0, 1.0)).all():
        return None
    n = float(v.size)
    p = float(v.sum()) / n
    z = float(ndtri(0.5 + confidence / 2))
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    dist = z * np.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n**2)) / denom
    return float(np.clip(center - dist, 0, 1)), float(np.clip(center + dist, 0, 1))


def mcse_summary(values: np.ndarray, confidence: float = 0.95, *, proportion: bool = False) -> dict[str, Any]:
    """Mean of i.i.d. per-trial values with its Monte Carlo standard error and an interval.

    Parameters
    ----------
    values : array_like
        One value per trial. Every value counts: a non-finite one is not dropped.
    confidence : float
        Level of the interval.
    proportion : bool
        The values are 0/1 outcomes (the coverage of a bound): the interval is Wilson's score
        interval (``statsmodels``' ``proportion_confint``, ``method="wilson"``), which stays
        inside [0, 1] and is not empty at 0 or n successes (40 of 40: [0.912, 1]). The estimate
        and MCSE are those of any mean.

    Returns
    -------
    dict
        ``estimate``, ``mcse``, ``ci_low``, ``ci_high`` (the t interval on ``n - 1`` degrees of
        freedom, the numbers of ``statsmodels``' ``DescrStatsW(values).tconfint_mean``, or Wilson's), ``n`` (all values),
        ``n_nonfinite`` (NaN or infinite values among them) and ``nonfinite`` (``n_nonfinite > 0``).
        With non-finite values the estimate is the plain mean of all values (inf, -inf or NaN,
        never the mean of a filtered subset) and the MCSE and interval are NaN.

    Examples
    --------
    >>> s = mcse_summary(np.array([1.0, 2.0, 3.0, 4.0]))
    >>> s["estimate"], round(s["mcse"], 4), s["n"], s["n_nonfinite"]
    (2.5, 0.6455, 4, 0)
    >>> s = mcse_summary(np.array([1, 2, np.nan, np.inf, 3]))
    >>> s["estimate"], s["n"], s["n_nonfinite"], s["nonfinite"]
    (nan, 5, 2, True)
    >>> s = mcse_summary(np.ones(40), proportion=True)
    >>> round(s["ci_low"], 3), s["ci_high"]
    (0.912, 1.0)
    """
    confidence = check_real(confidence, "confidence", "mcse_summary", low=0, high=1, closed="neither")
    v = _trial_values(values)
    n = v.size
    n_bad = int(n - np.count_nonzero(np.isfinite(v)))
    out: dict[str, Any] = {"estimate": np.nan, "mcse": np.nan, "ci_low": np.nan, "ci_high": np.nan, "n": n}
    flags = {"n_nonfinite": n_bad, "nonfinite": n_bad > 0}
    if n == 0:
        return {**out, **flags}
    if n_bad:
        with np.errstate(invalid="ignore", over="ignore"):
            out["estimate"] = float(v.mean())  # inf, -inf or NaN: honest, not a filtered mean
        return {**out, **flags}
    mean = float(v.mean())
    out["estimate"] = mean
    wilson = _proportion_interval(v, confidence) if proportion else None
    if wilson is not None:
        out["ci_low"], out["ci_high"] = wilson
    if n < 2:
        return {**out, **flags}
    with np.errstate(over="ignore", invalid="ignore"):  # finite values whose squares overflow: an inf MCSE
        se = float(v.std(ddof=1) / np.sqrt(n))
    out["mcse"] = se
    if wilson is None:
        if se == 0.0:
            lo = hi = mean
        elif not np.isfinite(se):
            lo = hi = np.nan
        else:
            half = float(stdtrit(n - 1, 0.5 + confidence / 2)) * se  # Student's t quantile, n - 1 df
            lo, hi = mean - half, mean + half
        out["ci_low"], out["ci_high"] = float(lo), float(hi)
    return {**out, **flags}


def _decimals(mcse: float) -> int:
    return int(1 - np.floor(np.log10(mcse)))


def _fixed(value: float, dec: int) -> str:
    """``value`` to ``dec`` decimals; a value that rounds to zero has no sign (``0.0``, not ``-0.0``)."""
    text = f"{value:.{dec}f}"
    return text[1:] if text.startswith("-") and float(text) == 0.0 else text


def format_mcse(
    estimate: float,
    mcse: float,
    *,
    latex: bool = False,
    n_nonfinite: int = 0,
    n: int | None = None,
) -> str:
    """``estimate ± mcse`` with the MCSE to 2 significant figures and the estimate to match.

    Very small or large values use a shared power of ten, that of the larger of the estimate and
    the MCSE, so the MCSE never has more than two digits before the point: ``(1.23 ± 0.04)e-5``,
    ``(0.0 ± 1.1)e-4`` for 4e-6 ± 1.055e-4 (``\\times 10^{-5}`` in LaTeX). A non-finite estimate
    is written ``inf``, ``-inf`` or ``n/a`` (NaN); with ``n_nonfinite`` the text says how many of
    the ``n`` trial values were non-finite.

    Examples
    --------
    >>> format_mcse(0.012345, 0.00021)
    '0.01235 ± 0.00021'
    >>> format_mcse(123456.0, 789.0)
    '(1.2346 ± 0.0079)e5'
    >>> format_mcse(4e-6, 1.055e-4)
    '(0.0 ± 1.1)e-4'
    >>> format_mcse(float("inf"), float("nan"), n_nonfinite=99, n=100)
    'inf (99 of 100 non-finite)'

    An MCSE below 1e-12 of the estimate is round-off (a deterministic estimator): the value is
    shown alone.

    >>> format_mcse(2.926002366940087e-05, 7.8e-23)
    '2.926e-05'
    """
    for name, value in (("estimate", estimate), ("mcse", mcse)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise InvalidParameterError(
                f"The `{name}` parameter of format_mcse must be a real number. Got {value!r} instead."
            )
    if mcse < 0:
        raise InvalidParameterError(
            f"The `mcse` parameter of format_mcse must be a real number >= 0 (or NaN). Got {mcse!r} instead."
        )
    note = f" ({n_nonfinite} of {n if n is not None else '?'} non-finite)" if n_nonfinite else ""
    pm = r" \pm " if latex else " ± "
    if not np.isfinite(estimate):
        return ("n/a" if np.isnan(estimate) else ("inf" if estimate > 0 else "-inf")) + note
    if mcse == np.inf:  # finite values whose squares overflow
        return (f"${estimate:.4g}{pm}\\infty$" if latex else f"{estimate:.4g}{pm}inf") + note
    if not np.isfinite(mcse) or mcse <= 1e-12 * abs(estimate):  # zero, or round-off of an exact value
        return f"{estimate:.4g}" + note
    mag = max(abs(estimate), mcse)
    if mag >= 1e4 or mag < 1e-3:
        exp = int(np.floor(np.log10(mag)))
        scale = 10.0**exp
        dec = max(0, _decimals(mcse / scale))
        body = f"{_fixed(estimate / scale, dec)}{pm}{mcse / scale:.{dec}f}"
        return (f"$({body}) \\times 10^{{{exp}}}$" if latex else f"({body})e{exp}") + note
    dec = max(0, _decimals(mcse))
    body = f"{_fixed(estimate, dec)}{pm}{mcse:.{dec}f}"
    return (f"${body}$" if latex else body) + note


def format_interval(low: float, high: float) -> str:
    """An interval ``[low, high]`` to 3 significant figures (the Wilson interval of a proportion).

    >>> format_interval(0.91238, 1.0)
    '[0.912, 1]'
    """
    if not (np.isfinite(low) and np.isfinite(high)):
        return "[n/a]"
    return f"[{low:.3g}, {high:.3g}]"
