r"""Overflow-free special functions used by the closed forms (log space, positive series).

Everything here works on float64 arrays and returns logarithms (or sign and
log-magnitude) so that the MSE formulas stay finite for :math:`\|x+y\|^2` in
the hundreds. Series with positive terms are summed with a running
log-sum-exp; their relative error is a few ``k * eps`` for ``k`` terms.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from ..exceptions import NumericalOverflowError

__all__ = [
    "log_expm1",
    "log_2sinh2_half",
    "log_positive_series",
    "log_hyp0f1_pos",
    "hyp0f1_neg",
    "log_orf_gap_series",
    "orf_pair_count",
    "signed_logsumexp",
    "log_abs_expm1",
    "trig_orf_pair_minus_sq",
    "scipy_special",
]

_BLOCK = 64
_NEG_CUT = -745.0  # exp() of anything below this is 0 in float64


def scipy_special() -> ModuleType:
    """:mod:`scipy.special`, loaded on first use: it takes about 0.1 s to import, and neither
    ``import rfkit`` nor ``rfkit --help`` needs it."""
    import scipy.special

    return scipy.special


def log_expm1(t: np.ndarray) -> np.ndarray:
    """:math:`\\log(e^t - 1)` for ``t >= 0`` (``-inf`` at 0), stable for large and small ``t``."""
    t = np.asarray(t, dtype=np.float64)
    out = np.empty_like(t)
    big = t > 1.0
    out[big] = t[big] + np.log1p(-np.exp(-t[big]))
    with np.errstate(divide="ignore"):
        out[~big] = np.log(np.expm1(t[~big]))
    return out


def log_abs_expm1(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Sign and :math:`\log|e^t - 1|` for any real ``t`` (stable near 0 and for large ``|t|``)."""
    t = np.asarray(t, dtype=np.float64)
    pos = t >= 0
    out = np.empty_like(t)
    out[pos] = log_expm1(t[pos])
    tn = t[~pos]
    with np.errstate(divide="ignore"):
        out[~pos] = np.where(tn < -0.6931, np.log1p(-np.exp(tn)), np.log(-np.expm1(tn)))
    return np.where(t == 0, 0.0, np.sign(t)), out


def log_2sinh2_half(t: np.ndarray) -> np.ndarray:
    r""":math:`\log(2\sinh^2(t/2)) = \log\big(\tfrac12 e^{-t}(e^t-1)^2\big)` for ``t >= 0``."""
    return 2.0 * log_expm1(t) - t - np.log(2.0)


def signed_logsumexp(
    logs: list[np.ndarray], signs: list[np.ndarray | float]
) -> tuple[np.ndarray, np.ndarray]:
    """Sign and log-magnitude of :math:`\\sum_i s_i e^{l_i}` (elementwise over broadcast arrays)."""
    lb = np.broadcast_arrays(*[np.asarray(v, dtype=np.float64) for v in logs])
    sb = np.broadcast_arrays(*[np.asarray(v, dtype=np.float64) for v in signs], lb[0])[: len(lb)]
    L = np.stack(lb)
    S = np.where(np.isneginf(L), 0.0, np.stack(sb))
    M = np.max(np.where(S != 0, L, -np.inf), axis=0)
    Mf = np.where(np.isfinite(M), M, 0.0)
    with np.errstate(invalid="ignore", under="ignore"):
        tot = np.sum(S * np.exp(np.where(S != 0, L - Mf, -np.inf)), axis=0)
    with np.errstate(divide="ignore"):
        out = np.log(np.abs(tot)) + Mf
    out = np.where(np.isfinite(M), out, -np.inf)
    return np.sign(tot), out


