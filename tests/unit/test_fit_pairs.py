"""Fitting data-dependent maps on a selection of query-key pairs (``fit_pairs``, ``pairs=``, ``exclude=``).

* ``"all"`` (the default) is today's fit, bit for bit, with and without key padding;
* every selection equals a brute-force reference built from the list of selected pairs, pair
  by pair (``fit_pairs_reference``), to 1e-12;
* the fitted parameters minimise the objective evaluated pair by pair over the selection;
* RFA, Hybrid (``fit_on="remainder"``) and the study harness pass the sequence structure;
* bad input raises rfkit exceptions naming the argument.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest
from backend_marks import needs_torch, torch
from fit_pairs_reference import (
    aderf_ref,
    cexp_mean_ref,
    cexp_variance_ref,
    gerf_objective_ref,
    gerf_ref,
    log_second_moment,
    oprf_ref,
    pair_list,
    paired_rows,
    saderf_ref,
    sderf_ref,
)

import rfkit as rk
from rfkit.exceptions import InvalidParameterError, ShapeError

F = rk.features
S, N, D = 2, 7, 3
TOL = {"rtol": 1e-12, "atol": 1e-13}


def _data(seed=20240613, S=S, n=N, M=N, d=D):
    g = np.random.default_rng(seed)
    Q = 0.5 * g.standard_normal((S, n, d)) + np.linspace(0.2, 0.6, d)
    K = 0.4 * g.standard_normal((S, M, d)) - np.linspace(0.1, 0.5, d)
    return Q, K


def _exclusion(S=S, n=N, M=N, s=3, seed=7):
    """Distinct random key positions per query, some entries invalid."""
    g = np.random.default_rng(seed)
    idx = np.stack([np.stack([g.permutation(M)[:s] for _ in range(n)]) for _ in range(S)])
    valid = g.random((S, n, s)) < 0.7
    return idx, valid


PAD = np.zeros((S, N), dtype=bool)
PAD[0, 4] = PAD[1, 1] = PAD[1, 6] = True
MASK = np.random.default_rng(3).random((S, N, N)) < 0.6
MASK[:, :, 0] = True  # every query keeps a key

# (rule or mask, pad, exclude): the selections checked against the brute force
SELECTIONS = {
    "causal": ("causal", None, None),
    "causal+pad": ("causal", PAD, None),
    "causal+pad+exclude": ("causal", PAD, _exclusion()),
    "sequence+exclude": ("sequence", None, _exclusion()),
    "all+pad+exclude": ("all", PAD, _exclusion()),
    "mask+pad": ("mask", PAD, None),
    "mask+exclude": ("mask", None, _exclusion()),
}


def _select(name):
    rule, pad, exc = SELECTIONS[name]
    Q, K = _data()
    pairs = MASK if rule == "mask" else rule
    kw = {"pairs": pairs, "key_padding_mask": pad, "exclude": exc}
    qids, kids = pair_list(Q, K, rule, pad=pad, mask=MASK, exclude=exc)
    X, Y = paired_rows(Q, K, qids, kids)
    return Q, K, kw, X, Y, qids, kids


@pytest.mark.parametrize("name", list(SELECTIONS))
def test_closed_form_fits_equal_brute_force(name):
    Q, K, kw, X, Y, qids, kids = _select(name)
    np.testing.assert_allclose(F.oprf_optimal_A(Q, K, **kw), oprf_ref(X, Y), **TOL)
    np.testing.assert_allclose(F.OPRF(8).fit(Q, K, **kw).A, oprf_ref(X, Y), **TOL)
    np.testing.assert_allclose(F.SDERF(8).fit(Q, K, **kw).A, sderf_ref(X, Y), **TOL)
    a, G = aderf_ref(X, Y)
    fm = F.ADERF(8).fit(Q, K, **kw)
    np.testing.assert_allclose(fm.A, a, **TOL)
    np.testing.assert_allclose(fm.G, G, rtol=1e-10, atol=1e-12)  # scipy's sqrtm (Schur) vs eigh
    psi, a = saderf_ref(X, Y)
    fm = F.SADERF(8).fit(Q, K, **kw)
    np.testing.assert_allclose(fm.psi, psi, **TOL)
    np.testing.assert_allclose(fm.A, a, **TOL)
    np.testing.assert_allclose(F.CEXP(8, A="mean").fit(Q, K, **kw).A, cexp_mean_ref(X, Y), **TOL)
    want = cexp_variance_ref(X, Y, qids, kids)
    np.testing.assert_allclose(F.HCEXP(8, A="variance").fit(Q, K, **kw).A, want, **TOL)
    # given G (ADERF) or psi (SADERF): only a is fitted, on the transformed pairs
    Gd = np.array([1.3, 0.7, 1.1])
    np.testing.assert_allclose(F.ADERF(8, G=Gd).fit(Q, K, **kw).A, oprf_ref(X * Gd, Y / Gd), **TOL)
    np.testing.assert_allclose(F.SADERF(8, psi=Gd).fit(Q, K, **kw).A, oprf_ref(X * Gd, Y / Gd), **TOL)


@pytest.mark.parametrize("name", ["causal+pad+exclude", "sequence+exclude", "all+pad+exclude", "mask+pad"])
def test_numerical_fits_minimise_the_brute_force_objective(name):
    """Hyperbolic OPRF and GERF(s=-1): the fitted A minimises the mean over the listed pairs.

    The optimum is found numerically on both sides (rfkit: grid + Brent in log u; the reference:
    a finer grid + Brent), so the A agree to the optimisers' tolerance and the fit's objective
    is no worse than the reference's (to round-off).
    """
    Q, K, kw, X, Y, _, _ = _select(name)
    t_hyp, t_trig = -np.sum((X + Y) ** 2, axis=1), np.sum((X - Y) ** 2, axis=1)
    for fm, t in ((F.OPRF(8, hyperbolic=True), t_hyp), (F.GERF(8, s=-1), t_trig)):
        got, ref = fm.fit(Q, K, **kw).A, gerf_ref(t, D)
        np.testing.assert_allclose(got, ref, rtol=1e-6)
        assert gerf_objective_ref(got, t, D) <= gerf_objective_ref(ref, t, D) + 1e-12
        for da in (-1e-4, 1e-4):
            assert gerf_objective_ref(got, t, D) < gerf_objective_ref(got + da, t, D)


def test_pair_values_list_exactly_the_selected_pairs():
    for name in ("all+pad+exclude", "causal+pad+exclude", "mask+exclude"):
        Q, K, kw, X, Y, _, _ = _select(name)
        np.testing.assert_allclose(
            np.sort(F.pair_values(Q, K, 1.0, **kw)), np.sort(np.sum((X + Y) ** 2, 1)), **TOL
        )
        np.testing.assert_allclose(
            np.sort(F.pair_values(Q, K, -1.0, **kw)), np.sort(np.sum((X - Y) ** 2, 1)), **TOL
        )


def test_pair_moments_equal_brute_force():
    Q, K, kw, X, Y, qids, _ = _select("causal+pad+exclude")
    pm = F.pair_moments(Q, K, **kw)
    assert pm.weight == len(X)
    np.testing.assert_allclose(pm.mean_q, X.mean(0), **TOL)
    np.testing.assert_allclose(pm.second_k, Y.T @ Y / len(Y), **TOL)
    np.testing.assert_allclose(pm.cross, X.T @ Y / len(X), **TOL)
    np.testing.assert_allclose(pm.ss_q, np.sum((X - X.mean(0)) ** 2, 0), **TOL)
    assert pm.sq_weight_q == sum(c * c for c in Counter(qids).values())


# ----------------------------------------------------------------------------- optimality
def _perturbations(rng, d, k=6, eps=1e-3):
    return [eps * rng.standard_normal(d) for _ in range(k)]


@pytest.mark.parametrize("name", ["causal+pad", "causal+pad+exclude", "mask+exclude"])
def test_fitted_parameters_minimise_the_pair_objective(name):
    """The objective evaluated pair by pair over the selection is lowest at the fitted parameters."""
    Q, K, kw, X, Y, _, _ = _select(name)
    rng = np.random.default_rng(11)
    a = F.OPRF(8).fit(Q, K, **kw).A
    J = log_second_moment(np.full(D, a), X + Y)
    for da in (-1e-3, 1e-3):
        assert J < log_second_moment(np.full(D, a + da), X + Y)
    A = F.SDERF(8).fit(Q, K, **kw).A
    w, V = np.linalg.eigh(A)
    J = log_second_moment(w, (X + Y) @ V)
    for E in _perturbations(rng, (D, D)):
        w2, V2 = np.linalg.eigh(A + 0.5 * (E + E.T))
        assert J < log_second_moment(w2, (X + Y) @ V2)
    fm = F.ADERF(8).fit(Q, K, **kw)
    J = log_second_moment(np.full(D, fm.A), X @ fm.G.T + Y @ np.linalg.inv(fm.G))
    for E in _perturbations(rng, (D, D)):
        G2 = fm.G + E
        assert J < log_second_moment(np.full(D, fm.A), X @ G2.T + Y @ np.linalg.inv(G2))
    fm = F.SADERF(8).fit(Q, K, **kw)
    J = log_second_moment(np.full(D, fm.A), X * fm.psi + Y / fm.psi)
    for e in _perturbations(rng, D):
        p2 = fm.psi * np.exp(e)
        assert J < log_second_moment(np.full(D, fm.A), X * p2 + Y / p2)


# ----------------------------------------------------------------------------- "all" unchanged
MAPS = {
    "oprf": lambda: F.OPRF(8),
    "oprf-hyperbolic": lambda: F.OPRF(8, hyperbolic=True),
    "gerf-trig": lambda: F.GERF(8, s=-1),
    "saderf": lambda: F.SADERF(8),
    "aderf": lambda: F.ADERF(8),
    "sderf": lambda: F.SDERF(8),
    "cexp-mean": lambda: F.CEXP(8, A="mean"),
    "hcexp-variance": lambda: F.HCEXP(8, A="variance"),
}


def _params(fm):
    return [np.asarray(getattr(fm, p)) for p in ("A", "G", "psi") if hasattr(fm, p)]


@pytest.mark.parametrize("name", list(MAPS))
def test_all_is_the_pooled_fit_bit_for_bit(name):
    Q, K = _data()
    fm = MAPS[name]()
    assert fm.fit_pairs == "all"
    pooled = fm.fit(Q.reshape(-1, D), K.reshape(-1, D))
    for other in (fm.fit(Q, K), fm.fit(Q, K, pairs="all"), F.fit_to_pairs(fm, Q, K)):
        assert all(np.array_equal(a, b) for a, b in zip(_params(pooled), _params(other)))
    # padded keys are dropped: the fit of the pooled queries and the kept keys
    dropped = fm.fit(Q.reshape(-1, D), K.reshape(-1, D)[~PAD.reshape(-1)])
    masked = fm.fit(Q, K, key_padding_mask=PAD)
    assert all(np.array_equal(a, b) for a, b in zip(_params(dropped), _params(masked)))


@pytest.mark.parametrize("name", list(MAPS))
def test_causal_fit_ignores_padded_keys_and_the_future(name):
    """Moving a padded key changes nothing; moving a key the queries see changes the fit."""
    Q, K = _data()
    fm = MAPS[name]().__class__(**{**_fields(MAPS[name]()), "fit_pairs": "causal"})
    base = _params(fm.fit(Q, K, key_padding_mask=PAD))
    K2 = K.copy()
    K2[0, 4] += 5.0  # padded
    assert all(np.array_equal(a, b) for a, b in zip(base, _params(fm.fit(Q, K2, key_padding_mask=PAD))))
    K3 = K.copy()
    K3[0, 3] += 0.5  # seen by queries 3.. of sequence 0
    assert not all(np.allclose(a, b) for a, b in zip(base, _params(fm.fit(Q, K3, key_padding_mask=PAD))))


def _fields(fm):
    return {f.name: getattr(fm, f.name) for f in dataclasses.fields(fm)}


def test_sequence_equals_all_for_one_sequence_and_causal_differs():
    Q, K = _data(S=1)
    for name in ("oprf", "sderf", "saderf", "aderf", "hcexp-variance"):
        fm = MAPS[name]()
        a, s = _params(fm.fit(Q, K)), _params(fm.fit(Q, K, pairs="sequence"))
        assert all(np.allclose(x, y, rtol=1e-12, atol=1e-14) for x, y in zip(a, s)), name
        c = _params(fm.fit(Q, K, pairs="causal"))
        assert not all(np.allclose(x, y) for x, y in zip(a, c)), name


def test_causal_moments_run_in_linear_memory():
    """n = 200,000 tokens: an n x n weight matrix (320 GB) would not fit; prefix sums do."""
    g = np.random.default_rng(1)
    Q, K = 0.1 * g.standard_normal((2, 200_000, 4)), 0.1 * g.standard_normal((2, 200_000, 4))
    pm = F.pair_moments(Q, K, pairs="causal")
    assert pm.weight == 2 * 200_000 * 200_001 // 2
    assert np.isfinite(F.SDERF(8, fit_pairs="causal").fit(Q, K).A).all()


# ----------------------------------------------------------------------------- attention wiring
def test_rfa_fits_a_causal_map_on_causal_pairs_of_each_head():
    Q, K = _data()
    V = np.random.default_rng(2).standard_normal((S, N, 2))
    fm = F.SDERF(8, fit_pairs="causal")
    res = rk.attention.RFA(fm, causal=True)(Q, K, V, rng=1, key_padding_mask=PAD)
    np.testing.assert_array_equal(res.feature_map.A, fm.fit(Q, K, key_padding_mask=PAD).A)
    heads = rk.attention.RFA(fm, causal=True, shared_across_heads=False)(Q, K, V, rng=1)
    for h in range(S):
        np.testing.assert_array_equal(heads.feature_map[h].A, fm.fit(Q[h], K[h]).A)
    # the default stays "all", for causal attention too
    plain = rk.attention.RFA(F.SDERF(8), causal=True)(Q, K, V, rng=1)
    np.testing.assert_array_equal(plain.feature_map.A, F.SDERF(8).fit(Q.reshape(-1, D), K.reshape(-1, D)).A)


@pytest.mark.parametrize("causal", [False, True])
def test_hybrid_fits_on_the_remainder(causal):
    Q, K = _data()
    V = np.random.default_rng(2).standard_normal((S, N, 2))
    hy = rk.attention.Hybrid(F.OPRF(8), window=1, n_global=1, causal=causal, fit_on="remainder")
    res = hy(Q, K, V, rng=5, key_padding_mask=PAD)
    keep = ~PAD
    qids, kids = [], []
    for s in range(S):
        for i in range(N):
            for j in range(N):
                seen = keep[s, j] and (j <= i or not causal)
                exact = abs(i - j) <= 1 or j == 0
                if seen and not exact:
                    qids.append((s, i))
                    kids.append((s, j))
    X, Y = paired_rows(Q, K, qids, kids)
    np.testing.assert_allclose(res.feature_map.A, oprf_ref(X, Y), **TOL)
    default = rk.attention.Hybrid(F.OPRF(8), window=1, n_global=1, causal=causal)(Q, K, V, rng=5)
    assert default.feature_map.A == F.OPRF(8).fit(Q, K).A  # fit_on="all": as RFA


def test_hybrid_remainder_empty_support_and_full_support():
    Q, K = _data()
    V = np.random.default_rng(2).standard_normal((S, N, 2))
    fm = F.SADERF(8)
    empty = rk.attention.Hybrid(fm, causal=True, fit_on="remainder")(Q, K, V, rng=3)
    np.testing.assert_allclose(empty.feature_map.A, fm.fit(Q, K, pairs="causal").A, **TOL)
    full = rk.attention.Hybrid(fm, window=N, causal=True, fit_on="remainder")(Q, K, V, rng=3)
    np.testing.assert_allclose(
        full.output, rk.attention.softmax(Q, K, V, causal=True), rtol=1e-10, atol=1e-12
    )
    lsh = rk.attention.Hybrid(fm, lsh_buckets=2, fit_on="remainder")(Q, K, V, rng=3)
    assert np.isfinite(lsh.output).all()


_NO_CUDA = torch is None or not torch.cuda.is_available()


def _backend_cases():
    out = [pytest.param("array_api_strict", id="array_api_strict")]
    cuda = pytest.mark.skipif(_NO_CUDA, reason="no CUDA device (GPU tests run on a GPU machine)")
    return out + [
        pytest.param("torch", id="torch", marks=needs_torch),
        pytest.param("cuda", id="torch-cuda", marks=cuda),
    ]


@pytest.mark.parametrize("library", _backend_cases())
def test_selected_fits_on_other_array_libraries(library):
    """PyTorch (CPU) and array_api_strict inputs give the NumPy fit (moments formed on their device)."""
    Q, K = _data()
    idx, valid = _exclusion()
    if library == "torch":
        conv = torch.asarray
    elif library == "cuda":

        def conv(a):
            return torch.asarray(a, device="cuda")

    else:
        xps = pytest.importorskip("array_api_strict")
        conv = xps.asarray
    kw = {"key_padding_mask": PAD, "exclude": (idx, valid)}
    for name in ("oprf", "oprf-hyperbolic", "sderf", "aderf", "saderf", "hcexp-variance", "cexp-mean"):
        fm = dataclasses.replace(MAPS[name](), fit_pairs="causal")
        want = _params(fm.fit(Q, K, **kw))
        got = _params(fm.fit(conv(Q), conv(K), key_padding_mask=conv(PAD), exclude=(idx, valid)))
        for a, b in zip(want, got):
            np.testing.assert_allclose(
                b, a, rtol=1e-11 if name != "oprf-hyperbolic" else 1e-6, atol=1e-13
            )  # Brent: flat optimum
        mask = conv(MASK)
        np.testing.assert_allclose(
            _params(fm.fit(conv(Q), conv(K), pairs=mask))[0], _params(fm.fit(Q, K, pairs=MASK))[0], rtol=1e-6
        )


def test_study_fits_causal_rows_on_decoder_cells_only():
    from rfkit.study import _builtin_attention_hooks as hooks
    from rfkit.study import _eval_attention as ev

    class _Design:
        def estimator_params(self, est, cell):
            return dict(est)

    est = {"estimator": "RFA", "map": "OPRF", "fit_pairs": "causal"}
    assert ev.cell_estimator_params(_Design(), est, {}, True)["fit_pairs"] == "causal"
    assert ev.cell_estimator_params(_Design(), est, {}, False)["fit_pairs"] == "all"
    Q, K = _data()
    rfa = rk.attention.RFA(F.OPRF(8, fit_pairs="causal"), causal=True)
    np.testing.assert_array_equal(
        hooks.rfa_fit(rfa, Q, K).feature_map.A, F.OPRF(8).fit(Q, K, pairs="causal").A
    )


def test_a_cell_fits_equal_maps_once(monkeypatch):
    """Estimators whose maps are equal (a "causal-fit" map on a bidirectional cell is the plain one) share
    one fit per chunk; different maps fit on their own."""
    from rfkit.features import _pairs
    from rfkit.study import _builtin_attention_hooks as hooks

    calls = []
    real = _pairs.fit_to_pairs
    monkeypatch.setattr(hooks, "fit_to_pairs", lambda fm, *a, **k: calls.append(fm) or real(fm, *a, **k))
    Q, K = _data()
    fits: dict = {}
    plain = rk.attention.RFA(F.OPRF(8, hyperbolic=True))
    same = rk.attention.RFA(F.OPRF(8, hyperbolic=True, fit_pairs="all"), causal=False)
    other = rk.attention.RFA(F.OPRF(8, hyperbolic=True, fit_pairs="causal"), causal=True)
    a, b, c = (hooks.rfa_fit(e, Q, K, fits) for e in (plain, same, other))
    assert len(calls) == 2 and a.feature_map is b.feature_map
    assert a.feature_map.A == F.OPRF(8, hyperbolic=True).fit(Q, K).A
    assert c.feature_map.A == F.OPRF(8, hyperbolic=True).fit(Q, K, pairs="causal").A != a.feature_map.A


# ----------------------------------------------------------------------------- bad input
def test_bad_input():
    Q, K = _data()
    with pytest.raises(InvalidParameterError, match="fit_pairs"):
        F.OPRF(8, fit_pairs="prefix")
    with pytest.raises(InvalidParameterError, match="fit_pairs"):
        F.CEXP(8, A="mean", fit_pairs=1)
    with pytest.raises(InvalidParameterError, match="pairs"):
        F.SDERF(8).fit(Q, K, pairs="bogus")
    with pytest.raises(InvalidParameterError, match="pairs"):
        F.SDERF(8).fit(Q, K, pairs=3.0)
    with pytest.raises(ShapeError, match="causal"):
        F.OPRF(8, fit_pairs="causal").fit(Q, K[:, :5])
    with pytest.raises(InvalidParameterError, match="boolean"):
        F.OPRF(8).fit(Q, K, pairs=MASK.astype(float))
    with pytest.raises(ShapeError, match="pairs"):
        F.OPRF(8).fit(Q, K, pairs=MASK[:, :3])
    with pytest.raises(InvalidParameterError, match="key_padding_mask"):
        F.OPRF(8, fit_pairs="causal").fit(Q, K, key_padding_mask=PAD.astype(int))
    with pytest.raises(ShapeError, match="key_padding_mask"):
        F.OPRF(8, fit_pairs="causal").fit(Q, K, key_padding_mask=PAD[:, :3])
    idx, valid = _exclusion()
    dup = idx.copy()
    dup[0, 2, 1] = dup[0, 2, 0]
    with pytest.raises(InvalidParameterError, match="at most once"):
        F.OPRF(8).fit(Q, K, pairs="sequence", exclude=(dup, np.ones_like(valid)))
    with pytest.raises(ShapeError, match="outside"):
        F.OPRF(8).fit(Q, K, pairs="sequence", exclude=(idx + N, valid | True))
    with pytest.raises(InvalidParameterError, match="exclude"):
        F.OPRF(8).fit(Q, K, exclude=idx)
    everything = np.broadcast_to(np.arange(N), (S, N, N))
    with pytest.raises(ShapeError, match="no \\(query, key\\) pair"):
        F.OPRF(8).fit(Q, K, pairs="causal", exclude=(everything, np.ones((S, N, N), bool)))
    with pytest.raises(ShapeError, match="effective sample"):
        F.CEXP(8, A="variance").fit(Q[0, :1], K[0, :1], pairs="causal")
    with pytest.raises(InvalidParameterError, match="fit_on"):
        rk.attention.Hybrid(F.OPRF(8), fit_on="support")
    V = np.ones((S, N, 1))
    with pytest.raises(InvalidParameterError, match="shared_across_heads"):
        rk.attention.Hybrid(F.OPRF(8), window=1, fit_on="remainder", shared_across_heads=False)(
            Q, K, V, rng=0
        )


def test_maps_of_your_own_fit_on_all_pairs_only():
    """A map whose fit(Q, K) takes no selection: fitted on the pooled rows, other selections refused."""

    @dataclasses.dataclass(frozen=True)
    class Mine(F.Positive):
        A: float | None = None
        _fitted_params = ("A",)

        def fit(self, queries, keys):
            return dataclasses.replace(self, A=float(np.mean(queries) + np.mean(keys)))

    Q, K = _data()
    got = F.fit_to_pairs(Mine(4), Q, K, key_padding_mask=PAD)
    assert got.A == float(np.mean(Q.reshape(-1, D)) + np.mean(K.reshape(-1, D)[~PAD.reshape(-1)]))
    with pytest.raises(InvalidParameterError, match="takes no pair selection"):
        F.fit_to_pairs(Mine(4), Q, K, pairs="causal")


def test_study_files_validate_fit_pairs(tmp_path):
    """real-attention's causal-fit rows load; a bad value or a map without the option is refused by name."""
    from pathlib import Path

    import tomllib

    src = (Path(rk.__file__).parent / "studies" / "real-attention.toml").read_text(encoding="utf-8")
    fitted = [e for e in tomllib.loads(src)["estimators"] if e.get("fit_pairs") == "causal"]
    assert {e["map"] for e in fitted} >= {"OPRF", "SDERF", "SADERF", "CEXP", "HCEXP"}
    bad = tmp_path / "bad.toml"
    bad.write_text(src.replace('\nfit_pairs = "causal"\n', '\nfit_pairs = "prefix"\n', 1), encoding="utf-8")
    with pytest.raises(InvalidParameterError, match="fit_pairs.*'prefix'"):
        rk.study.load_design(bad)
    bad.write_text(
        src.replace(
            'map = "Positive"\nprojection = "orthogonal"\n', 'map = "Positive"\nfit_pairs = "causal"\n', 1
        ),
        encoding="utf-8",
    )
    with pytest.raises(InvalidParameterError, match="Positive has no parameter `fit_pairs`"):
        rk.study.load_design(bad)
