r"""Pair covariance of simplex-coupled directions (``projection="simplex"``; Reid et al. (ICML 2023)).

Derived here (docs page *Theory*, section 1a).

Two directions of one simplex block are :math:`\omega_1 = \rho_1 u_1`, :math:`\omega_2 = \rho_2 u_2`
with :math:`u_1^\top u_2 = c = -1/(d-1)`, a common Haar rotation and independent
:math:`\rho_1, \rho_2 \sim \chi(d)`. Write :math:`\rho_1 = R\cos\varphi`, :math:`\rho_2 = R\sin\varphi`:
then :math:`R \sim \chi(2d)` and :math:`\psi = 2\varphi \in [0, \pi]` are independent, :math:`\psi` has
density :math:`\propto \sin^{d-1}\psi`, and with :math:`S = \sin\psi`

.. math:: \|\omega_1 \pm \omega_2\|^2 = R^2(1 \pm cS),

with a uniform direction independent of the norm. The orthogonal-pair computation (docs page *Theory*, section 1:
:math:`\mathbb E_{\rm dir} e^{t\,\mathbf u^\top z} = {}_0F_1(;\tfrac d2;\tfrac{t^2\|z\|^2}4)`,
:math:`\mathbb E R^{2k} = 2^k (d)_k`) then gives, for :math:`F(x) = {}_1F_1(d;\tfrac d2;x)`,

.. math::

    \mathbb E\,e^{(\omega_1 \pm \omega_2)^\top z} = \mathbb E_S\,F\big((1 \pm cS)\tfrac{\|z\|^2}{2}\big),\qquad
    \mathbb E\cos\big((\omega_1 \pm \omega_2)^\top \Delta\big) = \mathbb E_S\,F\big(-(1 \pm cS)\tfrac{\|\Delta\|^2}{2}\big).

(:math:`c = 0` is the orthogonal case.) The expectation over :math:`S` is a one-dimensional integral of
an entire function; it is evaluated by Gauss-Legendre quadrature in :math:`\psi` on
:math:`[0, \pi/2]` (the integrand is symmetric about :math:`\pi/2`), whose error is at round-off
level with :math:`40 + 3\lceil\sqrt d\,\rceil` nodes (checked against an exact mpmath series in
``tests/reference``). Every integrand is arranged as a sum of terms of known sign evaluated in log
space, so nothing overflows and nothing cancels catastrophically.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from ._special import log_orf_gap_series, scipy_special, trig_orf_pair_minus_sq

__all__ = ["simplex_cosine", "s_quadrature", "simplex_exp_pair_cov", "simplex_trig_pair_cov"]


def simplex_cosine(d: int) -> float:
    """Inner product :math:`-1/(d-1)` of two unit vertices of a regular simplex in :math:`\\mathbb R^d` (d >= 2)."""
    return -1.0 / (d - 1.0)


@lru_cache(maxsize=64)
def s_quadrature(d: int) -> tuple[np.ndarray, np.ndarray]:
    r"""Nodes :math:`S_k = \sin\psi_k` and log-weights (summing to 1) for :math:`\mathbb E_S f(S)`.

    :math:`\psi` has density :math:`\propto\sin^{d-1}\psi` on :math:`[0, \pi]` (folded onto
    :math:`[0, \pi/2]`); Gauss-Legendre in :math:`\psi` with :math:`40 + 3\lceil\sqrt d\rceil` nodes.
    """
    n = 40 + 3 * int(np.ceil(np.sqrt(d)))
    x, w = scipy_special().roots_legendre(n)
    psi = (x + 1.0) * (np.pi / 4.0)
    S = np.sin(psi)
    lw = np.log(w) + (d - 1.0) * np.log(S)
    top = np.max(lw)
    lw = lw - (top + np.log(np.sum(np.exp(lw - top))))
    S.setflags(write=False)
    lw.setflags(write=False)
    return S, lw


def _lse(a: np.ndarray, axis: int = -1) -> np.ndarray:
    top = np.max(a, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.squeeze(top, axis=axis) + np.log(np.sum(np.exp(a - top), axis=axis))


def _signed_lse(logs: np.ndarray, signs: np.ndarray, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Sign and log|sum(signs * exp(logs))| along ``axis``."""
    live = (signs != 0) & np.isfinite(logs)
    top = np.max(np.where(live, logs, -np.inf), axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(under="ignore"):
        tot = np.sum(np.where(live, signs * np.exp(np.where(live, logs, 0.0) - top), 0.0), axis=axis)
    with np.errstate(divide="ignore"):
        out = np.log(np.abs(tot)) + np.squeeze(top, axis=axis)
    return np.sign(tot), out


def _log_two_sinh2(v: np.ndarray) -> np.ndarray:
    r""":math:`\log(\cosh v - 1) = \log(2\sinh^2(v/2))`, ``-inf`` at 0."""
    a = np.abs(v) / 2.0
    with np.errstate(divide="ignore"):
        small = np.log(2.0) + 2.0 * np.log(np.sinh(np.minimum(a, 300.0)))
    big = 2.0 * a - np.log(2.0) + 2.0 * np.log1p(-np.exp(-2.0 * np.maximum(a, 1e-300)))
    return np.where(a < 20.0, small, big)


def _on_nodes(d: int, t: Any) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, np.ndarray]:
    """``t`` as floats, ``t[..., None]`` against the quadrature nodes, the simplex cosine, the nodes and log weights."""
    t = np.asarray(t, dtype=np.float64)
    S, lw = s_quadrature(d)
    return t, t[..., None], simplex_cosine(d), S, lw


