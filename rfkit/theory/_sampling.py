r"""Exact finite-population theory of the sampled remainders of sparse attention.

Sparse attention computes a support :math:`S` of the keys a query may see exactly and
estimates the rest :math:`R` (the remainder, :math:`N_R = |R|` keys) by sampling ``s`` of its
keys. With the weights :math:`w_j = e^{q^\top k_j - c}` (one common shift :math:`c`) and values
:math:`v_j`, the exact parts are :math:`Z_S = \sum_S w_j`, :math:`E_S = \sum_S w_jv_j`, the
remainder's totals :math:`Z_R = \sum_R w_j`, :math:`T = \sum_R w_jv_j`, and the output is
:math:`\hat o = (E_S + \hat T)/(Z_S + \hat Z_R)`.

Every remainder estimator here is a linear, unbiased estimator :math:`\hat X = \sum_i c_i x_{j_i}`
of a remainder total :math:`X = \sum_R x_j`, so the covariance of two of them is a bilinear form
in the per-key quantities, exact for every ``s`` (Horvitz & Thompson (JASA 1952); Cochran,
*Sampling Techniques*, 3rd ed. (1977), ch. 2 and 5; Owen, *Monte Carlo theory, methods and
examples* (2013), ch. 9):

* uniform without replacement, :math:`\hat X = (N_R/s)\sum_{\text{sample}}x_j`:
  :math:`\mathrm{Cov}(\hat X, \hat Y) = N_R^2(1 - s/N_R)\,S_{xy}/s`,
  :math:`S_{xy} = \sum_R (x_j-\bar x)(y_j-\bar y)/(N_R-1)` (Cochran (1977), ch. 2);
* uniform with replacement: :math:`N_R^2\sigma_{xy}/s`, :math:`\sigma_{xy}` with divisor :math:`N_R`;
* stratified (contiguous strata :math:`h` of :math:`N_h` keys, :math:`s_h` drawn without
  replacement in each): the sum over the strata of the first formula (Cochran (1977), ch. 5);
* importance (``s`` draws with replacement from :math:`p`, :math:`\hat X = \frac1s\sum_i x_{j_i}/p_{j_i}`):
  :math:`\mathrm{Cov}(\hat X, \hat Y) = \frac1s\sum_R (x_j - p_jX)(y_j - p_jY)/p_j
  = \frac1s\big(\sum_R x_jy_j/p_j - XY\big)` (Owen (2013), ch. 9).

The output is a ratio of such estimators; its bias and variance are the delta method's
(Cochran (1977), ch. 6, the ratio estimator), see :func:`sampled_remainder_moments`.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from .._params import check_int, check_real
from .._validation import host_float_array
from ..exceptions import InvalidParameterError, OutOfDomainWarning, ShapeError
from ._delta import DOMAIN_REL_VAR, _centred_values, _check_exact, _lse, query_keys_values

__all__ = ["sampled_remainder_moments", "SampledRemainderMoments", "REMAINDERS", "DEFAULT_MIX"]

_OWNER = "sampled_remainder_moments"

#: The sampled remainders :func:`sampled_remainder_moments` covers.
REMAINDERS = ("uniform", "stratified", "importance", "none")

#: Default share :math:`\lambda` of the uniform distribution in the importance proposal
#: :math:`p = (1-\lambda)\,\mathrm{softmax}_R(\text{proxy}) + \lambda/N_R`.
DEFAULT_MIX = 0.1


@dataclasses.dataclass(frozen=True, repr=False)
class SampledRemainderMoments:
    r"""Exact moments of a sampled remainder and the delta-method error of the output, for one query.

    Totals are on the shifted scale :math:`w_j = e^{q^\top k_j - c}` with
    :math:`c` = ``log_shift`` (the largest logit the query sees); multiply a variance by
    :math:`e^{2c}` for the unshifted one. Per-coordinate arrays have shape ``(dv,)`` (``(1,)`` for
    one-dimensional ``V``). ``mse_total``, ``variance_total`` and ``bias_sq_total`` sum over the
    value coordinates. The fields, which the constructor takes in this order:

    Parameters
    ----------
    remainder : str
        ``"uniform"``, ``"stratified"``, ``"importance"`` or ``"none"``.
    n_samples : int or None
        The budget ``s`` of sampled keys (None for ``"none"``).
    replace : bool
        Whether the keys are drawn with replacement.
    n_support, n_remainder : int
        :math:`|S|` and :math:`N_R`.
    deterministic : bool
        True when nothing is sampled (``"none"``, an empty remainder, or ``s >= N_R``: the
        remainder is then computed exactly): the output error is then exactly ``bias``.
    log_shift : float
        The common shift :math:`c`.
    normaliser, remainder_normaliser : float
        :math:`Z = Z_S + Z_R` and :math:`Z_R` (shifted scale).
    attention : ndarray (dv,)
        The exact output :math:`a = (E_S + T)/Z`.
    var_Z : float
        :math:`\mathrm{Var}(\hat Z_R)`, exact.
    var_T, cov_ZT : ndarray (dv,)
        :math:`\mathrm{Var}(\hat T)` and :math:`\mathrm{Cov}(\hat Z_R, \hat T)`, exact.
    normaliser_rel_var : float
        :math:`\sigma_Z^2 = \mathrm{Var}(\hat Z_R)/Z^2`, exact; the delta method's domain is
        :math:`\sigma_Z^2 \le 0.1`.
    bias, variance, mse : ndarray (dv,)
        The output's delta-method bias :math:`-\mathrm{Cov}(\hat Z_R, \hat D)/Z^2`, variance
        :math:`\mathrm{Var}(\hat D)/Z^2` (:math:`\hat D = \hat T - a\hat Z_R`) and
        ``mse = variance + bias**2``; exact when ``deterministic`` (variance 0).
    in_domain : bool
        True when ``normaliser_rel_var <= 0.1`` (or nothing is sampled); False is also announced
        by an :class:`~rfkit.exceptions.OutOfDomainWarning`.
    proposal : ndarray (N_R,) or None
        The importance proposal :math:`p` over the remainder keys in key order (None otherwise).
    mix : float or None
        :math:`\lambda` of a proposal built from proxy logits (None otherwise).
    """

    remainder: str
    n_samples: int | None
    replace: bool
    n_support: int
    n_remainder: int
    deterministic: bool
    log_shift: float
    normaliser: float
    remainder_normaliser: float
    attention: np.ndarray
    var_Z: float
    var_T: np.ndarray
    cov_ZT: np.ndarray
    normaliser_rel_var: float
    bias: np.ndarray
    variance: np.ndarray
    mse: np.ndarray
    in_domain: bool
    proposal: np.ndarray | None = None
    mix: float | None = None

    @property
    def mse_total(self) -> float:
        """The output's MSE summed over the value coordinates."""
        return float(np.sum(self.mse))

    @property
    def variance_total(self) -> float:
        """The output's delta-method variance summed over the value coordinates."""
        return float(np.sum(self.variance))

    @property
    def bias_sq_total(self) -> float:
        """The squared bias summed over the value coordinates."""
        return float(np.sum(self.bias**2))

    def __repr__(self) -> str:
        s = "None" if self.n_samples is None else str(self.n_samples)
        return (
            f"SampledRemainderMoments(remainder={self.remainder!r}, n_samples={s}, "
            f"n_remainder={self.n_remainder}, normaliser_rel_var={self.normaliser_rel_var:.4g}, "
            f"mse_total={self.mse_total:.4g}, in_domain={self.in_domain})"
        )


