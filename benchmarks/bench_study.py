"""Overhead of the study harness.

For a 200-trial grid, compares median wall times of:

* bare: one vectorised ``sample(n_draws=200).pairwise`` call per (cell, estimator) plus the
  squared-error reduction (the floor: no per-trial streams, no tables);
* harness: ``rk.study.run(design, executor="serial")`` (per-trial streams, chunked vectorised
  evaluation, metrics, tidy tables);
* loop: a plain per-trial Python loop over the same work (one ``sample`` + ``pairwise`` per trial).

Targets: harness / bare <= 1.15 and loop / harness >= 2. Prints medians over repeats and ratios
for two grids: performer-mse on iid and orthogonal projections only (trig, positive, hyperbolic;
7 feature counts) and the whole built-in study, which also has QMC and structured projections.
The QMC directions are vectorised over draws (one scipy Sobol' engine per draw, about 0.4 ms each
in all three variants, would dominate and compress the ratios).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

import rfkit.study as st
from rfkit.study._cell_data import cell_data
from rfkit.study._estimators import build_feature_map

STUDY = Path(__file__).resolve().parents[1] / "studies" / "performer-mse.toml"


def median_time(fn, repeats):
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def measure(design, repeats):
    root = np.random.SeedSequence(1)
    cells = design.cells()
    data = [cell_data(design, c, int(root.entropy), ()) for c in cells]
    maps = [
        [build_feature_map(e["map"], design.estimator_params(e, c)) for e in design.estimators] for c in cells
    ]

    def bare():
        gen = np.random.default_rng(0)
        for (X, Y), fms in zip(data, maps):
            truth = np.exp(np.sum(X * Y, axis=1))
            for fm in fms:
                est = fm.sample(X.shape[1], rng=gen, n_draws=design.trials).pairwise(X, Y)
                ((est - truth) ** 2).mean(axis=1)

    def harness():
        st.run(design, rng=1, executor="serial", progress=False)

    def loop():
        for c, ((X, Y), fms) in enumerate(zip(data, maps)):
            truth = np.exp(np.sum(X * Y, axis=1))
            for fm in fms:
                for t in range(design.trials):
                    ss = np.random.SeedSequence(root.entropy, spawn_key=(c, t))
                    est = fm.sample(X.shape[1], rng=ss).pairwise(X, Y)
                    ((est - truth) ** 2).mean()

    tb = median_time(bare, repeats)
    th = median_time(harness, repeats)
    tl = median_time(loop, max(1, repeats // 2))
    return tb, th, tl


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    full = st.load_design(STUDY).with_trials(args.trials)
    d = full.to_dict()
    d["estimators"] = [e for e in d["estimators"] if e.get("projection", "iid") in ("iid", "orthogonal")]
    iid_orthogonal = st.Design(**d)
    for name, design in (
        ("performer-mse, iid and orthogonal grid", iid_orthogonal),
        ("performer-mse, with qmc + structured", full),
    ):
        tb, th, tl = measure(design, args.repeats)
        print(
            f"{name}: {len(design.cells())} cells x {len(design.estimators)} estimators x {design.trials} trials"
        )
        print(f"  bare vectorised calls : median {tb:.3f} s")
        print(f"  study harness (serial): median {th:.3f} s   harness/bare = {th / tb:.2f}  (target <= 1.15)")
        print(f"  per-trial Python loop : median {tl:.3f} s   loop/harness = {tl / th:.2f}  (target >= 2)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
