"""Batched trials: a work unit evaluates its trials as stacked arrays, one draw tensor for
all of them, and every trial's numbers equal the trial-by-trial computation from its own stream
(same seeds, same numbers to round-off), for every built-in feature map, in kernel cells and in
RFA attention cells."""

from __future__ import annotations

import numpy as np
import pytest

import rfkit as rk
import rfkit.study as st
import rfkit.study._builtin_attention_hooks as hooks
from rfkit.study._eval_kernel import kernel_ratios

F = rk.features

#: every built-in map, with its projections where it has them
MAPS = {
    "Trig": F.Trig(6, projection="orthogonal"),
    "Positive": F.Positive(6, projection="simplex"),
    "Positive-qmc": F.Positive(8, projection="qmc"),
    "Positive-structured": F.Positive(8, projection="structured"),
    "Hyperbolic": F.Hyperbolic(5),
    "CEXP": F.CEXP(6, A="mean"),
    "HCEXP": F.HCEXP(6, A="variance"),
    "OPRF": F.OPRF(6, hyperbolic=True),
    "GERF": F.GERF(6, s=-1),
    "SADERF": F.SADERF(6),
    "ADERF": F.ADERF(6),
    "SDERF": F.SDERF(6),
    "Taylor": F.Taylor(degree=3),
    "Limit": F.Limit(n=3),
    "RandomMaclaurin": F.RandomMaclaurin(6),
    "TensorSketch": F.TensorSketch(4, degree=2),
}


def test_every_builtin_map_is_covered():
    assert {name.split("-")[0] for name in MAPS} == set(st.FEATURE_MAPS)


@pytest.mark.parametrize("name", sorted(MAPS))
def test_kernel_trials_batched_equal_trial_by_trial(name):
    rng = np.random.default_rng(17)
    X = 0.4 * rng.standard_normal((9, 4))
    Y = 0.4 * rng.standard_normal((9, 4))
    fm = MAPS[name]
    if fm.needs_data:
        fm = fm.fit(X, Y)
    log_truth = np.sum(X * Y, axis=1)
    streams = [np.random.SeedSequence(31, spawn_key=(2, t)) for t in range(7)]
    batched = kernel_ratios(fm, X, Y, log_truth, streams, cache={})
    one_by_one = np.stack([kernel_ratios(fm, X, Y, log_truth, [s])[0] for s in streams])
    np.testing.assert_allclose(batched, one_by_one, rtol=1e-12, atol=1e-14)


ATTENTION = dict(
    name="batched-attention",
    kind="attention",
    trials=6,
    chunk_trials=6,
    seed=5,
    metrics=["mse"],
    data={"source": "sequence", "n_tokens": 12, "dim": 4, "d_v": 3, "scale": 0.5},
    grid={"dim": [4]},
    estimators=[{"label": name, "estimator": "RFA", "map": fm} for name, fm in MAPS.items()]
    + [
        {"label": f"{name}-causal", "estimator": "RFA", "map": fm, "causal": True}
        for name, fm in MAPS.items()
    ],
    on_error="record",
)


@pytest.mark.filterwarnings("ignore::rfkit.exceptions.NonPositiveNormalizerWarning")
def test_rfa_trials_batched_equal_trial_by_trial(monkeypatch):
    d = st.Design(**ATTENTION)
    batched = st.run(d, progress=False)
    monkeypatch.setattr(hooks, "BATCH_ELEMS", 1)  # one call per trial, from its own stream
    single = st.run(d, progress=False)
    a, b = batched.trials, single.trials
    assert (a["status"] == b["status"]).all()
    num = ["err", "sq_err", "abs_err", "max_abs_err", "nonpositive_rows", "n_nan_rows"]
    np.testing.assert_allclose(a[num].to_numpy(float), b[num].to_numpy(float), rtol=1e-10, atol=1e-13)


#: the sampled estimators (their own draws, no feature map), in every form a study may use
SAMPLED = [
    {"label": "snis", "estimator": "SNIS", "n_samples": 6},
    {
        "label": "snis-orth-heads",
        "estimator": "SNIS",
        "n_samples": 6,
        "projection": "orthogonal",
        "shared_across_heads": False,
    },
    {"label": "snis-chunk", "estimator": "SNIS", "proposal": "chunk-mean", "n_samples": 6, "n_chunks": 3},
    {
        "label": "snis-chunk-causal",
        "estimator": "SNIS",
        "proposal": "chunk-mean",
        "n_samples": 6,
        "n_chunks": 3,
        "causal": True,
    },
    {"label": "lara", "estimator": "LARA", "n_proposals": 3, "samples_per_proposal": 2, "weights": "balance"},
    {
        "label": "lara-optimal",
        "estimator": "LARA",
        "n_proposals": 3,
        "samples_per_proposal": 2,
        "weights": "optimal",
    },
    {
        "label": "lara-causal",
        "estimator": "LARA",
        "n_proposals": 3,
        "samples_per_proposal": 2,
        "weights": "balance",
        "causal": True,
    },
    {"label": "ra", "estimator": "RA", "n_samples": 3},
    {"label": "ra-causal", "estimator": "RA", "n_samples": 2, "causal": True},
]


