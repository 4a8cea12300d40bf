"""Statistics of queries and keys that decide how hard random-feature attention is.

:func:`describe` summarises each head (or any stack of ``(n, d)`` query/key arrays): norms,
‖q + k‖², per-dimension variance (anisotropy), logits, and the entropy of the attention
rows, over the pairs a query attends to (all valid keys, or with ``causal`` the keys at or
before it). ``DESCRIBE_COLUMNS`` maps each column to its meaning.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._validation import check_points
from ..exceptions import InvalidParameterError, ShapeError
from ._qk import TransformerQK

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DESCRIBE_COLUMNS", "describe"]

#: Column name -> meaning of each statistic returned by :func:`describe`.
DESCRIBE_COLUMNS = {
    "n_tokens": "valid tokens (queries = keys)",
    "q_norm_mean": "mean ‖q_i‖",
    "q_norm_max": "max ‖q_i‖",
    "k_norm_mean": "mean ‖k_j‖",
    "k_norm_max": "max ‖k_j‖",
    "q_mean_norm": "‖mean of q‖ (offset of the query cloud)",
    "k_mean_norm": "‖mean of k‖",
    "qk_sum_sq_mean": "mean over pairs of ‖q_i + k_j‖² (all pairs: E‖q‖² + E‖k‖² + 2 q̄·k̄)",
    "qk_sum_sq_max": "max over pairs of ‖q_i + k_j‖²",
    "q_var_mean": "per-dimension variance of q, mean over the d dimensions",
    "q_var_max": "per-dimension variance of q, max over dimensions",
    "k_var_mean": "per-dimension variance of k, mean over dimensions",
    "k_var_max": "per-dimension variance of k, max over dimensions",
    "logit_max": "max_ij q_i·k_j",
    "logit_mean": "mean over pairs of q_i·k_j",
    "logit_std": "standard deviation of q_i·k_j over pairs",
    "logit_spread_mean": "mean over queries of max_j − min_j of q_i·k_j",
    "entropy_mean": "mean over queries of the attention entropy (nats)",
    "entropy_min": "min over queries of the attention entropy",
    "entropy_ratio": "entropy_mean / log(n_tokens): 1 = uniform attention, 0 = one-hot (causal: mean over "
    "queries that see >= 2 keys of H_i / log(keys visible to i))",
    "attention_max_mean": "mean over queries of max_j softmax probability",
}


def describe(
    q: Any,
    k: Any = None,
    *,
    mask: Any = None,
    axis_names: Sequence[str] | None = None,
    causal: bool | None = None,
) -> pd.DataFrame:
    """Compute the statistics that decide how hard random-feature estimation of ``softmax(q kᵀ)`` is.

    One row per leading index of ``q`` and ``k`` (per text, layer and head for
    :func:`minilm_qk` and :func:`smollm2_qk` output). A "pair" is a query and a key it
    attends to: every valid pair, or with ``causal`` only keys at or before the query.
    Norms and ‖q+k‖² drive the variance of positive and trigonometric features (which
    grows like exp(‖q+k‖²) and exp(‖q‖²+‖k‖²)); per-dimension variance shows anisotropy
    (what data-adaptive features exploit); the max logit and the attention entropy
    measure how peaked the target is. See ``docs/data.md``.

    Parameters
    ----------
    q, k : array of shape (..., n, d)
        Queries and keys (same leading shape, same n). ``q`` may instead be a
        :class:`MiniLMQK` or :class:`SmolLM2QK` result (then ``k``, ``mask`` and ``causal``
        come from it and the index columns are the text number and the model's layer and head).
    mask : bool array broadcastable to (..., n), optional
        Valid tokens; invalid ones are excluded as queries and as keys.
    axis_names : sequence of str, optional
        Names of the leading axes (default ``axis0, axis1, ...``).
    causal : bool, optional
        Query ``i`` attends to keys ``j <= i`` only (a decoder). Default: the result's own
        ``causal`` for a model result, else False.

    Returns
    -------
    pandas.DataFrame
        Index columns, then the statistics named in ``rfkit.data.DESCRIBE_COLUMNS``
        (column -> meaning).
    """
    import pandas as pd

    labels: list[np.ndarray] | None = None
    if isinstance(q, TransformerQK):
        res = q
        if k is not None or mask is not None:
            raise InvalidParameterError("describe(result) takes k and mask from the result; pass neither.")
        if causal is None:
            causal = res.causal
        q, k = res.q, res.k
        mask = res.mask[:, None, None, :]
        axis_names = ("text", "layer", "head")
        labels = [np.arange(q.shape[0]), np.asarray(res.layers), np.asarray(res.heads)]
    if k is None:
        raise InvalidParameterError("describe(q, k) needs `k` (or a MiniLMQK / SmolLM2QK result as `q`).")
    q = check_points(q, "q")
    k = check_points(k, "k")
    if q.shape != k.shape:
        raise ShapeError(
            f"`q` and `k` must have the same shape (..., n, d) (self-attention); got q.shape={q.shape}, "
            f"k.shape={k.shape}."
        )
    lead, (n, d) = q.shape[:-2], q.shape[-2:]
    if mask is None:
        w = np.ones(lead + (n,), dtype=bool)
    else:
        m = np.asarray(mask)
        if m.dtype != bool:
            raise InvalidParameterError(f"`mask` must be a boolean array; got dtype {m.dtype}.")
        try:
            w = np.broadcast_to(m, lead + (n,))
        except ValueError:
            raise ShapeError(f"`mask` of shape {m.shape} does not broadcast to {lead + (n,)}.") from None
    if axis_names is None:
        axis_names = tuple(f"axis{i}" for i in range(len(lead)))
    elif len(axis_names) != len(lead):
        raise ShapeError(f"`axis_names` has {len(axis_names)} names for {len(lead)} leading axes.")
    R = math.prod(lead)
    qf = q.reshape(R, n, d).astype(np.float64, copy=False)
    kf = k.reshape(R, n, d).astype(np.float64, copy=False)
    wf = np.ascontiguousarray(w.reshape(R, n))
    cnt = wf.sum(axis=1)
    if np.any(cnt == 0):
        raise InvalidParameterError(f"`mask` leaves no valid token at leading index {int(np.argmin(cnt))}.")
    stats: dict[str, np.ndarray] = {c: np.empty(R) for c in DESCRIBE_COLUMNS}
    causal = bool(causal)
    tril = np.tril(np.ones((n, n), dtype=bool))[None]
    step = max(1, 2**22 // (n * n))
    for r0 in range(0, R, step):
        r = slice(r0, min(R, r0 + step))
        Q, K, W, c = qf[r], kf[r], wf[r], cnt[r].astype(np.float64)
        Wf = W.astype(np.float64)
        nq2, nk2 = np.einsum("rnd,rnd->rn", Q, Q), np.einsum("rnd,rnd->rn", K, K)
        nq, nk = np.sqrt(nq2), np.sqrt(nk2)
        mq = np.einsum("rn,rnd->rd", Wf, Q) / c[:, None]
        mk = np.einsum("rn,rnd->rd", Wf, K) / c[:, None]
        stats["n_tokens"][r] = c
        stats["q_norm_mean"][r] = (nq * Wf).sum(1) / c
        stats["k_norm_mean"][r] = (nk * Wf).sum(1) / c
        stats["q_norm_max"][r] = np.where(W, nq, -np.inf).max(1)
        stats["k_norm_max"][r] = np.where(W, nk, -np.inf).max(1)
        stats["q_mean_norm"][r] = np.linalg.norm(mq, axis=1)
        stats["k_mean_norm"][r] = np.linalg.norm(mk, axis=1)
        eq2, ek2 = (nq2 * Wf).sum(1) / c, (nk2 * Wf).sum(1) / c
        if not causal:
            stats["qk_sum_sq_mean"][r] = eq2 + ek2 + 2 * np.einsum("rd,rd->r", mq, mk)
        vq = np.einsum("rn,rnd->rd", Wf, (Q - mq[:, None]) ** 2) / c[:, None]
        vk = np.einsum("rn,rnd->rd", Wf, (K - mk[:, None]) ** 2) / c[:, None]
        stats["q_var_mean"][r], stats["q_var_max"][r] = vq.mean(1), vq.max(1)
        stats["k_var_mean"][r], stats["k_var_max"][r] = vk.mean(1), vk.max(1)
        logits = Q @ K.swapaxes(1, 2)  # (r, n, n)
        pair = W[:, :, None] & W[:, None, :]
        if causal:
            pair = pair & tril
        n_keys = pair.sum(axis=2)  # keys each query attends to
        npairs = n_keys.sum(axis=1).astype(np.float64)
        lm = np.where(pair, logits, -np.inf)
        stats["logit_max"][r] = lm.max(axis=(1, 2))
        mean_l = np.where(pair, logits, 0.0).sum(axis=(1, 2)) / npairs
        stats["logit_mean"][r] = mean_l
        dev = np.where(pair, logits - mean_l[:, None, None], 0.0)
        stats["logit_std"][r] = np.sqrt((dev * dev).sum(axis=(1, 2)) / npairs)
        s2 = nq2[:, :, None] + nk2[:, None, :] + 2 * logits
        stats["qk_sum_sq_max"][r] = np.where(pair, s2, -np.inf).max(axis=(1, 2))
        if causal:
            stats["qk_sum_sq_mean"][r] = np.where(pair, s2, 0.0).sum(axis=(1, 2)) / npairs
        row_max = lm.max(axis=2, keepdims=True)
        row_min = np.where(pair, logits, np.inf).min(axis=2)
        row_max = np.where(W[:, :, None], row_max, 0.0)
        stats["logit_spread_mean"][r] = (np.where(W, row_max[..., 0] - row_min, 0.0)).sum(1) / c
        z = np.exp(lm - row_max)  # masked keys -> 0; masked query rows -> all 0 (excluded below)
        s = z.sum(axis=2)
        s = np.where(W, s, 1.0)
        p = z / s[:, :, None]
        # H = log Σ e^l − Σ p l  (computed with shifted logits for stability)
        plogit = np.where(pair, p * (logits - row_max), 0.0).sum(axis=2)
        ent = np.log(s) - plogit
        stats["entropy_mean"][r] = np.where(W, ent, 0.0).sum(1) / c
        stats["entropy_min"][r] = np.where(W, ent, np.inf).min(1)
        stats["attention_max_mean"][r] = np.where(W, p.max(axis=2), 0.0).sum(1) / c
        if causal:
            many = W & (n_keys >= 2)
            with np.errstate(divide="ignore", invalid="ignore"):
                per_query = np.where(many, ent / np.log(np.maximum(n_keys, 2)), 0.0)
            stats["entropy_ratio"][r] = np.where(
                many.any(1), per_query.sum(1) / np.maximum(many.sum(1), 1), 0.0
            )
    if not causal:
        with np.errstate(divide="ignore", invalid="ignore"):
            stats["entropy_ratio"] = np.where(
                stats["n_tokens"] > 1, stats["entropy_mean"] / np.log(stats["n_tokens"]), 0.0
            )
    stats["n_tokens"] = stats["n_tokens"].astype(np.int64)
    columns: dict[str, Any] = {}
    if lead:
        grid = np.indices(lead).reshape(len(lead), R)
        for ax, name in enumerate(axis_names):
            idx = grid[ax]
            columns[name] = labels[ax][idx] if labels is not None else idx
    columns.update(stats)
    return pd.DataFrame(columns)
