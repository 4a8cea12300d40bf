r"""Linear Randomized Attention (LARA; Zheng, Wang, Kong, ICML 2022): multiple importance sampling."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from scipy.special import logsumexp

from .._random import check_rng
from .._validation import check_int, check_option, check_real
from ..exceptions import InvalidParameterError
from ..projections import PROJECTIONS
from ._common import QKV, check_bool, check_chunk_size, check_qkv
from ._result import AttentionResult
from ._rfa import finish_ratio
from ._snis import (
    check_means,
    chunk_means,
    gauss_logits,
    importance_slice,
    noise_per_head,
    warn_nonpositive,
)

__all__ = ["LARA"]


def _column_logsumexp(Q: np.ndarray, qtT: np.ndarray, block: int = 1 << 14) -> np.ndarray:
    """log sum_n exp(q_n . q~_c) for every c, in row blocks (O(block * C) memory)."""
    top = np.full(qtT.shape[1], -np.inf)
    acc = np.zeros(qtT.shape[1])
    for s0 in range(0, Q.shape[0], block):
        L = Q[s0 : s0 + block] @ qtT
        new = np.maximum(top, L.max(axis=0))
        acc = acc * np.exp(top - new) + np.exp(L - new).sum(axis=0)
        top = new
    return top + np.log(acc)


@dataclasses.dataclass(frozen=True)
class LARA:
    r"""Linear Randomized Attention: multiple importance sampling with chunk-mean proposals.

    Proposals :math:`q_c(\omega) = \mathcal N(\omega; \tilde q_c + \tilde k_c, I)`,
    :math:`c = 1..C`, where :math:`\tilde q_c, \tilde k_c` are the means of the
    queries and of the keys in the ``c``-th of ``C`` contiguous chunks of the
    sequence. ``k`` samples per proposal, shared by all queries (linear cost
    :math:`O((n+M)Ckd)`), and (Zheng, Wang, Kong, "Linear Complexity Randomized
    Self-attention Mechanism", ICML 2022; THEORY.md §8)

    .. math::

        \widehat{\mathrm{Attn}}(q_n) = \frac{\sum_{c,j}\alpha_{nc}(\omega_{cj})
            \frac{\tilde p_n(\omega_{cj})}{q_c(\omega_{cj})} f_n(\omega_{cj})}
            {\sum_{c,j}\alpha_{nc}(\omega_{cj})\frac{\tilde p_n(\omega_{cj})}{q_c(\omega_{cj})}},
        \qquad
        \alpha_{nc}(\omega) = \frac{q_c(\omega)}{\sum_{c'}q_{c'}(\omega)}
            + r'_{nc} - \frac1C\sum_{c'} r'_{nc'},\qquad
        r'_{nc} = \frac{\exp(q_n^\top\tilde q_c)}{\sum_{n'}\exp(q_{n'}^\top\tilde q_c)}

    (``weights="optimal"``, the paper's query-specific weights; the softmax of
    :math:`r'` runs over the query index; no :math:`1/\sqrt d` since rfkit
    absorbs the temperature). ``weights="balance"`` keeps only the first term
    (the balance heuristic). Since :math:`\sum_c\alpha_{nc}(\omega) = 1`, the
    numerator and the denominator (:math:`\frac1k\sum_{c,j}\dots`) are unbiased
    for :math:`Z_n\mathrm{Attn}(q_n)` and :math:`Z_n`; the ratio is biased like
    any SNIS estimator.

    "Optimal" weights can be negative; like the authors' code (``lara.py``,
    ``mis-opt``) they are raised to ``alpha_floor`` (default 1e-8), which breaks
    :math:`\sum_c\alpha = 1` slightly (a small extra bias); the number of floored
    weights is recorded. ``alpha_floor=None`` keeps the signed weights (exactly
    unbiased numerator/denominator; rows whose denominator ends up <= 0 are NaN
    and counted). Balance weights are always positive.

    Parameters
    ----------
    n_proposals : int, optional
        ``C``, 1 <= C <= min(n, M) (checked at call time). Default 8 (capped at
        ``min(n, M)``) unless ``proposal_means`` is given.
    weights : {"optimal", "balance"}, default="optimal"
    samples_per_proposal : int, default=1
        ``k`` samples from each proposal.
    alpha_floor : float or None, default=1e-8
        Floor of the "optimal" weights (ignored by "balance").
    proposal_means : array_like of shape (C, d) or (..., C, d), optional
        Explicit proposal means instead of the chunk means (e.g. zeros: all
        proposals :math:`\mathcal N(0, I)`; with ``weights="balance"`` and
        ``k = 1`` this is RFA with ``C`` positive features). The
        :math:`r'` term of "optimal" still uses the query chunk means :math:`\tilde q_c`.
    projection : str, default="iid"
        How the standard-normal noise rows are drawn (``sample_projection``).
    shared_across_heads : bool, default=True
        One noise draw for every slice, or one per head.
    chunk_size : int, optional
        Rows per block of the linear passes.

    Returns (from ``__call__``)
    ---------------------------
    AttentionResult
        ``output``, scaled numerator/denominator (``numerator``/``normalizer``
        are the unbiased MIS estimates), ``ess`` (:math:`(\sum|w|)^2/\sum w^2`),
        ``n_floored``, ``n_negative_alpha``, ``omega``, ``proposal_means``.

    Notes
    -----
    Bidirectional only (no causal mask). LARA beats RFA with the same number of
    samples on locally structured sequences with peaked attention, not on i.i.d.
    tokens (THEORY.md §8, "Measured behaviour").

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> rng = np.random.default_rng(0)
    >>> Q, K, V = 0.3 * rng.normal(size=(3, 2, 32, 8))
    >>> res = rk.attention.LARA(n_proposals=4, samples_per_proposal=2)(Q, K, V, rng=0)
    >>> res.output.shape, res.proposal_means.shape, res.n_floored
    ((2, 32, 8), (2, 4, 8), 0)
    """

    n_proposals: int | None = None
    weights: str = "optimal"
    samples_per_proposal: int = 1
    alpha_floor: float | None = 1e-8
    proposal_means: Any = None
    projection: str = "iid"
    shared_across_heads: bool = True
    chunk_size: int | None = None

    def __post_init__(self) -> None:
        if self.n_proposals is not None:
            object.__setattr__(self, "n_proposals", check_int(self.n_proposals, "n_proposals", "LARA", low=1))
        check_option(self.weights, "weights", "LARA", ("optimal", "balance"))
        object.__setattr__(
            self,
            "samples_per_proposal",
            check_int(self.samples_per_proposal, "samples_per_proposal", "LARA", low=1),
        )
        if self.alpha_floor is not None:
            object.__setattr__(
                self, "alpha_floor", check_real(self.alpha_floor, "alpha_floor", "LARA", low=0.0, high=1.0)
            )
        check_option(self.projection, "projection", "LARA", PROJECTIONS)
        object.__setattr__(
            self, "shared_across_heads", check_bool(self.shared_across_heads, "shared_across_heads", "LARA")
        )
        object.__setattr__(self, "chunk_size", check_chunk_size(self.chunk_size, "LARA"))

    def _n_proposals(self, x: QKV, means: np.ndarray | None) -> int:
        limit = min(x.n, x.m)
        if means is not None:
            C = means.shape[-2]
            if self.n_proposals is not None and self.n_proposals != C:
                raise InvalidParameterError(
                    f"The `n_proposals` parameter of LARA ({self.n_proposals}) disagrees with "
                    f"`proposal_means`, which has C={C} rows."
                )
            if self.weights == "optimal" and C > x.n:
                raise InvalidParameterError(
                    f"LARA(weights='optimal') needs C <= n query chunks; `proposal_means` has C={C} "
                    f"rows but n={x.n}."
                )
            return C
        C = self.n_proposals if self.n_proposals is not None else min(8, limit)
        if C > limit:
            raise InvalidParameterError(
                f"The `n_proposals` parameter of LARA must be an int in the range [1, min(n, M)] = "
                f"[1, {limit}] for these inputs (one proposal per contiguous chunk). Got {C} instead."
            )
        return C

    def __call__(self, Q: Any, K: Any, V: Any, *, rng: Any = None) -> AttentionResult:
        """Estimate attention; ``rng`` keyword-only (None, int, SeedSequence or Generator)."""
        x = check_qkv(Q, K, V, "LARA")
        means = (
            None
            if self.proposal_means is None
            else check_means(self.proposal_means, x, "LARA", "proposal_means")
        )
        C = self._n_proposals(x, means)
        k = self.samples_per_proposal
        S = C * k
        gen = check_rng(rng)
        noise = noise_per_head(gen, x, S, self.projection, self.shared_across_heads)
        B, n, dv, d = x.n_slices, x.n, x.dv, x.d
        dt = x.dtype
        optimal = self.weights == "optimal"
        floor = self.alpha_floor
        comp = np.repeat(np.arange(C), k)  # sample s = c*k + j comes from proposal c
        log_scale = np.empty((B, n), dtype=dt)
        num = np.empty((B, n, dv), dtype=dt)
        den = np.empty((B, n), dtype=dt)
        ess = np.empty((B, n), dtype=dt)
        all_means = np.empty((B, C, d), dtype=np.float64)
        omegas = np.empty((B, S, d), dtype=np.float64)
        n_floored = 0
        n_negative = 0
        for b in range(B):
            Qb = x.Q[b]
            qt = chunk_means(Qb, C) if (optimal or means is None) else None
            mu = (
                means[b].astype(np.float64)
                if means is not None
                else (qt + chunk_means(x.K[b], C)).astype(np.float64)
            )  # type: ignore[operator]
            all_means[b] = mu
            E = noise[0] if len(noise) == 1 else noise[b % x.n_heads]
            omega = mu[comp] + E
            omegas[b] = omega
            # log q_c'(w_s) - log N(w_s; 0, I) = w_s . mu_c' - |mu_c'|^2 / 2, (S, C)
            lq = gauss_logits(omega, mu)
            own = lq[np.arange(S), comp]
            log_bh = own - logsumexp(lq, axis=-1)  # balance heuristic  q_c(w)/sum_c' q_c'(w)
            log_corr = -own - np.log(k)  # log N(w;0,I) - log q_c(w) - log k
            alpha_fn = None
            if optimal:
                qtT = qt.T.astype(np.float64)  # type: ignore[union-attr]
                lse = _column_logsumexp(Qb, qtT)  # r'_nc = exp(q_n . q~_c - lse_c): softmax over queries n
                bh = np.exp(log_bh).astype(dt)
                counts = [0, 0]

                def alpha_fn(
                    rows: slice,
                    Qb: np.ndarray = Qb,
                    qtT: np.ndarray = qtT,
                    lse: np.ndarray = lse,
                    bh: np.ndarray = bh,
                    counts: list[int] = counts,
                ) -> tuple[np.ndarray, np.ndarray | None]:
                    rp = np.exp(Qb[rows] @ qtT - lse)  # (rows, C)
                    rshift = (rp - rp.mean(axis=1, keepdims=True)).astype(dt)  # r'_nc - mean_c' r'_nc'
                    a = bh[None, :] + rshift[:, comp]  # (rows, S)
                    counts[1] += int(np.count_nonzero(a < 0))
                    if floor is not None:
                        low = a < floor
                        counts[0] += int(np.count_nonzero(low))
                        a = np.where(low, floor, a)
                        with np.errstate(divide="ignore"):
                            return np.log(a), None
                    with np.errstate(divide="ignore"):
                        return np.log(np.abs(a)), np.sign(a)

            else:
                log_corr = log_corr + log_bh
            log_scale[b], num[b], den[b], ess[b] = importance_slice(
                Qb, x.K[b], x.V[b], omega.astype(dt, copy=False), log_corr, alpha_fn, self.chunk_size
            )
            if optimal:
                n_floored += counts[0]
                n_negative += counts[1]
        out, nbad = finish_ratio(log_scale, num, den)
        if nbad:
            warn_nonpositive("LARA", nbad, (B, n))
        return AttentionResult(
            output=x.unflatten(out),
            method="LARA",
            estimator=self,
            log_scale=x.unflatten(log_scale),
            numerator_values=x.unflatten(num),
            denominator_values=x.unflatten(den),
            n_nonpositive=nbad,
            ess=x.unflatten(ess),
            n_floored=n_floored if optimal and floor is not None else (0 if optimal else None),
            n_negative_alpha=n_negative if optimal else None,
            omega=x.unflatten(omegas),
            proposal_means=x.unflatten(all_means),
        )
