r"""RFA as self-normalised importance sampling (SNIS) with Gaussian proposals.

The estimator and its numerics (shared samples, log-space weights, the causal form as
causal RFA over the samples) are those of :mod:`rfkit.attention._importance`, which LARA
shares; Zheng, Wang & Kong (ICML 2022), section 3.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from .._parallel import threads
from .._validation import check_int, check_option, half_precision
from ..exceptions import InvalidParameterError
from ._common import QKV, check_qkv, check_shared_options, sampler_rng, threads_of
from ._importance import SampledOptions, causal_sample_attention, importance_sampling, jobs_of, sampled_result
from ._proposals import check_means, chunk_means, mixture_offsets, mixture_samples, noise
from ._result import AttentionResult

__all__ = ["SNIS"]


# ----------------------------------------------------------------------------- SNIS
@dataclasses.dataclass(frozen=True)
class SNIS(SampledOptions):
    r"""RFA written as self-normalised importance sampling with Gaussian proposals.

    .. math::

        \widehat{\mathrm{Attn}}(q_n) = \frac{\sum_s w_{ns} f_n(\omega_s)}{\sum_s w_{ns}},\qquad
        w_{ns} = \frac{\tilde p_n(\omega_s)}{q(\omega_s)},\qquad
        q(\omega) = \sum_c \lambda_c\,\mathcal N(\omega; \mu_c, I),

    with :math:`\tilde p_n, f_n` as in :mod:`rfkit.attention._importance` (Zheng, Wang & Kong (ICML 2022),
    §3: "RFA is SNIS with proposal :math:`\mathcal N(0, I)`"). Samples are shared by
    all queries (linear cost). Sample ``s`` comes from component ``s mod C`` and
    :math:`\lambda_c` is the fraction of samples from component ``c``
    (deterministic mixture sampling; the unnormalised numerator and denominator
    stay unbiased for :math:`Z_n\mathrm{Attn}(q_n)` and :math:`Z_n`). Weights are
    computed in log space.

    **Causal** (``causal=True``): query ``i`` sees keys ``0..i``; the numerator and
    normaliser become prefix sums over the keys, computed by the same blocked prefix scan
    and shared-shift numerics as causal RFA (row ``i`` depends on keys ``0..i`` only, also
    numerically). ``"standard"`` and explicit means use no data, so every query uses every
    sample. ``"chunk-mean"`` must not look ahead: component 0 is :math:`\mathcal N(0, I)` and
    component ``p >= 1`` has mean :math:`\tilde q_{p-1} + \tilde k_{p-1}` of chunk ``p - 1``
    of a partition into ``C`` contiguous chunks; the queries of chunk ``c`` use the samples
    of components ``p <= c`` only (all built from earlier chunks), with the mixture of those
    components as their proposal, :math:`q_c(\omega) \propto \sum_{p\le c} n_p\mathcal
    N(\omega;\mu_p,I)`. Each query's numerator and normaliser stay unbiased (the proposal
    and its samples do not depend on anything the query may not see).

    Parameters
    ----------
    proposal : {"standard", "chunk-mean"} or array_like, default="standard"
        ``"standard"``: :math:`\mu = 0`; with the same :math:`\omega` this *is*
        RFA with :class:`~rfkit.features.Positive` features (identical up to
        round-off, bidirectional and causal). ``"chunk-mean"``: :math:`\mu_c =
        \tilde q_c + \tilde k_c`, the means of ``n_chunks`` contiguous chunks of the
        queries and of the keys (LARA's proposals; with a key padding
        mask, chunks of the unmasked keys). An array of shape (C, d) or (..., C, d):
        explicit means (of the inputs' library and device).
    n_samples : int, default=64
        Total number of samples ``S`` (>= 1).
    n_chunks : int, optional
        Chunks for ``"chunk-mean"`` (1 <= C <= min(n, M)); default ``min(S, n, M, 8)``.
    projection : {"iid", "orthogonal", "qmc", ...}, default="iid"
        How the standard-normal noise rows are drawn
        (:func:`rfkit.projections.sample_projection`; ``"iid"`` and
        ``"orthogonal"`` give exactly the directions of ``Positive(S, projection)``
        with the same generator).
    shared_across_heads : bool, default=True
        One noise draw for every slice, or one per head (axis -3).
    chunk_size : int, optional
        Rows per block of the linear passes (causal: of the prefix scan, default 128).
    causal : bool, default=False
        Query ``i`` attends to keys ``0..i`` (needs ``n == M``).
    n_threads : int, optional
        Threads of the NumPy backend, chosen as for :class:`RFA`; results do not depend on it.

    Returns
    -------
    AttentionResult
        What calling the estimator returns, with ``ess`` (effective sample size of the normalised weights of each
        query, :math:`(\sum_s w_{ns})^2/\sum_s w_{ns}^2`), ``omega``,
        ``proposal_means`` and the scaled numerator/denominator (``normalizer``
        estimates :math:`Z_n`). Arrays of the inputs' namespace, device and dtype.

    Notes
    -----
    Cost :math:`O((n+M)Sd + (n+M)Sd_v)`, memory :math:`O(S d_v)` plus row blocks of
    :math:`O(S)` columns (causal: the prefix scan's blocks, linear in ``n``).

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> rng = np.random.default_rng(0)
    >>> Q, K, V = 0.3 * rng.normal(size=(3, 32, 8))
    >>> res = rk.attention.SNIS("chunk-mean", n_samples=16, n_chunks=4)(Q, K, V, rng=0)
    >>> res.output.shape, res.ess.shape
    ((32, 8), (32,))
    """

    proposal: Any = "standard"
    n_samples: int = 64
    n_chunks: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_samples", check_int(self.n_samples, "n_samples", "SNIS", low=1))
        if isinstance(self.proposal, str):
            check_option(self.proposal, "proposal", "SNIS", ("standard", "chunk-mean"))
        elif self.proposal is None:
            raise InvalidParameterError(
                "The `proposal` parameter of SNIS must be 'standard', 'chunk-mean' or an array of "
                "means of shape (C, d). Got None instead."
            )
        if self.n_chunks is not None:
            object.__setattr__(self, "n_chunks", check_int(self.n_chunks, "n_chunks", "SNIS", low=1))
            if not (isinstance(self.proposal, str) and self.proposal == "chunk-mean"):
                raise InvalidParameterError(
                    "The `n_chunks` parameter of SNIS applies only to proposal='chunk-mean'. "
                    f"Got n_chunks={self.n_chunks} with proposal={self.proposal!r}."
                )
        check_shared_options(self, "SNIS")

    def _n_chunks(self, x: QKV) -> int:
        kept = min(x.kept_keys())
        limit = min(x.n_queries, kept)
        C = self.n_chunks if self.n_chunks is not None else min(self.n_samples, limit, 8)
        if C > limit:
            what = "min(n, M)" if x.mask is None else "min(n, unmasked keys of a slice)"
            raise InvalidParameterError(
                f"The `n_chunks` parameter of SNIS must be an int in the range [1, {what}] = "
                f"[1, {limit}] for these inputs. Got {C} instead."
            )
        return C

    def _means(self, x: QKV) -> Any:
        """(B, C, d) proposal means, or None for the standard proposal."""
        if isinstance(self.proposal, str):
            if self.proposal == "standard":
                return None
            C = self._n_chunks(x)
            keep = None if x.mask is None else ~x.mask
            if not self.causal:
                return chunk_means(x.bk, x.Q, C) + chunk_means(x.bk, x.K, C, keep)
            # causal: component 0 = N(0, I), component p >= 1 from chunk p - 1 (earlier data only)
            mu = chunk_means(x.bk, x.Q, C) + chunk_means(x.bk, x.K, C, keep, ranked=False)
            xp = x.xp
            return xp.concat([xp.zeros_like(mu[:, :1, :]), mu[:, : C - 1, :]], axis=1)
        return check_means(self.proposal, x, "SNIS", "proposal")

    @half_precision()
    def __call__(
        self, Q: Any, K: Any, V: Any, *, rng: Any = None, key_padding_mask: Any = None
    ) -> AttentionResult:
        """Estimate attention; ``rng`` keyword-only (None, int, SeedSequence or Generator).

        ``key_padding_mask`` (..., M) bool, True = padded key (ignored): the result equals
        the estimate on the unmasked keys alone with the same samples (``"chunk-mean"``:
        the chunks of the unmasked keys).
        """
        extra = [] if isinstance(self.proposal, str) else [("proposal", self.proposal)]
        x = check_qkv(Q, K, V, "SNIS", causal=self.causal, key_padding_mask=key_padding_mask, extra=extra)
        nt = threads_of(self.n_threads, "SNIS")
        bk, xp = x.bk, x.xp
        S = self.n_samples
        with threads(nt):
            means = self._means(x)
            gen = sampler_rng(rng, x, "SNIS")
            E = noise(gen, x, S, self.projection, self.shared_across_heads, "SNIS")
            chunked = self.causal and isinstance(self.proposal, str) and self.proposal == "chunk-mean"
            if means is None:
                omega = E
                log_corr = xp.full((1, S), -math.log(S), dtype=x.dtype, device=bk.device)
                qoff = log_corr[:, None, :]
            else:
                C = int(means.shape[-2])
                comp = np.arange(S) % C
                counts = np.bincount(comp, minlength=C)
                with np.errstate(divide="ignore"):
                    log_counts = bk.asarray(np.log(counts), x.dtype)
                omega, lq = mixture_samples(bk, means, E, comp)
                log_corr, qoff = mixture_offsets(bk, lq, log_counts, comp, causal_chunks=chunked)
            if self.causal:
                parts = causal_sample_attention(x, omega, qoff, nt, self.chunk_size)
            else:
                log_scale, num, den, ess, _, _ = importance_sampling(
                    jobs_of(x, omega, log_corr), x, nt, self.chunk_size
                )
                parts = (log_scale, num, den, ess)
        shared = int(omega.shape[0]) == 1  # one draw of samples for every slice
        omega_out = omega[0, ...] if shared else x.unflatten(xp.broadcast_to(omega, (x.n_slices, S, x.dim)))
        return sampled_result("SNIS", self, x, parts, nt, means, omega=omega_out)
