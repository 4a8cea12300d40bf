r"""RFA as self-normalised importance sampling (SNIS) with Gaussian proposals, and the shared core.

For a query :math:`q_n` the unnormalised target is
:math:`\tilde p_n(\omega) = \mathcal N(\omega; 0, I)\,\xi(q_n,\omega)\sum_m\xi(k_m,\omega)`
with :math:`\xi(x,\omega) = e^{\omega^\top x - \|x\|^2/2}`; it integrates to
:math:`Z_n = \sum_m e^{q_n^\top k_m}`, and :math:`\mathrm{Attn}(q_n)` is the mean of
:math:`f_n(\omega) = \sum_m \mathrm{softmax}_m(\omega^\top k_m - \frac12\|k_m\|^2)v_m`
under :math:`\tilde p_n / Z_n` (Zheng et al., ICML 2022; THEORY.md §8). With samples
:math:`\omega_s` shared by all queries and weights
:math:`w_{ns} = c_s\,\tilde p_n(\omega_s)/q_s(\omega_s)` every estimator here is

.. math:: \widehat{\mathrm{Attn}}(q_n) = \frac{\sum_s w_{ns} f_n(\omega_s)}{\sum_s w_{ns}},

computed in log space: :math:`\log w_{ns} = \omega_s^\top q_n - \frac12\|q_n\|^2
+ \log\sum_m \xi(k_m,\omega_s) + \log\frac{\mathcal N(\omega_s;0,I)}{q_s(\omega_s)} + \log c_s`
(+ :math:`\log|\alpha_{ns}|` for LARA). :math:`f_n(\omega_s)` does not depend on
:math:`n` (the :math:`\xi(q_n,\cdot)` factor cancels), so the cost is linear:
:math:`O((n+M)Sd + MSd_v + nSd_v)`.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.special import logsumexp

from .._random import check_rng
from .._validation import check_int, check_option, check_points
from ..exceptions import InvalidParameterError, NonPositiveNormalizerWarning, ShapeError
from ..projections import PROJECTIONS
from ._common import QKV, check_bool, check_chunk_size, check_qkv, gaussian_noise, row_blocks
from ._result import AttentionResult
from ._rfa import finish_ratio, nonpositive_message

__all__ = ["SNIS", "importance_slice", "chunk_means", "check_means"]

# Row blocks of the linear passes hold about this many elements (1 MiB in float64).
IS_BLOCK_ELEMS = 1 << 17

AlphaFn = Callable[[slice], tuple[np.ndarray, np.ndarray | None]]


def importance_slice(
    Q: np.ndarray,
    K: np.ndarray,
    V: np.ndarray,
    omega: np.ndarray,
    log_corr: np.ndarray,
    alpha: AlphaFn | None = None,
    block: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    r"""Weighted importance-sampling attention for one slice.

    Parameters
    ----------
    Q, K, V : ndarray (n, d), (M, d), (M, dv)
    omega : ndarray (S, d)
        Samples shared by all queries.
    log_corr : ndarray (S,)
        :math:`\log c_s + \log\mathcal N(\omega_s;0,I) - \log q_s(\omega_s)`.
    alpha : callable, optional
        ``alpha(rows) -> (log|alpha|, sign or None)`` of shape (rows, S): extra
        query-specific multiplicative weights (LARA's :math:`\alpha_{nc}`).

    Returns
    -------
    log_scale (n,), numerator values (n, dv), denominator values (n,), ess (n,)
    """
    n, M, S = Q.shape[0], K.shape[0], omega.shape[0]
    dt = Q.dtype
    dv = V.shape[-1]
    # Key pass: log H_s = log sum_m xi(k_m, w_s) and f(w_s), one shift per sample (never per key).
    half_k = 0.5 * np.sum(K * K, axis=-1)
    top = np.full(S, -np.inf, dtype=dt)
    G = np.zeros((S, dv), dtype=dt)
    H = np.zeros(S, dtype=dt)
    for ks in row_blocks(M, S, budget=IS_BLOCK_ELEMS, cap=block):
        L = K[ks] @ omega.T - half_k[ks, None]  # (c, S)
        new = np.maximum(top, np.max(L, axis=0))
        r = np.exp(top - new)
        E = np.exp(L - new)
        G = G * r[:, None] + E.T @ V[ks]
        H = H * r + np.sum(E, axis=0)
        top = new
    F = G / H[:, None]  # f(w_s), (S, dv)
    base = top + np.log(H) + log_corr.astype(dt, copy=False)  # (S,)
    half_q = 0.5 * np.sum(Q * Q, axis=-1)
    log_scale = np.empty(n, dtype=dt)
    num = np.empty((n, dv), dtype=dt)
    den = np.empty(n, dtype=dt)
    ess = np.empty(n, dtype=dt)
    for qs in row_blocks(n, S, budget=IS_BLOCK_ELEMS, cap=block):
        lw = Q[qs] @ omega.T - half_q[qs, None] + base  # (c, S)
        sign = None
        if alpha is not None:
            la, sign = alpha(qs)
            lw = lw + la
        mx = np.max(lw, axis=1)
        mx = np.where(np.isfinite(mx), mx, 0.0)
        w = np.exp(lw - mx[:, None])
        if sign is not None:
            w = w * sign
        num[qs] = w @ F
        den[qs] = np.sum(w, axis=1)
        aw = np.abs(w)
        with np.errstate(invalid="ignore", divide="ignore"):
            ess[qs] = np.sum(aw, axis=1) ** 2 / np.sum(aw * aw, axis=1)
        log_scale[qs] = mx
    return log_scale, num, den, ess


def chunk_means(X: np.ndarray, C: int) -> np.ndarray:
    """Means of ``C`` contiguous chunks of the rows of ``X`` (n, d) -> (C, d) (``np.array_split`` sizes)."""
    n = X.shape[0]
    edges = (np.arange(C + 1) * n) // C
    sums = np.add.reduceat(X, edges[:-1], axis=0)
    return sums / np.diff(edges)[:, None].astype(X.dtype)


def check_means(means: Any, x: QKV, owner: str, name: str) -> np.ndarray:
    """User-supplied proposal means (C, d) or (..., C, d) -> (B, C, d)."""
    arr = check_points(means, name)
    if arr.shape[-1] != x.d:
        raise ShapeError(
            f"`{name}` of {owner} must have shape (C, d) or (..., C, d) with d={x.d} (the query "
            f"dimension); got shape {arr.shape}."
        )
    try:
        arr = np.broadcast_to(arr.astype(x.dtype, copy=False), x.batch_shape + arr.shape[-2:])
    except ValueError:
        raise ShapeError(
            f"`{name}` of {owner} has batch shape {arr.shape[:-2]}, which does not broadcast to the "
            f"batch shape {x.batch_shape} of Q, K, V."
        ) from None
    return arr.reshape((x.n_slices,) + arr.shape[-2:])


def gauss_logits(omega: np.ndarray, means: np.ndarray) -> np.ndarray:
    r""":math:`\log\mathcal N(\omega_s;\mu_c,I) - \log\mathcal N(\omega_s;0,I) = \omega_s^\top\mu_c - \tfrac12\|\mu_c\|^2`, (S, C).

    Exact (no cancellation of :math:`\|\omega\|^2` terms) and formed by one matrix product.
    """
    return omega @ means.T - 0.5 * np.einsum("cd,cd->c", means, means)[None, :]


def gaussian_log_ratio(omega: np.ndarray, means: np.ndarray, log_mix: np.ndarray) -> np.ndarray:
    r""":math:`\log\mathcal N(\omega;0,I) - \log\sum_c \lambda_c\mathcal N(\omega;\mu_c,I)` for rows of ``omega``."""
    return -logsumexp(gauss_logits(omega, means) + log_mix, axis=-1)


def noise_per_head(
    gen: np.random.Generator, x: QKV, n_samples: int, projection: str, shared: bool
) -> list[np.ndarray]:
    """Standard-normal rows: one (S, d) array shared by all slices, or one per head."""
    k = 1 if shared else x.n_heads
    return [gaussian_noise(gen, n_samples, x.d, projection) for _ in range(k)]


def warn_nonpositive(owner: str, nbad: int, shape: tuple[int, ...], stacklevel: int = 3) -> None:
    warnings.warn(
        nonpositive_message(owner, nbad, shape, "Negative MIS weights or underflow of every weight."),
        NonPositiveNormalizerWarning,
        stacklevel=stacklevel,
    )


@dataclasses.dataclass(frozen=True)
class SNIS:
    r"""RFA written as self-normalised importance sampling with Gaussian proposals.

    .. math::

        \widehat{\mathrm{Attn}}(q_n) = \frac{\sum_s w_{ns} f_n(\omega_s)}{\sum_s w_{ns}},\qquad
        w_{ns} = \frac{\tilde p_n(\omega_s)}{q(\omega_s)},\qquad
        q(\omega) = \sum_c \lambda_c\,\mathcal N(\omega; \mu_c, I),

    with :math:`\tilde p_n, f_n` as in THEORY.md §8 (Zheng, Wang, Kong, ICML 2022,
    §3: "RFA is SNIS with proposal :math:`\mathcal N(0, I)`"). Samples are shared by
    all queries (linear cost). Sample ``s`` comes from component ``s mod C`` and
    :math:`\lambda_c` is the fraction of samples from component ``c``
    (deterministic mixture sampling; the unnormalised numerator and denominator
    stay unbiased for :math:`Z_n\mathrm{Attn}(q_n)` and :math:`Z_n`). Weights are
    computed in log space.

    Parameters
    ----------
    proposal : {"standard", "chunk-mean"} or array_like, default="standard"
        ``"standard"``: :math:`\mu = 0`; with the same :math:`\omega` this *is*
        RFA with :class:`~rfkit.features.Positive` features (identical up to
        round-off). ``"chunk-mean"``: :math:`\mu_c = \tilde q_c + \tilde k_c`, the
        means of ``n_chunks`` contiguous chunks of the queries and of the keys
        (LARA's proposals, THEORY.md §8). An array of shape (C, d) or
        (..., C, d): explicit means.
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
        Rows per block of the linear passes.

    Returns (from ``__call__``)
    ---------------------------
    AttentionResult
        With ``ess`` (effective sample size of the normalised weights of each
        query, :math:`(\sum_s w_{ns})^2/\sum_s w_{ns}^2`), ``omega``,
        ``proposal_means`` and the scaled numerator/denominator (``normalizer``
        estimates :math:`Z_n`).

    Notes
    -----
    Bidirectional only (no causal mask). Cost :math:`O((n+M)Sd + (n+M)Sd_v)`,
    memory :math:`O(S d_v)` plus row blocks of :math:`O(S)` columns.

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
    projection: str = "iid"
    shared_across_heads: bool = True
    chunk_size: int | None = None

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
        check_option(self.projection, "projection", "SNIS", PROJECTIONS)
        object.__setattr__(
            self, "shared_across_heads", check_bool(self.shared_across_heads, "shared_across_heads", "SNIS")
        )
        object.__setattr__(self, "chunk_size", check_chunk_size(self.chunk_size, "SNIS"))

    def _means(self, x: QKV) -> np.ndarray | None:
        """(B, C, d) proposal means, or None for the standard proposal."""
        if isinstance(self.proposal, str):
            if self.proposal == "standard":
                return None
            limit = min(x.n, x.m)
            C = self.n_chunks if self.n_chunks is not None else min(self.n_samples, limit, 8)
            if C > limit:
                raise InvalidParameterError(
                    f"The `n_chunks` parameter of SNIS must be an int in the range [1, min(n, M)] = "
                    f"[1, {limit}] for these inputs. Got {C} instead."
                )
            return np.stack([chunk_means(x.Q[b], C) + chunk_means(x.K[b], C) for b in range(x.n_slices)])
        return check_means(self.proposal, x, "SNIS", "proposal")

    def __call__(self, Q: Any, K: Any, V: Any, *, rng: Any = None) -> AttentionResult:
        """Estimate attention; ``rng`` keyword-only (None, int, SeedSequence or Generator)."""
        x = check_qkv(Q, K, V, "SNIS")
        means = self._means(x)
        gen = check_rng(rng)
        S = self.n_samples
        noise = noise_per_head(gen, x, S, self.projection, self.shared_across_heads)
        B, n, dv, d = x.n_slices, x.n, x.dv, x.d
        dt = x.dtype
        log_scale = np.empty((B, n), dtype=dt)
        num = np.empty((B, n, dv), dtype=dt)
        den = np.empty((B, n), dtype=dt)
        ess = np.empty((B, n), dtype=dt)
        omegas = np.empty((B, S, d), dtype=np.float64)
        for b in range(B):
            E = noise[0] if len(noise) == 1 else noise[b % x.n_heads]
            if means is None:
                omega = E
                log_corr = np.full(S, -np.log(S))
            else:
                mu = means[b].astype(np.float64)
                C = mu.shape[0]
                comp = np.arange(S) % C
                counts = np.bincount(comp, minlength=C)
                with np.errstate(divide="ignore"):
                    log_mix = np.log(counts / S)
                omega = mu[comp] + E
                log_corr = gaussian_log_ratio(omega, mu, log_mix) - np.log(S)
            omegas[b] = omega
            log_scale[b], num[b], den[b], ess[b] = importance_slice(
                x.Q[b], x.K[b], x.V[b], omega.astype(dt, copy=False), log_corr, None, self.chunk_size
            )
        out, nbad = finish_ratio(log_scale, num, den)
        if nbad:
            warn_nonpositive("SNIS", nbad, (B, n))
        shared_omega = means is None and len(noise) == 1
        return AttentionResult(
            output=x.unflatten(out),
            method="SNIS",
            estimator=self,
            log_scale=x.unflatten(log_scale),
            numerator_values=x.unflatten(num),
            denominator_values=x.unflatten(den),
            n_nonpositive=nbad,
            ess=x.unflatten(ess),
            omega=omegas[0] if shared_omega else x.unflatten(omegas),
            proposal_means=None if means is None else x.unflatten(means),
        )
