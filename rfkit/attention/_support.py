r"""Sparse supports of hybrid attention: sliding windows, global "sink" keys and angular-LSH buckets.

A support is a padded index array ``idx`` (S, n, s) of key positions with a boolean ``valid``
(S, n, s) (S = 1 when it is the same for every slice): query ``i`` of slice ``b`` computes the
keys ``idx[b, i, valid[b, i]]`` exactly. Entries are distinct within a row. Built in NumPy
(the indices depend only on the sizes, or on the hashes for LSH) and moved to the call's backend
by the estimator.
"""

from __future__ import annotations

import numpy as np

__all__ = ["window_support", "sink_support", "lsh_support", "union_support", "lsh_codes"]


def window_support(n: int, M: int, window: int, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """Keys ``j`` with ``|i - j| <= window`` (causal: ``i - window <= j <= i``), shape (1, n, s)."""
    offsets = np.arange(-window, 1 if causal else window + 1)
    idx = np.arange(n)[:, None] + offsets[None, :]
    valid = (idx >= 0) & (idx < M)
    return np.where(valid, idx, 0)[None], valid[None]


def sink_support(n: int, M: int, n_global: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n_global`` keys for every query, shape (1, n, min(n_global, M))."""
    g = min(n_global, M)
    idx = np.broadcast_to(np.arange(g)[None, :], (n, g))
    return idx[None], np.ones((1, n, g), dtype=bool)


def lsh_codes(X: np.ndarray, rotation: np.ndarray) -> np.ndarray:
    r"""Angular-LSH bucket of each row: :math:`\arg\max [xR, -xR]` of the unit-normalised rows.

    Reformer hashing (Kitaev, Kaiser & Levskaya (ICLR 2020), section 2): ``rotation`` is a
    (d, b/2) Gaussian matrix, giving ``b`` buckets; rows of zero norm go to bucket 0.
    """
    norms = np.linalg.norm(X, axis=-1, keepdims=True)
    U = X / np.where(norms > 0, norms, 1.0)
    P = U @ rotation
    return np.argmax(np.concatenate([P, -P], axis=-1), axis=-1)


def lsh_support(hq: np.ndarray, hk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keys in the query's bucket, for bucket codes ``hq`` (S, n) and ``hk`` (S, M).

    Padded to the largest bucket that some query falls in: shape (S, n, s_max).
    """
    S, n = hq.shape
    lists = []
    s_max = 0
    for b in range(S):
        order = np.argsort(hk[b], kind="stable")
        sorted_codes = hk[b][order]
        lo = np.searchsorted(sorted_codes, hq[b], side="left")
        hi = np.searchsorted(sorted_codes, hq[b], side="right")
        lists.append((order, lo, hi))
        if n:
            s_max = max(s_max, int((hi - lo).max()))
    idx = np.zeros((S, n, s_max), dtype=np.int64)
    valid = np.zeros((S, n, s_max), dtype=bool)
    cols = np.arange(s_max)
    for b, (order, lo, hi) in enumerate(lists):
        pos = lo[:, None] + cols[None, :]
        ok = pos < hi[:, None]
        idx[b] = np.where(ok, order[np.minimum(pos, len(order) - 1)], 0)
        valid[b] = ok
    return idx, valid


def union_support(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Union of supports (each (S_i, n, s_i)) without duplicates, shape (max S_i, n, sum s_i)."""
    S = max(p[0].shape[0] for p in parts)
    n = parts[0][0].shape[1]
    idx = np.concatenate([np.broadcast_to(i, (S, n, i.shape[2])) for i, _ in parts], axis=-1)
    valid = np.concatenate([np.broadcast_to(v, (S, n, v.shape[2])) for _, v in parts], axis=-1)
    if len(parts) == 1:
        return np.array(idx), np.array(valid)
    big = np.iinfo(np.int64).max
    key = np.where(valid, idx, big)
    key.sort(axis=-1)
    dup = np.zeros_like(valid)
    dup[..., 1:] = key[..., 1:] == key[..., :-1]
    ok = (key != big) & ~dup
    return np.where(ok, key, 0), ok
