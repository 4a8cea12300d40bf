r"""Relative variance, pair covariance and bias of the built-in map families.

For the trigonometric maps (Rahimi & Recht (NeurIPS 2007); GERF with :math:`s=-1`) and the
exponential ones (positive and hyperbolic features of Choromanski et al. (ICLR 2021), Lemma 2;
CEXP/HCEXP of Choromanski et al. (ICLR 2022) through :math:`z = Ax + A^{-\top}y`
(Blackwelder (2024), Lemma 3.1); OPRF of Likhosherstov et al. (NeurIPS 2022)), with
:math:`\chi(d)` or fixed :math:`\sqrt d` norms and iid, orthogonal (Yu et al. (NeurIPS 2016))
or simplex (Reid et al. (ICML 2023)) directions. The exact orthogonal-pair covariances and
the fixed-norm moments are derived in docs page *Theory*, sections 1 and 1a.
"""

from __future__ import annotations

import numpy as np

from ..exceptions import InvalidParameterError
from ._closed_form import _Parts, _Plan, _transform
from ._simplex import simplex_exp_pair_cov, simplex_trig_pair_cov
from ._special import (
    hyp0f1_neg,
    log_2sinh2_half,
    log_abs_expm1,
    log_expm1,
    log_hyp0f1_pos,
    log_orf_gap_series,
    signed_logsumexp,
    trig_orf_pair_minus_sq,
)

__all__: list[str] = []


def _parts(plan: _Plan, X: np.ndarray, Y: np.ndarray, d: int) -> _Parts:
    log_sm = np.sum(X * Y, axis=-1)
    fixed = plan.projection == "orthogonal-fixed"
    orth = plan.projection in ("orthogonal", "orthogonal-fixed") and d > 1
    simplex = plan.projection == "simplex" and d > 1
    a = plan.a
    if plan.family == "trig":
        D2 = np.sum((X - Y) ** 2, axis=-1)
        if not fixed:
            if a == 0.0:
                log_relvar = log_2sinh2_half(D2)
            elif a >= 0.125:
                log_relvar = np.full_like(D2, np.inf)
            else:  # GERF, s = -1: E[(est/SM)^2] = K(A) (e^{D2} + e^{-D2/(1-8A)}) / 2
                L = _log_k(d, a) + np.logaddexp(D2, -D2 / (1.0 - 8.0 * a)) - np.log(2.0)
                log_relvar = log_expm1(np.maximum(L, 0.0))
            cov = None
            if orth:
                cov = trig_orf_pair_minus_sq(d, D2)
            elif simplex:
                cov = simplex_trig_pair_cov(d, D2)
            return _Parts(log_sm, log_relvar, cov, None)
        if a != 0.0:
            raise InvalidParameterError(
                "GERF with s=-1 has no closed form for projection='orthogonal-fixed' (fixed norms); "
                "use 'iid', 'orthogonal' or 'simplex', or measure it with rfkit.theory.check."
            )
        b, v = d / 2.0, d * D2 / 4.0
        mu1 = hyp0f1_neg(b, v)
        musq = 0.5 * (1.0 + hyp0f1_neg(b, 4.0 * v))
        with np.errstate(divide="ignore"):
            log_relvar = D2 + np.log(np.maximum(musq - mu1**2, 0.0))
            cov = None
            if orth:
                c = hyp0f1_neg(b, 2.0 * v) - mu1**2
                cov = (np.sign(c), D2 + np.log(np.abs(c)))
            l1 = 0.5 * D2 + np.log(np.abs(mu1))
        bias = signed_logsumexp([l1, np.zeros_like(l1)], [np.sign(mu1), -1.0])
        return _Parts(log_sm, log_relvar, cov, bias)
    Xq, Yk = _transform(plan, X, Y)
    z2 = np.sum((Xq + Yk) ** 2, axis=-1)
    if not fixed:
        if plan.hyperbolic and a == 0.0:
            log_relvar = log_2sinh2_half(z2)
        elif a == 0.0:
            log_relvar = log_expm1(z2)
        elif a >= 0.125:
            log_relvar = np.full_like(z2, np.inf)
        elif plan.hyperbolic:  # hyperbolic OPRF: E[(est/SM)^2] = K(A) (e^{-z2} + e^{z2/(1-8A)}) / 2
            L = _log_k(d, a) + np.logaddexp(-z2, z2 / (1.0 - 8.0 * a)) - np.log(2.0)
            log_relvar = log_expm1(np.maximum(L, 0.0))
        else:
            L = _log_k(d, a) + z2 / (1.0 - 8.0 * a)
            log_relvar = log_expm1(np.maximum(L, 0.0))
        cov = None
        if orth:
            cov = (-np.ones_like(z2), -z2 + log_orf_gap_series(d, z2))
        elif simplex:
            cov = simplex_exp_pair_cov(d, z2, plan.hyperbolic)
        return _Parts(log_sm, log_relvar, cov, None)
    # fixed norms: e^{2a||w||^2} = e^{2ad} is a constant, so every moment is finite for a < 1/4
    b2 = 1.0 - 4.0 * a
    log_c = 0.5 * d * np.log1p(-4.0 * a) + 2.0 * a * d
    v = d * b2 * z2 / 4.0
    E1 = log_c + log_hyp0f1_pos(d / 2.0, v) - 0.5 * z2
    if plan.hyperbolic:
        E2 = 2.0 * log_c - z2 - np.log(2.0) + np.logaddexp(0.0, log_hyp0f1_pos(d / 2.0, 4.0 * v))
    else:
        E2 = 2.0 * log_c - z2 + log_hyp0f1_pos(d / 2.0, 4.0 * v)
    log_relvar = 2.0 * E1 + log_expm1(np.maximum(E2 - 2.0 * E1, 0.0))
    cov = None
    if orth:
        Ep = 2.0 * log_c - z2 + log_hyp0f1_pos(d / 2.0, 2.0 * v)
        s, lg = log_abs_expm1(Ep - 2.0 * E1)
        cov = (s, 2.0 * E1 + lg)
    bias = log_abs_expm1(E1)
    return _Parts(log_sm, log_relvar, cov, bias)


def _log_k(d: int, a: float) -> float:
    r""":math:`\log K(A) = \tfrac d2\log\frac{(1-4A)^2}{1-8A}` (the GERF/OPRF variance prefactor, :math:`A < 1/8`)."""
    return float(0.5 * d * (2.0 * np.log1p(-4.0 * a) - np.log1p(-8.0 * a)))
