r"""Exact MSE of random Maclaurin features and TensorSketch (registered with log_mse).

Notation: :math:`t = x^\top y`, :math:`\mathrm{SM} = e^t`, :math:`T_K(t) = \sum_{n\le K}t^n/n!`.
Derivations: docs page *Theory*, section 1c.

**Random Maclaurin** (Kar & Karnick (AISTATS 2012)). One feature product is
:math:`F = \frac{a_N}{q_N}\prod_{j\le N}(w_j^\top x)(w_j^\top y)`, :math:`a_n = 1/n!`, with
:math:`\mathbb E[(w^\top x)^2(w^\top y)^2] = \kappa = \|x\|^2\|y\|^2 + 2t^2 - 2\sum_ix_i^2y_i^2`
(Rademacher :math:`w`; Gaussian :math:`w`: without the last term). Conditioning on :math:`N`,

.. math:: \mathbb E F^2 = \sum_n \frac{a_n^2\kappa^n}{q_n},\qquad
    \mathrm{MSE} = \frac{\mathbb E F^2 - \mu^2}{m} + (\mu - e^t)^2,

with :math:`\mu = e^t` for the geometric measure :math:`q_n = (1-r)r^n` (:math:`r = 1/p`), where
:math:`\mathbb E F^2 = I_0(2\sqrt{\kappa/r})/(1-r)` (since :math:`\sum_n z^n/(n!)^2 = I_0(2\sqrt z)`),
and :math:`\mu = T_K(t)` for the measure truncated to :math:`n \le K` (a finite sum). Domain:
all finite :math:`x, y`, any :math:`p > 1`.

**TensorSketch** (Pham & Pagh (KDD 2013)), degree-:math:`j` sketch of size :math:`D` with fully
random hashes. With :math:`c = t^2`, :math:`w_1 = \sum_ix_i^2y_i^2`, :math:`w_3 = \|x\|^2\|y\|^2 - w_1`,
:math:`w_4 = t^2 - w_1` and :math:`g = \gcd(2, D)`,

.. math:: V_j = \frac1D\sum_{k\ge1}\binom jk c^{j-k}(w_3^k + w_4^k)
    + \frac{g}{D^2}\sum_{k_3,k_4\ge1}\frac{j!}{k_3!k_4!(j-k_3-k_4)!}c^{j-k_3-k_4}w_3^{k_3}w_4^{k_4},

and rfkit's map (independent sketches of every degree :math:`j\le n`, scaled by
:math:`1/\sqrt{j!}`) has :math:`\mathrm{MSE} = \sum_{j=1}^n V_j/(j!)^2 + (T_n(t) - e^t)^2`.
Domain: all finite :math:`x, y`, any :math:`D \ge 1`.
"""

from __future__ import annotations

from math import comb, factorial, lgamma

import numpy as np

from ..features import RandomMaclaurin, TensorSketch, slog_taylor_polynomial
from ._closed_form import register_mse_formula
from ._special import log_abs_expm1, scipy_special, signed_logsumexp

__all__ = ["maclaurin_kappa", "tensorsketch_variance_terms"]


def maclaurin_kappa(X: np.ndarray, Y: np.ndarray, distribution: str = "rademacher") -> np.ndarray:
    r""":math:`\kappa = \mathbb E[(w^\top x)^2(w^\top y)^2]` for iid Rademacher or standard normal entries."""
    t = np.sum(X * Y, axis=-1)
    k = np.sum(X * X, axis=-1) * np.sum(Y * Y, axis=-1) + 2.0 * t * t
    if distribution == "rademacher":
        k = k - 2.0 * np.sum(X * X * Y * Y, axis=-1)
    return np.maximum(k, 0.0)  # an expectation of a square: >= 0 exactly, max removes round-off only


def _log_rel_truncation_bias(t: np.ndarray, degree: int) -> tuple[np.ndarray, np.ndarray]:
    r"""Sign and :math:`\log|T_K(t)e^{-t} - 1|` (the relative bias of an estimator of :math:`T_K`)."""
    s, lT = slog_taylor_polynomial(t, degree)
    s, lT = np.asarray(s, dtype=np.float64), np.asarray(lT, dtype=np.float64)
    pos_s, pos_l = log_abs_expm1(np.where(s > 0, lT - t, 0.0))
    neg_l = np.logaddexp(0.0, np.where(s < 0, lT - t, -np.inf))  # -e^{lT-t} - 1 (and -1 when T_K = 0)
    sign = np.where(s > 0, pos_s, -1.0)
    return sign, np.where(s > 0, pos_l, neg_l)


def _log_second_moment_maclaurin(fm: RandomMaclaurin, kappa: np.ndarray) -> np.ndarray:
    r""":math:`\log\mathbb E F^2 = \log\sum_n \kappa^n/((n!)^2q_n)`."""
    r = 1.0 / fm.p
    if fm.max_degree is None:
        z = 2.0 * np.sqrt(kappa / r)
        return np.log(scipy_special().i0e(z)) + z - np.log1p(-r)
    n = np.arange(fm.max_degree + 1, dtype=np.float64)
    lq = fm.log_degree_probability(n)
    lf = np.array([lgamma(k + 1.0) for k in range(fm.max_degree + 1)])
    with np.errstate(divide="ignore", invalid="ignore"):
        lk = np.log(kappa)[..., None] * n
    lk = np.where(n == 0, 0.0, lk)  # kappa^0 = 1, also at kappa = 0
    terms = lk - 2.0 * lf - lq
    top = np.max(terms, axis=-1, keepdims=True)
    return np.log(np.sum(np.exp(terms - top), axis=-1)) + top[..., 0]