def simplex_exp_pair_cov(d: int, z2: np.ndarray, hyperbolic: bool) -> tuple[np.ndarray, np.ndarray]:
    r"""Relative pair covariance :math:`\mathrm{Cov}(F_1,F_2)/\mathrm{SM}^2` of the exponential maps, simplex pair.

    With :math:`G(t) = e^{t} - F(t/2) = \sum_{k\ge2}\frac{t^k}{k!}(1-c_k) \ge 0`
    (:func:`~rfkit.theory._special.log_orf_gap_series`), :math:`z^2 = \|x+y\|^2` (after any CEXP
    transform) and :math:`c = -1/(d-1)`:

    .. math::

        \phi^+,\ \text{OPRF, CEXP}:&\quad \rho_C = -\,\mathbb E_S\big[-\mathrm{expm1}(cSz^2) + e^{-z^2}G(z^2(1+cS))\big] < 0,\\
        \phi^{++},\ \text{HCEXP}:&\quad \rho_C = \mathbb E_S\big[\cosh(cSz^2) - 1\big]
            - \tfrac12\,\mathbb E_S\big[e^{-z^2}\big(G(z^2(1+cS)) + G(z^2(1-cS))\big)\big].

    The OPRF parameter drops out (as for orthogonal pairs, docs page *Theory*, section 1): the pair moment is
    :math:`(1-4A)^d\,\mathbb E[e^{2AR^2}F(\dots)]` and :math:`\mathbb E[R^{2k}e^{2AR^2}] = 2^k(d)_k(1-4A)^{-d-k}`.
    Because :math:`1 + cS \le 1`, :math:`F` is increasing and convex, the positive-map covariance
    is below the orthogonal one (:math:`-e^{-z^2}G(z^2)`) for every pair, while the hyperbolic
    maps, whose pairs also meet at :math:`\cos = +1/(d-1)` through :math:`-\omega_j`, are *above*
    it (Jensen).

    Returns
    -------
    sign, log|rho_C| : ndarray
        Shape of ``z2``. ``d >= 2``.
    """
    z2, zz, c, S, lw = _on_nodes(d, z2)
    cs = c * S * zz  # <= 0
    with np.errstate(divide="ignore"):
        a = np.log(-np.expm1(cs))  # -inf at z2 = 0
    gplus = -zz + log_orf_gap_series(d, zz * (1.0 + c * S))
    if not hyperbolic:
        return -np.ones_like(z2), _lse(np.logaddexp(a, gplus) + lw)
    gminus = -zz + log_orf_gap_series(d, zz * (1.0 - c * S))
    pos = _log_two_sinh2(cs) + lw
    neg = np.logaddexp(gplus, gminus) - np.log(2.0) + lw
    logs = np.concatenate([pos, neg], axis=-1)
    signs = np.concatenate([np.ones_like(pos), -np.ones_like(neg)], axis=-1)
    return _signed_lse(logs, signs)


def simplex_trig_pair_cov(d: int, D2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Relative pair covariance of the trig estimator (and GERF with :math:`s=-1`), simplex pair.

    With :math:`h(t) = e^{t}\big(F(-t/2) - e^{-t}\big)` (the orthogonal trig term,
    :func:`~rfkit.theory._special.trig_orf_pair_minus_sq`), :math:`t_\pm = \|\Delta\|^2(1 \pm cS)`:

    .. math::

        \rho_C = e^{\|\Delta\|^2}\,\tfrac12\big(\mathbb E_S F(-t_+/2) + \mathbb E_S F(-t_-/2)\big) - 1
        = \mathbb E_S\big[\cosh(cS\|\Delta\|^2) - 1\big]
          + \tfrac12\,\mathbb E_S\big[e^{-cS\|\Delta\|^2}h(t_+) + e^{cS\|\Delta\|^2}h(t_-)\big].

    Returns
    -------
    sign, log|rho_C| : ndarray
        Shape of ``D2``. ``d >= 2``.
    """
    D2, dd, c, S, lw = _on_nodes(d, D2)
    cs = c * S * dd
    shp = np.broadcast_shapes(dd.shape, S.shape)
    sp, lp = trig_orf_pair_minus_sq(d, np.broadcast_to(dd * (1.0 + c * S), shp).copy())
    sm, lm = trig_orf_pair_minus_sq(d, np.broadcast_to(dd * (1.0 - c * S), shp).copy())
    logs = np.concatenate(
        [_log_two_sinh2(cs) + lw, lp - cs - np.log(2.0) + lw, lm + cs - np.log(2.0) + lw], axis=-1
    )
    signs = np.concatenate([np.ones(shp), sp, sm], axis=-1)
    return _signed_lse(logs, signs)
