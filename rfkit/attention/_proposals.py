r"""Proposals of the importance-sampling estimators (SNIS, LARA): Gaussian mixtures and their weights.

The samples :math:`\omega_s = \mu_{c_s} + \varepsilon_s` come from components
:math:`\mathcal N(\mu_c, I)` (:math:`\mu = 0`: the standard proposal; chunk means of the
queries and keys: LARA's proposals, Zheng, Wang & Kong (ICML 2022)); the weights use the
deterministic-mixture (balance-heuristic) correction
:math:`\mathcal N(\omega;0,I)/\sum_c n_c\,\mathcal N(\omega;\mu_c,I)` in log space. The
estimator they feed is in :mod:`rfkit.attention._importance`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._backend import Backend
from .._random import TrialStreams
from .._validation import check_points
from ..exceptions import ShapeError
from ._common import QKV, check_draw_library, device_gaussian_noise, gaussian_noise

__all__ = [
    "chunk_edges",
    "chunk_means",
    "check_means",
    "gauss_logits",
    "mixture_log_corr",
    "mixture_samples",
    "mixture_offsets",
    "causal_offsets",
    "noise",
]


# ----------------------------------------------------------------------------- proposals
def chunk_edges(n: int, C: int) -> list[int]:
    """Boundaries of ``C`` contiguous chunks of ``n`` rows (``np.array_split`` sizes)."""
    return [(c * n) // C for c in range(C + 1)]


def chunk_means(bk: Backend, X: Any, C: int, keep: Any = None, *, ranked: bool = True) -> Any:
    """Means of ``C`` contiguous chunks of the rows of ``X`` (B, n, d) -> (B, C, d).

    ``keep`` (B, n) bool: only those rows count. ``ranked=True`` cuts the kept rows of
    each slice into ``C`` chunks (the same as dropping the other rows first);
    ``ranked=False`` keeps the positional chunks of all ``n`` rows and averages the
    kept rows of each (0 for a chunk without any, used by the causal proposals).
    """
    xp = bk.xp
    n = int(X.shape[-2])
    if keep is None:
        e = chunk_edges(n, C)
        return xp.stack([xp.mean(X[:, e[c] : e[c + 1], :], axis=-2) for c in range(C)], axis=-2)
    if ranked:
        B = int(X.shape[0])
        return xp.stack([chunk_means(bk, X[b, ...][keep[b, ...]][None, ...], C)[0, ...] for b in range(B)])
    e = chunk_edges(n, C)
    kf = xp.astype(keep, X.dtype)
    parts = []
    for c in range(C):
        cnt = xp.sum(kf[:, e[c] : e[c + 1]], axis=-1)[:, None]
        s = xp.sum(X[:, e[c] : e[c + 1], :] * kf[:, e[c] : e[c + 1], None], axis=-2)
        parts.append(xp.where(cnt > 0, s / xp.where(cnt > 0, cnt, xp.ones_like(cnt)), xp.zeros_like(s)))
    return xp.stack(parts, axis=-2)


def check_means(means: Any, x: QKV, owner: str, name: str) -> Any:
    """User-supplied proposal means (C, d) or (..., C, d) -> (B, C, d) on the call's backend."""
    arr = check_points(means, name, backend=x.bk)
    shape = tuple(arr.shape)
    if shape[-1] != x.dim:
        raise ShapeError(
            f"`{name}` of {owner} must have shape (C, d) or (..., C, d) with d={x.dim} (the query "
            f"dimension); got shape {shape}."
        )
    try:
        full = tuple(np.broadcast_shapes(shape[:-2], x.batch_shape))
    except ValueError:
        full = None
    if full != x.batch_shape:
        raise ShapeError(
            f"`{name}` of {owner} has batch shape {shape[:-2]}, which does not broadcast to the "
            f"batch shape {x.batch_shape} of Q, K, V."
        )
    xp = x.xp
    arr = xp.astype(arr, x.dtype, copy=False)
    arr = xp.broadcast_to(arr, x.batch_shape + shape[-2:])
    return xp.reshape(arr, (x.n_slices,) + shape[-2:])


def gauss_logits(bk: Backend, omega: Any, means: Any) -> Any:
    r""":math:`\log\mathcal N(\omega_s;\mu_c,I) - \log\mathcal N(\omega_s;0,I) = \omega_s^\top\mu_c - \tfrac12\|\mu_c\|^2`.

    ``omega`` (B, S, d), ``means`` (B, C, d) -> (B, S, C). Exact (no cancellation of
    :math:`\|\omega\|^2` terms) and formed by one matrix product.
    """
    xp = bk.xp
    return omega @ xp.matrix_transpose(means) - 0.5 * bk.sqnorm(means)[..., None, :]


