"""Array steps shared by the feature maps: projections, chunking and log-sum-exps (any backend)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .._backend import Backend, get_backend

__all__ = ["project", "block_projection", "iter_chunks", "fast_logsumexp", "paired_logsumexp"]

# Work arrays in chunked reductions stay below this many elements (~16 MiB in float64).
_CHUNK_ELEMS = 1 << 21


def project(U: Any, W: Any) -> Any:
    """Projections ``U @ W.T`` with a leading draw axis when ``W`` is (T, m, d).

    ``U`` (..., n, d), ``W`` (m, d) -> (..., n, m); ``W`` (T, m, d) -> (T, ..., n, m),
    computed as one matrix product over all draws. ``W`` must already be on ``U``'s
    library, device and dtype (:meth:`FeatureDraw.param`).
    """
    xp = get_backend(("U", U)).xp
    if W.ndim == 2:
        return U @ xp.matrix_transpose(W)
    T, m, d = W.shape
    P = xp.reshape(U, (-1, d)) @ xp.matrix_transpose(xp.reshape(W, (T * m, d)))
    P = xp.reshape(P, tuple(U.shape[:-1]) + (T, m))
    return xp.moveaxis(P, -2, 0)


def paired_logsumexp(
    bk: Backend, Z: Any, W: Any, e: Any | None, *, b: float = 1.0, mirrored: bool = False
) -> Any:
    r""":math:`\log\sum_k \exp(b\,w_k^\top z + e_k)` for every row ``z`` of ``Z`` (..., n, d): ([T,] ..., n).

    ``W`` (m, d) or (T, m, d) and ``e`` (m,) or (T, m) or None, on ``Z``'s backend;
    ``mirrored`` adds the terms with :math:`-w_k` (hyperbolic maps). The paired estimate of
    the exponential maps is this log-sum-exp plus a row constant. Fixed blocks of draws and
    rows on the thread pool (NumPy); every exponent is finite.
    """
    xp = bk.xp
    lead = tuple(Z.shape[:-1])
    batched = W.ndim == 3
    if not batched:
        W, e = W[None, ...], (None if e is None else e[None, ...])
    T, m, d = (int(n) for n in W.shape)
    Zf = xp.reshape(Z, (-1, d))
    N = int(Zf.shape[0])
    two = 2 if mirrored else 1

    def block(tn: tuple[slice, slice]) -> None:
        ts, ns = tn
        Wt = W[ts, ...]
        t = Wt.shape[0]
        P = xp.reshape(Zf[ns, ...] @ xp.matrix_transpose(xp.reshape(Wt, (t * m, d))), (-1, t, m))
        if b != 1.0:
            P = P * b
        if mirrored:
            P = xp.concat([P, -P], axis=-1)
        if e is not None:
            et = e[ts, ...]
            et = xp.concat([et, et], axis=-1) if mirrored else et
            P = bk.update(P, "+", et)  # P is this block's own work array (a fresh product)
        out[ts, ns] = xp.matrix_transpose(bk.logsumexp(P, axis=-1, overwrite=True))  # (t, Nc)

    out = bk.empty((T, N), Zf.dtype)
    budget = bk.row_block_elems * 2
    chunks = [
        (ts, ns)
        for ts in iter_chunks(T, N * m * two, budget=budget)
        for ns in iter_chunks(N, m * two * (ts.stop - ts.start), budget=budget)
    ]
    bk.run_blocks(block, chunks)
    res = xp.reshape(out, (T,) + lead)
    return res if batched else res[0, ...]


def block_projection(bk: Backend, U: Any, W: Any) -> tuple[Any, Any, int, int, Callable[[Any], Any]]:
    """Set up a row-blocked product ``U @ W.T`` with the draws side by side.

    ``U`` (..., n, d) and ``W`` (m, d) or (T, m, d) on one backend. Returns ``Uf`` (N, d)
    (the rows of ``U``), ``WT`` (d, T m) (so that ``Uf[rows] @ WT`` reshaped to (-1, T, m) is
    the projection of a row block for every draw), ``T`` (1 for a single draw), ``m`` and
    ``unflatten``, which turns an (N, T, k) result into ([T,] ..., n, k).
    """
    xp = bk.xp
    lead = tuple(U.shape[:-1])
    d = U.shape[-1]
    batched = W.ndim == 3
    T = int(W.shape[0]) if batched else 1
    m = int(W.shape[-2])
    WT = xp.matrix_transpose(xp.reshape(W, (T * m, d)) if batched else W)

    def unflatten(a: Any) -> Any:
        k = int(a.shape[-1])
        if not batched:
            return xp.reshape(a, lead + (k,))
        return xp.moveaxis(xp.reshape(a, lead + (T, k)), -2, 0)

    return xp.reshape(U, (-1, d)), WT, T, m, unflatten


def iter_chunks(total: int, per_item: int, budget: int = _CHUNK_ELEMS) -> Iterator[slice]:
    """Slices over ``range(total)`` so that each chunk holds at most ``budget`` elements."""
    step = max(1, budget // max(per_item, 1))
    for start in range(0, total, step):
        yield slice(start, min(total, start + step))


def fast_logsumexp(a: Any, axis: int = -1) -> Any:
    """``log(sum(exp(a)))`` along ``axis`` for finite ``a`` (max-shifted; no SciPy overhead)."""
    return get_backend(("a", a)).logsumexp(a, axis=axis)
