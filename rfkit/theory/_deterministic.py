r"""Deterministic maps: exact kernels, dimensions, truncation errors, signs (docs page *Theory*, section 2).

With :math:`t = x^\top y`, the Taylor map of degree :math:`n` computes
:math:`T_n(t)=\sum_{j=0}^n t^j/j!` and the limit map of order :math:`n` computes
:math:`L_n(t)=(1+t/n)^n`. Both have zero variance; the only error is the
deterministic truncation error relative to :math:`e^t`.
"""

from __future__ import annotations

import dataclasses
from math import comb, factorial
from typing import Any

import numpy as np

from .._validation import check_int, host_float_array
from ..exceptions import InvalidParameterError
from ..features import Limit, Taylor, slog_taylor_polynomial, taylor_polynomial
from ._special import scipy_special

__all__ = [
    "truncated_kernel",
    "relative_truncation_error",
    "truncation_error_bound",
    "deterministic_feature_dim",
    "negative_region",
    "taylor_real_root",
    "NegativeRegion",
]


def _kind(fm: Any, owner: str) -> tuple[str, int]:
    if isinstance(fm, Taylor):
        return "taylor", fm.degree
    if isinstance(fm, Limit):
        return "limit", fm.n
    raise InvalidParameterError(f"{owner}: expected a Taylor or Limit feature map; got {fm!r}.")


def _t(t: Any) -> np.ndarray:
    return host_float_array(t, "t")


def truncated_kernel(fm: Any, t: Any) -> np.ndarray:
    r"""Exact kernel :math:`\phi(x)^\top\phi(y)` of a deterministic map as a function of :math:`t=x^\top y`.

    Taylor: :math:`T_n(t) = \sum_{j=0}^n t^j/j!` (the series starts at :math:`j=0`; a
    :math:`\sum_{m=1}^\infty` printed in the source of these maps is a typo, corrected here;
    see docs page *Theory*, section 5). Limit: :math:`L_n(t)=(1+t/n)^n`.
    Source: docs page *Theory*, section 2. Exact for every real ``t`` (may overflow to inf
    for huge :math:`|t|`).

    Parameters
    ----------
    fm : Taylor or Limit
        The deterministic feature map (its degree ``n``).
    t : array_like
        Inner products :math:`t = x^\top y` (any shape).

    Returns
    -------
    ndarray
        :math:`T_n(t)` or :math:`L_n(t)`, float64, the shape of ``t``.
    """
    kind, n = _kind(fm, "truncated_kernel")
    t = _t(t)
    if kind == "taylor":
        return taylor_polynomial(t, n)
    return (1.0 + t / n) ** n


def relative_truncation_error(fm: Any, t: Any) -> np.ndarray:
    r"""Signed relative error :math:`1 - K_n(t)/e^t` of a deterministic map (docs page *Theory*, section 2).

    Taylor, :math:`t\ge0`: :math:`1-T_n(t)e^{-t} = P[\mathrm{Poisson}(t) > n]` computed as the
    regularised incomplete gamma :math:`P(n+1, t)` (no cancellation); :math:`t<0` via the
    signed log of :math:`T_n`. Limit: :math:`-\mathrm{expm1}(n\log(1+t/n) - t)` for
    :math:`t>-n`, signed otherwise. Positive values mean the map underestimates :math:`e^t`.

    Parameters
    ----------
    fm : Taylor or Limit
        The deterministic feature map (its degree ``n``).
    t : array_like
        Inner products :math:`t = x^\top y` (any shape).

    Returns
    -------
    ndarray
        :math:`1 - K_n(t)/e^t`, float64, the shape of ``t``.
    """
    kind, n = _kind(fm, "relative_truncation_error")
    t = _t(t)
    out = np.empty_like(t)
    if kind == "taylor":
        pos = t >= 0
        out[pos] = scipy_special().gammainc(n + 1.0, t[pos])
        s, la = slog_taylor_polynomial(t[~pos], n)
        out[~pos] = 1.0 - s * np.exp(la - t[~pos])
        return out
    inside = t > -n
    out[inside] = -np.expm1(n * np.log1p(t[inside] / n) - t[inside])
    tb = t[~inside]
    base = 1.0 + tb / n
    with np.errstate(divide="ignore"):
        out[~inside] = 1.0 - np.sign(base) ** n * np.exp(n * np.log(np.abs(base)) - tb)
    return out


