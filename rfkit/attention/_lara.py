r"""Linear Randomized Attention (LARA; Zheng, Wang & Kong (ICML 2022)): multiple importance sampling."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from .._backend import Backend
from .._parallel import threads
from .._validation import check_int, check_option, check_real, half_precision
from ..exceptions import InvalidParameterError
from ._common import (
    QKV,
    blocks_per_job,
    budget,
    check_qkv,
    check_shared_options,
    row_blocks,
    sampler_rng,
    shifted_sum,
    threads_of,
)
from ._importance import (
    IS_BLOCK_ELEMS,
    ISJob,
    SampledOptions,
    causal_sample_attention,
    importance_sampling,
    jobs_of,
    sampled_result,
)
from ._proposals import check_means, chunk_means, mixture_offsets, mixture_samples, noise
from ._result import AttentionResult

__all__ = ["LARA"]


def _column_logsumexp(bk: Backend, jobs: list[ISJob], n_threads: int) -> None:
    r"""``ctx["lse"]`` (g, C) = :math:`\log\sum_n \exp(q_n^\top\tilde q_c)` of every job, in fixed row blocks.

    Each block has its own shift; the blocks are combined exactly in block order.
    """
    xp = bk.xp

    def one(t: tuple[int, slice]) -> tuple[Any, Any]:
        job = jobs[t[0]]
        L = job.Q[:, t[1], :] @ job.ctx["qtT"]  # (g, rows, C)
        top = xp.max(L, axis=-2)
        return top, xp.sum(xp.exp(L - top[..., None, :]), axis=-2)

    n = int(jobs[0].Q.shape[-2])
    tasks = [
        (ji, qs)
        for ji, job in enumerate(jobs)
        for qs in row_blocks(
            n, int(job.Q.shape[0]) * int(job.ctx["qtT"].shape[-1]), budget=budget(bk, IS_BLOCK_ELEMS)
        )
    ]
    per_job = blocks_per_job(bk, one, tasks, len(jobs), n_threads)
    for job, blocks in zip(jobs, per_job):
        top, acc = shifted_sum(xp, blocks, lambda f: f)
        job.ctx["lse"] = top + xp.log(acc)


@dataclasses.dataclass(frozen=True)
class LARA(SampledOptions):
    r"""Linear Randomized Attention: multiple importance sampling with chunk-mean proposals.

    Proposals :math:`q_c(\omega) = \mathcal N(\omega; \tilde q_c + \tilde k_c, I)`,
    :math:`c = 1..C`, where :math:`\tilde q_c, \tilde k_c` are the means of the
    queries and of the keys in the ``c``-th of ``C`` contiguous chunks of the
    sequence. ``k`` samples per proposal, shared by all queries (linear cost
    :math:`O((n+M)Ckd)`), and (Zheng, Wang & Kong (ICML 2022), "Linear Complexity Randomized
    Self-attention Mechanism")

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

    **Causal LARA** (``causal=True``, query ``i`` sees keys ``0..i``). The proposals and
    their samples are shared by all queries, so a query may only use proposals built
    from data it may see. Derivation: cut the sequence into ``C`` contiguous chunks
    :math:`[e_c, e_{c+1})`, :math:`e_c = \lfloor cn/C\rfloor`. Proposal 0 is
    :math:`\mathcal N(0, I)` (no data); proposal :math:`p \ge 1` is
    :math:`\mathcal N(\tilde q_{p-1} + \tilde k_{p-1}, I)` from chunk :math:`p-1`
    (means of its queries and of its unmasked keys; 0 for a chunk whose keys are all
    padded). A query of chunk :math:`c` uses the proposals :math:`p \le c` (built from
    chunks strictly before its own) with the balance heuristic over them,

    .. math:: \alpha^{\le c}_{np}(\omega) = \frac{q_p(\omega)}{\sum_{p'\le c} q_{p'}(\omega)},
        \qquad \sum_{p\le c}\alpha^{\le c}_{np} = 1,

    and the causal target :math:`\tilde p^{\,\le}_n(\omega) = \mathcal N(\omega;0,I)
    \xi(q_n,\omega)\sum_{m\le n}\xi(k_m,\omega)`. The MIS identity
    :math:`\mathbb E\big[\frac1k\sum_{p\le c}\sum_j \alpha^{\le c}_{np}(\omega_{pj})
    \tilde p^{\,\le}_n(\omega_{pj})g(\omega_{pj})/q_p(\omega_{pj})\big] = \int \tilde
    p^{\,\le}_n g` (for :math:`g = 1` and :math:`g = f^{\le}_n`) holds because the weights
    sum to one over the proposals used and every :math:`q_p > 0`; the proposals are
    fixed functions of data before the query's chunk, so the causal numerator and
    normaliser stay unbiased for :math:`Z^{\le}_n\mathrm{Attn}^{\le}(q_n)` and
    :math:`Z^{\le}_n` and nothing the query may not see enters its estimate (the
    sums over keys run through the same blocked prefix scan as causal RFA; blocks never
    cross a chunk boundary, so the in-block shifts use only the columns of usable
    proposals). ``weights="optimal"`` has **no causal form**: its :math:`r'_{nc}` is a
    softmax over *all* ``n`` queries, i.e. it needs queries after :math:`q_n`; a
    softmax over the prefix :math:`n' \le n` would be a different weighting (not the
    paper's), so ``causal=True`` with ``weights="optimal"`` raises
    :class:`~rfkit.exceptions.InvalidParameterError`. With explicit ``proposal_means``
    (fixed, no data) every query uses every proposal (balance heuristic).

    Parameters
    ----------
    n_proposals : int, optional
        ``C``, 1 <= C <= min(n, M) (checked at call time; with a key padding mask,
        M is the smallest number of unmasked keys of a slice; causal: C <= n).
        Default 8 (capped at ``min(n, M)``) unless ``proposal_means`` is given.
    weights : {"optimal", "balance"}, default="optimal"
        ``"balance"`` is required with ``causal=True``.
    samples_per_proposal : int, default=1
        ``k`` samples from each proposal.
    alpha_floor : float or None, default=1e-8
        Floor of the "optimal" weights (ignored by "balance").
    proposal_means : array_like of shape (C, d) or (..., C, d), optional
        Explicit proposal means instead of the chunk means (e.g. zeros: all
        proposals :math:`\mathcal N(0, I)`; with ``weights="balance"`` and
        ``k = 1`` this is RFA with ``C`` positive features). The
        :math:`r'` term of "optimal" still uses the query chunk means :math:`\tilde q_c`.
        Of the inputs' library and device.
    projection : str, default="iid"
        How the standard-normal noise rows are drawn (``sample_projection``).
    shared_across_heads : bool, default=True
        One noise draw for every slice, or one per head.
    chunk_size : int, optional
        Rows per block of the linear passes (causal: of the prefix scan, default 128).
    causal : bool, default=False
        Query ``i`` attends to keys ``0..i`` (needs ``n == M`` and ``weights="balance"``).
    n_threads : int, optional
        NumPy threads (see :class:`RFA`); the result is the same for every value.

    Returns
    -------
    AttentionResult
        What calling the estimator returns: ``output``, scaled numerator/denominator (``numerator``/``normalizer``
        are the unbiased MIS estimates), ``ess`` (:math:`(\sum|w|)^2/\sum w^2`),
        ``n_floored``, ``n_negative_alpha``, ``omega``, ``proposal_means`` (causal:
        row 0 is the zero mean of :math:`\mathcal N(0, I)`). Arrays of the inputs'
        namespace, device and dtype.

    Notes
    -----
    LARA beats RFA with the same number of samples on locally structured sequences
    with peaked attention, not on i.i.d. tokens (docs page *Attention estimators*, LARA).

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
        check_shared_options(self, "LARA")
        if self.causal and self.weights == "optimal":
            raise InvalidParameterError(
                "The `weights` parameter of LARA must be 'balance' when causal=True: the 'optimal' weights' "
                "r'_nc is a softmax over all n queries, so it uses queries after q_n and has no causal form "
                "(a softmax over the prefix would be a different weighting). Got weights='optimal' with "
                "causal=True instead."
            )

    def _n_proposals(self, x: QKV, means: Any) -> int:
        kept = min(x.kept_keys())
        limit = x.n_queries if self.causal else min(x.n_queries, kept)
        if means is not None:
            C = int(means.shape[-2])
            if self.n_proposals is not None and self.n_proposals != C:
                raise InvalidParameterError(
                    f"The `n_proposals` parameter of LARA ({self.n_proposals}) disagrees with "
                    f"`proposal_means`, which has C={C} rows."
                )
            if self.weights == "optimal" and C > x.n_queries:
                raise InvalidParameterError(
                    f"LARA(weights='optimal') needs C <= n query chunks; `proposal_means` has C={C} "
                    f"rows but n={x.n_queries}."
                )
            return C
        C = self.n_proposals if self.n_proposals is not None else min(8, limit)
        if C > limit:
            what = (
                "n"
                if self.causal
                else ("min(n, M)" if x.mask is None else "min(n, unmasked keys of a slice)")
            )
            raise InvalidParameterError(
                f"The `n_proposals` parameter of LARA must be an int in the range [1, {what}] = "
                f"[1, {limit}] for these inputs (one proposal per contiguous chunk). Got {C} instead."
            )
        return C

    @half_precision()
    def __call__(
        self, Q: Any, K: Any, V: Any, *, rng: Any = None, key_padding_mask: Any = None
    ) -> AttentionResult:
        """Estimate attention; ``rng`` keyword-only (None, int, SeedSequence or Generator).

        ``key_padding_mask`` (..., M) bool, True = padded key (ignored). Bidirectional:
        the result equals the estimate on the unmasked keys alone with the same samples
        (the chunk means are those of the unmasked keys' chunks).
        """
        extra = [] if self.proposal_means is None else [("proposal_means", self.proposal_means)]
        x = check_qkv(Q, K, V, "LARA", causal=self.causal, key_padding_mask=key_padding_mask, extra=extra)
        bk, xp = x.bk, x.xp
        means = (
            None
            if self.proposal_means is None
            else check_means(self.proposal_means, x, "LARA", "proposal_means")
        )
        C = self._n_proposals(x, means)
        k = self.samples_per_proposal
        S = C * k
        nt = threads_of(self.n_threads, "LARA")
        optimal = self.weights == "optimal"
        floor = self.alpha_floor
        comp = np.repeat(np.arange(C), k)  # sample s = c*k + j comes from proposal c
        keep = None if x.mask is None else ~x.mask
        with threads(nt):
            gen = sampler_rng(rng, x, "LARA")
            E = noise(gen, x, S, self.projection, self.shared_across_heads, "LARA")
            qt = chunk_means(bk, x.Q, C) if (optimal or means is None) else None
            if means is not None:
                mu = means
            elif self.causal:
                mu_c = qt + chunk_means(bk, x.K, C, keep, ranked=False)  # type: ignore[operator]
                mu = xp.concat([xp.zeros_like(mu_c[:, :1, :]), mu_c[:, : C - 1, :]], axis=1)
            else:
                mu = qt + chunk_means(bk, x.K, C, keep)  # type: ignore[operator]
            omega, lq = mixture_samples(bk, mu, E, comp)  # (B, S, d); log q_c'(w_s) - log N(w_s; 0, I)
            log_counts = xp.full((C,), math.log(k), dtype=x.dtype, device=bk.device)
            n_floored = n_negative = 0
            if self.causal:
                _, qoff = mixture_offsets(bk, lq, log_counts, comp, causal_chunks=means is None)
                parts = causal_sample_attention(x, omega, qoff, nt, self.chunk_size)
            else:
                jobs = jobs_of(x, omega, None)
                if optimal:
                    B = x.n_slices
                    flat = bk.asarray(np.arange(S) * C + comp)
                    own = xp.take(
                        xp.reshape(lq, (B, S * C)), flat, axis=-1
                    )  # log q_c(w_s) - log N(w_s; 0, I)
                    bh = xp.exp(own - bk.logsumexp(lq, axis=-1))  # balance heuristic q_c(w)/sum_c' q_c'(w)
                    log_corr = -own - math.log(k)  # log N(w;0,I) - log q_c(w) - log k
                    comp_d = bk.asarray(comp)
                    qtT = xp.matrix_transpose(qt)
                    for job in jobs:
                        job.log_corr = log_corr[job.sl, ...]
                        job.ctx = {"qtT": qtT[job.sl, ...], "bh": bh[job.sl, ...], "comp": comp_d}
                        job.alpha = _optimal_alpha(bk, floor)
                    _column_logsumexp(bk, jobs, nt)
                else:
                    log_corr, _ = mixture_offsets(bk, lq, log_counts, comp, causal_chunks=False)  # balance
                    for job in jobs:
                        job.log_corr = log_corr[job.sl, ...]
                log_scale, num, den, ess, n_negative, n_floored = importance_sampling(
                    jobs, x, nt, self.chunk_size
                )
                parts = (log_scale, num, den, ess)
        return sampled_result(
            "LARA",
            self,
            x,
            parts,
            nt,
            mu,
            n_floored=n_floored if optimal and floor is not None else (0 if optimal else None),
            n_negative_alpha=n_negative if optimal else None,
            omega=x.unflatten(omega),
        )


def _optimal_alpha(bk: Backend, floor: float | None) -> Any:
    """LARA's "optimal" weights for a block of queries of a job: (log|alpha|, sign, negatives, floored)."""
    xp = bk.xp

    def alpha(job: ISJob, rows: slice) -> tuple[Any, Any, int, int]:
        ctx = job.ctx
        rp = xp.exp(
            job.Q[:, rows, :] @ ctx["qtT"] - ctx["lse"][..., None, :]
        )  # r'_nc: softmax over queries n
        rshift = rp - xp.mean(rp, axis=-1, keepdims=True)  # r'_nc - mean_c' r'_nc'
        a = ctx["bh"][..., None, :] + xp.take(rshift, ctx["comp"], axis=-1)  # (g, rows, S)
        n_neg = bk.count(a < 0)
        with np.errstate(divide="ignore"):
            if floor is not None:
                low = a < floor
                n_floor = bk.count(low)
                a = xp.where(low, xp.asarray(floor, dtype=a.dtype, device=bk.device), a)
                return xp.log(a), None, n_neg, n_floor
            return xp.log(xp.abs(a)), xp.sign(a), n_neg, 0

    return alpha