@pytest.mark.filterwarnings("ignore::rfkit.exceptions.NonPositiveNormalizerWarning")
def test_sampled_estimator_trials_batched_equal_trial_by_trial(monkeypatch):
    """SNIS, LARA and RA cells: trials stacked on a leading axis with TrialStreams, one call."""
    spec = dict(ATTENTION, estimators=SAMPLED)
    d = st.Design(**spec)
    calls: list[int] = []
    real = hooks.TrialStreams

    def counting(gens):  # records every stacked call's trial count
        calls.append(len(gens))
        return real(gens)

    monkeypatch.setattr(hooks, "TrialStreams", counting)
    batched = st.run(d, progress=False)
    assert calls and max(calls) == 6  # the whole chunk of trials in one call
    monkeypatch.setattr(hooks, "SAMPLED_BATCH_ELEMS", 1)  # one call per trial, from its own stream
    calls.clear()
    single = st.run(d, progress=False)
    assert not calls
    a, b = batched.trials, single.trials
    assert (a["status"] == "ok").all() and (b["status"] == "ok").all()
    num = ["err", "sq_err", "abs_err", "max_abs_err", "nonpositive_rows", "n_nan_rows"]
    np.testing.assert_allclose(a[num].to_numpy(float), b[num].to_numpy(float), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize(
    "est",
    [
        rk.attention.SNIS(n_samples=5, shared_across_heads=False),
        rk.attention.SNIS("chunk-mean", n_samples=6, n_chunks=2, causal=True),
        rk.attention.LARA(n_proposals=2, samples_per_proposal=3, weights="optimal"),
        rk.attention.RA(n_samples=3, causal=True),
    ],
    ids=["snis-heads", "snis-causal", "lara-optimal", "ra-causal"],
)
def test_trial_streams_equal_one_call_per_generator(est):
    from rfkit._random import TrialStreams

    rng = np.random.default_rng(3)
    Q, K, V = 0.5 * rng.standard_normal((3, 2, 3, 10, 4))  # (texts, heads, n, d)
    T = 4
    stack = [np.broadcast_to(a, (T, *a.shape)) for a in (Q, K, V)]
    res = est(*stack, rng=TrialStreams(tuple(np.random.default_rng(100 + t) for t in range(T))))
    for t in range(T):
        one = est(Q, K, V, rng=np.random.default_rng(100 + t))
        np.testing.assert_allclose(res.output[t], one.output, rtol=1e-12, atol=1e-14)


def test_trial_streams_need_the_trial_axis():
    from rfkit._random import TrialStreams

    Q = np.zeros((3, 5, 4))  # 3 slices cannot hold 2 trials
    gens = TrialStreams((np.random.default_rng(0), np.random.default_rng(1)))
    for est in (rk.attention.SNIS(n_samples=4), rk.attention.RA()):
        with pytest.raises(rk.exceptions.InvalidParameterError, match="leading trial axis of length 2"):
            est(Q, Q, Q, rng=gens)


HYBRID = [
    {"label": "hybrid-plain", "estimator": "Hybrid", "variant": "plain", "window": 2, "n_global": 1},
    {
        "label": "hybrid-ratio",
        "estimator": "Hybrid",
        "variant": "ratio",
        "window": 3,
        "projection": "orthogonal",
    },
    {"label": "hybrid-causal", "estimator": "Hybrid", "window": 2, "n_global": 2, "causal": True},
    {"label": "hybrid-trig", "estimator": "Hybrid", "map": "Trig", "window": 1},
    {
        "label": "hybrid-lsh",
        "estimator": "Hybrid",
        "window": 1,
        "lsh_buckets": 4,
        "n_features": 3,
    },  # one call per trial
    {"label": "hybrid-fitted", "estimator": "Hybrid", "map": "OPRF", "window": 2},  # one call per trial
]


@pytest.mark.filterwarnings("ignore::rfkit.exceptions.NonPositiveNormalizerWarning")
def test_hybrid_trials_batched_equal_trial_by_trial(monkeypatch):
    """Hybrid cells: stacked feature draws where the support draws nothing (no LSH), as for RFA."""
    d = st.Design(**dict(ATTENTION, estimators=HYBRID, grid={"dim": [4], "feature_dim": [10]}))
    # which of them stack: those whose support draws nothing and whose map needs no fit
    qkv = tuple(np.zeros((12, 4)) for _ in range(3))
    streams = [np.random.SeedSequence(0, spawn_key=(t,)) for t in range(6)]
    bk = rk._backend.get_backend(("Q", qkv[0]))
    stacked = set()
    for e in d.estimators:
        est = st._estimators.build_attention_estimator(d.estimator_params(e, d.cells()[0]))
        calls = st.TrialCalls(*qkv, 4, streams, bk)
        if st.attention_estimator_record(e["estimator"]).batched(est, calls) is not None:
            stacked.add(d.label(e))
    assert stacked == {"hybrid-plain", "hybrid-ratio", "hybrid-causal", "hybrid-trig"}
    batched = st.run(d, progress=False)
    monkeypatch.setattr(hooks, "BATCH_ELEMS", 1)
    single = st.run(d, progress=False)
    a, b = batched.trials, single.trials
    assert (a["status"] == "ok").all() and (b["status"] == "ok").all()
    num = ["err", "sq_err", "abs_err", "max_abs_err", "nonpositive_rows", "n_nan_rows"]
    np.testing.assert_allclose(a[num].to_numpy(float), b[num].to_numpy(float), rtol=1e-10, atol=1e-13)
