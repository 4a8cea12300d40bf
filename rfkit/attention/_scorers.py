r"""Content scorers of :class:`~rfkit.attention.Hybrid`: which keys join the support by ``top_k``.

A scorer gives every key :math:`j` a query :math:`n` may see a score (a proxy logit); the
``top_k=t`` keys with the highest score that are not already in the window, sinks or LSH support
join the support. The same proxy logits define the importance-sampling proposal of the
``"importance"`` remainder (:mod:`rfkit.attention._remainder`).

* ``"oracle"``: the exact logit :math:`q_n^\top k_j` (a reference: it costs every key's logit).
* ``"proxy"``: :math:`\bar q_{p(n)}^\top k_j` with :math:`\bar q` the mean of recent queries,
  refreshed every ``refresh`` tokens (H2O's accumulated-attention idea with a query summary,
  Zhang et al. (NeurIPS 2023)). Causal: query :math:`n` of period :math:`p = \lfloor n/r\rfloor`
  uses the mean of the queries :math:`0..pr-1` (those before its period; the first period has
  no summary, all scores 0); bidirectional: the mean of all queries of the sequence.
* ``"quest"``: Quest (Tang et al. (ICML 2024)): keys in blocks of ``block_size``; per block the
  elementwise minimum :math:`m` and maximum :math:`M` of its keys; block score
  :math:`U = \sum_i \max(q_i m_i, q_i M_i)` (an upper bound of :math:`q^\top k` over the block);
  whole blocks in decreasing score are selected until they hold ``t`` keys. Causal: the block a
  query falls in is summarised over its keys up to the query only.
* ``"lsh"``: the number of ``n_hashes`` angular-LSH rotations (Reformer hashing,
  :func:`~rfkit.attention._support.lsh_codes`, ``lsh_buckets`` buckets, default 8) in which key
  and query share a bucket (MagicPIG's collision count, Chen et al. (ICLR 2025)).

Ties go to the earlier key. Everything is computed in fixed row blocks of queries, in the call's
namespace and on its device.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._backend_ops import array_device, dense_members, scatter_inverse, top_order
from ._common import QKV
from ._support import lsh_codes

__all__ = [
    "SCORERS",
    "Scorer",
    "visible_rows",
    "rank_to_position",
    "scoring_cost",
    "top_k_support",
]

#: The scorers of ``Hybrid(top_k=...)`` and of its importance proposal.
SCORERS = ("oracle", "proxy", "quest", "lsh")
#: Buckets of the ``"lsh"`` scorer when ``lsh_buckets`` is None.
DEFAULT_SCORER_BUCKETS = 8


def rank_to_position(counts: Any, rank: Any, xp: Any) -> Any:
    """Position of the ``rank``-th member (0-based) of each row.

    ``counts`` (B, r, M) int64 is the running count of members along the keys (non-decreasing,
    in [0, M]); ``rank`` (..., B, r, s) int64. Returns ``#{j : counts[j] <= rank}`` (M where the
    row has fewer members) by one binary search over the rows laid end to end (row ``i`` shifted
    by ``i (M + 1)``), without a per-row loop.
    """
    B, r, M = (int(v) for v in counts.shape)
    row = xp.reshape(xp.arange(B * r, dtype=xp.int64, device=array_device(counts)), (B, r, 1))
    flat = xp.reshape(counts + row * (M + 1), (-1,))
    pos = xp.searchsorted(flat, rank + row * (M + 1), side="right")
    return xp.astype(pos, xp.int64) - row * M


def visible_rows(x: QKV, causal: bool, rows: slice) -> Any:
    """Boolean (B or 1, r, M): the keys each query of ``rows`` may see (causal, padding)."""
    xp, dev, M = x.xp, x.bk.device, x.n_keys
    r = rows.stop - rows.start
    vis = xp.ones((1, r, M), dtype=xp.bool, device=dev)
    if causal:
        q = xp.arange(rows.start, rows.stop, dtype=xp.int64, device=dev)
        vis = (xp.arange(M, dtype=xp.int64, device=dev)[None, :] <= q[:, None])[None, ...]
    if x.mask is not None:
        vis = vis & ~x.mask[:, None, :]
    return vis


class Scorer:
    """One call's scorer state (query summaries, block corners or hash codes), made once."""

    def __init__(self, est: Any, x: QKV, gen: np.random.Generator) -> None:
        self.name, self.x, self.causal = est.scorer, x, est.causal
        self.top_k, self.refresh, self.block_size = est.top_k, est.refresh, est.block_size
        xp, bk, B, n, M, d = x.xp, x.bk, x.n_slices, x.n_queries, x.n_keys, x.dim
        if self.name in ("oracle", "proxy"):  # (B, d, M) in C order: row blocks' products run on BLAS
            flat = xp.reshape(xp.matrix_transpose(x.K), (B, d * M))  # a copy, in C order
            self.KT = xp.reshape(flat, (B, d, M))
        if self.name == "proxy":
            self.summary = self._summaries()
        elif self.name == "quest":
            self._corners()
        elif self.name == "lsh":
            b = est.lsh_buckets or DEFAULT_SCORER_BUCKETS
            H = est.n_hashes
            self.buckets = b
            R = [bk.asarray(gen.standard_normal((d, b // 2)), dtype=xp.float64) for _ in range(H)]
            self.cq = xp.stack([lsh_codes(x.Q, Rh) for Rh in R], axis=-1)  # (B, n, H)
            self.ck = xp.stack([lsh_codes(x.K, Rh) for Rh in R], axis=-1)  # (B, M, H)
        self.per_row = M * (4 + (est.n_hashes if self.name == "lsh" else 0)) + (
            (M // self.block_size + 1) * 2 if self.name == "quest" else 0
        )
        del B, n

    # ------------------------------------------------------------------ per-call state
    def _summaries(self) -> Any:
        """(B, n, d): the query summary each query scores the keys with."""
        x, xp = self.x, self.x.xp
        B, n, d, r = x.n_slices, x.n_queries, x.dim, self.refresh
        if not self.causal:
            return xp.broadcast_to(xp.mean(x.Q, axis=1, keepdims=True), (B, n, d))
        csum = xp.cumulative_sum(x.Q, axis=1)  # csum[:, i] = sum of queries 0..i
        start = (xp.arange(n, dtype=xp.int64, device=x.bk.device) // r) * r  # first query of the period
        prev = xp.clip(start - 1, 0, None)
        tot = xp.take(csum, prev, axis=1)
        cnt = xp.astype(start, x.dtype)
        mean = tot / xp.where(cnt > 0, cnt, xp.ones_like(cnt))[None, :, None]
        return xp.where((start > 0)[None, :, None], mean, xp.zeros_like(mean))

    def _corners(self) -> None:
        """Per-block minimum and maximum of the keys (padded keys left out), and their prefixes."""
        x, xp, bk = self.x, self.x.xp, self.x.bk
        B, M, d, bs = x.n_slices, x.n_keys, x.dim, self.block_size
        nb = -(-M // bs)
        inf = bk.scalar(math.inf, x.dtype)
        K = x.K
        pad = nb * bs - M
        if pad:
            K = xp.concat([K, xp.zeros((B, pad, d), dtype=x.dtype, device=bk.device)], axis=1)
        drop = xp.zeros((B, nb * bs), dtype=xp.bool, device=bk.device)
        if pad:
            drop = xp.concat([drop[:, :M], xp.ones((B, pad), dtype=xp.bool, device=bk.device)], axis=1)
        if x.mask is not None:
            drop = drop | xp.concat([x.mask, drop[:, M:]], axis=1)
        hi = xp.reshape(xp.where(drop[..., None], -inf, K), (B, nb, bs, d))
        lo = xp.reshape(xp.where(drop[..., None], inf, K), (B, nb, bs, d))
        pmax = bk.cummax(hi, axis=2)
        pmin = -bk.cummax(-lo, axis=2)
        self.nb = nb

        def fin(a: Any) -> Any:
            return xp.where(xp.isfinite(a), a, xp.zeros_like(a))

        self.kmax, self.kmin = fin(pmax[:, :, -1, :]), fin(pmin[:, :, -1, :])  # (B, nb, d)
        self.pmax = xp.reshape(fin(pmax), (B, nb * bs, d))[:, :M, :]  # prefix within the block
        self.pmin = xp.reshape(fin(pmin), (B, nb * bs, d))[:, :M, :]

    # ------------------------------------------------------------------ per row block
    def _block_scores(self, rows: slice) -> Any:
        """Quest block scores (B, r, nb); causal: a query's own block over its keys up to it."""
        x, xp = self.x, self.x.xp
        q = x.Q[:, rows, :]
        qp, qn = xp.maximum(q, xp.zeros_like(q)), xp.minimum(q, xp.zeros_like(q))
        U = qp @ xp.matrix_transpose(self.kmax) + qn @ xp.matrix_transpose(self.kmin)
        if not self.causal:
            return U
        own = xp.sum(qp * self.pmax[:, rows, :] + qn * self.pmin[:, rows, :], axis=-1)  # (B, r)
        pos = xp.arange(rows.start, rows.stop, dtype=xp.int64, device=x.bk.device)
        blk = xp.arange(self.nb, dtype=xp.int64, device=x.bk.device)
        is_own = (pos // self.block_size)[:, None] == blk[None, :]
        return xp.where(is_own[None, ...], own[..., None], U)

    def proxy(self, rows: slice) -> Any:
        """Proxy logits (B, r, M) of the queries ``rows`` against every key (not masked)."""
        x, xp = self.x, self.x.xp
        if self.name == "oracle":
            return x.Q[:, rows, :] @ self.KT
        if self.name == "proxy":
            return self.summary[:, rows, :] @ self.KT
        if self.name == "quest":
            U = self._block_scores(rows)
            blk = xp.arange(x.n_keys, dtype=xp.int64, device=x.bk.device) // self.block_size
            return xp.take(U, blk, axis=-1)
        hit = self.cq[:, rows, None, :] == self.ck[:, None, :, :]  # (B, r, M, H)
        return xp.astype(xp.sum(xp.astype(hit, xp.int64), axis=-1), x.dtype)

    def select(self, rows: slice, cand: Any) -> tuple[Any, Any]:
        """The top-k keys of the queries ``rows`` among the candidates ``cand`` (B, r, M).

        Returns a padded support ``(idx, valid)`` of shape (B, r, w): w = min(t, M), and for
        Quest (whole blocks) min(t + block_size - 1, M).
        """
        x, xp = self.x, self.x.xp
        M, t = x.n_keys, int(self.top_k)
        if self.name != "quest":
            neg = x.bk.scalar(-math.inf, x.dtype)
            score = xp.where(cand, self.proxy(rows), neg)
            order = top_order(-score, min(t, M), xp)
            return order, xp.take_along_axis(cand, order, axis=-1)
        U = self._block_scores(rows)  # (B, r, nb)
        B, r, bs, nb = int(U.shape[0]), int(U.shape[1]), self.block_size, self.nb
        pad = nb * bs - M
        c = cand
        if pad:
            c = xp.concat([cand, xp.zeros((B, r, pad), dtype=xp.bool, device=x.bk.device)], axis=-1)
        count = xp.sum(xp.astype(xp.reshape(c, (B, r, nb, bs)), xp.int64), axis=-1)  # (B, r, nb)
        neg = x.bk.scalar(-math.inf, x.dtype)
        order = xp.argsort(-xp.where(count > 0, U, neg), axis=-1, stable=True)
        cs = xp.take_along_axis(count, order, axis=-1)
        before = xp.cumulative_sum(cs, axis=-1) - cs
        chosen_sorted = (before < t) & (cs > 0)
        chosen = scatter_inverse(chosen_sorted, order, xp)
        blk = xp.arange(M, dtype=xp.int64, device=x.bk.device) // bs
        sel = cand & xp.take(chosen, blk, axis=-1)
        w = min(t + bs - 1, M)
        idx = xp.argsort(xp.astype(~sel, xp.int8), axis=-1, stable=True)[..., :w]
        return idx, xp.take_along_axis(sel, idx, axis=-1)


def scoring_cost(est: Any, x: QKV, visible: Any) -> tuple[Any, Any]:
    """Per-query (exact logits, scoring products) of ``est``'s scorer, for ``visible`` = |J(n)| (B, n) float."""
    xp = x.xp
    zero = xp.zeros_like(visible)
    if est.scorer is None:
        return zero, zero
    if est.scorer == "oracle":
        return visible, zero
    if est.scorer == "proxy":
        if est.causal:
            return zero, visible / est.refresh
        return zero, zero + x.n_keys / x.n_queries
    if est.scorer == "quest":
        return zero, 2.0 * xp.ceil(visible / est.block_size)
    h = est.n_hashes * ((est.lsh_buckets or DEFAULT_SCORER_BUCKETS) // 2)
    return zero, zero + h * (1.0 + x.n_keys / x.n_queries)


def top_k_support(scorer: Scorer, idx: Any, valid: Any, block_elems: int) -> tuple[Any, Any]:
    """The ``top_k`` keys of every query outside the support ``idx``/``valid`` (S, n, s): (B, n, w).

    In row blocks of about ``block_elems`` work elements (linear memory in n for a fixed block).
    """
    x, xp = scorer.x, scorer.x.xp
    B, n, M = x.n_slices, x.n_queries, x.n_keys
    step = max(1, block_elems // max(1, B * scorer.per_row))
    out_i, out_v = [], []
    for a in range(0, n, step):
        rows = slice(a, min(n, a + step))
        r = rows.stop - rows.start
        ib = xp.broadcast_to(idx[:, rows, :], (B, r, int(idx.shape[-1])))
        vb = xp.broadcast_to(valid[:, rows, :], (B, r, int(valid.shape[-1])))
        cand = xp.broadcast_to(visible_rows(x, scorer.causal, rows), (B, r, M)) & ~dense_members(
            ib, vb, M, xp
        )
        i, v = scorer.select(rows, cand)
        out_i.append(i)
        out_v.append(v)
    return xp.concat(out_i, axis=1), xp.concat(out_v, axis=1)