def mixture_log_corr(bk: Backend, lq: Any, log_counts: Any) -> Any:
    r""":math:`-\log\sum_c n_c\,\mathcal N(\omega_s;\mu_c,I)/\mathcal N(\omega_s;0,I)`: ``lq`` (B, S, C) -> (B, S).

    With ``n_c`` the number of samples from component ``c`` this is the weight
    :math:`\mathcal N(\omega;0,I)/(S\,q(\omega))` of the deterministic mixture (or the
    balance heuristic with ``n_c`` samples per proposal).
    """
    return -bk.logsumexp(lq + log_counts, axis=-1)


def mixture_samples(bk: Backend, means: Any, E: Any, comp: np.ndarray) -> tuple[Any, Any]:
    r"""Samples of a Gaussian mixture and their log proposal ratios.

    Sample ``s`` is :math:`\omega_s = \mu_{comp_s} + E_s` (``means`` (B, C, d), noise ``E``
    (1 or B, S, d)); returns ``omega`` (B, S, d) and ``lq`` (B, S, C) =
    :math:`\log\mathcal N(\omega_s;\mu_c,I) - \log\mathcal N(\omega_s;0,I)` (:func:`gauss_logits`).
    """
    omega = bk.xp.take(means, bk.asarray(comp), axis=-2) + E
    return omega, gauss_logits(bk, omega, means)


def mixture_offsets(
    bk: Backend, lq: Any, log_counts: Any, comp: np.ndarray, *, causal_chunks: bool
) -> tuple[Any, Any]:
    """``(log_corr (B, S) or None, qoff (B, chunks, S))`` of the balance-heuristic mixture weights.

    ``causal_chunks``: the causal chunk-mean proposals, where the queries of chunk ``c`` use
    the components built from earlier chunks only (:func:`causal_offsets`; no ``log_corr``).
    Otherwise every query uses every sample: ``log_corr`` from :func:`mixture_log_corr`
    and one chunk of offsets.
    """
    if causal_chunks:
        return None, causal_offsets(bk, lq, log_counts, comp, int(lq.shape[-1]))
    log_corr = mixture_log_corr(bk, lq, log_counts)
    return log_corr, log_corr[:, None, :]


def noise(gen: Any, x: QKV, n_samples: int, projection: str, shared: bool, owner: str = "SNIS") -> Any:
    """Standard-normal rows on the backend: (1, S, d) shared by all slices, or (B, S, d), one per head.

    ``gen`` may be :class:`~rfkit._random.TrialStreams` (inputs stacked on a leading trial axis):
    then every trial draws its rows from its own generator, as an unstacked call would, and the
    result is (B, S, d), each slice holding its trial's rows.
    """
    bk, xp = x.bk, x.xp
    if isinstance(gen, TrialStreams):
        check_draw_library(gen, bk, owner)
        B0 = gen.slices_per_trial(x.n_slices, owner)
        k = 1 if shared else (x.batch_shape[-1] if len(x.batch_shape) > 1 else 1)
        if gen.on_device:  # draws = "backend": each trial's rows drawn on the device by its generator
            rows = [
                device_gaussian_noise(g, n_samples, x.dim, projection)
                for g in gen.generators
                for _ in range(k)
            ]
            E = xp.stack([bk.asarray(r, x.dtype) for r in rows])
        else:
            E = bk.asarray(
                np.stack(
                    [
                        gaussian_noise(g, n_samples, x.dim, projection)
                        for g in gen.generators
                        for _ in range(k)
                    ]
                ),
                x.dtype,
            )
        i = np.arange(x.n_slices)
        return xp.take(E, bk.asarray((i // B0) * k + (i % B0) % k), axis=0)
    k = 1 if shared else x.n_heads
    E = np.stack([gaussian_noise(gen, n_samples, x.dim, projection) for _ in range(k)])
    Ed = bk.asarray(E, x.dtype)
    if k == 1:
        return Ed
    return xp.take(Ed, bk.asarray(np.arange(x.n_slices) % k), axis=0)


def causal_offsets(bk: Backend, lq: Any, log_counts: Any, comp: np.ndarray, n_chunks: int) -> Any:
    r"""Query offsets of causal chunk-mean proposals, (B, chunks, S).

    Component ``p`` (``p = 0``: :math:`\mathcal N(0, I)`; ``p >= 1``: built from chunk
    ``p - 1``) may be used by the queries of chunks ``c >= p``. For chunk ``c`` and a usable
    sample ``s`` the offset is the balance-heuristic weight over the usable components,
    :math:`-\log\sum_{p\le c} n_p\,\mathcal N(\omega_s;\mu_p,I)/\mathcal N(\omega_s;0,I)`;
    ``-inf`` for the others. ``lq`` (B, S, C) from :func:`gauss_logits`, ``comp`` the
    component of every sample.
    """
    xp = bk.xp
    terms = lq + log_counts  # (B, S, C)
    run_ = terms[..., 0]
    rows = []
    neg = bk.scalar(-math.inf, lq.dtype)
    for c in range(n_chunks):
        if c > 0:
            run_ = xp.logaddexp(run_, terms[..., c])
        usable = bk.asarray(comp <= c)
        rows.append(xp.where(usable, -run_, neg))
    return xp.stack(rows, axis=-2)
