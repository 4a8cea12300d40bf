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
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
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
        ``n_nonfinite`` (NaN or infinite values among them), ``nonfinite`` (``n_nonfinite > 0``)
        and ``overflow`` (every value is finite but a bound of the interval lies beyond the
        largest float, and is given as ``-inf`` or ``inf``).
        With non-finite values the estimate is the plain mean of all values (inf, -inf or NaN,
        never the mean of a filtered subset) and the MCSE and interval are NaN.

    Notes
    -----
    The statistics are computed on the values divided by a power of two near their largest
    magnitude, then scaled back. The division is exact, so ordinary values give the plain mean
    and standard deviation bit for bit, while values near the largest float (whose sum
    overflows), huge values (whose squares overflow) and subnormal ones (whose squares
    underflow) get the right estimate and MCSE. The estimate and the MCSE of finite values are
    always finite (the MCSE is at most half their range); only a bound of the t interval can
    exceed the float range, and ``overflow`` says so.

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
    flags = {"n_nonfinite": n_bad, "nonfinite": n_bad > 0, "overflow": False}
    if n == 0:
        return {**out, **flags}
    if n_bad:
        with np.errstate(invalid="ignore", over="ignore"):
            out["estimate"] = float(v.mean())  # inf, -inf or NaN: honest, not a filtered mean
        return {**out, **flags}
    # statistics of w = v / 2**e with max |w| in [0.5, 1): a power of two scales exactly, so ordinary
    # values give the plain numbers bit for bit, while sums of values near the largest float and
    # squares of huge or subnormal values neither overflow nor underflow
    e = int(np.frexp(np.max(np.abs(v)))[1])
    w = np.ldexp(v, -e)
    mean_w = float(w.mean())
    out["estimate"] = float(np.ldexp(mean_w, e))  # |mean| <= max |v|: always finite
    wilson = _proportion_interval(v, confidence) if proportion else None
    if wilson is not None:
        out["ci_low"], out["ci_high"] = wilson
    if n < 2:
        return {**out, **flags}
    se_w = float(w.std(ddof=1) / np.sqrt(n))
    out["mcse"] = float(np.ldexp(se_w, e))  # at most half the range of the values: always finite
    if wilson is None:
        if se_w == 0.0:
            lo_w = hi_w = mean_w
        else:
            half_w = float(stdtrit(n - 1, 0.5 + confidence / 2)) * se_w  # Student's t quantile, n - 1 df
            lo_w, hi_w = mean_w - half_w, mean_w + half_w
        with np.errstate(over="ignore"):  # a bound beyond the largest float: infinite and flagged
            out["ci_low"], out["ci_high"] = float(np.ldexp(lo_w, e)), float(np.ldexp(hi_w, e))
        flags["overflow"] = not (np.isfinite(out["ci_low"]) and np.isfinite(out["ci_high"]))
    return {**out, **flags}


def _to_place(value: float | Decimal, place: int) -> Decimal:
    """``value`` rounded half-even to a multiple of ``10**place``; a rounded zero has no sign."""
    with localcontext() as ctx:
        ctx.prec = 60  # enough for any float rounded at an MCSE above 1e-12 of it
        out = Decimal(value).quantize(Decimal(1).scaleb(place), rounding=ROUND_HALF_EVEN)
    return out.copy_abs() if out.is_zero() else out


def _rounded(estimate: float, mcse: float) -> tuple[Decimal, Decimal, int]:
    """The estimate and MCSE (> 0) rounded to the place of the MCSE's second significant digit, and that place.

    Decimal arithmetic on the floats' exact values: the same half-even rounding as ``f"{x:.2f}"``,
    with powers of ten applied exactly (subnormal numbers included). An MCSE that rounds up to the
    next power of ten keeps 2 significant figures (0.0998 is 0.10, not 0.100).
    """
    se = Decimal(mcse)
    place = se.adjusted() - 1
    se_r = _to_place(se, place)
    if se_r.adjusted() > se.adjusted():
        place += 1
        se_r = _to_place(se, place)
    return _to_place(estimate, place), se_r, place


def _plain(value: float) -> str:
    """``value`` to 4 significant figures; zero has no sign."""
    return f"{0.0 if value == 0 else value:.4g}"


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

    Parameters
    ----------
    estimate : float
        The Monte Carlo estimate.
    mcse : float
        Its Monte Carlo standard error.
    latex : bool, default=False
        Write LaTeX math (``$... \\pm ...$``) instead of plain text.
    n_nonfinite : int, default=0
        How many of the trial values were non-finite (said in the text when not 0).
    n : int, optional
        The number of trial values, for that count.

    Returns
    -------
    str
        The formatted text.

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
    if mcse == np.inf:  # an infinite MCSE (summaries saved before MCSEs were computed scaled)
        return (f"${_plain(estimate)}{pm}\\infty$" if latex else f"{_plain(estimate)}{pm}inf") + note
    if not np.isfinite(mcse) or mcse <= 1e-12 * abs(estimate):  # zero, or round-off of an exact value
        return _plain(estimate) + note
    est, se, place = _rounded(float(estimate), float(mcse))
    exp = max(
        est.copy_abs(), se
    ).adjusted()  # of the rounded numbers: 9.99996e-5 ± 1e-6 is (1.000 ± 0.010)e-4
    if exp >= 4 or exp < -3:
        body = f"{est.scaleb(-exp):f}{pm}{se.scaleb(-exp):f}"
        return (f"$({body}) \\times 10^{{{exp}}}$" if latex else f"({body})e{exp}") + note
    if place > 0:  # an MCSE of 100 or more: whole numbers
        est, se = _to_place(float(estimate), 0), _to_place(float(mcse), 0)
    body = f"{est:f}{pm}{se:f}"
    return (f"${body}$" if latex else body) + note


def format_interval(low: float, high: float) -> str:
    """An interval ``[low, high]`` to 3 significant figures (the Wilson interval of a proportion).

    Parameters
    ----------
    low, high : float
        The interval's ends.

    Returns
    -------
    str
        ``[low, high]``; ``[n/a]`` when an end is not finite.

    Examples
    --------
    >>> format_interval(0.91238, 1.0)
    '[0.912, 1]'
    """
    if not (np.isfinite(low) and np.isfinite(high)):
        return "[n/a]"
    return f"[{low:.3g}, {high:.3g}]"
