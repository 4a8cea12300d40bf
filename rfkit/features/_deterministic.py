r"""Deterministic polynomial maps: Taylor truncation and the limit definition (docs page *Theory*, section 2).

Both are *deterministic*: zero variance, the only error is the truncation bias.

Taylor, degree :math:`n`:
:math:`\phi_T(x)^\top\phi_T(y) = T_n(t) = \sum_{j=0}^n t^j/j!`, :math:`t = x^\top y`.
Full-tensor form :math:`(x^{\otimes j}/\sqrt{j!})_{j\le n}` has dimension
:math:`\sum_{j\le n} d^j`; the symmetric (monomial) form
:math:`(x^\alpha/\sqrt{\alpha!})_{|\alpha|\le n}` has dimension :math:`\binom{d+n}{n}`.

Limit, order :math:`n`: with :math:`u = (1, x/\sqrt n)`,
:math:`\phi_L(x) = u^{\otimes n}` and :math:`\phi_L(x)^\top\phi_L(y) = L_n(t) = (1+t/n)^n`.
Full dimension :math:`(d+1)^n`; symmetric form
:math:`(\sqrt{n!/\beta!}\,u^\beta)_{|\beta| = n}` has dimension :math:`\binom{d+n}{n}`.

Signs (reported, never hidden): :math:`T_n(t) > 0` for all :math:`t` iff :math:`n`
is even (odd :math:`n`: one real root, negative left of it); :math:`L_n(t) < 0` iff
:math:`n` is odd and :math:`t < -n`. Both need :math:`|t| \ll n` to be accurate.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from math import comb, lgamma, log
from typing import Any

import numpy as np

from .._backend import get_backend, is_array
from .._validation import check_int, check_option, check_points, check_same_dim, exp_checked
from ..exceptions import InvalidParameterError
from ._base import FeatureMap
from ._draw import FeatureDraw

__all__ = ["Taylor", "Limit", "MonomialDraw", "taylor_polynomial", "slog_taylor_polynomial"]

FORMS = ("symmetric", "full")
_MAX_COLUMNS = 1 << 21


def _lfact(k: int) -> float:
    return lgamma(k + 1)


@functools.lru_cache(maxsize=64)
def _exponents(kind: str, dim: int, degree: int, form: str) -> tuple[np.ndarray, np.ndarray]:
    """Exponent matrix E (D, d) and log-coefficients (D,) with phi_k(x) = exp(c_k) prod_j x_j^E_kj."""
    rows: list[tuple[int, ...]] = []
    coefs: list[float] = []
    if kind == "taylor":
        for j in range(degree + 1):
            if form == "symmetric":
                for combo in itertools.combinations_with_replacement(range(dim), j):
                    alpha = np.bincount(np.asarray(combo, dtype=np.intp), minlength=dim)
                    rows.append(tuple(alpha))
                    coefs.append(-0.5 * sum(_lfact(int(a)) for a in alpha))
            else:
                for seq in itertools.product(range(dim), repeat=j):
                    rows.append(tuple(np.bincount(np.asarray(seq, dtype=np.intp), minlength=dim)))
                    coefs.append(-0.5 * _lfact(j))
    else:  # limit: u = (1, x / sqrt(n)), index 0 is the constant
        n = degree
        if form == "symmetric":
            for combo in itertools.combinations_with_replacement(range(dim + 1), n):
                beta = np.bincount(np.asarray(combo, dtype=np.intp), minlength=dim + 1)
                k = n - int(beta[0])
                rows.append(tuple(beta[1:]))
                coefs.append(0.5 * (_lfact(n) - sum(_lfact(int(b)) for b in beta)) - 0.5 * k * log(n))
        else:
            for seq in itertools.product(range(dim + 1), repeat=n):
                beta = np.bincount(np.asarray(seq, dtype=np.intp), minlength=dim + 1)
                rows.append(tuple(beta[1:]))
                coefs.append(-0.5 * (n - int(beta[0])) * log(n))
    E = np.asarray(rows, dtype=np.float64).reshape(len(rows), dim)
    c = np.asarray(coefs, dtype=np.float64)
    E.setflags(write=False)
    c.setflags(write=False)
    return E, c


def taylor_polynomial(t: Any, degree: int) -> Any:
    r"""Taylor polynomial :math:`T_n(t) = \sum_{j=0}^n t^j/j!` by Horner's rule.

    Parameters
    ----------
    t : array_like
        The points, elementwise (any supported array library).
    degree : int
        The degree :math:`n`.

    Returns
    -------
    array
        :math:`T_n(t)`, the shape of ``t``, in its array library.
    """
    bk = get_backend(("t", t))
    xp = bk.xp
    t = t if is_array(t) else bk.asarray(t)
    r = xp.ones_like(t)
    for j in range(degree, 0, -1):
        r = 1.0 + r * t / j
    return r


def slog_taylor_polynomial(t: Any, degree: int) -> tuple[Any, Any]:
    r"""Sign and log-magnitude of :math:`T_n(t)`, overflow-free (signed log-sum-exp of the terms).

    Parameters
    ----------
    t : array_like
        The points, elementwise (any supported array library; integers become float64).
    degree : int
        The degree :math:`n`.

    Returns
    -------
    sign : array
        The sign of :math:`T_n(t)` (-1, 0 or 1), the shape of ``t``.
    log_abs : array
        :math:`\log|T_n(t)|` (``-inf`` where it is 0), the shape of ``t``.
    """
    bk = get_backend(("t", t))
    xp = bk.xp
    if not is_array(t):
        t = bk.asarray(t)
    if not xp.isdtype(t.dtype, "real floating"):
        t = xp.astype(t, xp.float64)
    jn = np.arange(degree + 1, dtype=np.float64)
    lfn = np.array([_lfact(int(k)) for k in range(degree + 1)])
    j = bk.asarray(jn, dtype=t.dtype)
    lf = bk.asarray(lfn, dtype=t.dtype)
    odd = bk.asarray(jn % 2 == 1)
    first = bk.asarray(jn == 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        la = xp.log(xp.abs(t))[..., None] * j - lf
        la = xp.where(first, -lf, la)  # t^0 = 1 even at t = 0
        one = xp.ones_like(la)
        sg = xp.where((t[..., None] < 0) & odd, -one, one)
        sg = xp.where((t[..., None] == 0) & ~first, xp.zeros_like(la), sg)
        s, out = bk.signed_logsumexp(la, sg, axis=-1)
    return s, out


class _MonomialMap(FeatureMap):
    is_random = False
    _kind = "taylor"

    @property
    def _degree(self) -> int:
        raise NotImplementedError

    def feature_dim(self, dim: int) -> int:
        n = self._degree
        if self.form == "symmetric":  # type: ignore[attr-defined]
            return comb(dim + n, n)
        if self._kind == "taylor":
            return sum(dim**j for j in range(n + 1))
        return (dim + 1) ** n

    def _from_projection(self, dim: int, n_draws: int | None, W: np.ndarray | None) -> FeatureDraw:
        D = self.feature_dim(dim)
        if D > _MAX_COLUMNS:
            form = self.form  # type: ignore[attr-defined]
            other = "form='symmetric', " if form == "full" else ""
            raise InvalidParameterError(
                f"{self.name}(form={form!r}) would build {D} feature columns for dim={dim} "
                f"(limit {_MAX_COLUMNS}); use {other}a lower degree, or "
                f"{self.name}.exact_kernel() which never builds features."
            )
        E, c = _exponents(self._kind, dim, self._degree, self.form)  # type: ignore[attr-defined]
        return MonomialDraw(self, dim, n_draws, E, c)

    def _slog_exact(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def slog_exact_kernel(self, X: Any, Y: Any) -> tuple[np.ndarray, np.ndarray]:
        """Sign and log-magnitude of :meth:`exact_kernel` (overflow-free)."""
        bk = get_backend(("X", X), ("Y", Y))
        X = check_points(X, "X", backend=bk)
        Y = check_points(Y, "Y", backend=bk)
        check_same_dim(X, Y, "X", "Y")
        return self._slog_exact(X @ bk.xp.matrix_transpose(Y))

    def exact_kernel(self, X: Any, Y: Any) -> np.ndarray:
        """The map's kernel :math:`k_n(x_i^\\top y_j)` computed directly, never building features.

        Parameters
        ----------
        X : array_like of shape (..., n, d)
        Y : array_like of shape (..., m, d)

        Returns
        -------
        ndarray of shape (..., n, m)
        """
        s, la = self.slog_exact_kernel(X, Y)
        return s * exp_checked(la, f"{self.name}.exact_kernel", "slog_exact_kernel()")


@dataclasses.dataclass(frozen=True)
class Taylor(_MonomialMap):
    r"""Deterministic Taylor-truncation map of degree :math:`n` (docs page *Theory*, section 2).

    :math:`\phi_T(x)^\top\phi_T(y) = \sum_{j=0}^n (x^\top y)^j/j!`. Relative error
    :math:`|e^t - T_n(t)|/e^t \le \frac{|t|^{n+1}}{(n+1)!}e^{\max(-t, 0)}`.

    Parameters
    ----------
    degree : int
        Truncation degree :math:`n \ge 0`.
    form : {"symmetric", "full"}, default="symmetric"
        Monomial form (dimension :math:`\binom{d+n}{n}`) or full tensors
        (dimension :math:`\sum_j d^j`); both give the same kernel.

    Notes
    -----
    ``is_positive`` is True only for even degree; odd degrees give negative
    estimates for :math:`t` below the real root of :math:`T_n` (-1 for n=1,
    -1.5961 for n=3, ...). ``sample(dim)`` ignores ``rng`` (no randomness).
    """

    degree: int
    form: str = "symmetric"
    _kind = "taylor"

    def __post_init__(self) -> None:
        object.__setattr__(self, "degree", check_int(self.degree, "degree", "Taylor", low=0))
        check_option(self.form, "form", "Taylor", FORMS)

    @property
    def is_positive(self) -> bool:  # type: ignore[override]
        return self.degree % 2 == 0

    @property
    def _degree(self) -> int:
        return self.degree

    def _slog_exact(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return slog_taylor_polynomial(t, self.degree)


@dataclasses.dataclass(frozen=True)
class Limit(_MonomialMap):
    r"""Deterministic limit-definition map :math:`(1 + x^\top y/n)^n` (docs page *Theory*, section 2).

    Relative error for :math:`t > -n`:
    :math:`0 \le 1 - (1+t/n)^n e^{-t} \le t^2/(2(n + \min(t, 0)))`.

    Parameters
    ----------
    n : int
        Order :math:`n \ge 1`.
    form : {"symmetric", "full"}, default="symmetric"
        :math:`\binom{d+n}{n}` or :math:`(d+1)^n` columns; same kernel.

    Notes
    -----
    The estimate is negative iff ``n`` is odd and :math:`t < -n`; for even ``n``
    it is >= 0 but non-monotone and explodes for :math:`t < -2n`.
    """

    n: int
    form: str = "symmetric"
    _kind = "limit"

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", check_int(self.n, "n", "Limit", low=1))
        check_option(self.form, "form", "Limit", FORMS)

    @property
    def is_positive(self) -> bool:  # type: ignore[override]
        return False  # odd n: negative for t < -n; even n: exactly 0 at t = -n

    @property
    def _degree(self) -> int:
        return self.n

    def _slog_exact(self, t: Any) -> tuple[Any, Any]:
        xp = get_backend(("t", t)).xp
        base = 1.0 + t / self.n
        with np.errstate(divide="ignore"):
            la = self.n * xp.log(xp.abs(base))
        s = xp.sign(base) ** self.n
        return s, la


class MonomialDraw(FeatureDraw):
    """Features :math:`\\phi_k(x) = e^{c_k}\\prod_j x_j^{E_{kj}}` built in log space (no randomness)."""

    def __init__(self, spec: FeatureMap, dim: int, n_draws: int | None, E: np.ndarray, c: np.ndarray) -> None:
        super().__init__(spec, dim, n_draws)
        self.exponents = E
        self.log_coefficients = c

    def _lead(self, arr: Any) -> Any:
        if self.n_draws is None:
            return arr
        xp = get_backend(("a", arr)).xp
        return xp.broadcast_to(arr, (self.n_draws,) + tuple(arr.shape))

    def _log_features(self, X: Any, side: str) -> tuple[Any | None, Any]:
        xp = get_backend(("X", X)).xp
        ET = xp.matrix_transpose(self.param("E", self.exponents, X))
        zero = X == 0
        one = xp.ones_like(X)
        with np.errstate(divide="ignore"):
            lx = xp.where(zero, xp.zeros_like(X), xp.log(xp.abs(xp.where(zero, one, X))))
        logabs = lx @ ET + self.param("c", self.log_coefficients, X)
        nneg = xp.astype(X < 0, X.dtype) @ ET
        half = xp.remainder(nneg, 2.0) > 0.5
        sign = xp.where(half, -xp.ones_like(logabs), xp.ones_like(logabs))
        if bool(xp.any(zero)):
            hits = (xp.astype(zero, X.dtype) @ ET) > 0
            logabs = xp.where(hits, xp.full_like(logabs, -np.inf), logabs)
            sign = xp.where(hits, xp.zeros_like(sign), sign)
        return self._lead(sign), self._lead(logabs)

    def _slog_pairwise(self, X: Any, Y: Any) -> tuple[Any, Any]:
        xp = get_backend(("X", X)).xp
        t = xp.sum(X * Y, axis=-1)
        s, la = self.spec._slog_exact(t)  # type: ignore[attr-defined]
        return self._lead(s), self._lead(la)