def log_positive_series(logx: np.ndarray, log_coef, k_start: int = 0, max_terms: int = 200_000) -> np.ndarray:
    r""":math:`\log\sum_{k\ge k_0} c_k x^k` for positive coefficients, summed in blocks in log space.

    ``log_coef(k)`` returns :math:`\log c_k` for an integer array ``k``. Stops once a
    whole block lies 40 nats below the running sum and the terms decrease.
    """
    logx = np.asarray(logx, dtype=np.float64)
    flat = logx.reshape(-1)
    acc = np.full(flat.shape, -np.inf)
    k0 = k_start
    while True:
        k = np.arange(k0, k0 + _BLOCK)
        lc = log_coef(k)
        with np.errstate(invalid="ignore"):
            terms = lc[None, :] + k[None, :] * flat[:, None]  # (N, B)
        terms = np.where(np.isneginf(flat)[:, None], np.where(k == 0, lc, -np.inf)[None, :], terms)
        bmax = np.max(terms, axis=1)
        M = np.maximum(acc, bmax)
        Mf = np.where(np.isfinite(M), M, 0.0)
        with np.errstate(under="ignore"):
            s = np.exp(acc - Mf) + np.sum(np.exp(terms - Mf[:, None]), axis=1)
        with np.errstate(divide="ignore"):
            acc = np.where(np.isfinite(M), Mf + np.log(s), -np.inf)
        decreasing = terms[:, -1] <= terms[:, -2]
        done = np.all((~np.isfinite(bmax)) | ((bmax < acc - 40.0) & decreasing))
        k0 += _BLOCK
        if done:
            break
        if k0 > max_terms:  # pragma: no cover - needs arguments around 1e5
            raise NumericalOverflowError(
                f"series did not converge within {max_terms} terms (largest argument "
                f"exp({float(np.max(flat)):.4g})); the closed form is outside its numerical domain."
            )
    return acc.reshape(logx.shape)


def _log_rising(b: float, k: np.ndarray) -> np.ndarray:
    """:math:`\\log (b)_k` for b > 0 (differences of gammaln)."""
    return scipy_special().gammaln(b + k) - scipy_special().gammaln(b)


def log_hyp0f1_pos(b: float, v: np.ndarray) -> np.ndarray:
    r""":math:`\log{}_0F_1(;b;v)` for ``v >= 0``, ``b > 0`` (positive series, any size of ``v``)."""
    v = np.asarray(v, dtype=np.float64)
    with np.errstate(divide="ignore"):
        lv = np.log(v)
    return log_positive_series(lv, lambda k: -scipy_special().gammaln(k + 1.0) - _log_rising(b, k))


def hyp0f1_neg(b: float, v: np.ndarray) -> np.ndarray:
    r""":math:`{}_0F_1(;b;-v)` for ``v >= 0`` (Bessel form :math:`\Gamma(b)v^{(1-b)/2}J_{b-1}(2\sqrt v)`).

    Alternating series for :math:`v \le 2b + 4` (cancellation at most
    :math:`\sim e^{4}`), Bessel function otherwise. Values are bounded by 1.
    """
    v = np.asarray(v, dtype=np.float64)
    out = np.empty_like(v)
    small = v <= 2.0 * b + 4.0
    if np.any(small):
        vs = v[small]
        kmax = int(np.ceil(4.0 * np.sqrt(np.max(vs)) + 40.0))
        k = np.arange(kmax)
        lc = -scipy_special().gammaln(k + 1.0) - _log_rising(b, k)
        with np.errstate(divide="ignore", invalid="ignore"):
            lv = np.log(vs)
            terms = np.exp(lc[None, :] + k[None, :] * np.where(vs[:, None] > 0, lv[:, None], -np.inf))
        terms[:, 0] = 1.0
        sgn = np.where(k % 2 == 0, 1.0, -1.0)
        out[small] = np.sum(terms * sgn[None, :], axis=1)
    big = ~small
    if np.any(big):
        vb = v[big]
        x = 2.0 * np.sqrt(vb)
        J = scipy_special().jv(b - 1.0, x)
        if np.any(J == 0.0) and np.any(x < b):
            raise NumericalOverflowError(
                "0F1(;b;-v) underflowed (Bessel J of large order); the fixed-norm trig formula "
                f"is outside its numerical domain (b={b}, v up to {float(np.max(vb)):.4g})."
            )
        with np.errstate(divide="ignore"):
            la = scipy_special().gammaln(b) + 0.5 * (1.0 - b) * np.log(vb) + np.log(np.abs(J))
        out[big] = np.sign(J) * np.exp(la)
    return out


