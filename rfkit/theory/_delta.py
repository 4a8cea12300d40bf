r"""The delta method for ratio estimators of attention: RFA, and hybrid attention with exact keys.

RFA (Peng et al. (ICLR 2021); read as self-normalised importance sampling as in Zheng, Wang &
Kong (ICML 2022)) and both variants of :class:`rfkit.attention.Hybrid` (Chen, Dao et al.
(NeurIPS 2021), "Scatterbrain") are ratios :math:`\hat o = \hat N/\hat Z` whose errors are linear
in the centred kernel estimates :math:`\delta_j = \hat\kappa_j - \kappa_j`:
:math:`\delta\hat Z = \sum_j w_j\delta_j`, :math:`\delta\hat N - a\,\delta\hat Z = \sum_j u_j\delta_j`
per output coordinate, with

* plain: :math:`w = \mathbb 1_R`, :math:`u_j = (v_j - a)\mathbb 1_R(j)` (:math:`R`: the keys not
  computed exactly; RFA: all keys);
* ratio: :math:`w = \mathbb 1`, :math:`u_j = v'_j - a`, :math:`v'_j = \mu^S` (the support's exact
  mean output) on the support and :math:`v_j` elsewhere.

With :math:`\mathrm{Cov}(\delta) = C/m + (K(m)/m^2)P` (:mod:`rfkit.theory._pairwise`) the
ratio-estimator delta method (Owen (2013), ch. 9) gives, per output coordinate,

.. math::

    \mathrm{Bias} \approx -\frac{w^\top\mathrm{Cov}(\delta)u}{Z^2},\qquad
    \mathrm{Var} \approx \frac{u^\top\mathrm{Cov}(\delta)u}{Z^2},

with remainders :math:`O(m^{-2})`. Derivation and domain: docs page *Sparse + random features*,
section "Theory".
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from .._backend import to_numpy
from .._validation import check_int, host_float_array
from ..exceptions import InvalidParameterError, NumericalOverflowError, OutOfDomainWarning, ShapeError
from ._pairwise import CrossState, cross_block, cross_diag, cross_state
from ._special import log_abs_expm1, orf_pair_count, scipy_special

__all__ = [
    "RFADeltaMethod",
    "delta_method",
    "query_keys_values",
    "NormalisedMoments",
    "normalised_moments",
    "DOMAIN_REL_VAR",
]

_VARIANTS = ("plain", "ratio")

#: Largest relative variance :math:`\sigma_Z^2(m) = \mathrm{Var}(\hat Z)/Z^2` of the estimated normaliser
#: inside the delta method's domain (docs page *Theory*, section 3, "Domain").
DOMAIN_REL_VAR = 0.1


def out_of_domain_message(dm: Any, m: Any) -> str:
    """The text of :class:`~rfkit.exceptions.OutOfDomainWarning` for ``dm`` at the features ``m``."""
    ms = np.atleast_1d(np.asarray(m))
    rv = float(np.max(dm.normaliser_rel_var(ms)))
    return (
        f"The delta-method prediction at m={ms.tolist() if ms.size > 1 else int(ms[0])} features is outside its "
        f"domain: the estimated normaliser's relative variance Var(Z_hat)/Z^2 = {rv:.4g} must be <= "
        f"{DOMAIN_REL_VAR:g} (moment_ratio = {dm.moment_ratio:.4g}); its remainder is not small there and "
        "the first-order bias and variance can be wrong by orders of magnitude. Use more features, or "
        "measure by simulation."
    )


@dataclasses.dataclass(frozen=True)
class RFADeltaMethod:
    r"""First-order (delta-method) bias and variance of a ratio attention estimator for one query.

    With ``m`` features (directions) the bias is :math:`(b_1 + b_2K(m)/m)/m` and the variance
    :math:`(v_1 + v_2K(m)/m)/m`, where :math:`K(m) = \sum_b k_b(k_b-1)` counts the ordered pairs of
    directions in one orthogonal block (:math:`b_2 = v_2 = 0` for iid directions).

    Parameters
    ----------
    attention : ndarray (dv,)
        Exact softmax attention output :math:`a`.
    bias_coef, var_coef : ndarray (dv,)
        :math:`b_1 = -w^\top Cu/Z^2` and :math:`v_1 = u^\top Cu/Z^2` (the one-direction covariance
        :math:`C`); for RFA with :math:`\phi^+`, :math:`-\mathbf 1^\top G(v-a\mathbf 1)/Z^2` and
        :math:`(v-a\mathbf1)^\top G(v-a\mathbf1)/Z^2`.
    moment_ratio : float
        :math:`w^\top Gw/(w^\top\kappa)^2`, the relative second moment of one direction's estimate
        of the estimated mass; the expansion needs ``m`` :math:`\gg` this (and control of higher
        moments: with log-normal weights convergence is slow: 12x the first-order bias was
        measured at ratio 5.6, m=64; docs page *Theory*, section 3).
    pair_bias_coef, pair_var_coef : ndarray (dv,) or None
        :math:`b_2 = -w^\top Pu/Z^2` and :math:`v_2 = u^\top Pu/Z^2` (the covariance :math:`P` of two
        directions of one orthogonal block); None for iid directions.
    dim : int or None
        Block size :math:`d` of the orthogonal construction (None for iid directions).
    norm_var_coef : float or None
        :math:`c_1 = w^\top Cw/Z^2`, the one-direction relative variance of the estimated
        normaliser (:meth:`normaliser_rel_var`); None: unknown (``moment_ratio - 1`` bounds it).
    pair_norm_var_coef : float or None
        :math:`c_2 = w^\top Pw/Z^2` (orthogonal blocks); None for iid directions.
    n_features : int or None
        The feature count ``m`` the prediction was asked for (None: not given).
    in_domain : bool or None
        Whether ``m`` is inside the expansion's domain (:meth:`within_domain`); None without ``m``.
    """

    attention: np.ndarray
    bias_coef: np.ndarray
    var_coef: np.ndarray
    moment_ratio: float
    pair_bias_coef: np.ndarray | None = None
    pair_var_coef: np.ndarray | None = None
    dim: int | None = None
    norm_var_coef: float | None = None
    pair_norm_var_coef: float | None = None
    n_features: int | None = None
    in_domain: bool | None = None

    def normaliser_rel_var(self, n_features: Any) -> np.ndarray:
        r""":math:`\sigma_Z^2(m) = \mathrm{Var}(\hat Z)/Z^2 = (c_1 + c_2K(m)/m)/m`, the estimated normaliser's relative variance.

        :math:`c_1 = w^\top Cw/Z^2` (``norm_var_coef``; unknown: ``moment_ratio - 1``, an upper
        bound) and :math:`c_2 = w^\top Pw/Z^2` (``pair_norm_var_coef``, orthogonal blocks).
        """
        S = np.asarray(n_features, dtype=np.float64)
        c1 = self.norm_var_coef if self.norm_var_coef is not None else max(self.moment_ratio - 1.0, 0.0)
        out = c1 / S
        if self.pair_norm_var_coef is not None and self.dim is not None:
            K = orf_pair_count(np.asarray(n_features, dtype=np.int64), self.dim)
            out = out + self.pair_norm_var_coef * K / (S * S)
        return np.maximum(out, 0.0)

    def within_domain(self, n_features: Any) -> np.ndarray:
        """True where ``normaliser_rel_var(m) <= DOMAIN_REL_VAR`` (0.1): the expansion's domain (docs page *Theory*, section 3).

        Also True everywhere when every coefficient is 0 (nothing estimated enters the output:
        the error is then exactly 0 for every ``m``, whatever the normaliser does).
        """
        inside = np.asarray(self.normaliser_rel_var(n_features) <= DOMAIN_REL_VAR)
        coefs = (self.bias_coef, self.var_coef, self.pair_bias_coef, self.pair_var_coef)
        if all(c is None or not np.any(c) for c in coefs):
            return np.ones_like(inside, dtype=bool)
        return inside

    def _warn_outside(self, n_features: Any, stacklevel: int = 3) -> None:
        ok = self.within_domain(n_features)
        if not np.all(ok):
            m = np.asarray(n_features)[~ok] if np.ndim(n_features) else np.asarray(n_features)
            warnings.warn(out_of_domain_message(self, m), OutOfDomainWarning, stacklevel=stacklevel)

    def _pair_weight(self, n_samples: Any) -> np.ndarray:
        S = np.asarray(n_samples, dtype=np.float64)[..., None]
        if self.dim is None:
            return np.zeros_like(S)
        return orf_pair_count(np.asarray(n_samples, dtype=np.int64), self.dim)[..., None] / S

    def bias(self, n_samples: Any) -> np.ndarray:
        """First-order bias at ``m`` features (``m`` may be an array; result (..., dv)).

        Warns :class:`~rfkit.exceptions.OutOfDomainWarning` where ``m`` is outside the domain.
        """
        self._warn_outside(n_samples)
        return self._bias(n_samples)

    def _bias(self, n_samples: Any) -> np.ndarray:
        S = np.asarray(n_samples, dtype=np.float64)[..., None]
        out = self.bias_coef / S
        if self.pair_bias_coef is not None:
            out = out + self.pair_bias_coef * self._pair_weight(n_samples) / S
        return out

    def variance(self, n_samples: Any) -> np.ndarray:
        """First-order variance at ``m`` features (warns outside the domain, as :meth:`bias`)."""
        self._warn_outside(n_samples)
        return self._variance(n_samples)

    def _variance(self, n_samples: Any) -> np.ndarray:
        S = np.asarray(n_samples, dtype=np.float64)[..., None]
        out = self.var_coef / S
        if self.pair_var_coef is not None:
            out = out + self.pair_var_coef * self._pair_weight(n_samples) / S
        return np.maximum(out, 0.0)

    def mse(self, n_samples: Any) -> np.ndarray:
        """First-order MSE (= variance; the squared bias is :math:`O(m^{-2})`, like the neglected terms).

        Warns :class:`~rfkit.exceptions.OutOfDomainWarning` where ``m`` is outside the domain.
        """
        self._warn_outside(n_samples)
        return self._variance(n_samples)

    def is_asymptotic(self, n_samples: int, factor: float = 10.0) -> bool:
        """True when ``m >= factor * moment_ratio`` (a necessary condition, not sufficient)."""
        return bool(n_samples >= factor * self.moment_ratio)


def query_keys_values(q: Any, K: Any, V: Any, owner: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """One query ``(d,)``, keys ``(M, d)`` and values ``(M,)`` or ``(M, dv)`` as float64 arrays.

    Returns ``(q, K, V2, scalar)`` with ``V2`` of shape ``(M, dv)`` and ``scalar`` True when
    ``V`` was one-dimensional. Raises ShapeError naming ``owner`` on mismatched shapes.
    """
    qv = host_float_array(q, "q", min_ndim=1)
    Kv = host_float_array(K, "K", min_ndim=2)
    Vv = host_float_array(V, "V", min_ndim=1)
    if qv.ndim != 1 or Kv.ndim != 2 or Kv.shape[1] != qv.shape[0]:
        raise ShapeError(f"{owner}: need q (d,), K (M, d); got q {qv.shape}, K {Kv.shape}.")
    scalar = Vv.ndim == 1
    V2 = Vv[:, None] if scalar else Vv
    if V2.ndim != 2 or V2.shape[0] != Kv.shape[0]:
        raise ShapeError(f"{owner}: V must be (M,) or (M, dv) with M={Kv.shape[0]}; got {Vv.shape}.")
    return qv, Kv, V2, scalar


#: Elements of one row block of the (M, M) moment matrices (2 MiB of float64): memory stays linear in M.
BLOCK_ELEMENTS = 1 << 18


@dataclasses.dataclass(frozen=True)
class NormalisedMoments:
    """One query's moments, ready for quadratic forms without building any (M, M) matrix.

    Attributes
    ----------
    state : CrossState
        The per-key vectors of :func:`rfkit.theory._pairwise.cross_block`.
    logp : ndarray (M,)
        Log softmax weights :math:`\\log p_j`.
    half_log_var : ndarray (M,)
        :math:`h_j = \\log\\sqrt{(C/Z^2)_{jj}}` (``-inf`` for a key estimated without error).
    dim : int or None
        Block size of the orthogonal construction (None: iid directions).
    """

    state: CrossState
    logp: np.ndarray
    half_log_var: np.ndarray
    dim: int | None

    @property
    def p(self) -> np.ndarray:
        """Softmax weights."""
        return np.exp(self.logp)


def _rows(M: int) -> list[slice]:
    b = max(1, BLOCK_ELEMENTS // max(M, 1))
    return [slice(s, min(s + b, M)) for s in range(0, M, b)]


def normalised_moments(fm: Any, q: np.ndarray, K: np.ndarray, owner: str) -> NormalisedMoments:
    """:class:`NormalisedMoments` of ``fm`` (None: iid positive features) for one query (log space)."""
    st = cross_state(fm, q, K, owner)
    s = st.log_kappa
    logp = s - scipy_special().logsumexp(s)
    lg_diag = log_abs_expm1(cross_diag(st))[1]
    dim = st.dim if st.projection == "orthogonal" and st.dim > 1 else None
    return NormalisedMoments(state=st, logp=logp, half_log_var=logp + 0.5 * lg_diag, dim=dim)


def _scaled(logmag: np.ndarray, sign: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Columns ``sign * exp(logmag)`` as ``(X / e^{R}, R)`` with ``R`` the column maxima (``-inf``: all zero)."""
    R = np.max(logmag, axis=0) if logmag.shape[0] else np.full(logmag.shape[1:], -np.inf)
    Rf = np.where(np.isfinite(R), R, 0.0)
    with np.errstate(under="ignore", invalid="ignore"):
        X = np.where(np.isneginf(logmag), 0.0, sign * np.exp(logmag - Rf))
    return X, R