def _maclaurin_log_relative(
    fm: RandomMaclaurin, X: np.ndarray, Y: np.ndarray, d: int, m: np.ndarray
) -> np.ndarray:
    t = np.sum(X * Y, axis=-1)
    lE2 = _log_second_moment_maclaurin(fm, maclaurin_kappa(X, Y, fm.distribution))
    if fm.max_degree is None:
        lmu2 = 2.0 * t
        bias = None
    else:
        _, lT = slog_taylor_polynomial(t, fm.max_degree)
        lmu2 = 2.0 * np.asarray(lT, dtype=np.float64)
        bias = _log_rel_truncation_bias(t, fm.max_degree)
    with np.errstate(divide="ignore"):
        # Var = E F^2 - mu^2 >= 0 (Cauchy-Schwarz: mu^2 <= (sum a_n kappa^{n/2})^2 <= E F^2)
        lvar = lE2 + np.log(-np.expm1(np.minimum(lmu2 - lE2, 0.0)))
    out = lvar - 2.0 * t - np.log(m.astype(np.float64))
    if bias is not None:
        out = np.logaddexp(out, 2.0 * bias[1])
    return out


def _maclaurin_bias(
    fm: RandomMaclaurin, X: np.ndarray, Y: np.ndarray, d: int
) -> tuple[np.ndarray, np.ndarray]:
    t = np.sum(X * Y, axis=-1)
    if fm.max_degree is None:
        return np.zeros(t.shape), np.full(t.shape, -np.inf)
    return _log_rel_truncation_bias(t, fm.max_degree)


def tensorsketch_variance_terms(X: np.ndarray, Y: np.ndarray, degree: int) -> tuple[np.ndarray, np.ndarray]:
    r"""Normalised parts :math:`(\hat A_j, \hat B_j)_{j=1..n}` of the degree-:math:`j` sketch variance.

    :math:`V_j = (\|x\|\|y\|)^{2j}(\hat A_j/D + \gcd(2,D)\hat B_j/D^2)`, with
    :math:`c, w_3, w_4` divided by :math:`\|x\|^2\|y\|^2` (so every term is bounded by
    :math:`3^j`); the multinomial expansions avoid the cancellation of the difference form.
    Returns two arrays of shape (n, ...).
    """
    t = np.sum(X * Y, axis=-1)
    N = np.sum(X * X, axis=-1) * np.sum(Y * Y, axis=-1)
    w1 = np.sum(X * X * Y * Y, axis=-1)
    safe = np.where(N > 0, N, 1.0)
    c, w3, w4 = t * t / safe, (N - w1) / safe, (t * t - w1) / safe
    pc = np.stack([c**k for k in range(degree + 1)])
    p3 = np.stack([w3**k for k in range(degree + 1)])
    p4 = np.stack([w4**k for k in range(degree + 1)])
    A = np.zeros((degree,) + t.shape)
    B = np.zeros((degree,) + t.shape)
    for j in range(1, degree + 1):
        for k in range(1, j + 1):
            A[j - 1] += comb(j, k) * pc[j - k] * (p3[k] + p4[k])
        for k3 in range(1, j):
            for k4 in range(1, j - k3 + 1):
                coef = factorial(j) // (factorial(k3) * factorial(k4) * factorial(j - k3 - k4))
                B[j - 1] += coef * pc[j - k3 - k4] * p3[k3] * p4[k4]
    return A, B


def _tensorsketch_log_relative(
    fm: TensorSketch, X: np.ndarray, Y: np.ndarray, d: int, m: np.ndarray
) -> np.ndarray:
    t = np.sum(X * Y, axis=-1)
    sign_b, lbias = _log_rel_truncation_bias(t, fm.degree)
    shape = np.broadcast_shapes(t.shape, m.shape)
    if fm.degree == 0:
        return np.broadcast_to(2.0 * lbias, shape).copy()
    N = np.sum(X * X, axis=-1) * np.sum(Y * Y, axis=-1)
    A, B = tensorsketch_variance_terms(X, Y, fm.degree)
    j = np.arange(1, fm.degree + 1, dtype=np.float64).reshape((-1,) + (1,) * t.ndim)
    lf2 = np.array([2.0 * lgamma(k + 1.0) for k in range(1, fm.degree + 1)]).reshape(j.shape)
    with np.errstate(divide="ignore"):
        lw = j * np.log(N) - lf2  # log N^j/(j!)^2 (-inf when x or y is 0)
        sA, lA = signed_logsumexp(list(lw + np.log(np.abs(A))), list(np.sign(A)))
        sB, lB = signed_logsumexp(list(lw + np.log(np.abs(B))), list(np.sign(B)))
    D = m.astype(np.float64)
    g = np.where(m % 2 == 0, 2.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        s, lvar = signed_logsumexp([lA - np.log(D), lB + np.log(g) - 2.0 * np.log(D)], [sA, sB])
    # the variance is >= 0 exactly; a non-positive value is a zero variance up to round-off (e.g. d = 1)
    lvar = np.where(s > 0, lvar, -np.inf)
    return np.logaddexp(lvar - 2.0 * t, 2.0 * lbias)


def _tensorsketch_bias(
    fm: TensorSketch, X: np.ndarray, Y: np.ndarray, d: int
) -> tuple[np.ndarray, np.ndarray]:
    return _log_rel_truncation_bias(np.sum(X * Y, axis=-1), fm.degree)


register_mse_formula(RandomMaclaurin, _maclaurin_log_relative, _maclaurin_bias)
register_mse_formula(TensorSketch, _tensorsketch_log_relative, _tensorsketch_bias)
