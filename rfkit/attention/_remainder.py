r"""Sampled remainders of :class:`~rfkit.attention.Hybrid`: exact logits of a few remainder keys.

For query :math:`n` with the keys it may see :math:`J(n)`, the exact support :math:`S(n)` and
the remainder :math:`R(n) = J(n)\setminus S(n)`, :math:`N_R = |R(n)|`, weights
:math:`w_j = e^{q_n^\top k_j - c}` (one shift :math:`c` per row: the maximum of the logits it
computes) and a budget of :math:`s` = ``n_samples`` exact logits per query, the remainder totals
:math:`Z_R = \sum_R w_j` and :math:`T = \sum_R w_j v_j` are estimated by

* ``"uniform"``: :math:`s` keys uniformly without replacement; :math:`\hat Z_R = (N_R/s)\sum w_j`
  (Horvitz-Thompson);
* ``"stratified"``: :math:`R(n)` in key order cut into :math:`H = \min(s, N_R)` contiguous strata
  of sizes as equal as possible (the first :math:`N_R \bmod H` one key larger), one key drawn
  uniformly in each; :math:`\hat Z_R = \sum_h N_h w_{j_h}`;
* ``"importance"``: :math:`s` keys with replacement from
  :math:`p = (1-\lambda)\,\mathrm{softmax}_R(\ell) + \lambda/N_R` with :math:`\ell` the scorer's
  proxy logits and :math:`\lambda` = ``proposal_mix``;
  :math:`\hat Z_R = \frac1s\sum_i w_{j_i}/p_{j_i}`;

and :math:`\hat T` likewise with :math:`w_j v_j`. All three are unbiased; where :math:`s \ge N_R`
the remainder is computed exactly. ``"none"`` sets both to 0. The output is
:math:`(E_S + \hat T)/(Z_S + \hat Z_R)`.

Work runs in fixed row blocks. The uniforms are drawn (NumPy, float64, moved to the inputs'
device) in draw blocks of at most ``_DRAW_ELEMS`` work elements whose layout depends only on the
sizes, never on the device, so the same seed gives the same numbers on every backend and device;
a work block computes several draw blocks together (more on an accelerator, where the work block
is larger). Memory is O(block x M) per block: linear in n for a fixed block.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._backend_ops import array_device, dense_members
from .._validation import check_int, check_option
from ..exceptions import InvalidParameterError
from ._common import QKV
from ._scorers import SCORERS, Scorer, rank_to_position, visible_rows

__all__ = ["REMAINDERS", "SAMPLED", "sampled_attention", "check_content_options"]

#: The remainders of :class:`~rfkit.attention.Hybrid`.
REMAINDERS = ("features", "none", "uniform", "stratified", "importance")
#: The remainders that draw keys.
SAMPLED = ("uniform", "stratified", "importance")
# Elements of the work arrays of the row blocks computed together (several blocks of draws).
_GROUP_ELEMS = 1 << 21
# Elements of the row blocks the uniforms are drawn in: Hybrid's work block on the CPU.
_DRAW_ELEMS = 1 << 18


def _gather(x: QKV, pos: Any, lead: tuple[int, ...]) -> tuple[Any, Any]:
    """Keys and values at positions ``pos`` (lead + (B, r, s)) of each slice: (..., s, d), (..., s, dv)."""
    xp, B, M = x.xp, x.n_slices, x.n_keys
    base = xp.reshape(xp.arange(B, dtype=xp.int64, device=x.bk.device) * M, (B, 1, 1))
    flat = xp.reshape(base + pos, (-1,))
    shape = tuple(pos.shape)
    Kg = xp.reshape(xp.take(xp.reshape(x.K, (B * M, x.dim)), flat, axis=0), shape + (x.dim,))
    Vg = xp.reshape(xp.take(xp.reshape(x.V, (B * M, x.value_dim)), flat, axis=0), shape + (x.value_dim,))
    del lead
    return Kg, Vg


def _draw_positions(
    est: Any, x: QKV, rows: slice, inR: Any, n_r: Any, scorer: Scorer | None, u: Any, subs: list[slice]
) -> tuple[Any, Any, Any]:
    """Sampled positions (T, B, r, s'), their validity and Horvitz-Thompson / importance factors.

    ``subs`` are the draw blocks within ``rows`` (relative slices): the importance draw inverts
    each one's CDFs laid end to end, as it would on that block alone (the same numbers).
    """
    xp = x.xp
    M, s = x.n_keys, int(est.n_samples)
    counts = xp.cumulative_sum(xp.astype(inR, xp.int64), axis=-1)  # (B, r, M)
    n_r4 = n_r[None, ..., None]  # (1, B, r, 1)
    if est.remainder == "uniform":
        # a uniformly random order of the remainder: its first min(s, N_R) keys, weight N_R / min(s, N_R)
        key = xp.where(inR[None, ...], u, xp.full_like(u, 2.0))
        w = min(s, M)
        pos = xp.argsort(key, axis=-1)[..., :w]
        ok = xp.take_along_axis(key, pos, axis=-1) < 2.0
        k = xp.astype(xp.minimum(n_r4, s), x.dtype)
        factor = xp.astype(n_r4, x.dtype) / xp.where(k > 0, k, xp.ones_like(k))
        return pos, ok, xp.broadcast_to(factor, tuple(pos.shape))
    h = xp.arange(s, dtype=xp.int64, device=x.bk.device)
    H = xp.minimum(n_r4, s)
    if est.remainder == "stratified":
        Hs = xp.maximum(H, xp.ones_like(H))
        base, extra = n_r4 // Hs, n_r4 % Hs
        size = base + xp.astype(h < extra, xp.int64)
        start = h * base + xp.minimum(h, extra)
        off = xp.astype(xp.floor(u * xp.astype(size, u.dtype)), xp.int64)
        rank = start + xp.minimum(off, xp.maximum(size - 1, xp.zeros_like(size)))
        ok = xp.broadcast_to(h < H, tuple(rank.shape))
        rank = xp.where(ok, rank, xp.zeros_like(rank))
        pos = xp.clip(rank_to_position(counts, rank, xp), 0, M - 1)
        return pos, ok, xp.astype(xp.broadcast_to(size, tuple(pos.shape)), x.dtype)
    # importance, with replacement from p = (1 - lam) softmax_R(proxy) + lam / N_R
    assert scorer is not None
    lam = float(est.proposal_mix)
    neg = x.bk.scalar(-math.inf, x.dtype)
    # each draw block's proxy logits on their own (a product's rounding may depend on its row count)
    a = rows.start
    ell = xp.concat([scorer.proxy(slice(a + sb.start, a + sb.stop)) for sb in subs], axis=1)
    ell = xp.where(inR, ell, neg)
    top = xp.max(ell, axis=-1, keepdims=True)
    e = xp.exp(ell - xp.where(xp.isfinite(top), top, xp.zeros_like(top)))
    tot = xp.sum(e, axis=-1, keepdims=True)
    nr = xp.astype(n_r[..., None], x.dtype)
    p = xp.where(
        inR,
        (1.0 - lam) * e / xp.where(tot > 0, tot, xp.ones_like(tot))
        + lam / xp.where(nr > 0, nr, xp.ones_like(nr)),
        xp.zeros_like(e),
    )
    cdf = xp.cumulative_sum(p, axis=-1)
    cdf = cdf / xp.where(cdf[..., -1:] > 0, cdf[..., -1:], xp.ones_like(cdf[..., -1:]))
    B, r = int(inR.shape[0]), int(inR.shape[1])
    found = xp.concat([_invert(xp, cdf[:, sb, :], u[..., sb, :]) for sb in subs], axis=-2)
    last = rank_to_position(counts, xp.maximum(n_r4[0] - 1, xp.zeros_like(n_r4[0])), xp)  # (B, r, 1)
    drawn = xp.minimum(found, last)
    exact = n_r4 <= s
    ranks = xp.broadcast_to(h, tuple(drawn.shape))
    listed = xp.clip(rank_to_position(counts, xp.broadcast_to(h, (B, r, s)), xp), 0, M - 1)
    pos = xp.where(exact, listed[None, ...], drawn)
    ok = xp.where(exact, ranks < n_r4, n_r4 > 0)
    pj = xp.take_along_axis(xp.broadcast_to(p[None, ...], tuple(pos.shape[:-1]) + (M,)), pos, axis=-1)
    factor = xp.where(exact, xp.ones_like(pj), 1.0 / (s * xp.where(pj > 0, pj, xp.ones_like(pj))))
    return pos, ok, factor


def _invert(xp: Any, cdf: Any, u: Any) -> Any:
    """Positions ``#{j : cdf[j] <= u}`` (..., B, r, s) of the uniforms ``u`` in each row's CDF (B, r, M)."""
    B, r, M = (int(v) for v in cdf.shape)
    row = xp.reshape(xp.arange(B * r, dtype=xp.int64, device=array_device(cdf)), (B, r, 1))
    shift = 2.0 * xp.astype(row, cdf.dtype)  # rows laid end to end: row i's CDF in [2i, 2i + 1]
    found = xp.astype(xp.searchsorted(xp.reshape(cdf + shift, (-1,)), u + shift, side="right"), xp.int64)
    return found - row * M


def sampled_attention(
    est: Any,
    x: QKV,
    idx: Any,
    valid: Any,
    scorer: Scorer | None,
    gen: np.random.Generator,
    T: int | None,
    block_elems: int,
) -> tuple[Any, Any, Any, Any]:
    """Support exact, remainder sampled (or dropped): ``(log_scale, num, den, n_sampled)``.

    Shapes ``pre + (B, n)``, ``pre + (B, n, dv)``, ``pre + (B, n)`` with ``pre = (T,)`` or (),
    and ``n_sampled`` (B, n) float: the remainder keys each query computes, :math:`\\min(s, N_R)`.
    """
    xp, bk = x.xp, x.bk
    B, n, M, d, dv = x.n_slices, x.n_queries, x.n_keys, x.dim, x.value_dim
    pre = () if T is None else (T,)
    T1 = 1 if T is None else T
    s = int(est.n_samples) if est.remainder in SAMPLED else 0
    sS = int(idx.shape[-1])
    log_scale = bk.empty((T1, B, n), x.dtype)
    num = bk.empty((T1, B, n, dv), x.dtype)
    den = bk.empty((T1, B, n), x.dtype)
    n_sampled = bk.zeros((B, n), x.dtype)
    per_row = B * (M * (5 + T1 + (scorer.per_row // max(M, 1) if scorer is not None else 0)))
    per_row += B * (sS * (d + dv + 2) + T1 * s * (d + dv + 4))
    # the uniforms are drawn in blocks of `step` rows of at most _DRAW_ELEMS elements whatever the
    # device (their layout fixes the numbers); several such blocks are computed together (fewer,
    # larger array operations, the same numbers), more where the work block is larger (accelerators)
    step = max(1, min(block_elems, _DRAW_ELEMS) // max(per_row, 1))
    group = step * max(1, max(_GROUP_ELEMS, block_elems) // max(per_row * step, 1))
    neg = bk.scalar(-math.inf, x.dtype)
    for a in range(0, n, group):
        rows = slice(a, min(n, a + group))
        r = rows.stop - rows.start
        subs = [slice(b - a, min(rows.stop, b + step) - a) for b in range(a, rows.stop, step)]
        ib = xp.broadcast_to(idx[:, rows, :], (B, r, sS))
        vb = xp.broadcast_to(valid[:, rows, :], (B, r, sS))
        q = x.Q[:, rows, :]
        Ks, Vs = _gather(x, ib, ())
        la = xp.where(vb, (Ks @ q[..., None])[..., 0], neg)  # (B, r, sS) exact support logits
        c = xp.max(la, axis=-1) if sS else xp.full((B, r), -math.inf, dtype=x.dtype, device=bk.device)
        c = xp.broadcast_to(c[None, ...], (T1, B, r))
        if s:
            inR = xp.broadcast_to(visible_rows(x, est.causal, rows), (B, r, M)) & ~dense_members(
                ib, vb, M, xp
            )
            n_r = xp.sum(xp.astype(inR, xp.int64), axis=-1)  # (B, r)
            width = M if est.remainder == "uniform" else s
            draws = [gen.random((T1, B, sb.stop - sb.start, width)) for sb in subs]
            u = bk.asarray(np.concatenate(draws, axis=2), dtype=x.dtype)
            pos, ok, factor = _draw_positions(est, x, rows, inR, n_r, scorer, u, subs)
            Kr, Vr = _gather(x, pos, (T1,))  # (T1, B, r, s', d)
            lb = xp.where(ok, (Kr @ q[None, ..., None])[..., 0], neg)
            c = xp.maximum(c, xp.max(lb, axis=-1))
            n_sampled[:, rows] = xp.astype(xp.minimum(n_r, s), x.dtype)
        c0 = xp.where(xp.isfinite(c), c, xp.zeros_like(c))
        ws = xp.exp(la[None, ...] - c0[..., None])  # (T1, B, r, sS); -inf logits give 0
        Z = xp.sum(ws, axis=-1)
        N = (ws[..., None, :] @ Vs[None, ...])[..., 0, :]
        if s:
            wr = xp.exp(lb - c0[..., None]) * factor
            wr = xp.where(ok, wr, xp.zeros_like(wr))
            Z = Z + xp.sum(wr, axis=-1)
            N = N + (wr[..., None, :] @ Vr)[..., 0, :]
        log_scale[:, :, rows] = c0
        num[:, :, rows, :] = N
        den[:, :, rows] = Z
    if T is None:
        return log_scale[0, ...], num[0, ...], den[0, ...], n_sampled
    del pre
    return log_scale, num, den, n_sampled


def check_content_options(est: Any) -> None:
    """Validate, in place, the content options (``top_k``, ``scorer``, ``remainder``, ``n_samples``, ...)."""
    if est.remainder is None:
        if est.feature_map is None:
            raise InvalidParameterError(
                "Hybrid needs a `feature_map` for its default remainder 'features', or a `remainder` "
                f"among {sorted(REMAINDERS)} that needs none. Got feature_map=None and remainder=None."
            )
        object.__setattr__(est, "remainder", "features")
    check_option(est.remainder, "remainder", "Hybrid", REMAINDERS)
    if est.remainder == "features" and est.feature_map is None:
        raise InvalidParameterError(
            "The `feature_map` parameter of Hybrid is required with remainder='features' (the "
            "remainder's random features). Got None instead."
        )
    if est.remainder != "features":
        for name, value, default in (
            ("feature_map", est.feature_map, None),
            ("variant", est.variant, "plain"),
            ("fit_on", est.fit_on, "all"),
        ):
            if value != default:
                raise InvalidParameterError(
                    f"The `{name}` parameter of Hybrid is only used with remainder='features'; with "
                    f"remainder={est.remainder!r} it must be {default!r}. Got {value!r} instead."
                )
    if est.scorer is not None:
        check_option(est.scorer, "scorer", "Hybrid", SCORERS)
    if est.top_k is not None:
        object.__setattr__(est, "top_k", check_int(est.top_k, "top_k", "Hybrid", low=1))
    needs = est.top_k is not None or est.remainder == "importance"
    if needs and est.scorer is None:
        raise InvalidParameterError(
            f"The `scorer` parameter of Hybrid must be a str among {sorted(SCORERS)} with top_k or "
            "remainder='importance' (it ranks the keys / gives the proposal's proxy logits). Got None instead."
        )
    if not needs and est.scorer is not None:
        raise InvalidParameterError(
            "The `scorer` parameter of Hybrid is used only with top_k or remainder='importance'; "
            f"it must be None here. Got {est.scorer!r} instead."
        )
    if est.remainder in SAMPLED and (est.n_samples is not None or getattr(est, "epsilon", None) is None):
        if est.n_samples is None:
            raise InvalidParameterError(
                f"The `n_samples` parameter of Hybrid must be an int >= 1 with remainder={est.remainder!r} "
                "(exact logits of remainder keys per query). Got None instead."
            )
        object.__setattr__(est, "n_samples", check_int(est.n_samples, "n_samples", "Hybrid", low=1))
    elif est.n_samples is not None:
        raise InvalidParameterError(
            f"The `n_samples` parameter of Hybrid is used only with remainder in {sorted(SAMPLED)}; it must "
            f"be None with remainder={est.remainder!r}. Got {est.n_samples!r} instead."
        )
    lam = est.proposal_mix
    if (
        isinstance(lam, bool)
        or not isinstance(lam, (int, float, np.floating, np.integer))
        or not 0 < lam <= 1
    ):
        raise InvalidParameterError(
            "The `proposal_mix` parameter of Hybrid must be a float in (0, 1] (the uniform share of the "
            f"importance proposal, which keeps every probability > 0). Got {lam!r} instead."
        )
    object.__setattr__(est, "proposal_mix", float(lam))
    for name in ("refresh", "block_size", "n_hashes"):
        object.__setattr__(est, name, check_int(getattr(est, name), name, "Hybrid", low=1))
    if est.remainder == "none" and est.window is None and not est.n_global:
        if est.lsh_buckets is None and est.top_k is None:
            raise InvalidParameterError(
                "Hybrid(remainder='none') computes only its support and needs one: a window, n_global, "
                "lsh_buckets or top_k. Got none of them (every query would have no keys)."
            )
