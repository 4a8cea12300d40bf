"""Sampled remainders of sparse attention: rk.theory.sampled_remainder_moments against a NumPy
reference sampler that implements the shared definitions directly.

For one query with support S (computed exactly) and remainder R (the other keys it may see),
the sampler draws the remainder estimates (Z_R hat, T hat) of "uniform" (without and with
replacement), "stratified" and "importance", and the output (E_S + T hat)/(Z_S + Z_R hat).
The exact variances are checked as exact (the simulated mean of the squared, centred
estimates, whose mean is known, against the formula), and the delta-method output MSE where it
is in its domain. Tolerances: |z| <= 5 with the MCSE of the per-draw statistic; fixed seeds.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import rfkit as rk
from rfkit.exceptions import OutOfDomainWarning

MIX = 0.1


# ----------------------------------------------------------------------------- reference sampler
def _parts(q, K, V, exact):
    """Shifted weights w (c = the largest logit), Z_S, E_S, the remainder indices, Z_R, T, Z, a."""
    logits = K @ q
    w = np.exp(logits - logits.max())
    R = np.flatnonzero(~exact)
    Zs, Es = w[exact].sum(), w[exact] @ V[exact]
    Zr, Tr = w[R].sum(), w[R] @ V[R]
    Z = Zs + Zr
    return w, Zs, Es, R, Zr, Tr, Z, (Es + Tr) / Z


def _proposal(logits_R, mix=MIX):
    e = np.exp(logits_R - logits_R.max())
    return (1.0 - mix) * e / e.sum() + mix / logits_R.shape[0]


def _draw_indices(kind, NR, s, T, rng, replace, p):
    """(T, s) indices into R and (T, s) Horvitz-Thompson factors, by the definitions."""
    if kind == "uniform":
        if replace:
            idx = rng.integers(0, NR, size=(T, s))
        else:
            idx = np.argsort(rng.random((T, NR)), axis=1)[:, :s]
        return idx, np.full((T, s), NR / s)
    if kind == "stratified":
        H = min(s, NR)
        sizes = [NR // H + (1 if h < NR % H else 0) for h in range(H)]
        budgets = [s // H + (1 if h < s % H else 0) for h in range(H)]
        idx, fac, start = [], [], 0
        for Nh, sh in zip(sizes, budgets):
            pick = np.argsort(rng.random((T, Nh)), axis=1)[:, :sh] + start
            idx.append(pick)
            fac.append(np.full((T, sh), Nh / sh))
            start += Nh
        return np.concatenate(idx, axis=1), np.concatenate(fac, axis=1)
    assert kind == "importance"
    idx = rng.choice(NR, size=(T, s), replace=True, p=p)
    return idx, 1.0 / (s * p[idx])


def reference_draws(q, K, V, exact, kind, s, T, rng, *, replace=False, p=None):
    """T draws of (Z_R hat, T hat, output) of one query; plus Z_R, T, Z and the exact output a."""
    w, Zs, Es, R, Zr, Tr, Z, a = _parts(q, K, V, exact)
    NR = R.shape[0]
    if kind == "none":
        Zh, Th = np.zeros(T), np.zeros((T, V.shape[1]))
    elif s >= NR:
        Zh, Th = np.full(T, Zr), np.broadcast_to(Tr, (T, V.shape[1])).copy()
    else:
        idx, fac = _draw_indices(kind, NR, s, T, rng, replace, p)
        wR, VR = w[R], V[R]
        Zh = np.sum(fac * wR[idx], axis=1)
        Th = np.einsum("ts,tsc->tc", fac * wR[idx], VR[idx])
    out = (Es + Th) / (Zs + Zh)[:, None]
    return Zh, Th, out, Zr, Tr, Z, a


# ----------------------------------------------------------------------------- data
def _synthetic(seed, M=48, d=8, dv=3, scale=0.35):
    rng = np.random.default_rng(seed)
    return scale * rng.normal(size=d), scale * rng.normal(size=(M, d)), rng.normal(size=(M, dv))


def _support(n, M, window, sinks, causal):
    """Window of half-width ``window`` (causal: n - window <= j <= n) plus the first ``sinks`` keys."""
    j = np.arange(M)
    near = (n - window <= j) & (j <= n) if causal else np.abs(n - j) <= window
    return near | (j < sinks)


def _head(source):
    """(Q, K, V, causal) of the longest text of layer 2, head 0 (no padding there)."""
    if source == "smollm2":
        d = rk.data.smollm2_qk(layers=[2], heads=[0], max_len=128)
        causal = True
    else:
        d = rk.data.minilm_qk(layers=[2], heads=[0], max_len=128)
        causal = False
    t = int(np.argmax(d.mask.sum(-1)))
    n = int(d.mask[t].sum())
    return d.q[t, 0, 0, :n], d.k[t, 0, 0, :n], d.v[t, 0, 0, :n], causal


def _queries(Q, K, V, causal, window=8, sinks=2):
    """Per query: the keys and values it sees (causal: j <= n) and its support mask."""
    for i in range(Q.shape[0]):
        M = i + 1 if causal else K.shape[0]
        yield Q[i], K[:M], V[:M], _support(i, M, window, sinks, causal)


def _theory(q, K, V, ex, kind, s, replace=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfDomainWarning)
        return rk.theory.sampled_remainder_moments(q, K, V, ex, remainder=kind, n_samples=s, replace=replace)


def _z(sample, pred):
    se = sample.std(ddof=1) / np.sqrt(sample.shape[0])
    return (sample.mean() - pred) / se if se > 0 else (0.0 if np.isclose(sample.mean(), pred) else np.inf)


# ----------------------------------------------------------------------------- tests
KINDS = [("uniform", False), ("uniform", True), ("stratified", None), ("importance", None)]


@pytest.mark.parametrize(("kind", "replace"), KINDS)
@pytest.mark.parametrize("s", [4, 12])
def test_exact_variances_one_query(kind, replace, s):
    """Var(Z_R hat), Var(T hat) and Cov(Z_R hat, T hat) are exact: simulated with the known means."""
    q, K, V = _synthetic(20261128 + s)
    ex = np.arange(K.shape[0]) >= 40  # the last 8 keys exact
    res = _theory(q, K, V, ex, kind, s, replace)
    logits = K @ q
    p = _proposal(logits[~ex]) if kind == "importance" else None
    if p is not None:
        np.testing.assert_allclose(res.proposal, p, rtol=1e-12)
    T = 20_000
    Zh, Th, _, Zr, Tr, _, _ = reference_draws(
        q, K, V, ex, kind, s, T, np.random.default_rng(7 + s), replace=bool(replace), p=p
    )
    assert abs(_z(Zh, Zr)) <= 5  # unbiased
    assert abs(_z((Zh - Zr) ** 2, res.var_Z)) <= 5
    for c in range(V.shape[1]):
        assert abs(_z((Th[:, c] - Tr[c]) ** 2, res.var_T[c])) <= 5
        assert abs(_z((Zh - Zr) * (Th[:, c] - Tr[c]), res.cov_ZT[c])) <= 5


def _enumerate(kind, NR, s, replace, p):
    """Every sample of the design with its probability: (indices (n, s), HT factors (n, s), prob (n,))."""
    if kind == "uniform" and not replace:
        idx = np.asarray(list(itertools.combinations(range(NR), s)))
        return idx, np.full(idx.shape, NR / s), np.full(idx.shape[0], 1.0 / idx.shape[0])
    if kind == "stratified":
        H = min(s, NR)
        sizes = [NR // H + (1 if h < NR % H else 0) for h in range(H)]
        budgets = [s // H + (1 if h < s % H else 0) for h in range(H)]
        starts = np.cumsum([0] + sizes[:-1])
        per = [
            list(itertools.combinations(range(a, a + Nh), sh)) for a, Nh, sh in zip(starts, sizes, budgets)
        ]
        fac = np.concatenate([np.full(sh, Nh / sh) for Nh, sh in zip(sizes, budgets)])
        idx = np.asarray([np.concatenate(c) for c in itertools.product(*per)])
        return idx, np.broadcast_to(fac, idx.shape), np.full(idx.shape[0], 1.0 / idx.shape[0])
    idx = np.asarray(list(itertools.product(range(NR), repeat=s)))  # ordered draws with replacement
    q = np.full(NR, 1.0 / NR) if kind == "uniform" else p
    fac = NR / s if kind == "uniform" else 1.0 / (s * q[idx])
    return idx, np.broadcast_to(fac, idx.shape), np.prod(q[idx], axis=1)


@pytest.mark.parametrize(("kind", "replace"), KINDS)
def test_exact_variances_by_enumeration(kind, replace):
    """Var and Cov over every possible sample (small population): equal to the formulas to round-off."""
    q, K, V = _synthetic(11, M=13, scale=0.8)
    ex = np.arange(13) < 3  # N_R = 10
    s = 4 if kind == "stratified" or not (replace or kind == "importance") else 3
    res = _theory(q, K, V, ex, kind, s, replace)
    w, _, _, R, Zr, Tr, _, _ = _parts(q, K, V, ex)
    p = _proposal((K @ q)[R]) if kind == "importance" else None
    idx, fac, prob = _enumerate(kind, R.shape[0], s, bool(replace), p)
    np.testing.assert_allclose(prob.sum(), 1.0, rtol=1e-12)
    Zh = np.sum(fac * w[R][idx], axis=1)
    Th = np.einsum("ns,nsc->nc", fac * w[R][idx], V[R][idx])
    np.testing.assert_allclose(prob @ Zh, Zr, rtol=1e-12)
    np.testing.assert_allclose(prob @ Th, Tr, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(res.var_Z, prob @ (Zh - Zr) ** 2, rtol=1e-10)
    np.testing.assert_allclose(res.var_T, prob @ (Th - Tr) ** 2, rtol=1e-10)
    np.testing.assert_allclose(res.cov_ZT, prob @ ((Zh - Zr)[:, None] * (Th - Tr)), rtol=1e-9, atol=1e-14)


@pytest.mark.parametrize(("kind", "replace"), KINDS)
def test_delta_method_mse_in_domain(kind, replace):
    """Deep in the domain (sigma_Z^2 <= 0.01) the delta-method MSE matches the simulated one."""
    T = 20_000
    sims, preds = [], []
    for k in range(4):
        q, K, V = _synthetic(31 + k, scale=0.25)
        ex = np.arange(K.shape[0]) < 6
        s = 16
        res = _theory(q, K, V, ex, kind, s, replace)
        assert res.in_domain and res.normaliser_rel_var <= 0.01
        p = _proposal((K @ q)[~ex]) if kind == "importance" else None
        _, _, out, _, _, _, a = reference_draws(
            q, K, V, ex, kind, s, T, np.random.default_rng(100 + k), replace=bool(replace), p=p
        )
        sims.append(((out - a) ** 2).sum(axis=1))
        preds.append(res.mse_total)
    per_draw = np.sum(sims, axis=0)
    assert abs(_z(per_draw, sum(preds))) <= 5, (per_draw.mean(), sum(preds))


def test_none_is_exact_and_deterministic():
    q, K, V = _synthetic(5)
    ex = np.arange(K.shape[0]) >= 30
    res = rk.theory.sampled_remainder_moments(q, K, V, ex, remainder="none")
    _, _, out, _, _, _, a = reference_draws(q, K, V, ex, "none", 0, 3, np.random.default_rng(0))
    exact_out = rk.attention.softmax(q[None], K, V)[0]
    np.testing.assert_allclose(res.attention, exact_out, rtol=1e-12)
    np.testing.assert_allclose(res.bias, out[0] - exact_out, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(res.mse, (out[0] - exact_out) ** 2, rtol=1e-9, atol=1e-30)
    assert res.deterministic and res.in_domain and not np.any(res.variance) and res.var_Z == 0.0


@pytest.mark.parametrize("kind", ["uniform", "stratified", "importance"])
def test_budget_covering_the_remainder_is_exact(kind):
    q, K, V = _synthetic(6)
    ex = np.arange(K.shape[0]) < 40
    res = rk.theory.sampled_remainder_moments(q, K, V, ex, remainder=kind, n_samples=8)
    assert res.deterministic and res.mse_total == 0.0 and res.var_Z == 0.0 and res.in_domain


def test_log_space_shift_invariance_and_no_overflow():
    """A common offset C of every logit (here 2000: e^C overflows) leaves every relative quantity unchanged."""
    q, K, V = _synthetic(9)
    ex = np.arange(K.shape[0]) < 5
    base = rk.theory.sampled_remainder_moments(q, K, V, ex, remainder="importance", n_samples=6)
    q2, K2 = np.append(q, 2000.0), np.hstack([K, np.ones((K.shape[0], 1))])
    big = rk.theory.sampled_remainder_moments(q2, K2, V, ex, remainder="importance", n_samples=6)
    assert np.isfinite(big.log_shift) and big.log_shift > 1900
    for name in ("normaliser_rel_var", "bias", "variance", "mse", "var_Z", "var_T", "cov_ZT", "attention"):
        np.testing.assert_allclose(getattr(big, name), getattr(base, name), rtol=1e-9, atol=1e-300)


def test_out_of_domain_warns_and_flags():
    rng = np.random.default_rng(3)
    q, K, V = 1.5 * rng.normal(size=8), 1.5 * rng.normal(size=(64, 8)), rng.normal(size=(64, 2))
    ex = np.arange(64) < 2
    with pytest.warns(OutOfDomainWarning, match="n_samples=2"):
        res = rk.theory.sampled_remainder_moments(q, K, V, ex, remainder="uniform", n_samples=2)
    assert not res.in_domain and res.normaliser_rel_var > 0.1
    assert "in_domain=False" in repr(res)


# ----------------------------------------------------------------------------- real heads
def _real_head_stats(source, kind, replace, s, T, seed):
    """Per draw: the summed squared errors of Z_R hat / Z, of T hat / Z, their products, and of the output."""
    Q, K, V, causal = _head(source)
    rng = np.random.default_rng(seed)
    stats = {k: np.zeros(T) for k in ("Z", "T", "ZT", "lin_var", "lin_bias", "out")}
    pred = dict.fromkeys(stats, 0.0)
    in_domain = []
    for q, Kn, Vn, ex in _queries(Q, K, V, causal):
        res = _theory(q, Kn, Vn, ex, kind, s, replace)
        p = _proposal((Kn @ q)[~ex]) if kind == "importance" and (~ex).sum() > s else None
        Zh, Th, out, Zr, Tr, Z, a = reference_draws(
            q, Kn, Vn, ex, kind, s, T, rng, replace=bool(replace), p=p
        )
        # shifted scales agree (both use the largest logit): relative to Z
        stats["Z"] += ((Zh - Zr) / Z) ** 2
        stats["T"] += np.sum(((Th - Tr) / Z) ** 2, axis=1)
        stats["ZT"] += np.sum((Zh - Zr)[:, None] * (Th - Tr), axis=1) / Z**2
        L = ((Th - Tr) - a * (Zh - Zr)[:, None]) / Z  # the linearised output error D / Z
        stats["lin_var"] += np.sum(L**2, axis=1)
        stats["lin_bias"] += -np.sum(L * ((Zh - Zr) / Z)[:, None], axis=1)
        stats["out"] += np.sum((out - a) ** 2, axis=1)
        pred["Z"] += res.normaliser_rel_var
        pred["T"] += float(np.sum(res.var_T)) / res.normaliser**2
        pred["ZT"] += float(np.sum(res.cov_ZT)) / res.normaliser**2
        pred["lin_var"] += res.variance_total
        pred["lin_bias"] += float(np.sum(res.bias))
        pred["out"] += res.mse_total
        in_domain.append(res.in_domain)
    return stats, pred, np.asarray(in_domain)


@pytest.mark.slow
@pytest.mark.parametrize("source", ["smollm2", "minilm"])
@pytest.mark.parametrize("s", [8, 32])
@pytest.mark.parametrize(("kind", "replace"), KINDS)
def test_exact_variances_on_real_heads(source, s, kind, replace):
    """Layer 2, head 0, window 8 + 2 sinks: the exact variances hold on real q, k, v.

    Also the delta method's two terms, which are exact moments of the linearised error
    D/Z = ((T hat - T) - a (Z_R hat - Z_R))/Z: variance E[(D/Z)^2] and bias -E[(D/Z) eps]. How
    well they predict the output's MSE on these heads is measured in docs page Theory, section
    "Sampled remainders: exact finite-population theory" (an approximation, not a z-test).
    """
    stats, pred, _ = _real_head_stats(source, kind, replace, s, 2000, 20261128 + s)
    for key in ("Z", "T", "ZT", "lin_var", "lin_bias"):
        assert abs(_z(stats[key], pred[key])) <= 5, (key, stats[key].mean(), pred[key])


# ----------------------------------------------------------------------------- rk.attention.Hybrid itself
def _hybrid_samples() -> bool:
    import dataclasses

    return "remainder" in {f.name for f in dataclasses.fields(rk.attention.Hybrid)}


@pytest.mark.slow
@pytest.mark.skipif(
    not _hybrid_samples(), reason="rk.attention.Hybrid has no sampled remainders (remainder=...) in this tree"
)
@pytest.mark.parametrize("source", ["smollm2", "minilm"])
@pytest.mark.parametrize("s", [8, 32])
@pytest.mark.parametrize("kind", ["uniform", "stratified", "importance"])
def test_theory_matches_hybrid_simulation(source, s, kind):
    """Hybrid(window=8, n_global=2, remainder=kind, n_samples=s) on the real heads: its normaliser's and
    numerator's remainder variances and covariance, and the delta method's two terms, as predicted.

    Importance uses the oracle scorer: the proposal (1 - 0.1) softmax_R(q.k) + 0.1/N_R, the theory's default.
    """
    Q, K, V, causal = _head(source)
    T = 2000
    scorer = "oracle" if kind == "importance" else None
    est = rk.attention.Hybrid(window=8, n_global=2, causal=causal, remainder=kind, n_samples=s, scorer=scorer)
    r = est(Q, K, V, rng=20261128 + s, n_draws=T)
    stats = {k: np.zeros(T) for k in ("Z", "T", "ZT", "lin_var", "lin_bias")}
    pred = dict.fromkeys(stats, 0.0)
    for i, (q, Kn, Vn, ex) in enumerate(_queries(Q, K, V, causal)):
        res = _theory(q, Kn, Vn, ex, kind, s)
        logits = Kn @ q
        logZ = logits.max() + np.log(np.sum(np.exp(logits - logits.max())))
        p = np.exp(logits - logZ)  # w_j / Z
        zs, es = p[ex].sum(), p[ex] @ Vn[ex]
        zr, tr = p[~ex].sum(), p[~ex] @ Vn[~ex]
        eZ = np.exp(r.log_normalizer[:, i] - logZ) * np.sign(r.denominator_values[:, i]) - zs - zr
        eT = r.numerator_values[:, i] * np.exp(r.log_scale[:, i] - logZ)[:, None] - es - tr
        L = eT - res.attention * eZ[:, None]
        stats["Z"] += eZ**2
        stats["T"] += np.sum(eT**2, axis=1)
        stats["ZT"] += np.sum(eZ[:, None] * eT, axis=1)
        stats["lin_var"] += np.sum(L**2, axis=1)
        stats["lin_bias"] += -np.sum(L * eZ[:, None], axis=1)
        Z2 = res.normaliser**2
        pred["Z"] += res.normaliser_rel_var
        pred["T"] += float(np.sum(res.var_T)) / Z2
        pred["ZT"] += float(np.sum(res.cov_ZT)) / Z2
        pred["lin_var"] += res.variance_total
        pred["lin_bias"] += float(np.sum(res.bias))
    for key in stats:
        assert abs(_z(stats[key], pred[key])) <= 5, (key, stats[key].mean(), pred[key])
