r"""Cross moment of two orthogonal :math:`\chi(d)`-normed directions with two different vectors.

For a pair :math:`(\omega_1, \omega_2)` of one orthogonal block (Yu et al. (NeurIPS 2016):
:math:`\omega_i = \rho_i u_i`, :math:`(u_1, u_2)` two columns of a Haar orthogonal matrix,
:math:`\rho_1, \rho_2` i.i.d. :math:`\chi(d)`) and vectors :math:`a, b \in \mathbb R^d` with
:math:`\alpha = \|a\|^2`, :math:`\beta = \|b\|^2`, :math:`\gamma = a^\top b`, this module
evaluates the relative moment

.. math::

    R(\alpha, \beta, \gamma) = e^{-(\alpha+\beta)/2}\,
        \mathbb E\big[e^{\omega_1^\top a + \omega_2^\top b}\big]
    = \sum_{i\ge0}\pi_i(L)\sum_{k\ge0}\pi_k(x)\,c_{ik}\,{}_1F_1(k;\tfrac d2+i+k;-\nu),

with :math:`x = \beta/2`, :math:`\nu = \gamma^2/(2\beta)`, :math:`L = (\alpha - \gamma^2/\beta)/2`,
Poisson weights :math:`\pi_i(L) = e^{-L}L^i/i!` and
:math:`c_{ik} = \frac{(d/2)_k\,(p+i)_k}{(p)_k\,(d/2+i)_k}`, :math:`p = (d-1)/2`. (For
independent Gaussian directions :math:`R = 1`; for :math:`a = b = z` it is
:math:`e^{-\|z\|^2}{}_1F_1(d;\tfrac d2;\tfrac{\|z\|^2}2)`, the pair moment of docs page *Theory*,
section 1.) Derivation (docs page *Sparse + random features*, section "Theory"): given
:math:`u_1`, :math:`\rho_2u_2` is a :math:`\chi(d)`-normed uniform direction of the
:math:`(d-1)`-dimensional complement, so
:math:`\mathbb E[e^{\omega_2^\top b}\mid u_1] = {}_1F_1(\tfrac d2;p;\tfrac{\beta\sin^2\theta}2)`,
:math:`\theta` the angle between :math:`u_1` and :math:`b`; :math:`\omega_1` alone is
:math:`\mathcal N(0, I)`, and tilting by :math:`e^{\omega_1^\top a}` makes it
:math:`\mathcal N(a, I)` (factor :math:`e^{\alpha/2}`), under which :math:`\sin^2\theta` is a
doubly non-central :math:`\mathrm{Beta}(p, \tfrac12)` with non-centralities
:math:`\alpha - \gamma^2/\beta` and :math:`\gamma^2/\beta`, a Poisson mixture of
:math:`\mathrm{Beta}(p+i, \tfrac12+j)`; the sum over :math:`j` is Kummer's integral.

Signed (trigonometric) maps need :math:`R^{-} = e^{(\alpha+\beta)/2}\mathbb E[e^{i\omega_1^\top a
+ i\omega_2^\top b}]`, the same entire function at :math:`(-\alpha,-\beta,-\gamma)`: the weights
become :math:`e^{L}(-L)^i/i!` (alternating), so cancellation costs about
:math:`e^{\alpha+\beta}` in relative accuracy; it is refused beyond :math:`\alpha+\beta > 16` (error below about :math:`10^{-9}`).
"""

from __future__ import annotations

import numpy as np

from ..exceptions import InvalidParameterError, NumericalOverflowError
from ._special import scipy_special

__all__ = ["orth_pair_gap", "ORTH_PAIR_MAX_NORM2", "ORTH_PAIR_MAX_SIGNED"]

#: Largest ``alpha`` or ``beta`` of the positive series (``1F1`` of ``nu <= alpha/2`` stays finite).
ORTH_PAIR_MAX_NORM2 = 1200.0
#: Largest ``alpha + beta`` of the alternating (signed) series (relative error ~ e^{alpha+beta} eps).
ORTH_PAIR_MAX_SIGNED = 16.0


def _n_terms(mean: float) -> int:
    """Terms of a Poisson-weighted sum with the given largest mean (tail below 1e-17 relative)."""
    return int(np.ceil(mean + 12.0 * np.sqrt(mean) + 30.0))


