"""How the projection draws and model products on rfkit's thread pool scale with threads. Not a test.

Two paths, each timed at every thread count of ``--threads`` (``rk.threads(n)``), medians of
``--repeats`` calls after one warm-up, in one process:

* **projection draws of trial streams** (``rfkit.projections.sample_projection_streams``): the
  directions of a study's work unit, in fixed blocks of streams: orthogonal, 2000 streams,
  m = 64, d = 16 (performer-mse's size), and 250 streams, m = 1024, d = 32
  (softmax-kernel-estimators' largest);
* **the pretrained models' weight products** (``rfkit.data._gemm.matmul``), with BLAS held at one
  thread as inside a study's work unit (elsewhere BLAS computes them whole, with its own threads):
  32 token rows with SmolLM2's 576 x 1536 feed-forward weight and its 576 x 49,152 logits weight
  (random numbers of those shapes, float32; no model files needed).

Each row says whether the result equals the one-thread result bit for bit (it must: the blocks are
fixed by the sizes). Run::

    .venv/bin/python benchmarks/bench_pool_scaling.py --threads 1,2,8,16 --out benchmarks/results/pool

It writes ``pool-scaling.md`` and ``pool-scaling.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

import rfkit as rk
from rfkit._parallel import blas_limited
from rfkit.data._gemm import matmul
from rfkit.projections import sample_projection_streams


def _held(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` with BLAS held at one thread, as in a study's work unit."""
    with blas_limited():
        return fn(*args)


def _cases(quick: bool) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    t_small, t_big = (200, 50) if quick else (2000, 250)
    s_small = [np.random.SeedSequence(3, spawn_key=(0, t)) for t in range(t_small)]
    s_big = [np.random.SeedSequence(4, spawn_key=(0, t)) for t in range(t_big)]
    h = rng.standard_normal((32, 576)).astype(np.float32)
    w_ffn = rng.standard_normal((1536, 576)).astype(np.float32).T  # a transposed view, as the model keeps it
    w_logits = rng.standard_normal((49152 // (8 if quick else 1), 576)).astype(np.float32).T
    return {
        f"orthogonal directions, {t_small} streams, m = 64, d = 16": lambda: sample_projection_streams(
            "orthogonal", 64, 16, s_small
        ),
        f"orthogonal directions, {t_big} streams, m = 1024, d = 32": lambda: sample_projection_streams(
            "orthogonal", 1024, 32, s_big
        ),
        "model product 32 x 576 x 1536 (float32)": lambda: _held(matmul, h, w_ffn),
        f"model product 32 x 576 x {w_logits.shape[1]} (float32)": lambda: _held(matmul, h, w_logits),
    }


def measure(counts: list[int], repeats: int, quick: bool) -> list[dict[str, Any]]:
    rows = []
    for name, fn in _cases(quick).items():
        ref = None
        for n in counts:
            with rk.threads(n):
                out = fn()
                ts = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    fn()
                    ts.append(time.perf_counter() - t0)
            ref = out if ref is None else ref
            rows.append(
                {
                    "case": name,
                    "threads": n,
                    "ms": statistics.median(ts) * 1e3,
                    "bit_identical_to_first": bool(np.array_equal(out, ref)),
                }
            )
            print(f"[pool] {name}, {n} threads: {rows[-1]['ms']:.2f} ms", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1,2", help="thread counts, e.g. 1,2,8,16 (default 1,2)")
    ap.add_argument("--repeats", type=int, default=7, help="timed calls per row (default 7)")
    ap.add_argument("--quick", action="store_true", help="smaller cases (a smoke run)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/pool"), help="output folder")
    a = ap.parse_args(argv)
    counts = [int(c) for c in a.threads.split(",")]
    if not counts or min(counts) < 1 or a.repeats < 1:
        ap.error("--threads must list integers >= 1 and --repeats must be >= 1")
    rows = measure(counts, a.repeats, a.quick)
    first = {}
    for r in rows:
        first.setdefault(r["case"], r["ms"])
        r["speedup_vs_first"] = first[r["case"]] / r["ms"]
    machine = (
        f"{platform.machine()}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "pool-scaling.json").write_text(
        json.dumps({"machine": machine, "quick": a.quick, "rows": rows}, indent=1)
    )
    lines = [
        "# rfkit's thread pool: projection draws and model products",
        "",
        f"`benchmarks/bench_pool_scaling.py`, {machine}; medians of {a.repeats} calls in ms"
        + (" (quick cases)" if a.quick else "")
        + ".",
        "",
        f"| case | threads | ms | speed-up vs {counts[0]} thread(s) | bit-identical |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['case']} | {r['threads']} | {r['ms']:.2f} | {r['speedup_vs_first']:.2f} | {r['bit_identical_to_first']} |"
        for r in rows
    ]
    (a.out / "pool-scaling.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {a.out / 'pool-scaling.md'}")
    return 0 if all(r["bit_identical_to_first"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