def truncation_error_bound(fm: Any, t: Any) -> np.ndarray:
    r"""Upper bound on :math:`|e^t - K_n(t)|/e^t` (docs page *Theory*, section 2; verified on a grid).

    * Taylor (Lagrange remainder): :math:`\frac{|t|^{n+1}}{(n+1)!}e^{\max(-t,0)}` for all real ``t``.
    * Limit: :math:`\frac{t^2}{2(n+\min(t,0))}` for :math:`t>-n` (from
      :math:`\log(1+u)\ge u-u^2/2` for :math:`u\ge0` and :math:`\log(1+u)\ge u-\frac{u^2}{2(1+u)}`
      for :math:`-1<u<0`); also :math:`0\le1-L_n(t)e^{-t}`.

    Parameters
    ----------
    fm : Taylor or Limit
        The deterministic feature map (its degree ``n``).
    t : array_like
        Inner products :math:`t = x^\top y` (any shape).

    Returns
    -------
    ndarray
        The bound, float64, the shape of ``t``.

    Raises
    ------
    InvalidParameterError
        For the limit map with some :math:`t\le-n` (outside the bound's domain; there
        :math:`L_n` is 0, negative or exploding, see :func:`negative_region`).
    """
    kind, n = _kind(fm, "truncation_error_bound")
    t = _t(t)
    if kind == "taylor":
        return np.abs(t) ** (n + 1) / factorial(n + 1) * np.exp(np.maximum(-t, 0.0))
    if np.any(t <= -n):
        raise InvalidParameterError(
            f"truncation_error_bound: the limit-map bound needs t > -n = {-n}; got min t = {float(np.min(t))!r}."
        )
    return t * t / (2.0 * (n + np.minimum(t, 0.0)))


def deterministic_feature_dim(fm: Any, dim: int) -> dict[str, int]:
    r"""Feature dimensions of a deterministic map for inputs of dimension ``dim`` (docs page *Theory*, section 2).

    Taylor: full tensors :math:`\sum_{j\le n}d^j`, symmetric (monomials)
    :math:`\binom{d+n}{n}`. Limit: full :math:`(d+1)^n`, symmetric :math:`\binom{d+n}{n}`.
    The "order of :math:`d^n`" often quoted is the asymptotic size.

    Parameters
    ----------
    fm : Taylor or Limit
        The deterministic feature map (its degree ``n``).
    dim : int
        The input dimension ``d`` (>= 1).

    Returns
    -------
    dict of str to int
        ``{"full": ..., "symmetric": ...}`` (exact Python ints).
    """
    kind, n = _kind(fm, "deterministic_feature_dim")
    d = check_int(dim, "dim", "deterministic_feature_dim", low=1)
    sym = comb(d + n, n)
    full = sum(d**j for j in range(n + 1)) if kind == "taylor" else (d + 1) ** n
    return {"full": int(full), "symmetric": int(sym)}


def taylor_real_root(degree: int) -> float | None:
    r"""The real root of :math:`T_n` (odd ``n``; exactly one, negative), None for even ``n``.

    :math:`T_n(t) > 0` for all real ``t`` iff ``n`` is even; for odd ``n`` it is negative
    left of this root (-1, -1.5961, -2.1806, -2.7590 for n = 1, 3, 5, 7; docs page *Theory*, section 2).

    Parameters
    ----------
    degree : int
        The degree ``n`` (>= 0).

    Returns
    -------
    float or None
        The root; None for even ``n``.
    """
    n = check_int(degree, "degree", "taylor_real_root", low=0)
    if n % 2 == 0:
        return None
    from scipy.optimize import brentq

    lo = -1.0
    while taylor_polynomial(np.asarray(lo), n) > 0:
        lo *= 2.0
    return float(
        brentq(lambda s: float(taylor_polynomial(np.asarray(s), n)), lo, 0.0, xtol=1e-300, rtol=1e-15)
    )


@dataclasses.dataclass(frozen=True)
class NegativeRegion:
    """Where a deterministic kernel is negative: ``t < threshold`` (None: never negative).

    Parameters
    ----------
    threshold : float or None
        The kernel is negative for :math:`t` below it; None: never negative.
    note : str
        The region in words.
    """

    threshold: float | None
    note: str


def negative_region(fm: Any) -> NegativeRegion:
    r"""Where :math:`T_n(t)` or :math:`L_n(t)` is negative (matters for attention normalisers).

    Taylor: never for even ``n``; for odd ``n`` exactly for :math:`t` below the real root
    (:func:`taylor_real_root`). Limit: :math:`L_n(t)<0` iff ``n`` odd and :math:`t<-n`; for
    even ``n``, :math:`L_n\ge0` (zero at :math:`t=-n`) but non-monotone and exploding for
    :math:`t<-2n`. Source: derived here (docs page *Theory*, sections 2 and 5).

    Parameters
    ----------
    fm : Taylor or Limit
        The deterministic feature map (its degree ``n``).

    Returns
    -------
    NegativeRegion
        The threshold below which the kernel is negative (None: never) and a note in words.
    """
    kind, n = _kind(fm, "negative_region")
    if kind == "taylor":
        if n % 2 == 0:
            return NegativeRegion(None, f"T_{n} > 0 for every real t (even degree).")
        r = taylor_real_root(n)
        return NegativeRegion(r, f"T_{n}(t) < 0 iff t < {r:.6g} (its only real root).")
    if n % 2 == 0:
        return NegativeRegion(
            None, f"(1+t/{n})^{n} >= 0 (zero at t={-n}) but non-monotone and exploding for t < {-2 * n}."
        )
    return NegativeRegion(float(-n), f"(1+t/{n})^{n} < 0 iff t < {-n}.")
