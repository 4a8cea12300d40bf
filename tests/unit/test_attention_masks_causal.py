"""Key padding masks for every estimator, causal SNIS and LARA, and their bad input.

* A key padding mask equals dropping the masked keys: each slice is compared, to round-off,
  with the estimator run on its unmasked keys alone with the same ``rng`` (the draws do not
  depend on the keys; chunk-mean proposals are the chunks of the unmasked keys).
* Causal equals the prefix loop (row i = the estimator on keys 0..i, same draws) where the
  draws do not depend on the data; causal chunk-mean SNIS and causal LARA are checked against
  their definition (dense weights, docs page *Attention* and the LARA docstring), and row i is
  bit-identical when anything after position i changes.
* Memory stays linear in n (tracemalloc at two lengths).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import rfkit as rk
from rfkit import attention as att
from rfkit.exceptions import InvalidParameterError, ShapeError


def data(seed=20240601, shape=(2, 3), n=24, d=5, dv=3, scale=0.4):
    rng = np.random.default_rng(seed)
    Q = scale * rng.standard_normal(shape + (n, d))
    K = scale * rng.standard_normal(shape + (n, d))
    V = rng.standard_normal(shape + (n, dv))
    return Q, K, V


def ragged_mask(shape=(2, 3), n=24, seed=5):
    """Different padding in every slice (right padding, holes), key 0 always kept."""
    rng = np.random.default_rng(seed)
    mask = rng.random(shape + (n,)) < 0.3
    mask[..., 0] = False
    mask.reshape(-1, n)[0, -6:] = True
    return mask


# ----------------------------------------------------------------------------- masks = dropping keys
DROP_ESTIMATORS = {
    "rfa-positive": att.RFA(rk.features.Positive(16), chunk_size=5),
    "rfa-trig": att.RFA(rk.features.Trig(64)),
    "rfa-taylor": att.RFA(rk.features.Taylor(2), chunk_size=4),
    "snis-standard": att.SNIS(n_samples=16, chunk_size=5),
    "snis-chunk-mean": att.SNIS("chunk-mean", n_samples=12, n_chunks=4),
    "snis-means": att.SNIS(proposal=0.1 * np.ones((3, 5)), n_samples=9),
    "lara-optimal": att.LARA(n_proposals=4, samples_per_proposal=2, alpha_floor=None),
    "lara-balance": att.LARA(n_proposals=5, weights="balance", chunk_size=4),
}


@pytest.mark.filterwarnings("ignore::rfkit.exceptions.NonPositiveNormalizerWarning")
@pytest.mark.parametrize("name", list(DROP_ESTIMATORS))
def test_mask_equals_dropping_the_keys(name):
    est = DROP_ESTIMATORS[name]
    Q, K, V = data()
    mask = ragged_mask()
    res = est(Q, K, V, rng=11, key_padding_mask=mask)
    for idx in np.ndindex(mask.shape[:-1]):
        keep = ~mask[idx]
        sub = est(Q[idx], K[idx][keep], V[idx][keep], rng=11)
        np.testing.assert_allclose(res.output[idx], sub.output, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(res.log_normalizer[idx], sub.log_normalizer, rtol=1e-11, atol=1e-11)
        if res.ess is not None:
            np.testing.assert_allclose(res.ess[idx], sub.ess, rtol=1e-10)
        if res.proposal_means is not None:
            np.testing.assert_allclose(res.proposal_means[idx], sub.proposal_means, rtol=1e-13, atol=1e-15)


def test_ra_mask_equals_dropping_the_keys():
    Q, K, V = data(shape=())
    mask = ragged_mask(shape=())
    keep = ~mask
    for causal in (False, True):
        est = att.RA(n_samples=5, chunk_size=6, causal=causal)
        res = est(Q, K, V, rng=4, key_padding_mask=mask)
        if not causal:
            sub = est(Q, K[keep], V[keep], rng=4)
            np.testing.assert_allclose(res.output, sub.output, rtol=1e-12, atol=1e-13)
            np.testing.assert_allclose(res.mcse, sub.mcse, rtol=1e-10, atol=1e-13)
        else:  # the first row sees key 0 only; rows are convex combinations of kept keys' values
            np.testing.assert_allclose(res.output[0], V[0], rtol=1e-13)
    # the chosen components never land on padded keys: one-hot values show the weights
    onehot = np.eye(24)
    res = att.RA(n_samples=50)(Q, K, onehot, rng=1, key_padding_mask=mask)
    assert np.all(res.output[:, mask] == 0.0)


def test_mask_with_a_data_dependent_map_fits_on_the_kept_keys():
    Q, K, V = data()
    mask = np.zeros(24, dtype=bool)
    mask[[2, 3, 9, 20, 21, 22, 23]] = True  # one mask for every slice
    for fm in (rk.features.CEXP(16, A="mean"), rk.features.OPRF(16)):
        res = att.RFA(fm)(Q, K, V, rng=2, key_padding_mask=mask)
        sub = att.RFA(fm)(Q, K[..., ~mask, :], V[..., ~mask, :], rng=2)
        np.testing.assert_allclose(res.output, sub.output, rtol=1e-11)
        assert res.feature_map == sub.feature_map or np.allclose(res.feature_map.A, sub.feature_map.A)


@pytest.mark.parametrize(
    "est",
    [
        att.RFA(rk.features.Positive(16), causal=True, chunk_size=5),
        att.RFA(rk.features.Trig(64), causal=True, chunk_size=4),
        att.SNIS(n_samples=12, causal=True, chunk_size=3),
        att.SNIS(proposal=0.2 * np.ones((2, 5)), n_samples=6, causal=True, chunk_size=7),
        att.LARA(proposal_means=np.zeros((3, 5)), weights="balance", causal=True, chunk_size=4),
    ],
    ids=["rfa", "rfa-trig", "snis", "snis-means", "lara-means"],
)
@pytest.mark.filterwarnings("ignore::rfkit.exceptions.NonPositiveNormalizerWarning")
def test_causal_equals_prefix_loop_with_and_without_mask(est):
    Q, K, V = data(shape=(2,), n=17)
    mask = ragged_mask(shape=(2,), n=17, seed=9)
    bidir = type(est)(**{**est.__dict__, "causal": False})
    for m in (None, mask):
        res = est(Q, K, V, rng=6, key_padding_mask=m)
        for i in range(17):
            sl = slice(0, i + 1)
            pre = bidir(
                Q[..., sl, :],
                K[..., sl, :],
                V[..., sl, :],
                rng=6,
                key_padding_mask=None if m is None else m[:, sl],
            )
            np.testing.assert_allclose(res.output[..., i, :], pre.output[..., i, :], rtol=1e-10, atol=1e-11)
            np.testing.assert_allclose(
                res.log_normalizer[..., i], pre.log_normalizer[..., i], rtol=1e-10, atol=1e-10
            )
            if res.ess is not None:
                np.testing.assert_allclose(res.ess[..., i], pre.ess[..., i], rtol=1e-9)


def test_causal_snis_standard_is_causal_positive_rfa():
    Q, K, V = data(n=40)
    for projection in ("iid", "orthogonal"):
        snis = att.SNIS(n_samples=24, projection=projection, causal=True, chunk_size=7)(Q, K, V, rng=3)
        rfa = att.RFA(rk.features.Positive(24, projection=projection), causal=True)(Q, K, V, rng=3)
        np.testing.assert_array_equal(snis.omega, rfa.draw.projection)
        np.testing.assert_allclose(snis.output, rfa.output, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(snis.log_normalizer, rfa.log_normalizer, rtol=1e-12, atol=1e-12)
    # LARA with all proposals N(0, I), balance, k = 1, causal: causal RFA with C positive features
    lara = att.LARA(proposal_means=np.zeros((6, 5)), weights="balance", causal=True)(Q, K, V, rng=8)
    rfa = att.RFA(rk.features.Positive(6), causal=True)(Q, K, V, rng=8)
    np.testing.assert_allclose(lara.output, rfa.output, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- causal chunk-mean: definition
def causal_definition(res, Q, K, V, comp, counts, mask=None):
    """Dense causal MIS weights w_is of the SNIS/LARA docstrings for one slice (NumPy reference)."""
    n, d = Q.shape
    C = len(counts)
    om, mu = res.omega, res.proposal_means  # (S, d), (C, d); mu[0] = 0
    keep = np.ones(n, bool) if mask is None else ~mask
    edges = (np.arange(C + 1) * n) // C
    # proposal means from the definition: mu_0 = 0, mu_p = mean q + mean of kept k of chunk p - 1
    for p in range(1, C):
        a, b = edges[p - 1], edges[p]
        kk = K[a:b][keep[a:b]]
        ref = Q[a:b].mean(0) + (kk.mean(0) if len(kk) else 0.0)
        np.testing.assert_allclose(mu[p], ref, rtol=1e-13, atol=1e-15)
    assert np.all(mu[0] == 0.0)
    chunk = np.searchsorted(edges, np.arange(n), side="right") - 1
    ratio = np.exp(om @ mu.T - 0.5 * (mu**2).sum(-1))  # N(w; mu_p, I) / N(w; 0, I), (S, C)
    xi_k = np.exp(om @ K.T - 0.5 * (K**2).sum(-1)) * keep  # (S, n)
    w = np.zeros((n, len(om)))
    F = np.zeros((n, len(om), V.shape[1]))
    for i in range(n):
        c = chunk[i]
        usable = comp <= c
        mix = (ratio[:, : c + 1] * counts[: c + 1]).sum(-1)  # sum_{p<=c} n_p N(w; mu_p)/N(w; 0)
        H = xi_k[:, : i + 1].sum(-1)
        w[i] = usable * np.exp(om @ Q[i] - 0.5 * Q[i] @ Q[i]) * H / mix
        F[i] = (xi_k[:, : i + 1] @ V[: i + 1]) / H[:, None]
    num = np.einsum("is,isv->iv", w, F)
    den = w.sum(-1)
    ess = den**2 / (w**2).sum(-1)
    return num, den, ess


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize(
    ("est", "layout"),
    [
        (att.SNIS("chunk-mean", n_samples=11, n_chunks=4, causal=True, chunk_size=3), "mod"),
        (
            att.LARA(n_proposals=4, weights="balance", samples_per_proposal=3, causal=True, chunk_size=2),
            "repeat",
        ),
        (att.LARA(n_proposals=7, weights="balance", causal=True), "repeat"),
    ],
    ids=["snis", "lara-k3", "lara-k1"],
)
def test_causal_chunk_mean_matches_definition(est, layout, masked):
    Q, K, V = data(shape=(), n=23, seed=77)
    mask = None
    if masked:
        mask = np.zeros(23, dtype=bool)
        mask[[3, 4, 5, 6, 7, 12, 20]] = True  # chunk 1 of the C = 7 partition loses every key
    res = est(Q, K, V, rng=12, key_padding_mask=mask)
    C = res.proposal_means.shape[0]
    S = res.omega.shape[0]
    comp = np.arange(S) % C if layout == "mod" else np.repeat(np.arange(C), S // C)
    counts = np.bincount(comp, minlength=C).astype(float)
    num, den, ess = causal_definition(res, Q, K, V, comp, counts, mask)
    np.testing.assert_allclose(res.normalizer, den, rtol=1e-11)
    np.testing.assert_allclose(res.numerator, num, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(res.output, num / den[:, None], rtol=1e-10)
    np.testing.assert_allclose(res.ess, ess, rtol=1e-10)


@pytest.mark.parametrize(
    "est",
    [
        att.SNIS("chunk-mean", n_samples=16, n_chunks=5, causal=True, chunk_size=4),
        att.LARA(n_proposals=5, weights="balance", samples_per_proposal=3, causal=True, chunk_size=4),
        att.RFA(rk.features.Hyperbolic(8), causal=True, chunk_size=4),
        att.RA(n_samples=3, causal=True),
    ],
    ids=["snis", "lara", "rfa", "ra"],
)
def test_causal_rows_never_depend_on_later_positions(est):
    """Row i depends on positions 0..i only, bit for bit (queries, keys, values and the mask)."""
    Q, K, V = data(shape=(2,), n=40, scale=0.6)
    mask = np.zeros((2, 40), dtype=bool)
    mask[1, 5:9] = True
    a = est(Q, K, V, rng=2, key_padding_mask=mask)
    t = 22  # not a chunk or block boundary
    Q2, K2, V2, m2 = Q.copy(), K.copy(), V.copy(), mask.copy()
    Q2[:, t:] *= -3.0
    K2[:, t:] *= 4.0  # much larger key scales in the future
    V2[:, t:] = 1e6
    m2[:, t + 3 :] = True
    b = est(Q2, K2, V2, rng=2, key_padding_mask=m2)
    np.testing.assert_array_equal(a.output[:, :t], b.output[:, :t])
    if a.log_scale is not None:
        np.testing.assert_array_equal(a.numerator_values[:, :t], b.numerator_values[:, :t])
        np.testing.assert_array_equal(a.log_scale[:, :t], b.log_scale[:, :t])
    if a.ess is not None:
        np.testing.assert_array_equal(a.ess[:, :t], b.ess[:, :t])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "est",
    [
        att.SNIS(n_samples=64, causal=True),
        att.SNIS("chunk-mean", n_samples=64, n_chunks=8, causal=True),
        att.LARA(n_proposals=8, weights="balance", samples_per_proposal=4, causal=True),
    ],
    ids=["snis", "snis-chunk", "lara"],
)
def test_causal_linear_methods_large_logits_finite(dtype, est):
    rng = np.random.default_rng(4242)
    n, d = 64, 32
    U = rng.standard_normal((2, n, d))
    U /= np.linalg.norm(U, axis=-1, keepdims=True)
    Q = np.sqrt(50.0) * U[0]
    K = np.sqrt(50.0) * (0.8 * U[0] + 0.6 * U[1])
    K[::5] = np.sqrt(50.0) * U[0][::5]
    V = rng.standard_normal((n, 3))
    res = est(Q.astype(dtype), K.astype(dtype), V.astype(dtype), rng=0)
    assert res.output.dtype == dtype
    assert np.all(np.isfinite(res.output)) and res.n_nonpositive == 0
    assert np.all(np.isfinite(res.log_normalizer))
    assert np.all((res.ess >= 1 - 1e-3) & (res.ess <= 64 * (1 + 1e-3)))


def test_causal_memory_is_linear_in_n():
    """Peak traced memory at n and 4n: about 4x (linear), far below one n x n array."""

    def peak(est, n):
        rng = np.random.default_rng(0)
        Q, K, V = 0.3 * rng.standard_normal((3, n, 8))
        tracemalloc.start()
        est(Q, K, V, rng=0)
        _, pk = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return pk

    for est in (
        att.RFA(rk.features.Positive(32), causal=True),
        att.SNIS("chunk-mean", n_samples=32, causal=True),
        att.LARA(n_proposals=8, weights="balance", samples_per_proposal=4, causal=True),
    ):
        small, large = peak(est, 2048), peak(est, 8192)
        assert large < 0.05 * 8192 * 8192 * 8, (est, large)
        assert large / small < 5.0, (est, small, large)


# ----------------------------------------------------------------------------- bad input
ALL = [
    lambda causal: att.RFA(rk.features.Positive(4), causal=causal),
    lambda causal: att.RA(n_samples=2, causal=causal),
    lambda causal: att.SNIS(n_samples=4, causal=causal),
    lambda causal: att.LARA(n_proposals=2, weights="balance", causal=causal),
]
NAMES = ["RFA", "RA", "SNIS", "LARA"]


@pytest.mark.parametrize("make", ALL, ids=NAMES)
def test_bad_masks_are_named(make):
    Q, K, V = data(n=6)
    owner = make(False).__class__.__name__
    est = make(False)
    with pytest.raises(
        InvalidParameterError, match=rf"`key_padding_mask` parameter of {owner} must be a boolean.*float64"
    ):
        est(Q, K, V, rng=0, key_padding_mask=np.zeros(6))
    with pytest.raises(
        ShapeError, match=rf"`key_padding_mask` parameter of {owner} must have shape \(..., M\) with M=6"
    ):
        est(Q, K, V, rng=0, key_padding_mask=np.zeros(5, dtype=bool))
    with pytest.raises(ShapeError, match=r"not broadcastable .*key_padding_mask: \(4,\)"):
        est(Q, K, V, rng=0, key_padding_mask=np.zeros((4, 6), dtype=bool))
    with pytest.raises(
        ShapeError, match=r"batch shape \(5, 2, 3\), which must broadcast to the batch shape \(2, 3\)"
    ):
        est(Q, K, V, rng=0, key_padding_mask=np.zeros((5, 2, 3, 6), dtype=bool))
    full = np.zeros((2, 3, 6), dtype=bool)
    full[1, 2] = True
    with pytest.raises(ShapeError, match=r"hides every key that every query of batch index \(1, 2\)"):
        est(Q, K, V, rng=0, key_padding_mask=full)
    first = np.zeros(6, dtype=bool)
    first[:2] = True
    with pytest.raises(
        ShapeError, match=r"hides every key that queries 0..1 of batch index \(0, 0\).*causal=True"
    ):
        make(True)(Q, K, V, rng=0, key_padding_mask=first)


@pytest.mark.parametrize("make", ALL, ids=NAMES)
def test_causal_needs_square_inputs(make):
    Q, K, V = data(n=6)
    with pytest.raises(ShapeError, match=r"`causal=True` needs as many queries as keys.*n=5.*M=6"):
        make(True)(Q[..., :5, :], K, V, rng=0)


def test_lara_optimal_has_no_causal_form():
    with pytest.raises(
        InvalidParameterError,
        match=r"`weights` parameter of LARA must be 'balance' when causal=True.*"
        r"softmax over all n queries.*Got weights='optimal' with causal=True",
    ):
        att.LARA(causal=True)
    with pytest.raises(InvalidParameterError, match="`causal` parameter of SNIS must be a bool"):
        att.SNIS(causal="yes")


def test_masked_chunk_limits():
    Q, K, V = data(n=6)
    mask = np.zeros(6, dtype=bool)
    mask[2:] = True  # two keys left in every slice
    with pytest.raises(
        InvalidParameterError, match=r"`n_proposals` .* \[1, min\(n, unmasked keys of a slice\)\] = \[1, 2\]"
    ):
        att.LARA(n_proposals=3)(Q, K, V, rng=0, key_padding_mask=mask)
    with pytest.raises(InvalidParameterError, match=r"`n_chunks` .* = \[1, 2\]"):
        att.SNIS("chunk-mean", n_samples=8, n_chunks=3)(Q, K, V, rng=0, key_padding_mask=mask)
    # causal: positional chunks, every chunk has queries, so C <= n
    res = att.LARA(n_proposals=6, weights="balance", causal=True)(Q, K, V, rng=0, key_padding_mask=mask)
    assert np.all(np.isfinite(res.output))


# ----------------------------------------------------------------------------- causal numerics: both paths
def _spread_data(n=96, seed=31):
    """Keys whose norms grow along the sequence: small spreads of the column maxima early, large later."""
    rng = np.random.default_rng(seed)
    Q = 0.5 * rng.standard_normal((2, n, 6))
    K = rng.standard_normal((2, n, 6)) * np.linspace(0.2, 3.0, n)[:, None]
    V = rng.standard_normal((2, n, 3))
    return Q, K, V


@pytest.mark.parametrize("limit", [0.0, 6.0, 25.0], ids=["all-exact", "mixed", "all-factorised"])
@pytest.mark.parametrize(
    "est",
    [
        att.RFA(rk.features.Positive(32), causal=True, chunk_size=8),
        att.RFA(rk.features.OPRF(16, A=-0.1), causal=True, chunk_size=5),
        att.SNIS(n_samples=24, causal=True, chunk_size=8),
    ],
    ids=["positive", "oprf", "snis"],
)
def test_causal_factorised_and_exact_paths_agree(est, limit, monkeypatch):
    """The scan folds per-column shifts into products only where that is exact (spread below the
    limit of the dtype), per block; forcing the exponential path anywhere changes nothing beyond
    round-off, and the per-block choice keeps rows independent of later positions bit for bit."""
    from rfkit.attention import _causal

    Q, K, V = _spread_data()
    mask = np.zeros((2, 96), dtype=bool)
    mask[1, 40:52] = True
    ref = est(Q, K, V, rng=3, key_padding_mask=mask)
    monkeypatch.setattr(_causal, "spread_limit", lambda bk, dtype: limit)
    res = est(Q, K, V, rng=3, key_padding_mask=mask)
    np.testing.assert_allclose(res.output, ref.output, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(res.log_normalizer, ref.log_normalizer, rtol=1e-11, atol=1e-11)
    if ref.ess is not None:
        np.testing.assert_allclose(res.ess, ref.ess, rtol=1e-10)
    t = 61
    K2, V2 = K.copy(), V.copy()
    K2[:, t:] *= 5.0
    V2[:, t:] = -1e5
    later = est(Q, K2, V2, rng=3, key_padding_mask=mask)
    np.testing.assert_array_equal(later.output[:, :t], res.output[:, :t])