def _log_one_minus_ck(d: int, k: np.ndarray) -> np.ndarray:
    r""":math:`\log(1-c_k)`, :math:`c_k=\prod_{i<k}\frac{d+i}{d+2i} = \frac{(d)_k}{2^k(d/2)_k}` (``-inf`` for k < 2)."""
    kmax = int(np.max(k)) + 1
    i = np.arange(kmax, dtype=np.float64)
    steps = np.log1p(-i / (d + 2.0 * i))  # log((d+i)/(d+2i))
    L = np.concatenate([[0.0], np.cumsum(steps)])  # L[k] = log c_k
    with np.errstate(divide="ignore"):
        out = np.log(-np.expm1(L[k]))
    return np.where(k < 2, -np.inf, out)


def log_orf_gap_series(d: int, z2: np.ndarray) -> np.ndarray:
    r""":math:`\log S(z^2)`, :math:`S = e^{z^2} - {}_1F_1(d;\tfrac d2;\tfrac{z^2}2) = \sum_{k\ge2}\frac{z^{2k}}{k!}(1-c_k) \ge 0`.

    The orthogonal-pair covariance of the positive estimators (docs page *Theory*, section 1) is
    :math:`-\Lambda^2 S`; all terms are positive, so this is accurate for every
    :math:`z^2` (no cancellation between :math:`e^{z^2}` and :math:`{}_1F_1`).
    """
    z2 = np.asarray(z2, dtype=np.float64)
    with np.errstate(divide="ignore"):
        lz = np.log(z2)
    return log_positive_series(
        lz, lambda k: -scipy_special().gammaln(k + 1.0) + _log_one_minus_ck(d, k), k_start=2
    )


def trig_orf_pair_minus_sq(d: int, D2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Sign and log of :math:`e^{\|\Delta\|^2}\big({}_1F_1(d;\tfrac d2;-\tfrac{\|\Delta\|^2}2) - e^{-\|\Delta\|^2}\big)`.

    This is the relative orthogonal-pair covariance of the trig estimator
    (docs page *Theory*, section 1). Alternating series :math:`\sum_{k\ge2}\frac{(-\Delta^2)^k}{k!}(c_k-1)` for
    :math:`\|\Delta\|^2\le2`, SciPy's ``hyp1f1`` (checked against mpmath to ~1e-14
    relative for d <= 128, argument <= 300) otherwise; for :math:`\|\Delta\|^2>1400`
    the pair term underflows and is dropped (its size relative to the variance
    term is below :math:`e^{-600}`).
    """
    D2 = np.asarray(D2, dtype=np.float64)
    sign = np.empty_like(D2)
    logv = np.empty_like(D2)
    small = D2 <= 2.0
    if np.any(small):
        t = D2[small]
        k = np.arange(2, 60)
        l1mc = _log_one_minus_ck(d, k)
        with np.errstate(divide="ignore"):
            lt = np.log(t)
        terms = np.exp(l1mc[None, :] + k[None, :] * lt[:, None] - scipy_special().gammaln(k + 1.0)[None, :])
        sg = np.where(k % 2 == 0, -1.0, 1.0)  # (-1)^k (c_k - 1) = (-1)^(k+1) (1 - c_k)
        C = np.sum(terms * sg[None, :], axis=1)
        with np.errstate(divide="ignore"):
            sign[small] = np.sign(C)
            logv[small] = np.log(np.abs(C)) + t
    mid = (~small) & (D2 <= 1400.0)
    if np.any(mid):
        t = D2[mid]
        pair = scipy_special().hyp1f1(float(d), d / 2.0, -t / 2.0)
        C = pair - np.exp(-t)
        with np.errstate(divide="ignore"):
            sign[mid] = np.sign(C)
            logv[mid] = np.log(np.abs(C)) + t
    far = D2 > 1400.0
    sign[far] = -1.0
    logv[far] = 0.0  # e^{D2} * (0 - e^{-D2}) = -1
    return sign, logv


def orf_pair_count(n_features: np.ndarray, dim: int) -> np.ndarray:
    r""":math:`K = \sum_b k_b(k_b-1)`: ordered same-block pairs of the block-orthogonal construction.

    Blocks as :func:`rfkit.projections.block_sizes`: ``m // d`` blocks of ``d`` and
    one of ``m % d``.
    """
    m = np.asarray(n_features, dtype=np.int64)
    full, rest = np.divmod(m, dim)
    return (full * dim * (dim - 1) + rest * (rest - 1)).astype(np.float64)
