r"""(ε, δ) budgets of :class:`~rfkit.attention.Hybrid`'s uniform remainder: a sample count per query.

As vAttention (Desai et al., arXiv 2510.05688) chooses, per query and head, how many remainder
keys to sample so that the output's relative error is at most :math:`\varepsilon` with
probability at least :math:`1-\delta` (central limit theorem), here by the delta method on
rfkit's finite-population theory (:mod:`rfkit.theory._sampling`) rather than vAttention's
normaliser-only relaxation. For query :math:`n` with support :math:`S`, remainder :math:`R`
(:math:`N_R` keys), weights :math:`w_j = e^{q_n^\top k_j - c}`, :math:`Z = Z_S + Z_R`, output
:math:`a = (E_S + T)/Z` and :math:`s` keys drawn uniformly without replacement
(Horvitz-Thompson), the error is to first order

.. math::

    \hat a - a \approx \frac{\hat D - D}{Z},\qquad \hat D = \frac{N_R}{s}\sum_{\text{sample}} u_j,
    \quad u_j = w_j (v_j - a),\qquad
    \operatorname{tr}\mathrm{Var}(\hat a) \approx \frac{N_R^2}{Z^2}\Big(\frac1s - \frac1{N_R}\Big) S_u^2

with :math:`S_u^2 = \sum_R \lVert u_j - \bar u\rVert^2/(N_R - 1)` (Cochran (1977), ch. 2 and 6).
For a Gaussian error vector with covariance :math:`\Sigma`, :math:`\lVert X\rVert^2 =
\sum_i\lambda_i\chi^2_{1,i}` and :math:`P(\lVert X\rVert^2 \ge x\operatorname{tr}\Sigma) \le
P(\chi^2_1 \ge x)` for :math:`x \ge 1.5365` (Székely & Bakirov, Statist. Probab. Lett. 2003), so
:math:`\operatorname{tr}\mathrm{Var}(\hat a) \le (\varepsilon\lVert a\rVert/z)^2`, :math:`z =
\Phi^{-1}(1-\delta/2)`, gives :math:`P(\lVert\hat a - a\rVert > \varepsilon\lVert a\rVert) \le
\delta` for :math:`\delta \le 0.2` (:math:`z^2 \ge 1.64`). Solving for :math:`s`:

.. math::

    s = \Big\lceil \frac{n_0}{1 + n_0/N_R} \Big\rceil,\qquad
    n_0 = \frac{q^2 N_R^2 \hat S_u^2}{\varepsilon^2 \lVert \hat N\rVert^2},

(Cochran's finite-population correction) with :math:`\hat S_u^2` (:math:`u_j` centred on the
base estimate :math:`\hat a_b`) and :math:`\hat N = Z\hat a` (so :math:`\lVert\hat N\rVert =
\hat Z_b\lVert\hat a_b\rVert`) estimated from a base sample of :math:`b` = ``base_samples`` keys,
and :math:`q = z` (``budget_rule="normal"``, vAttention's plug-in) or :math:`q =
t_{b-1}^{-1}(1-\delta/2)` (``"t"``: Stein's two-stage rule (Ann. Math. Statist. 1945), which
accounts for :math:`\hat S_u^2` being estimated from :math:`b` keys; exact for Gaussian
:math:`u_j`). :math:`s` is clipped to :math:`[\min(b, N_R),\ \min(N_R,` ``max_samples``:math:`)]`;
the additional :math:`s - b` keys are drawn without replacement from the keys not in the base
sample (the next keys of one uniformly random order of :math:`R`), and the output is the
Horvitz-Thompson estimate from all :math:`s`. Rows with :math:`s = N_R` are exact.

Domain: the CLT and the plug-in variance need a base sample large enough to see the remainder's
heavy keys; with small :math:`b` and heavy-tailed weights the variance is underestimated and the
coverage falls below :math:`1-\delta` (measured in benchmarks/results/eps-delta-coverage-2026-11-28.md).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._backend_ops import first_of_order, promoted_matmul, row_weighted_sum
from .._validation import check_int, check_option
from ..exceptions import InvalidParameterError
from ._common import QKV
from ._remainder import _DRAW_ELEMS, _gather  # the uniforms' row blocks: as the fixed-count remainders'
from ._scorers import dense_members, visible_rows

__all__ = ["BUDGET_RULES", "MAX_DELTA", "budgeted_attention", "check_budget_options", "sample_counts"]

#: Budget rules: the normal quantile with the plug-in variance (CLT), Student's t with b - 1 df
#: (Stein), or a chi-square upper confidence bound of the variance at level 1 - δ/2 with z at δ/2.
BUDGET_RULES = ("normal", "t", "upper")
#: Largest δ: the bound P(||X||^2 >= z^2 tr Σ) <= δ holds for z^2 >= 1.5365 (δ <= 0.215).
MAX_DELTA = 0.2


def check_budget_options(est: Any) -> None:
    """Validate, in place, ``epsilon``, ``delta``, ``base_samples``, ``max_samples``, ``budget_rule``."""
    eps = est.epsilon
    if eps is None:
        for name, default in (
            ("delta", None),
            ("base_samples", None),
            ("max_samples", None),
            ("budget_rule", "normal"),
        ):
            value = getattr(est, name)
            if value != default:
                raise InvalidParameterError(
                    f"The `{name}` parameter of Hybrid is used only with epsilon (an (epsilon, delta) "
                    f"budget); it must be {default!r} with epsilon=None. Got {value!r} instead."
                )
        return
    object.__setattr__(
        est, "epsilon", _real_in(eps, "epsilon", 0.0, 1.0, "open interval (0, 1)", "relative error")
    )
    if est.remainder != "uniform":
        raise InvalidParameterError(
            "The `epsilon` parameter of Hybrid (an (epsilon, delta) budget) needs remainder='uniform' "
            "(the base sample and its additional keys are drawn uniformly without replacement). "
            f"Got remainder={est.remainder!r} instead."
        )
    if est.delta is None:
        raise InvalidParameterError(
            f"The `delta` parameter of Hybrid must be a float in (0, {MAX_DELTA}] with epsilon (the "
            "allowed probability of a relative error above epsilon). Got None instead."
        )
    d = _real_in(
        est.delta,
        "delta",
        0.0,
        MAX_DELTA,
        f"interval (0, {MAX_DELTA}] (above it the normal bound on the norm of the error vector fails)",
        "failure probability",
        closed_high=True,
    )
    object.__setattr__(est, "delta", d)
    if est.base_samples is None:
        raise InvalidParameterError(
            "The `base_samples` parameter of Hybrid must be an int >= 2 with epsilon (the keys whose "
            "variance sets the sample count). Got None instead."
        )
    b = check_int(est.base_samples, "base_samples", "Hybrid", low=2)
    object.__setattr__(est, "base_samples", b)
    if est.max_samples is not None:
        m = est.max_samples
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < b:
            raise InvalidParameterError(
                f"The `max_samples` parameter of Hybrid must be an int >= base_samples ({b}) or None. "
                f"Got {m!r} instead."
            )
        object.__setattr__(est, "max_samples", int(m))
    if est.n_samples is not None:
        raise InvalidParameterError(
            "The `n_samples` parameter of Hybrid is the fixed count; with epsilon the count is chosen "
            "per query: leave n_samples None (cap the count with max_samples). "
            f"Got {est.n_samples!r} instead."
        )
    check_option(est.budget_rule, "budget_rule", "Hybrid", BUDGET_RULES)


def _real_in(
    value: Any, name: str, low: float, high: float, rule: str, what: str, closed_high: bool = False
) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
    v = float(value) if ok else math.nan
    if not ok or not (low < v < high or (closed_high and v == high)):
        raise InvalidParameterError(
            f"The `{name}` parameter of Hybrid must be a float in the {rule} (the {what} of the "
            f"(epsilon, delta) budget). Got {value!r} instead."
        )
    return v


def _factor(rule: str, delta: float, df: np.ndarray) -> np.ndarray:
    r"""The factor :math:`q^2` (times :math:`S_u^2/\hat S_u^2` for ``"upper"``) of each row's count.

    ``"normal"``: :math:`z^2`, :math:`z = \Phi^{-1}(1-\delta/2)`; ``"t"``: :math:`t_{df}^{-1}(1-\delta/2)^2`;
    ``"upper"``: :math:`\Phi^{-1}(1-\delta/4)^2\, df/\chi^2_{df}(\delta/2)`, the normal quantile at
    :math:`\delta/2` times the :math:`1-\delta/2` upper confidence bound of the variance over its
    estimate (normal theory), so that by the union bound the two failures together have
    probability at most :math:`\delta`. ``df`` (>= 1) is the base sample's size minus one.
    """
    import scipy.special as sp  # noqa: PLC0415 (0.1 s import, only for budgets)

    df = np.maximum(df, 1.0)
    if rule == "normal":
        return np.full(df.shape, float(sp.ndtri(1.0 - delta / 2.0)) ** 2)
    if rule == "t":
        return np.asarray(sp.stdtrit(df, 1.0 - delta / 2.0), dtype=np.float64) ** 2
    z = float(sp.ndtri(1.0 - delta / 4.0))
    return z**2 * df / np.asarray(sp.chdtri(df, 1.0 - delta / 2.0), dtype=np.float64)


def _factors_by_size(est: Any, bk: Any) -> Any:
    """:func:`_factor` of a base sample of each size ``k = 0 .. b`` (``df = k - 1``): float64 (b + 1,)
    on the call's device, computed on the host (SciPy's quantiles) and moved once."""
    b = int(est.base_samples)
    table = _factor(est.budget_rule, float(est.delta), np.arange(b + 1, dtype=np.int64) - 1.0)
    return bk.asarray(table, dtype=bk.xp.float64)


def _as(xp: Any, a: Any, dtype: Any) -> Any:
    """``a`` in ``dtype`` (itself where it has that dtype already)."""
    return a if a.dtype == dtype else xp.astype(a, dtype)


def sample_counts(est: Any, logits: Any, values: Any, z_s: Any, e_s: Any, n_r: Any, *, bk: Any) -> Any:
    r"""The total sample count :math:`s` of each row from its base sample (see the module docstring).

    ``logits`` (..., b') and ``values`` (..., b', dv) are the first ``b' >= min(b, N_R)`` keys of
    the row's random order of :math:`R` (``-inf`` logits where there are fewer), ``z_s`` (...)
    and ``e_s`` (..., dv) the support's exact totals and ``n_r`` (...) int64 :math:`N_R`; every
    array shifted by one common :math:`c` per row and in the namespace and on the device of the
    backend ``bk`` (the count is computed there, its variance in float64). Returns int64 (...) in
    :math:`[\min(b, N_R), \min(N_R, \text{max\_samples})]`.
    """
    xp, f64, i64 = bk.xp, bk.xp.float64, bk.xp.int64
    one, zero, inf = (bk.scalar(v, f64) for v in (1.0, 0.0, math.inf))
    b = int(est.base_samples)
    lb, vb = logits[..., :b], values[..., :b, :]
    k = xp.minimum(n_r, bk.scalar(b, i64))
    kf = xp.astype(xp.maximum(k, bk.scalar(1, i64)), f64)
    nr = xp.astype(n_r, f64)
    has = z_s > 0
    one_c, zero_c, ninf_c = (bk.scalar(v, z_s.dtype) for v in (1.0, 0.0, -math.inf))
    log_zs = xp.where(has, xp.log(xp.where(has, z_s, one_c)), ninf_c)
    top = xp.max(xp.concat([lb, log_zs[..., None]], axis=-1), axis=-1)
    top = xp.where(xp.isfinite(top), top, zero_c)
    w = xp.exp(lb - top[..., None])  # base weights on the row's own shift: no underflow from later keys
    scale = xp.exp(-top)
    fac = nr / kf
    # float32 inputs: the variance in float64 (the products promote)
    Zb = z_s * scale + fac * xp.sum(w, axis=-1)
    Nb = e_s * scale[..., None] + fac[..., None] * row_weighted_sum(w, _as(xp, vb, w.dtype), xp)
    a = Nb / xp.where(Zb > 0, Zb, one)[..., None]
    u = w[..., None] * (vb - a[..., None, :])
    used = (xp.arange(int(lb.shape[-1]), dtype=i64, device=bk.device) < k[..., None])[..., None]
    ubar = xp.sum(xp.where(used, u, zero), axis=-2, keepdims=True) / kf[..., None, None]
    S2 = xp.sum(xp.where(used, (u - ubar) ** 2, zero), axis=(-2, -1)) / xp.maximum(kf - 1.0, one)
    q2 = xp.reshape(xp.take(_factors_by_size(est, bk), xp.reshape(k, (-1,)), axis=0), tuple(k.shape))
    norm2 = xp.sum(Nb**2, axis=-1)
    some = norm2 > 0
    n0 = q2 * nr**2 * S2 / (float(est.epsilon) ** 2 * xp.where(some, norm2, one))
    n0 = xp.where(S2 == 0, zero, xp.where(some, n0, inf))
    fin = xp.isfinite(n0)
    n0f = xp.where(fin, n0, zero)
    s_real = xp.where(fin, n0f / (1.0 + n0f / xp.maximum(nr, one)), nr)
    cap = n_r if est.max_samples is None else xp.minimum(n_r, bk.scalar(int(est.max_samples), i64))
    s = xp.astype(xp.ceil(s_real - 1e-9 * xp.maximum(s_real, one)), i64)
    return xp.minimum(xp.maximum(s, k), xp.maximum(cap, k))


def budgeted_attention(
    est: Any,
    x: QKV,
    idx: Any,
    valid: Any,
    gen: np.random.Generator,
    T: int | None,
    block_elems: int,
) -> tuple[Any, Any, Any, Any]:
    """Support exact, remainder by an (ε, δ) budget: ``(log_scale, num, den, n_sampled)``.

    Shapes as :func:`~rfkit.attention._remainder.sampled_attention`, except ``n_sampled``:
    ``pre + (B, n)`` float, the count :math:`s` each query of each draw computed (base included).
    Row blocks of fixed layout: memory O(block x M), linear in n. Each draw block (rows of at most
    ``_DRAW_ELEMS`` work elements, whatever the device) draws one uniform per (draw, slice, query,
    key) in block order (NumPy, float64, moved to the inputs' device: the same numbers on every
    backend and device); the row's random order of :math:`R` gives the base sample
    (its first ``min(b, N_R)`` keys) and the additional keys (the next ``s - b``). Computed in
    the inputs' namespace and on their device; the sampled terms are summed in float64.
    """
    xp, bk = x.xp, x.bk
    f64 = xp.float64
    B, n, M, d, dv = x.n_slices, x.n_queries, x.n_keys, x.dim, x.value_dim
    T1 = 1 if T is None else T
    W = M if est.max_samples is None else min(int(est.max_samples), M)
    sS = int(idx.shape[-1])
    cdt = x.dtype if sS else f64  # the shift's dtype: float64 where no query has a support
    log_scale = bk.empty((T1, B, n), x.dtype)
    num = bk.empty((T1, B, n, dv), x.dtype)
    den = bk.empty((T1, B, n), x.dtype)
    n_sampled = bk.zeros((T1, B, n), x.dtype)
    per_row = B * (M * (6 + 3 * T1) + sS * (d + dv + 2) + T1 * W * (d + 2 * dv + 6))
    # the uniforms are drawn in row blocks of at most _DRAW_ELEMS elements (their layout fixes the
    # numbers: the same on every device); larger compute blocks (accelerators) take several at once
    step = max(1, min(block_elems, _DRAW_ELEMS) // max(per_row, 1))
    group = step * max(1, block_elems // max(per_row * step, 1))
    neg = bk.scalar(-math.inf, x.dtype)
    two, one_i = bk.scalar(2.0, x.dtype), bk.scalar(1, xp.int64)
    zero_c, ninf_c = bk.scalar(0.0, cdt), bk.scalar(-math.inf, cdt)
    for a0 in range(0, n, group):
        rows = slice(a0, min(n, a0 + group))
        r = rows.stop - rows.start
        draws = [gen.random((T1, B, min(rows.stop, b + step) - b, M)) for b in range(a0, rows.stop, step)]
        ib = xp.broadcast_to(idx[:, rows, :], (B, r, sS))
        vb = xp.broadcast_to(valid[:, rows, :], (B, r, sS))
        q = x.Q[:, rows, :]
        Ks, Vs = _gather(x, ib, ())
        la = xp.where(vb, (Ks @ q[..., None])[..., 0], neg)  # (B, r, sS)
        inR = xp.broadcast_to(visible_rows(x, est.causal, rows), (B, r, M)) & ~dense_members(ib, vb, M, xp)
        n_r = xp.sum(xp.astype(inR, xp.int64), axis=-1)  # (B, r)
        u = bk.asarray(draws[0] if len(draws) == 1 else np.concatenate(draws, axis=2), dtype=x.dtype)
        key = xp.where(inR[None, ...], u, two)
        pos = first_of_order(key, W, xp)  # one uniformly random order of R per row and draw
        ok = xp.take_along_axis(key, pos, axis=-1) < 2.0
        Kr, Vr = _gather(x, pos, (T1,))  # (T1, B, r, W, d)
        lb = xp.where(ok, (Kr @ q[None, ..., None])[..., 0], neg)
        cs = xp.max(la, axis=-1) if sS else xp.full((B, r), -math.inf, dtype=f64, device=bk.device)
        cs0 = xp.where(xp.isfinite(cs), cs, zero_c)
        ws = xp.exp(la - cs0[..., None])
        zs, es = xp.sum(ws, axis=-1), (ws[..., None, :] @ _as(xp, Vs, cdt))[..., 0, :]
        nr3 = xp.broadcast_to(n_r, (T1, B, r))
        # the counts: base logits shifted by the support's shift (sample_counts re-shifts per row)
        s = sample_counts(
            est,
            lb - cs0[None, ..., None],
            Vr,
            xp.broadcast_to(zs, (T1, B, r)),
            xp.broadcast_to(es, (T1, B, r, dv)),
            nr3,
            bk=bk,
        )
        used = xp.arange(W, dtype=xp.int64, device=bk.device) < s[..., None]
        lu = xp.where(used, lb, neg)
        c = xp.maximum(cs[None, ...], _as(xp, xp.max(lu, axis=-1), cdt))
        c0 = xp.where(xp.isfinite(c), c, zero_c)
        fs = xp.exp(xp.where(xp.isfinite(cs), cs, ninf_c)[None, ...] - c0)  # support rescaled to c0
        fac = xp.astype(nr3, f64) / xp.astype(xp.maximum(s, one_i), f64)
        wr = xp.exp(lu - c0[..., None]) * fac[..., None]  # float64 (float32 inputs: promoted)
        tail = promoted_matmul(wr[..., None, :], Vr, xp)[..., 0, :]
        log_scale[:, :, rows] = _as(xp, c0, x.dtype)
        den[:, :, rows] = _as(xp, zs[None, ...] * fs + xp.sum(wr, axis=-1), x.dtype)
        num[:, :, rows, :] = _as(xp, es[None, ...] * fs[..., None] + tail, x.dtype)
        n_sampled[:, :, rows] = xp.astype(s, x.dtype)
    if T is None:
        return log_scale[0, ...], num[0, ...], den[0, ...], n_sampled[0, ...]
    return log_scale, num, den, n_sampled
