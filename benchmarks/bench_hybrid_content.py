"""Hybrid with keys by content and sampled remainders, one call at the shape of a SmolLM2-135M layer.

Run: ``.venv/bin/python benchmarks/bench_hybrid_content.py``. Q, K, V of shape (9, 512, 64)
(9 heads, 512 tokens, head dimension 64; Gaussian, scale 0.5 for Q and K), float32, causal; the
drop-in ``content`` profile's rows at cost 64 (window 4 + 4 sinks; ``top_k`` 28 without a
remainder, else ``top_k`` 27 and ``n_samples`` 28; ``window+uniform``: 55 samples) and exact
softmax attention. Wall time per call, the median of 5 calls after one warm-up call (rfkit's
default threads). To compare two commits, run it with ``PYTHONPATH`` set to each commit's tree,
each in a fresh process, alternating.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import rfkit as rk

ROWS = {
    "window+uniform": dict(remainder="uniform", n_samples=55),
    "proxy top-k": dict(scorer="proxy", top_k=28, remainder="none"),
    "proxy top-k+IS": dict(scorer="proxy", top_k=27, remainder="importance", n_samples=28),
    "quest top-k": dict(scorer="quest", block_size=4, top_k=28, remainder="none"),
    "quest top-k+uniform": dict(scorer="quest", block_size=4, top_k=27, remainder="uniform", n_samples=28),
    "oracle top-k": dict(scorer="oracle", top_k=28, remainder="none"),
}


def main() -> None:
    rng = np.random.default_rng(1)
    Q, K = ((0.5 * rng.normal(size=(9, 512, 64))).astype(np.float32) for _ in range(2))
    V = rng.normal(size=(9, 512, 64)).astype(np.float32)
    calls = {"exact softmax": lambda: rk.attention.softmax(Q, K, V, causal=True)}
    for name, kw in ROWS.items():
        est = rk.attention.Hybrid(window=4, n_global=4, causal=True, **kw)
        calls[name] = lambda est=est: est(Q, K, V, rng=0)
    print("| row | median ms per call (5 calls) |\n|---|---|")
    for name, call in calls.items():
        call()
        times = []
        for _ in range(5):
            t = time.perf_counter()
            call()
            times.append(time.perf_counter() - t)
        print(f"| {name} | {1e3 * statistics.median(times):.0f} |", flush=True)


if __name__ == "__main__":
    main()
