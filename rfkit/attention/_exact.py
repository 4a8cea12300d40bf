"""Exact softmax attention, max-shifted and processed in query chunks."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .._validation import check_broadcast
from ..exceptions import DegenerateInputWarning, InvalidParameterError, ShapeError
from ._common import CHUNK_ELEMS, check_bool, check_chunk_size, check_qkv

__all__ = ["softmax"]


def _check_mask(mask: Any, batch: tuple[int, ...], M: int) -> np.ndarray | None:
    if mask is None:
        return None
    arr = np.asarray(mask)
    if arr.dtype != np.bool_:
        raise InvalidParameterError(
            f"`key_padding_mask` must be a boolean array of shape (..., M) with True marking padded "
            f"keys to ignore; got dtype {arr.dtype}."
        )
    if arr.ndim < 1 or arr.shape[-1] != M:
        raise ShapeError(f"`key_padding_mask` must have shape (..., M) with M={M}; got shape {arr.shape}.")
    full = check_broadcast({"Q/K/V": batch, "key_padding_mask": arr.shape[:-1]})
    if full != batch:
        raise ShapeError(
            f"`key_padding_mask` batch shape {arr.shape[:-1]} must broadcast to the batch shape {batch} "
            "of Q, K, V."
        )
    B = int(np.prod(batch, dtype=np.int64)) if batch else 1
    return np.broadcast_to(arr, batch + (M,)).reshape(B, M)


def softmax(
    Q: Any,
    K: Any,
    V: Any,
    causal: bool = False,
    key_padding_mask: Any = None,
    chunk_size: int | None = None,
) -> np.ndarray:
    r"""Exact softmax attention :math:`\mathrm{softmax}(QK^\top)V`, computed stably in query chunks.

    .. math::

        \mathrm{Attn}(q_n) = \sum_m \pi_{nm} v_m,\qquad
        \pi_{nm} = \frac{e^{q_n^\top k_m - c_n}}{\sum_{m'} e^{q_n^\top k_{m'} - c_n}},\qquad
        c_n = \max_m q_n^\top k_m,

    (Vaswani et al. 2017, without the :math:`1/\sqrt d`: rfkit absorbs the
    temperature into ``Q`` and ``K``, see DESIGN.md). The max shift keeps every
    exponent <= 0, so logits of any size (well beyond 50) give finite results in
    float64 and float32.

    Parameters
    ----------
    Q : array_like of shape (..., n, d)
        Queries (rows). Leading axes (batch, heads) broadcast against ``K``, ``V``.
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
        O(chunk_size x M) beyond the inputs and output; never an n x M array
        unless ``chunk_size >= n``.

    Returns
    -------
    ndarray of shape (..., n, dv)
        Float32 only if all of ``Q``, ``K``, ``V`` are float32. Rows that see no
        key at all (every key padded) are NaN, with a
        :class:`~rfkit.exceptions.DegenerateInputWarning`.

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
    x = check_qkv(Q, K, V, "softmax", causal=causal)
    mask = _check_mask(key_padding_mask, x.batch_shape, x.m)
    B, n, M, dv = x.n_slices, x.n, x.m, x.dv
    out = np.empty((B, n, dv), dtype=x.dtype)
    qc = chunk if chunk is not None else max(1, min(n, CHUNK_ELEMS // M))
    qc = min(qc, n)
    bb = max(1, CHUNK_ELEMS // (qc * M)) if chunk is None else 1
    empty_rows = 0
    cols = np.arange(M)
    for b0 in range(0, B, bb):
        bs = slice(b0, min(B, b0 + bb))
        Kb, Vb = x.K[bs], x.V[bs]
        for q0 in range(0, n, qc):
            qs = slice(q0, min(n, q0 + qc))
            L = np.matmul(x.Q[bs, qs], np.swapaxes(Kb, -1, -2))  # (bb, c, M)
            drop = None
            if causal:
                drop = cols[None, :] > np.arange(qs.start, qs.stop)[:, None]  # (c, M)
                drop = np.broadcast_to(drop, L.shape)
            if mask is not None:
                pm = np.broadcast_to(mask[bs, None, :], L.shape)
                drop = pm if drop is None else (drop | pm)
            if drop is not None:
                L = np.where(drop, -np.inf, L)
            c = np.max(L, axis=-1, keepdims=True)
            dead = ~np.isfinite(c)
            if np.any(dead):
                empty_rows += int(np.count_nonzero(dead))
                c = np.where(dead, 0.0, c)
            P = np.exp(L - c)
            den = np.sum(P, axis=-1, keepdims=True)
            num = np.matmul(P, Vb)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[bs, qs] = num / den
    if empty_rows:
        warnings.warn(
            f"softmax: {empty_rows} query row(s) see no key (all keys padded); their output is NaN.",
            DegenerateInputWarning,
            stacklevel=2,
        )
    return x.unflatten(out)