def quadratic_forms(
    nm: NormalisedMoments, X: np.ndarray, pairs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    r"""Sign and log magnitude of :math:`x_a^\top (C/Z^2) x_b`, and :math:`x_a^\top (P/Z^2) x_b`, for column pairs.

    ``X`` is (M, k); ``pairs`` (n, 2) indexes its columns. The covariance :math:`C/Z^2` is walked
    in blocks of rows of its upper triangle as :math:`\hat C_{jl} e^{h_j + h_l}` with
    :math:`|\hat C_{jl}| \le 1` (a correlation matrix) and every column scaled by its own
    maximum of :math:`h_j + \log|x_j|`: nothing overflows, and memory is linear in M. The pair
    forms (orthogonal blocks) are returned as plain floats (None for iid directions).

    Raises
    ------
    NumericalOverflowError
        If a pair form of orthogonal directions exceeds the float64 range.
    """
    M, k = X.shape
    dead = ~np.isfinite(nm.half_log_var)
    # key j scaled by e^{-g_j}, g_j = log of its relative SD (floored so that e^{-g} stays finite):
    # |C_jl| e^{-g_j - g_l} <= 1 and the vectors carry p_j e^{g_j}
    g = np.where(dead, 0.0, np.maximum(nm.half_log_var - nm.logp, -300.0))
    E = np.exp(-g)
    with np.errstate(divide="ignore"):
        logmag = np.where(dead, -np.inf, nm.logp + g)[:, None] + np.log(np.abs(X))
    Xs, R = _scaled(logmag, np.sign(X))
    orth = nm.dim is not None
    if orth:
        with np.errstate(divide="ignore"):
            lpx = nm.logp[:, None] + np.log(np.abs(X))
        Xp, Rp = _scaled(lpx, np.sign(X))
    Y = np.zeros((M, k))
    Yp = np.zeros((M, k)) if orth else None
    for r in _rows(M):
        cols = slice(r.start, M)
        L, gap = cross_block(nm.state, r, cols, pair=orth)
        EE = np.outer(E[r], E[cols])
        small = L < 0.5
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            T = np.where(
                small,
                np.expm1(np.where(small, L, 0.0)) * EE,
                np.exp(np.where(small, 0.0, L) - g[r][:, None] - g[cols][None, :]) - EE,
            )
        np.clip(T, -1.0, 1.0, out=T)  # a correlation (Cauchy-Schwarz); clips round-off only
        nb = r.stop - r.start  # the diagonal sub-block: upper triangle, diagonal counted once
        T[:, :nb] = np.triu(T[:, :nb])
        T[np.arange(nb), np.arange(nb)] *= 0.5
        if dead.any():
            T[dead[r], :] = 0.0
            T[:, dead[cols]] = 0.0
        Y[r] += T @ Xs[cols]
        Y[cols] += T.T @ Xs[r]
        if orth and gap is not None and Yp is not None:
            G = gap.copy()
            G[:, :nb] = np.triu(G[:, :nb])
            G[np.arange(nb), np.arange(nb)] *= 0.5
            Yp[r] += G @ Xp[cols]
            Yp[cols] += G.T @ Xp[r]
    ia, ib = pairs[:, 0], pairs[:, 1]
    S = np.sum(Xs[:, ia] * Y[:, ib], axis=0)
    with np.errstate(divide="ignore"):
        logS = R[ia] + R[ib] + np.log(np.abs(S))
    logS = np.where(S == 0, -np.inf, logS)
    pair = None
    if orth and Yp is not None:
        Sp = np.sum(Xp[:, ia] * Yp[:, ib], axis=0)
        with np.errstate(over="ignore", invalid="ignore"):
            pair = np.where(Sp == 0, 0.0, Sp * np.exp(np.where(Sp == 0, 0.0, Rp[ia] + Rp[ib])))
        if not np.all(np.isfinite(pair)):
            raise NumericalOverflowError(
                "The orthogonal-pair covariance of the delta method exceeds the float64 range for these "
                "inputs; use projection='iid', or smaller inputs."
            )
    return np.sign(S), logS, pair


def _check_exact(exact: Any, M: int, owner: str) -> np.ndarray:
    if exact is None:
        return np.zeros(M, dtype=bool)
    ex = to_numpy(exact) if not isinstance(exact, np.ndarray) else exact
    ex = np.asarray(ex)
    if ex.dtype != bool or ex.shape != (M,):
        raise InvalidParameterError(
            f"The `exact` parameter of {owner} must be a boolean array of shape ({M},). "
            f"Got {getattr(ex, 'dtype', type(ex))} of shape {getattr(ex, 'shape', None)} instead."
        )
    return ex


def check_variant(variant: Any, owner: str) -> str:
    """``variant`` if it is ``"plain"`` or ``"ratio"``; else InvalidParameterError."""
    if not isinstance(variant, str) or variant not in _VARIANTS:
        raise InvalidParameterError(
            f"The `variant` parameter of {owner} must be one of 'plain', 'ratio'. Got {variant!r} instead."
        )
    return variant


_LOG_MAX = float(np.log(np.finfo(np.float64).max))


def _centred_values(logp: np.ndarray, V2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a = p @ V2`` and ``V2 - a``, the row of the heaviest key as ``(1 - p_t)(v_t - a_{-t})``.

    That row is the one whose difference cancels when ``p_t`` is near 1, and the one multiplied
    by the largest covariance: computed from the other keys' weights it keeps its relative accuracy.
    """
    p = np.exp(logp)
    a = p @ V2
    U0 = V2 - a[None, :]
    M = logp.shape[0]
    t = int(np.argmax(logp))
    if M == 1:
        U0[t] = 0.0
    elif p[t] > 0.5:
        others = np.delete(np.arange(M), t)
        lse = scipy_special().logsumexp(logp[others])
        a_rest = np.exp(logp[others] - lse) @ V2[others]
        U0[t] = np.exp(lse) * (V2[t] - a_rest)
    return a, U0


def _lse(x: np.ndarray) -> float:
    """``log(sum(exp(x)))`` (``-inf`` for none); finite ``x``."""
    if not x.size:
        return -np.inf
    top = float(np.max(x))
    return top + float(np.log(np.sum(np.exp(x - top))))


def _candidate_vectors(
    logp: np.ndarray, V2: np.ndarray, a: np.ndarray, U0: np.ndarray, ex: np.ndarray, variant: str
) -> tuple[np.ndarray, np.ndarray, float]:
    """``w`` (M,), ``U`` (M, dv) and ``log(w @ p)`` of one exact-key mask (module docstring)."""
    if variant == "plain":
        w = (~ex).astype(np.float64)
        return w, U0 * w[:, None], _lse(logp[~ex])
    w = np.ones(logp.shape[0])
    U = U0.copy()
    if ex.any():
        rest = ~ex
        if rest.any():
            ls, lr = _lse(logp[ex]), _lse(logp[rest])
            mu_s = np.exp(logp[ex] - ls) @ V2[ex]
            mu_r = np.exp(logp[rest] - lr) @ V2[rest]
            U[ex] = np.exp(lr) * (mu_s - mu_r)[None, :]  # mu_S - a = P_R (mu_S - mu_R), no cancellation
        else:
            U[ex] = 0.0
    return w, U, 0.0


def _exp_coef(logv: np.ndarray, what: str, owner: str) -> np.ndarray:
    top = float(np.max(logv)) if logv.size else -np.inf
    if top > _LOG_MAX:
        raise NumericalOverflowError(
            f"{owner}: the delta method's {what} is about e^{top:.6g}, beyond the float64 range "
            f"(e^{_LOG_MAX:.6g}). The first-order prediction is meaningless this far outside its domain "
            "(m would have to exceed it); scale q and K down, or measure by simulation."
        )
    with np.errstate(under="ignore"):
        return np.exp(logv)


def coefficients_many(
    nm: NormalisedMoments, V2: np.ndarray, masks: list[np.ndarray], variant: str, owner: str
) -> list[RFADeltaMethod]:
    """The delta-method coefficients of one query for several exact-key masks, one pass over its moments.

    The (M, M) covariances are walked once in row blocks for all masks together (memory linear in
    M); every quantity is carried as sign and logarithm until the end.
    """
    logp = nm.logp
    dv = V2.shape[1]
    a, U0 = _centred_values(logp, V2)
    cols, logmass = [], []
    for ex in masks:
        w, U, lm = _candidate_vectors(logp, V2, a, U0, ex, variant)
        cols += [w[:, None], U]
        logmass.append(lm)
    X = np.concatenate(cols, axis=1)
    k = dv + 1
    pairs = []
    for c in range(len(masks)):
        base = c * k
        pairs += [(base, base)] + [(base, base + 1 + j) for j in range(dv)]
        pairs += [(base + 1 + j, base + 1 + j) for j in range(dv)]
    idx = np.asarray(pairs, dtype=np.int64)
    sign, logS, pair = quadratic_forms(nm, X, idx)
    per = 1 + 2 * dv
    out = []
    for c in range(len(masks)):
        sl = slice(c * per, (c + 1) * per)
        sg, lg = sign[sl], logS[sl]
        bias = -sg[1 : 1 + dv] * _exp_coef(lg[1 : 1 + dv], "bias coefficient -w^T C u / Z^2", owner)
        var = sg[1 + dv :] * _exp_coef(lg[1 + dv :], "variance coefficient u^T C u / Z^2", owner)
        lm = logmass[c]
        with np.errstate(over="ignore", under="ignore"):
            norm_var = float(sg[0] * np.exp(lg[0])) if np.isfinite(lg[0]) else 0.0
            ratio = float(sg[0] * np.exp(lg[0] - 2.0 * lm)) + 1.0 if np.isfinite(lm) else 0.0
        pb = pv = None
        pnorm = None
        if pair is not None:
            pp = pair[sl]
            pb, pv = -pp[1 : 1 + dv], pp[1 + dv :]
            pnorm = float(pp[0])
        out.append(
            RFADeltaMethod(
                a.copy(), bias, var, ratio, pb, pv, nm.dim, norm_var_coef=norm_var, pair_norm_var_coef=pnorm
            )
        )
    return out


def coefficients(
    nm: NormalisedMoments, V2: np.ndarray, ex: np.ndarray, variant: str, owner: str = "rfa_delta_method"
) -> RFADeltaMethod:
    """The delta-method coefficients of one query from its moments, values and exact-key mask."""
    return coefficients_many(nm, V2, [ex], variant, owner)[0]


def delta_method(
    q: Any, K: Any, V: Any, exact: Any, variant: Any, feature_map: Any, owner: str, n_features: Any = None
) -> RFADeltaMethod:
    """The shared body of :func:`rfkit.theory.rfa_delta_method` and :func:`rfkit.theory.hybrid_delta_method`.

    With ``n_features`` the result records it and ``in_domain``, and an
    :class:`~rfkit.exceptions.OutOfDomainWarning` is emitted when it is outside the domain.
    """
    variant = check_variant(variant, owner)
    m = None if n_features is None else check_int(n_features, "n_features", owner, low=1)
    qv, Kv, V2, scalar = query_keys_values(q, K, V, owner)
    ex = _check_exact(exact, Kv.shape[0], owner)
    res = coefficients(normalised_moments(feature_map, qv, Kv, owner), V2, ex, variant, owner)
    if scalar:
        res = dataclasses.replace(
            res,
            **{
                f.name: getattr(res, f.name)[:1]
                for f in dataclasses.fields(res)
                if isinstance(getattr(res, f.name), np.ndarray)
            },
        )
    if m is not None:
        res = dataclasses.replace(res, n_features=m, in_domain=bool(res.within_domain(m)))
        if not res.in_domain:
            warnings.warn(out_of_domain_message(res, m), OutOfDomainWarning, stacklevel=3)
    return res
