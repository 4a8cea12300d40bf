r"""Sparse supports of hybrid attention: sliding windows, global "sink" keys and angular-LSH buckets.

A support is a padded index array ``idx`` (S, n, s) of key positions with a boolean ``valid``
(S, n, s) (S = 1 when it is the same for every slice): query ``i`` of slice ``b`` computes the
keys ``idx[b, i, valid[b, i]]`` exactly. Entries are distinct within a row. Everything is built
in the call's array namespace and on its device (:mod:`rfkit._backend`): the window and sink
supports from the sizes alone, the LSH buckets by hashing the queries and keys where they are
(in float64, as the NumPy reference does), so an accelerator's inputs never leave it; only the
largest bucket size (an int that fixes the padded width) is read back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._backend import Backend, get_backend

__all__ = ["window_support", "sink_support", "lsh_support", "union_support", "lsh_codes"]


def _bk(bk: Backend | None, *arrays: Any) -> Backend:
    if bk is not None:
        return bk
    return get_backend(*(("X", a) for a in arrays))


def window_support(n: int, M: int, window: int, causal: bool, bk: Backend | None = None) -> tuple[Any, Any]:
    """Keys ``j`` with ``|i - j| <= window`` (causal: ``i - window <= j <= i``), shape (1, n, s)."""
    b = _bk(bk)
    xp = b.xp
    offsets = xp.arange(-window, 1 if causal else window + 1, dtype=xp.int64, device=b.device)
    idx = xp.arange(n, dtype=xp.int64, device=b.device)[:, None] + offsets[None, :]
    valid = (idx >= 0) & (idx < M)
    return xp.where(valid, idx, xp.zeros_like(idx))[None, ...], valid[None, ...]


def sink_support(n: int, M: int, n_global: int, bk: Backend | None = None) -> tuple[Any, Any]:
    """The first ``n_global`` keys for every query, shape (1, n, min(n_global, M))."""
    b = _bk(bk)
    xp = b.xp
    g = min(n_global, M)
    idx = xp.broadcast_to(xp.arange(g, dtype=xp.int64, device=b.device)[None, :], (n, g))
    return idx[None, ...], xp.ones((1, n, g), dtype=xp.bool, device=b.device)


def lsh_codes(X: Any, rotation: Any) -> Any:
    r"""Angular-LSH bucket of each row: :math:`\arg\max [xR, -xR]` of the unit-normalised rows.

    Reformer hashing (Kitaev, Kaiser & Levskaya (ICLR 2020), section 2): ``rotation`` is a
    (d, b/2) Gaussian matrix, giving ``b`` buckets; rows of zero norm go to bucket 0. ``X`` and
    ``rotation`` are arrays of one namespace (the product is taken in float64); the codes are
    int64 arrays of it.
    """
    xp = _bk(None, X, rotation).xp
    X = xp.astype(X, xp.float64)
    norms = xp.sqrt(xp.sum(X * X, axis=-1, keepdims=True))
    U = X / xp.where(norms > 0, norms, xp.ones_like(norms))
    P = U @ xp.astype(rotation, xp.float64)
    return xp.astype(xp.argmax(xp.concat([P, -P], axis=-1), axis=-1), xp.int64)


def lsh_support(hq: Any, hk: Any, n_buckets: int | None = None) -> tuple[Any, Any]:
    """Keys in the query's bucket, for bucket codes ``hq`` (S, n) and ``hk`` (S, M).

    Padded to the largest bucket that some query falls in: shape (S, n, s_max). Keys are listed in
    increasing position. ``n_buckets`` (default: the largest code + 1, read from the device)
    bounds the codes.
    """
    b = _bk(None, hq, hk)
    xp = b.xp
    S, n = int(hq.shape[0]), int(hq.shape[1])
    if n_buckets is None:
        top = max(int(xp.max(hq)) if n else 0, int(xp.max(hk)) if hk.shape[1] else 0)
        n_buckets = top + 1
    order = xp.argsort(hk, axis=-1, stable=True)  # keys grouped by bucket, by position within one
    # start[s, c] = number of keys of slice s in buckets < c (c = 0..n_buckets)
    starts = [xp.zeros((S,), dtype=xp.int64, device=b.device)]
    for c in range(n_buckets):
        starts.append(starts[-1] + xp.sum(xp.astype(hk == c, xp.int64), axis=-1))
    start = xp.stack(starts, axis=-1)  # (S, n_buckets + 1)
    lo = xp.take_along_axis(start, hq, axis=-1)
    hi = xp.take_along_axis(start, hq + 1, axis=-1)
    s_max = int(xp.max(hi - lo)) if n else 0
    cols = xp.arange(s_max, dtype=xp.int64, device=b.device)
    pos = lo[..., None] + cols
    valid = pos < hi[..., None]
    M = int(hk.shape[1])
    pos = xp.reshape(xp.where(valid, pos, xp.zeros_like(pos)), (S, n * s_max))
    idx = xp.reshape(xp.take_along_axis(order, xp.clip(pos, 0, max(M - 1, 0)), axis=-1), (S, n, s_max))
    return xp.where(valid, idx, xp.zeros_like(idx)), valid


def union_support(parts: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    """Union of supports (each (S_i, n, s_i)) without duplicates, shape (max S_i, n, sum s_i)."""
    xp = _bk(None, parts[0][0]).xp
    S = max(int(p[0].shape[0]) for p in parts)
    n = int(parts[0][0].shape[1])
    idx = xp.concat([xp.broadcast_to(i, (S, n, int(i.shape[2]))) for i, _ in parts], axis=-1)
    valid = xp.concat([xp.broadcast_to(v, (S, n, int(v.shape[2]))) for _, v in parts], axis=-1)
    if len(parts) == 1:
        return idx, valid
    big = np.iinfo(np.int64).max
    key = xp.sort(xp.where(valid, idx, xp.full_like(idx, big)), axis=-1)
    dup = xp.concat([xp.zeros_like(valid[..., :1]), key[..., 1:] == key[..., :-1]], axis=-1)
    ok = (key != big) & ~dup
    return xp.where(ok, key, xp.zeros_like(key)), ok
