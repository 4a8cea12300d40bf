"""Attention trials one call each against stacked into one call (the attention cells' batched trials).

Run: ``.venv/bin/python benchmarks/bench_batched_trials.py``. RFA: for each (slices, tokens, d, D)
and causality, 20 trials from their own streams, one call per trial (``rng=stream``) against one
call on ``sample_streams`` of all 20. SNIS, LARA and RA: the trials a study stacks at these sizes,
one call per trial against one call on inputs repeated along a leading trial axis with
``TrialStreams``. Hybrid (window and sinks, no LSH): as RFA, stacked feature draws. One thread, one BLAS thread; CPU time per trial, medians of 5 rounds; the
largest difference of the outputs (round-off).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import rfkit as rk
from rfkit._parallel import blas_limited
from rfkit._random import TrialStreams


def _compare(est, Q, K, V, streams, stacked_call) -> str:
    """``one call per trial | stacked | largest difference`` cells: CPU ms per trial, medians of 5."""
    T = len(streams)
    loop, stacked = [], []
    with rk.threads(1), blas_limited():
        for _ in range(5):
            t = time.process_time()
            outs = [est(Q, K, V, rng=s).output for s in streams]
            loop.append(time.process_time() - t)
            t = time.process_time()
            res = stacked_call()
            stacked.append(time.process_time() - t)
    diff = float(np.max(np.abs(np.stack(outs) - res.output)))
    return f"{statistics.median(loop) / T * 1e3:.2f} ms | {statistics.median(stacked) / T * 1e3:.2f} ms | {diff:.1e}"


def _streams(T: int) -> list[np.random.SeedSequence]:
    return [np.random.SeedSequence(1, spawn_key=(0, t)) for t in range(T)]


def _features(rng: np.random.Generator, hybrid: bool) -> None:
    """RFA (20 trials) or Hybrid (window 16, 4 sinks; the trials a study stacks): stacked feature draws."""
    print()
    if hybrid:
        print(
            "| Hybrid (window 16, 4 sinks) | causal | trials per call | one call per trial | stacked | largest difference |"
        )
        print("|---|---|---|---|---|---|")
        cases = [(2, 64, 32, 32, 20), (1, 512, 64, 64, 2)]  # studies stack 20 and 2
    else:
        print("| slices x tokens, d, D | causal | one call per trial | stacked | largest difference |")
        print("|---|---|---|---|---|")
        cases = [(2, 32, 16, 32, 20), (1, 512, 64, 64, 20), (16, 64, 64, 64, 20)]
    for B, n, d, D, T in cases:
        Q, K, V = (0.3 * rng.standard_normal((B, n, d)) for _ in range(3))
        fm = rk.features.Positive(D, projection="orthogonal")
        for causal in (False, True):
            if hybrid:
                est = rk.attention.Hybrid(fm, window=16, n_global=4, causal=causal)
                label = f"{B} x {n}, {d}, D = {D} | {causal} | {T}"
            else:
                est = rk.attention.RFA(fm, causal=causal)
                label = f"{B} x {n}, {d}, {D} | {causal}"
            streams = _streams(T)

            def call(est=est, Q=Q, K=K, V=V, fm=fm, d=d, streams=streams):  # draws included, as per trial
                return est(Q, K, V, draw=fm.sample_streams(d, streams))

            cells = _compare(est, Q, K, V, streams, call)
            print(f"| {label} | {cells} |")


def _sampled(rng: np.random.Generator) -> None:
    print()
    print(
        "| estimator | slices x tokens, d | trials per call | one call per trial | stacked | largest difference |"
    )
    print("|---|---|---|---|---|---|")
    A = rk.attention
    for B, n, d, T in [(2, 64, 32, 8), (4, 64, 32, 4), (16, 64, 32, 2)]:  # studies stack 8, 4, 1
        Q, K, V = (0.4 * rng.standard_normal((B, n, d)) for _ in range(3))
        for label, est in [
            ("SNIS chunk-mean, S = 64", A.SNIS("chunk-mean", n_samples=64, n_chunks=8)),
            ("SNIS chunk-mean causal, S = 64", A.SNIS("chunk-mean", n_samples=64, n_chunks=8, causal=True)),
            ("LARA balance, 8 x 8", A.LARA(weights="balance", samples_per_proposal=8)),
            ("RA, S = 8", A.RA(n_samples=8)),
        ]:
            streams = _streams(T)
            stack = [np.broadcast_to(a, (T, *a.shape)) for a in (Q, K, V)]

            def call(est=est, stack=stack, streams=streams):
                return est(*stack, rng=TrialStreams(tuple(np.random.default_rng(s) for s in streams)))

            print(f"| {label} | {B} x {n}, {d} | {T} | {_compare(est, Q, K, V, streams, call)} |")


def main() -> None:
    rng = np.random.default_rng(0)
    _features(rng, hybrid=False)
    _sampled(rng)
    _features(rng, hybrid=True)


if __name__ == "__main__":
    main()