def orth_pair_gap(
    d: int, alpha: np.ndarray, beta: np.ndarray, gamma: np.ndarray, signed: bool = False
) -> np.ndarray:
    r""":math:`R(\alpha,\beta,\gamma) - 1` (``signed``: :math:`R^{-} - 1`) for a pair of one orthogonal block.

    Parameters
    ----------
    d : int
        Dimension (>= 2; a block of one direction has no pairs).
    alpha, beta, gamma : ndarray
        :math:`\|a\|^2`, :math:`\|b\|^2`, :math:`a^\top b` (broadcast; float64).
    signed : bool
        False: positive (exponential) maps; True: trigonometric maps (:math:`a = \Delta_j`,
        :math:`b = \Delta_l`).

    Returns
    -------
    ndarray
        The relative pair moment minus one; 0 for independent Gaussian directions.

    Raises
    ------
    NumericalOverflowError
        Outside the numerical domain: :math:`\max(\alpha,\beta) > 1200` (positive) or
        :math:`\alpha+\beta > 16` (signed).
    """
    if d < 2:
        raise InvalidParameterError(
            f"orth_pair_gap needs d >= 2 (one-direction blocks have no pairs); got d={d}."
        )
    al, be, ga = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (alpha, beta, gamma)))
    shape = al.shape
    al, be, ga = al.reshape(-1), be.reshape(-1), ga.reshape(-1)
    if al.size == 0:
        return np.zeros(shape)
    if signed and float(np.max(al + be)) > ORTH_PAIR_MAX_SIGNED:
        raise NumericalOverflowError(
            "The orthogonal-pair moment of trigonometric features is an alternating series that loses about "
            f"e^(|x-k_j|^2 + |x-k_l|^2) in relative accuracy; it is refused beyond {ORTH_PAIR_MAX_SIGNED} "
            f"(got {float(np.max(al + be)):.4g}). Use projection='iid', or smaller inputs."
        )
    if not signed and float(max(np.max(al), np.max(be))) > ORTH_PAIR_MAX_NORM2:
        raise NumericalOverflowError(
            f"The orthogonal-pair moment is evaluated for |z|^2 <= {ORTH_PAIR_MAX_NORM2} "
            f"(got {float(max(np.max(al), np.max(be))):.4g}); outside its numerical domain."
        )
    sp = scipy_special()
    pos = be > 0
    bsafe = np.where(pos, be, 1.0)
    nu = np.where(pos, ga * ga / (2.0 * bsafe), 0.0)
    L = np.maximum(0.5 * al - nu, 0.0)  # (alpha - gamma^2/beta)/2 >= 0 (Cauchy-Schwarz; round-off only)
    x = 0.5 * be
    n_i, n_k = _n_terms(float(np.max(L))), _n_terms(float(np.max(x)))
    i = np.arange(n_i, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # log 0 = -inf; 0 * -inf only where discarded
        logx = np.log(x)
        lw_i = np.where(i[None, :] == 0, 0.0, i[None, :] * np.log(L)[:, None]) - sp.gammaln(i + 1.0)[None, :]
    if signed:  # e^{L}(-L)^i / i!
        w_i = np.where(i % 2 == 0, 1.0, -1.0)[None, :] * np.exp(lw_i + L[:, None])
    else:  # e^{-L} L^i / i!
        w_i = np.exp(lw_i - L[:, None])
    p = 0.5 * (d - 1.0)
    c = 0.5 * d + i  # (n_i,)
    logc = np.zeros(n_i)  # log c_{ik}, built over k
    acc = np.zeros(al.shape)
    for k in range(n_k):
        if k > 0:
            t = k - 1.0
            logc = logc + np.log1p(1.0 / (2.0 * p + 2.0 * t)) + np.log1p(-1.0 / (d + 2.0 * i + 2.0 * t))
            with np.errstate(invalid="ignore"):
                lw_k = np.where(x > 0, k * logx, -np.inf) - sp.gammaln(k + 1.0)
        else:
            lw_k = np.zeros(al.shape)
        if signed:  # 1F1(k; c+k; nu) = e^{nu} 1F1(c; c+k; -nu) >= 1
            w_k = (1.0 if k % 2 == 0 else -1.0) * np.exp(lw_k + x)
            logh = np.log(sp.hyp1f1(float(k), c[None, :] + k, nu[:, None]))
        else:  # 1F1(k; c+k; -nu) = e^{-nu} 1F1(c; c+k; nu) in (0, 1]
            w_k = np.exp(lw_k - x)
            with np.errstate(over="ignore"):
                logh = np.log(sp.hyp1f1(c[None, :], c[None, :] + k, nu[:, None])) - nu[:, None]
        acc += w_k * np.sum(w_i * np.expm1(logc[None, :] + logh), axis=1)
    return acc.reshape(shape)
