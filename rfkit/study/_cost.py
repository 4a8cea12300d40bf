r"""Cost per query of an attention estimator: keys computed exactly plus random features.

The cost column of attention studies (docs page *Studies*, section "Cost per query"). For query
:math:`n` an estimator computes some keys exactly and summarises the rest with a number of
random features or samples; its cost per query is

.. math::

    c = \overline{|S(n)|} + m,

the number of keys computed exactly, averaged over the queries, plus the feature count. The
estimator's record says what that is (its ``cost`` hook, :class:`~rfkit.study.CellSizes`); rfkit's
own records (:mod:`rfkit.study._builtin_attention_hooks`) say:

* :class:`~rfkit.attention.RFA`: :math:`m` = its map's ``feature_dim(d)`` (columns), no exact keys;
* :class:`~rfkit.attention.Hybrid`: :math:`|S(n)|` = the keys of its support that query
  :math:`n` may see (window, sinks, LSH bucket; causal: :math:`j \le n`), averaged over the
  queries (and, with LSH buckets, over :data:`LSH_ROTATIONS` rotations), plus its map's
  ``feature_dim(d)``;
* :class:`~rfkit.attention.SNIS`: its ``n_samples``; :class:`~rfkit.attention.LARA`: its
  proposals times ``samples_per_proposal`` (Zheng, Wang & Kong (ICML 2022));
* :class:`~rfkit.attention.RA` and exact attention: every key the query may see (:math:`M`,
  causal: :math:`(n+1)/2` on average), since RA computes the exact softmax weights it samples from;
* an estimator of your own: its record's ``cost`` hook; without one, NaN (not known), unless the
  estimator has a ``cost_per_query(n_queries, n_keys, dim, causal)`` method, whose value is taken.

It counts work per query in units of one key (a dot product and an exponential), not seconds:
the wall time is in the ``timings`` table. The cost is computed once per cell, from the
estimator objects and the shapes of the cell's data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._random import check_rng
from ..exceptions import InvalidParameterError
from ._attention_hooks import CellSizes
from ._records import record_of

__all__ = ["attention_cost", "attention_costs", "support_size", "LSH_ROTATIONS"]

#: LSH rotations the support size of a Hybrid with ``lsh_buckets`` is averaged over
LSH_ROTATIONS = 8


def _shape(X: Any, name: str) -> tuple[int, int, int]:
    """``(slices, rows, dim)`` of a (..., rows, dim) array."""
    shape = tuple(int(s) for s in np.shape(X))
    if len(shape) < 2 or min(shape[-2:]) < 1:
        raise InvalidParameterError(
            f"`{name}` must have shape (..., rows, dim) with rows, dim >= 1. Got {shape}."
        )
    return math.prod(shape[:-2]), shape[-2], shape[-1]


def support_size(
    n_queries: int,
    n_keys: int,
    *,
    window: int | None = None,
    n_global: int = 0,
    causal: bool = False,
    codes: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    r"""Number of keys in the support of each query: window, sinks and LSH bucket, without repeats.

    The support of :class:`~rfkit.attention.Hybrid` (docs page *Sparse + random features*):
    keys :math:`j` with :math:`|n - j| \le w` (causal: :math:`n - w \le j \le n`), the first
    ``n_global`` keys, and, given bucket ``codes`` ``(hq (S, n), hk (S, M))``, the keys in the
    query's bucket; causal: only :math:`j \le n`. Returns (n,) counts, or (S, n) with ``codes``.

    >>> support_size(6, 6, window=1, n_global=2, causal=True).tolist()
    [1, 2, 3, 4, 4, 4]
    """
    i = np.arange(n_queries)[:, None]
    j = np.arange(n_keys)[None, :]
    inside = np.zeros((n_queries, n_keys), dtype=bool)
    if window is not None:
        inside |= (j >= i - window) & (j <= (i if causal else i + window))
    if n_global:
        inside |= j < n_global
    if codes is not None:
        hq, hk = (np.asarray(c) for c in codes)
        inside = inside[None] | (hq[:, :, None] == hk[:, None, :])
    if causal:
        inside &= j <= i
    return inside.sum(axis=-1)


def mean_visible(n: int, M: int, causal: bool) -> float:
    """Mean number of keys a query may see: M, causal (queries 0..n-1 see min(i + 1, M))."""
    if not causal:
        return float(M)
    return float(np.minimum(np.arange(1, n + 1), M).mean())


def attention_cost(
    estimator: Any, Q: Any, K: Any, *, causal: bool = False, rng: Any = None, record: Any = None
) -> float:
    """Cost per query of ``estimator`` on queries ``Q`` (..., n, d) and keys ``K`` (..., M, d).

    Exact keys computed per query (averaged over the queries) plus the feature count: the ``cost``
    hook of the estimator's record (``record``, default: the registered record of its class,
    :func:`~rfkit.study._records.record_of`); without one, the estimator's own
    ``cost_per_query(n_queries, n_keys, dim, causal)`` method, else NaN (not known). ``causal`` is
    the cell's (an estimator's own ``causal`` wins where it has one); ``rng`` is handed to the
    hook for a cost that draws (the LSH rotations of a Hybrid with ``lsh_buckets``).
    """
    S, n, d = _shape(Q, "Q")
    _, M, _ = _shape(K, "K")
    causal = bool(getattr(estimator, "causal", causal))
    if record is None:
        record = record_of(estimator)
    hook = None if record is None else record.cost
    if hook is not None:
        return float(hook(estimator, CellSizes(n, M, d, S, causal, Q, K, check_rng(rng))))
    own = getattr(estimator, "cost_per_query", None)
    if callable(own):
        return float(own(n, M, d, causal))
    return math.nan


def _codes(X: np.ndarray, R: np.ndarray) -> np.ndarray:
    """Angular-LSH bucket of each row (Reformer hashing, as :class:`~rfkit.attention.Hybrid`)."""
    norms = np.linalg.norm(X, axis=-1, keepdims=True)
    P = (X / np.where(norms > 0, norms, 1.0)) @ R
    return np.argmax(np.concatenate([P, -P], axis=-1), axis=-1)


def attention_costs(
    estimators: Sequence[Any],
    Q: Any,
    K: Any,
    *,
    causal: bool = False,
    rng: Any = None,
    records: Sequence[Any] | None = None,
) -> np.ndarray:
    """:func:`attention_cost` of each estimator of a cell (float array, NaN where not known).

    ``records``: the estimators' records (default: each one's registered record); one generator
    from ``rng`` serves them in turn.
    """
    gen = check_rng(rng)
    recs = [None] * len(estimators) if records is None else list(records)
    return np.array(
        [attention_cost(e, Q, K, causal=causal, rng=gen, record=r) for e, r in zip(estimators, recs)],
        dtype=float,
    )
