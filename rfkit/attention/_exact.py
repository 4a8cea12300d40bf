"""Exact softmax attention, max-shifted and processed in query chunks (on the thread pool)."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from .._parallel import threads
from .._params import check_allocation
from .._validation import caller_stacklevel, half_precision
from ..exceptions import DegenerateInputWarning
from ._common import CHUNK_ELEMS, check_bool, check_chunk_size, check_qkv, check_threads, run, threads_of

__all__ = ["softmax"]


@half_precision()
def softmax(
    Q: Any,
    K: Any,
    V: Any,
    causal: bool = False,
    key_padding_mask: Any = None,
    chunk_size: int | None = None,
    n_threads: int | None = None,
) -> Any:
    r"""Exact softmax attention :math:`\mathrm{softmax}(QK^\top)V`, computed stably in query chunks.

    .. math::

        \mathrm{Attn}(q_n) = \sum_m \pi_{nm} v_m,\qquad
        \pi_{nm} = \frac{e^{q_n^\top k_m - c_n}}{\sum_{m'} e^{q_n^\top k_{m'} - c_n}},\qquad
        c_n = \max_m q_n^\top k_m,

    (Vaswani et al. 2017, without the :math:`1/\sqrt d`: rfkit absorbs the
    temperature into ``Q`` and ``K``, see the docs page *Attention estimators*, "Conventions"). The max shift keeps every
    exponent <= 0, so logits of any size (well beyond 50) give finite results in
    float64 and float32.

    Parameters
    ----------
    Q : array_like of shape (..., n, d)
        Queries (rows). Leading axes (batch, heads) broadcast against ``K``, ``V``.
        NumPy, PyTorch (any device), CuPy or ``array_api_strict`` arrays: the result
        has the inputs' namespace, device and dtype.
    K : array_like of shape (..., M, d)
        Keys.
    V : array_like of shape (..., M, dv)
        Values.
    causal : bool, default=False
        Query ``i`` attends to keys ``0..i`` only (needs ``n == M``).
    key_padding_mask : array_like of bool, shape (..., M), optional
        True marks padded keys, which get zero weight (PyTorch convention).
    chunk_size : int, optional
        Number of query rows processed at once; by default chosen so that a
        work array holds at most about 2**21 elements. Memory is
        O(chunk_size x M) per thread beyond the inputs and output; never an n x M
        array unless ``chunk_size >= n``.
    n_threads : int, optional
        Threads of the NumPy backend (default: ``rk.threads(...)``, else
        ``RFKIT_NUM_THREADS``, else every CPU). The result does not depend on it.

    Returns
    -------
    array of shape (..., n, dv)
        Float32 only if all of ``Q``, ``K``, ``V`` are float32. Rows that see no
        key at all (every key padded) are NaN, with a
        :class:`~rfkit.exceptions.DegenerateInputWarning` (the randomized
        estimators refuse such a mask instead).

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> rng = np.random.default_rng(0)
    >>> Q, K, V = rng.normal(size=(3, 2, 5, 4))
    >>> rk.attention.softmax(Q, K, V, causal=True).shape
    (2, 5, 4)
    """
    causal = check_bool(causal, "causal", "softmax")
    chunk = check_chunk_size(chunk_size, "softmax")
    nt = threads_of(check_threads(n_threads, "softmax"), "softmax")
    x = check_qkv(Q, K, V, "softmax", causal=causal, key_padding_mask=key_padding_mask, refuse_hidden=False)
    bk, xp = x.bk, x.xp
    B, n, M, dv = x.n_slices, x.n_queries, x.n_keys, x.value_dim
    qc = chunk if chunk is not None else max(1, min(n, CHUNK_ELEMS // M))
    qc = min(qc, n)
    size = int(np.dtype(bk.dtype_name(x.dtype)).itemsize)
    check_allocation((B, n, dv), size, "the output (batch, n, dv)", "softmax")
    check_allocation(
        (nt, 2, qc, M), size, "per thread two (chunk_size, M) score blocks", "softmax", "Lower chunk_size."
    )
    out = bk.empty((B, n, dv), x.dtype)
    bb = max(1, CHUNK_ELEMS // (qc * M)) if chunk is None else 1
    tasks = [
        (slice(b0, min(B, b0 + bb)), slice(q0, min(n, q0 + qc)))
        for b0 in range(0, B, bb)
        for q0 in range(0, n, qc)
    ]
    cols = bk.arange(M)
    neg = bk.scalar(-math.inf, x.dtype)

    def one(task: tuple[slice, slice]) -> int:
        bs, qs = task
        L = x.Q[bs, qs, :] @ xp.matrix_transpose(x.K[bs, ...])  # (bb, c, M)
        drop = None
        if causal:
            drop = cols[None, :] > bk.arange(n)[qs][:, None]  # (c, M)
        if x.mask is not None:
            pm = x.mask[bs, None, :]
            drop = pm if drop is None else (drop | pm)
        if drop is not None:
            L = xp.where(drop, neg, L)
        c = xp.max(L, axis=-1, keepdims=True)
        dead = ~xp.isfinite(c)
        empty = bk.count(dead) if drop is not None else 0
        if empty:
            c = xp.where(dead, xp.zeros_like(c), c)
        P = bk.exp_(L - c)
        den = xp.sum(P, axis=-1, keepdims=True)
        num = P @ x.V[bs, ...]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[bs, qs, :] = num / den
        return empty

    with threads(nt):
        empty_rows = sum(run(bk, one, tasks, nt))
    if empty_rows:
        warnings.warn(
            f"softmax: {empty_rows} query row(s) see no key (all keys padded); their output is NaN.",
            DegenerateInputWarning,
            stacklevel=caller_stacklevel(),
        )
    return x.unflatten(out)