def _strata(n: int, s: int) -> tuple[np.ndarray, np.ndarray]:
    """Sizes :math:`N_h` and budgets :math:`s_h` of the ``H = min(s, n)`` contiguous strata.

    Sizes and budgets as equal as possible, the first ``n mod H`` (``s mod H``) strata one larger.
    """
    H = min(s, n)
    sizes = np.full(H, n // H, dtype=np.int64)
    sizes[: n % H] += 1
    budgets = np.full(H, s // H, dtype=np.int64)
    budgets[: s % H] += 1
    return sizes, budgets


def _srs_cov(A: np.ndarray, B: np.ndarray, s: int, replace: bool) -> np.ndarray:
    r"""Per column, :math:`\mathrm{Cov}(\hat A, \hat B)` of uniform sampling of ``s`` of the ``N`` rows."""
    N = A.shape[0]
    if N <= 1 or (not replace and s >= N):
        return np.zeros(np.broadcast_shapes(A.shape[1:], B.shape[1:]))
    Ac = A - A.mean(axis=0)
    Bc = B - B.mean(axis=0)
    cross = np.sum(Ac * Bc, axis=0)
    if replace:
        return N * cross / s  # N^2 sigma_xy / s, sigma_xy = cross / N
    return N * N * (1.0 - s / N) * (cross / (N - 1)) / s


def _cov(kind: str, A: np.ndarray, B: np.ndarray, s: int, replace: bool, p: np.ndarray | None) -> np.ndarray:
    r"""Exact :math:`\mathrm{Cov}(\hat A, \hat B)` per column for the remainder ``kind`` (module docstring)."""
    if kind == "uniform":
        return _srs_cov(A, B, s, replace)
    if kind == "stratified":
        sizes, budgets = _strata(A.shape[0], s)
        out = np.zeros(np.broadcast_shapes(A.shape[1:], B.shape[1:]))
        start = 0
        for Nh, sh in zip(sizes.tolist(), budgets.tolist()):
            out = out + _srs_cov(A[start : start + Nh], B[start : start + Nh], sh, False)
            start += Nh
        return out
    assert p is not None  # importance
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        Ra = A - p[:, None] * A.sum(axis=0)
        Rb = B - p[:, None] * B.sum(axis=0)
        return np.sum(Ra * Rb / p[:, None], axis=0) / s


def _proposal(
    proposal: Any, proxy_logits: Any, mix: Any, logits: np.ndarray, rest: np.ndarray
) -> tuple[np.ndarray, float | None]:
    """The importance proposal over the remainder keys, and the mix used (None for a given proposal)."""
    M = logits.shape[0]
    if proposal is not None:
        if proxy_logits is not None:
            raise InvalidParameterError(
                f"{_OWNER}: pass either `proposal` or `proxy_logits`, not both (got both arrays)."
            )
        pv = host_float_array(proposal, "proposal", min_ndim=1)
        if pv.shape != (M,):
            raise ShapeError(f"{_OWNER}: `proposal` must have shape ({M},) (one per key); got {pv.shape}.")
        pr = pv[rest]
        if pr.size and (np.any(pr <= 0) or not np.all(np.isfinite(pr))):
            bad = float(pr[~(np.isfinite(pr) & (pr > 0))][0])
            raise InvalidParameterError(
                f"The `proposal` parameter of {_OWNER} must be finite and > 0 on every remainder key "
                f"(else the estimator is biased). Got {bad!r} on a remainder key."
            )
        return pr / pr.sum(), None
    lam = check_real(mix, "mix", _OWNER, low=0.0, high=1.0)
    if proxy_logits is None:
        pl = logits[rest]
    else:
        pv = host_float_array(proxy_logits, "proxy_logits", min_ndim=1)
        if pv.shape != (M,):
            raise ShapeError(
                f"{_OWNER}: `proxy_logits` must have shape ({M},) (one per key); got {pv.shape}."
            )
        pl = pv[rest]
    n = pl.shape[0]
    soft = np.exp(pl - _lse(pl)) if n else pl
    p = (1.0 - lam) * soft + lam / max(n, 1)
    if n and np.any(p <= 0):
        raise InvalidParameterError(
            f"The `mix` parameter of {_OWNER} is {lam!r}: the proxy's softmax underflows to 0 on some "
            "remainder keys, so the proposal is 0 there and the estimator biased. Use mix > 0."
        )
    return p, lam


def _kind_and_replace(remainder: Any, replace: Any) -> tuple[str, bool]:
    if not isinstance(remainder, str) or remainder not in REMAINDERS:
        hint = " ('features' is covered by rk.theory.hybrid_delta_method)" if remainder == "features" else ""
        raise InvalidParameterError(
            f"The `remainder` parameter of {_OWNER} must be one of {', '.join(map(repr, REMAINDERS))}{hint}. "
            f"Got {remainder!r} instead."
        )
    if replace is not None and not isinstance(replace, (bool, np.bool_)):
        raise InvalidParameterError(
            f"The `replace` parameter of {_OWNER} must be None, True or False. Got {replace!r} instead."
        )
    allowed = {"uniform": (False, True), "stratified": (False,), "importance": (True,), "none": (False,)}
    default = {"uniform": False, "stratified": False, "importance": True, "none": False}[remainder]
    rep = default if replace is None else bool(replace)
    if rep not in allowed[remainder]:
        raise InvalidParameterError(
            f"The `replace` parameter of {_OWNER} must be {allowed[remainder][0]} (or None) for "
            f"remainder={remainder!r}: it is defined only "
            f"{'with' if allowed[remainder][0] else 'without'} replacement. Got {replace!r} instead."
        )
    return remainder, rep


def sampled_remainder_moments(
    q: Any,
    K: Any,
    V: Any,
    exact: Any = None,
    *,
    remainder: str = "uniform",
    n_samples: int | None = None,
    replace: bool | None = None,
    proposal: Any = None,
    proxy_logits: Any = None,
    mix: float = DEFAULT_MIX,
) -> SampledRemainderMoments:
    r"""Exact variances of a sampled remainder, and the output's delta-method bias, variance and MSE.

    One query ``q`` sees the keys ``K`` (rows in key-position order; causal masking and padding
    are the caller's: pass only the keys it may see). ``exact`` marks the support :math:`S`,
    computed exactly; the remainder :math:`R` (the other :math:`N_R` keys) is estimated from
    ``s = n_samples`` sampled keys. With :math:`w_j = e^{q^\top k_j - c}`
    (:math:`c` the largest logit, ``log_shift``):

    * ``"uniform"``: ``s`` keys uniformly without replacement (``replace=True``: ``s`` iid
      draws), Horvitz–Thompson :math:`\hat Z_R = (N_R/s)\sum w_j`, :math:`\hat T = (N_R/s)\sum w_jv_j`;
      :math:`\mathrm{Var}(\hat Z_R) = N_R^2(1-s/N_R)S_w^2/s` with
      :math:`S_w^2 = \sum_R(w_j-\bar w)^2/(N_R-1)` (with replacement :math:`N_R^2\sigma_w^2/s`,
      divisor :math:`N_R`), and likewise for :math:`\hat T` and the cross term.
    * ``"stratified"``: :math:`R` in key order cut into :math:`H = \min(s, N_R)` contiguous strata
      of sizes :math:`N_h` as equal as possible (the first :math:`N_R \bmod H` one larger),
      :math:`s_h` keys without replacement in each (``s // H``, plus one for the first
      ``s mod H``); :math:`\hat Z_R = \sum_h (N_h/s_h)\sum_{h} w_j`; the variance is the sum over
      the strata of the uniform formula.
    * ``"importance"``: ``s`` draws with replacement from :math:`p` over :math:`R`,
      :math:`\hat Z_R = \frac1s\sum_i w_{j_i}/p_{j_i}`;
      :math:`\mathrm{Var}(\hat Z_R) = \frac1s\sum_R (w_j - p_jZ_R)^2/p_j = (\sum_R w_j^2/p_j - Z_R^2)/s`.
      :math:`p` is ``proposal`` (normalised over :math:`R`), else
      :math:`(1-\lambda)\,\mathrm{softmax}_R(\text{proxy}) + \lambda/N_R` with
      :math:`\lambda` = ``mix`` and the proxy ``proxy_logits`` (default: the exact logits
      :math:`q^\top k_j`, the oracle proxy).
    * ``"none"``: :math:`\hat Z_R = \hat T = 0`; the output is :math:`E_S/Z_S` and its error
      :math:`\mu_S - a = (Z_R/Z)(\mu_S - \mu_R)` is deterministic, returned exactly as ``bias``.

    With ``s >= N_R`` the remainder is computed exactly (no sampling, no error). These variances
    and covariances are exact for every ``s`` (Horvitz & Thompson (JASA 1952); Cochran,
    *Sampling Techniques*, 3rd ed. (1977), ch. 2 and 5 (stratified); Owen, *Monte Carlo theory,
    methods and examples* (2013), ch. 9 (importance sampling)).

    The output :math:`\hat o = (E_S+\hat T)/(Z_S+\hat Z_R)` is a ratio estimator; with
    :math:`a = (E_S+T)/Z`, :math:`\hat D = \hat T - a\hat Z_R` (so :math:`\mathbb E\hat D = T - aZ_R`)
    and :math:`\varepsilon = (\hat Z_R - Z_R)/Z`, its error is exactly
    :math:`(\hat D - \mathbb E\hat D)/(Z(1+\varepsilon))`, and the delta method (Cochran (1977),
    ch. 6, the ratio estimator) keeps the first terms of :math:`1/(1+\varepsilon)`:

    .. math::

        \mathrm{Bias}\approx -\frac{\mathrm{Cov}(\hat Z_R, \hat D)}{Z^2},\qquad
        \mathrm{Var}\approx \frac{\mathrm{Var}(\hat D)}{Z^2}
        = \frac{\mathrm{Var}\hat T - 2a\,\mathrm{Cov}(\hat Z_R,\hat T) + a^2\,\mathrm{Var}\hat Z_R}{Z^2},

    per value coordinate, both exact bilinear forms of :math:`u_j = w_j(v_j - a)` and
    :math:`w_j` (computed from :math:`u`, not by cancellation), and ``mse = variance + bias**2``.

    **Domain of validity.** ``var_Z``, ``var_T``, ``cov_ZT`` and ``normaliser_rel_var`` are
    exact. The output's bias, variance and MSE are the delta method's, with neglected terms of
    relative size about :math:`3\sigma_Z^2` (:math:`\sigma_Z^2 = \mathrm{Var}(\hat Z_R)/Z^2`,
    ``normaliser_rel_var``); the expansion needs :math:`|\varepsilon| < 1`. As for
    :func:`rfa_delta_method`, a prediction is *in its domain* when :math:`\sigma_Z^2 \le 0.1`;
    outside it ``in_domain`` is False and an :class:`~rfkit.exceptions.OutOfDomainWarning` is
    emitted. When nothing is sampled (``deterministic``) the result is exact and in the domain.
    The accuracy measured on real heads is in docs page *Theory*, section "Sampled remainders:
    exact finite-population theory". All sums are in the shifted (log-space) scale
    :math:`w_j \le 1` relative to :math:`Z`, so nothing overflows.

    Parameters
    ----------
    q : array_like (d,)
        One query.
    K : array_like (M, d)
        The keys it may see, in key-position order (the strata are contiguous in this order).
    V : array_like (M,) or (M, dv)
        Values.
    exact : array_like of bool (M,), optional
        True for the keys computed exactly (the support); None: an empty support.
    remainder : {"uniform", "stratified", "importance", "none"}, default="uniform"
    n_samples : int >= 1
        The budget ``s`` of sampled keys (required unless ``remainder="none"``).
    replace : bool, optional
        None: without replacement for ``"uniform"`` and ``"stratified"``, with replacement for
        ``"importance"``; ``True`` is allowed for ``"uniform"`` only.
    proposal : array_like (M,), optional
        ``"importance"``: proposal weights, > 0 and finite on the remainder keys (entries on the
        support are ignored), normalised over the remainder.
    proxy_logits : array_like (M,), optional
        ``"importance"``: proxy logits whose softmax over the remainder, mixed with uniform, is the
        proposal. Default (neither given): the exact logits :math:`q^\top k_j`.
    mix : float in [0, 1], default=0.1
        :math:`\lambda` of the mixture with uniform (recorded in the result).

    Returns
    -------
    SampledRemainderMoments

    Raises
    ------
    InvalidParameterError
        Unknown ``remainder``, a ``replace`` the remainder does not define, a missing or bad
        ``n_samples``, a proposal that is not > 0 on the remainder, sampling options given to a
        remainder that does not sample, or ``"none"`` with an empty support (0/0).
    ShapeError
        Mismatched shapes.

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> rng = np.random.default_rng(0)
    >>> q, K, V = 0.3 * rng.normal(size=8), 0.3 * rng.normal(size=(64, 8)), rng.normal(size=(64, 2))
    >>> window = np.arange(64) >= 56
    >>> r = rk.theory.sampled_remainder_moments(q, K, V, exact=window, remainder="uniform", n_samples=16)
    >>> r.in_domain, bool(r.var_Z > 0)
    (True, True)
    >>> full = rk.theory.sampled_remainder_moments(q, K, V, exact=window, remainder="uniform", n_samples=56)
    >>> full.deterministic, float(full.mse_total)
    (True, 0.0)
    """
    kind, rep = _kind_and_replace(remainder, replace)
    qv, Kv, V2, _ = query_keys_values(q, K, V, _OWNER)
    M, dv = Kv.shape[0], V2.shape[1]
    if M == 0:
        raise ShapeError(f"{_OWNER}: need at least one key; got K of shape {Kv.shape}.")
    ex = _check_exact(exact, M, _OWNER)
    if kind == "none":
        if n_samples is not None:
            check_int(n_samples, "n_samples", _OWNER, low=0)
        s = None
    elif n_samples is None:
        raise InvalidParameterError(
            f"The `n_samples` parameter of {_OWNER} must be an int >= 1 for remainder={kind!r}. Got None instead."
        )
    else:
        s = check_int(n_samples, "n_samples", _OWNER, low=1)
    if kind != "importance" and (proposal is not None or proxy_logits is not None):
        raise InvalidParameterError(
            f"{_OWNER}: `proposal` and `proxy_logits` apply to remainder='importance' only. "
            f"Got remainder={kind!r} with {'proposal' if proposal is not None else 'proxy_logits'} given."
        )

    logits = Kv @ qv
    c = float(np.max(logits))
    lz = _lse(logits - c)  # log Z on the shifted scale
    logp = logits - c - lz  # log softmax: w_j / Z
    a, U0 = _centred_values(logp, V2)
    rest = ~ex
    NR, NS = int(rest.sum()), int(ex.sum())
    Z = float(np.exp(lz))
    ZR = float(np.exp(_lse(logits[rest] - c))) if NR else 0.0
    zeros = np.zeros(dv)
    p_rest: np.ndarray | None = None
    lam: float | None = None
    if kind == "importance":
        p_rest, lam = _proposal(proposal, proxy_logits, mix, logits, rest)

    deterministic = kind == "none" or NR == 0 or (s is not None and s >= NR)
    if deterministic:
        bias = zeros.copy()
        if kind == "none" and NR:
            if NS == 0:
                raise InvalidParameterError(
                    f"The `exact` parameter of {_OWNER} must mark at least one key for remainder='none' "
                    f"(the output E_S/Z_S is 0/0 otherwise). Got an empty support of {M} keys."
                )
            ls, lr = _lse(logp[ex]), _lse(logp[rest])
            mu_s = np.exp(logp[ex] - ls) @ V2[ex]
            mu_r = np.exp(logp[rest] - lr) @ V2[rest]
            bias = np.exp(lr) * (mu_s - mu_r)  # mu_S - a = (Z_R/Z)(mu_S - mu_R), no cancellation
        res = SampledRemainderMoments(
            remainder=kind,
            n_samples=s,
            replace=rep,
            n_support=NS,
            n_remainder=NR,
            deterministic=True,
            log_shift=c,
            normaliser=Z,
            remainder_normaliser=ZR,
            attention=a,
            var_Z=0.0,
            var_T=zeros.copy(),
            cov_ZT=zeros.copy(),
            normaliser_rel_var=0.0,
            bias=bias,
            variance=zeros.copy(),
            mse=bias**2,
            in_domain=True,
            proposal=p_rest,
            mix=lam,
        )
        return res

    assert s is not None
    pr = np.exp(logp[rest])  # w_j / Z on the remainder, key order
    W = pr[:, None]
    Y = pr[:, None] * V2[rest]  # w_j v_j / Z
    U = pr[:, None] * U0[rest]  # w_j (v_j - a) / Z
    rel_var = float(_cov(kind, W, W, s, rep, p_rest)[0])
    var_T = _cov(kind, Y, Y, s, rep, p_rest)
    cov_ZT = _cov(kind, W, Y, s, rep, p_rest)
    variance = np.maximum(_cov(kind, U, U, s, rep, p_rest), 0.0)
    bias = -_cov(kind, W, U, s, rep, p_rest)
    rel_var = max(rel_var, 0.0)
    inside = bool(rel_var <= DOMAIN_REL_VAR) or not (np.any(variance) or np.any(bias))
    res = SampledRemainderMoments(
        remainder=kind,
        n_samples=s,
        replace=rep,
        n_support=NS,
        n_remainder=NR,
        deterministic=False,
        log_shift=c,
        normaliser=Z,
        remainder_normaliser=ZR,
        attention=a,
        var_Z=rel_var * Z * Z,
        var_T=var_T * Z * Z,
        cov_ZT=cov_ZT * Z * Z,
        normaliser_rel_var=rel_var,
        bias=bias,
        variance=variance,
        mse=variance + bias**2,
        in_domain=inside,
        proposal=p_rest,
        mix=lam,
    )
    if not inside:
        warnings.warn(
            f"{_OWNER}: the delta-method output bias, variance and MSE at n_samples={s} "
            f"(remainder={kind!r}) are outside their domain: the estimated normaliser's relative variance "
            f"Var(Z_hat)/Z^2 = {rel_var:.4g} must be <= {DOMAIN_REL_VAR:g}; they can be wrong by orders of "
            "magnitude (in_domain is False). var_Z, var_T and cov_ZT stay exact. Use more samples, or "
            "measure by simulation.",
            OutOfDomainWarning,
            stacklevel=2,
        )
    return res
