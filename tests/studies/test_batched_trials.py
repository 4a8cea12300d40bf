"""Batched trials (issue 23): a work unit evaluates its trials as stacked arrays, one draw tensor for
all of them, and every trial's numbers equal the trial-by-trial computation from its own stream
(same seeds, same numbers to round-off), for every built-in feature map, in kernel cells and in
RFA attention cells."""

from __future__ import annotations

import numpy as np
import pytest

import rfkit as rk
import rfkit.study as st
import rfkit.study._eval_attention as eval_attention
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
    monkeypatch.setattr(eval_attention, "BATCH_ELEMS", 1)  # one call per trial, from its own stream
    single = st.run(d, progress=False)
    a, b = batched.trials, single.trials
    assert (a["status"] == b["status"]).all()
    num = ["err", "sq_err", "abs_err", "max_abs_err", "nonpositive_rows", "n_nan_rows"]
    np.testing.assert_allclose(a[num].to_numpy(float), b[num].to_numpy(float), rtol=1e-10, atol=1e-13)
