r"""Randomized Attention (RA; Zheng, Wang, Kong, ICML 2022): unbiased, quadratic."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._random import check_rng
from .._validation import check_int
from ._common import CHUNK_ELEMS, check_bool, check_chunk_size, check_qkv
from ._result import AttentionResult

__all__ = ["RA"]


def _softmax_rows(L: np.ndarray) -> np.ndarray:
    P = np.exp(L - np.max(L, axis=-1, keepdims=True))
    P /= np.sum(P, axis=-1, keepdims=True)
    return P


@dataclasses.dataclass(frozen=True)
class RA:
    r"""Randomized Attention: an unbiased Monte Carlo estimator of softmax attention.

    For each query :math:`q_n` (Zheng, Wang, Kong, "Linear Complexity Randomized
    Self-attention Mechanism", ICML 2022; THEORY.md §8)

    .. math::

        \mathrm{Attn}(q_n) = \mathbb E_{\omega\sim p_n}[f_n(\omega)],\qquad
        p_n(\omega) = \sum_m \pi_{nm}\,\mathcal N(\omega; q_n + k_m, I),\qquad
        f_n(\omega) = \sum_m \mathrm{softmax}_m\big(\omega^\top k_m - \tfrac12\|k_m\|^2\big)\,v_m,

    with :math:`\pi_{nm} = \mathrm{softmax}_m(q_n^\top k_m)`. Each sample draws a
    component :math:`m^\star \sim \mathrm{Cat}(\pi_{n\cdot})` and sets
    :math:`\omega = q_n + k_{m^\star} + \varepsilon`, :math:`\varepsilon \sim \mathcal N(0, I_d)`,
    in the coordinates where :math:`q^\top k` is the logit (rfkit has no hidden
    :math:`1/\sqrt d`). Then :math:`\mathrm{RA}_S(q_n) = \frac1S\sum_s f_n(\omega_s)` is
    **unbiased** with MSE :math:`\mathrm{Var}_{p_n}(f_n)/S`. (The public reference
    implementation adds the noise before its :math:`1/\sqrt d` scaling, i.e. uses
    noise of standard deviation :math:`d^{-1/4}` in these coordinates, which is
    biased.) Cost :math:`O(nMSd)`: quadratic, a reference estimator.

    Parameters
    ----------
    n_samples : int, default=1
        Samples ``S`` per query (>= 1).
    causal : bool, default=False
        Query ``i`` uses keys ``0..i`` in both :math:`p_n` and :math:`f_n`
        (still unbiased for causal softmax attention).
    chunk_size : int, optional
        Queries processed at once (default: a work array of about 2**21
        elements). The samples drawn depend on it.

    Notes
    -----
    Samples are independent for every query and slice (there is no draw to share
    across heads). The result carries ``mcse``: the per-entry Monte Carlo
    standard error :math:`\mathrm{sd}_s f_n(\omega_s)/\sqrt S` (NaN for S = 1).

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> rng = np.random.default_rng(0)
    >>> Q, K, V = 0.3 * rng.normal(size=(3, 16, 8))
    >>> rk.attention.RA(n_samples=4)(Q, K, V, rng=0).output.shape
    (16, 8)
    """

    n_samples: int = 1
    causal: bool = False
    chunk_size: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_samples", check_int(self.n_samples, "n_samples", "RA", low=1))
        object.__setattr__(self, "causal", check_bool(self.causal, "causal", "RA"))
        object.__setattr__(self, "chunk_size", check_chunk_size(self.chunk_size, "RA"))

    def __call__(self, Q: Any, K: Any, V: Any, *, rng: Any = None) -> AttentionResult:
        """Estimate attention; ``rng`` keyword-only (None, int, SeedSequence or Generator)."""
        x = check_qkv(Q, K, V, "RA", causal=self.causal)
        gen = check_rng(rng)
        S = self.n_samples
        B, n, M, d, dv = x.n_slices, x.n, x.m, x.d, x.dv
        dt = x.dtype
        out = np.empty((B, n, dv), dtype=dt)
        mcse = np.empty((B, n, dv), dtype=dt)
        per_query = S * max(M, d, dv)
        qc = self.chunk_size or max(1, CHUNK_ELEMS // per_query)
        cols = np.arange(M)
        for b in range(B):
            Kb, Vb = x.K[b], x.V[b]
            half_k = 0.5 * np.sum(Kb * Kb, axis=-1)
            for q0 in range(0, n, qc):
                qs = slice(q0, min(n, q0 + qc))
                Qc = x.Q[b, qs]
                c = Qc.shape[0]
                L = Qc @ Kb.T  # (c, M) logits
                future = None
                if self.causal:
                    future = cols[None, :] > np.arange(qs.start, qs.stop)[:, None]
                    L = np.where(future, -np.inf, L)
                pi = _softmax_rows(L)
                cum = np.cumsum(pi, axis=-1)
                cum /= cum[:, -1:]
                u = gen.random((c, S))
                # component m* = #{j < M-1 : cum_j <= u}  (inverse CDF, exact for u in [0, 1))
                comp = np.sum(cum[:, None, :-1] <= u[:, :, None], axis=-1)
                eps = gen.standard_normal((c, S, d)).astype(dt, copy=False)
                omega = Qc[:, None, :] + Kb[comp] + eps  # (c, S, d), omega ~ p_n
                Lf = omega @ Kb.T - half_k  # (c, S, M)
                if future is not None:
                    Lf = np.where(future[:, None, :], -np.inf, Lf)
                F = _softmax_rows(Lf) @ Vb  # (c, S, dv) = f_n(omega_s)
                out[b, qs] = np.mean(F, axis=1)
                if S > 1:
                    mcse[b, qs] = np.std(F, axis=1, ddof=1) / np.sqrt(S)
                else:
                    mcse[b, qs] = np.nan
        return AttentionResult(output=x.unflatten(out), method="RA", estimator=self, mcse=x.unflatten(mcse))
