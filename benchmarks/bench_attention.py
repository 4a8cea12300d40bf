"""Speed and memory of rfkit.attention against the machine's own limits (not a test).

Run: ``.venv/bin/python benchmarks/bench_attention.py [--quick] [--repeats R] [--gap S]``

1. Memory: RFA (bidirectional, causal, with a key padding mask), SNIS and LARA (bidirectional
   and causal) at n = 65 536, d = 64, m = 256 samples/features, float64. Peak traced
   allocation (``tracemalloc``; NumPy reports its buffers to it) beyond the inputs, compared
   with the size of one n x n float64 array (34 GB here) and with one n x m feature matrix;
   the causal rows also at n / 4 (linear memory: about 4x between the two).
2. Speed: bidirectional and causal RFA with Positive(256) features at n = 8192, d = 64,
   float64, median over repeats, against a floor measured in the same process: the time of
   the matrix products RFA cannot avoid (Q W^T, K W^T, Phi_K^T V, Phi_Q S at the same shapes)
   plus the time of the 2 n m exponentials (BLAS with its default threads, one-thread exp).
   Floor and estimators are timed back to back in every repeat (the ratio is taken per
   repeat, so both see the same machine load), each call after a short pause (``--gap``):
   OpenBLAS worker threads keep spinning for a while after a multithreaded product and would
   otherwise slow whatever is timed next. The share of the CPUs used by other processes
   while the table ran is printed with it.
3. Threads: both RFAs with ``n_threads=1`` and with every core (medians), and the context
   rows (SNIS, LARA, causal SNIS/LARA, exact softmax) at every core.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import tracemalloc

import numpy as np

import rfkit as rk
from rfkit import attention as att

try:  # run as a script from benchmarks/ or imported by run_all.py
    from _limits import Contention
except ImportError:  # pragma: no cover
    Contention = None  # type: ignore[assignment,misc]


def median_time(fn, repeats: int, gap: float = 0.0) -> float:
    times = []
    for _ in range(repeats):
        if gap:
            time.sleep(gap)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peak_mib(fn) -> float:
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def memory(n: int, d: int, m: int) -> None:
    rng = np.random.default_rng(20240601)
    Q, K, V = (0.5 * rng.standard_normal((3, n, d)) / d**0.25).astype(np.float64)
    pad = np.zeros(n, dtype=bool)
    pad[-n // 8 :] = True  # right padding of one eighth of the keys
    nn_mib = n * n * 8 / 2**20
    nm_mib = n * m * 8 / 2**20
    print(f"\n== peak traced memory beyond inputs, n={n}, d={d}, m={m}, float64 ==")
    print(
        f"   reference sizes: one n x n array {nn_mib:,.0f} MiB; one n x m array {nm_mib:,.0f} MiB; "
        f"output n x d {n * d * 8 / 2**20:,.0f} MiB"
    )
    lara_c = att.LARA(n_proposals=64, samples_per_proposal=4, weights="balance", causal=True)
    cases = {
        "RFA bidirectional": (lambda Q, K, V: att.RFA(rk.features.Positive(m))(Q, K, V, rng=0), False),
        "RFA bidirectional+mask": (
            lambda Q, K, V: att.RFA(rk.features.Positive(m))(Q, K, V, rng=0, key_padding_mask=pad[: len(K)]),
            False,
        ),
        "RFA causal": (lambda Q, K, V: att.RFA(rk.features.Positive(m), causal=True)(Q, K, V, rng=0), True),
        "SNIS standard": (lambda Q, K, V: att.SNIS(n_samples=m)(Q, K, V, rng=0), False),
        "SNIS chunk-mean causal": (
            lambda Q, K, V: att.SNIS("chunk-mean", n_samples=m, causal=True)(Q, K, V, rng=0),
            True,
        ),
        "LARA optimal C=64,k=4": (
            lambda Q, K, V: att.LARA(n_proposals=64, samples_per_proposal=4)(Q, K, V, rng=0),
            False,
        ),
        "LARA balance causal C=64,k=4": (lambda Q, K, V: lara_c(Q, K, V, rng=0), True),
    }
    for name, (fn, causal) in cases.items():
        t0 = time.perf_counter()
        pk = peak_mib(lambda fn=fn: fn(Q, K, V))
        dt = time.perf_counter() - t0
        extra = ""
        if causal:
            q = n // 4
            pk4 = peak_mib(lambda fn=fn, q=q: fn(Q[:q], K[:q], V[:q]))
            extra = f"   at n/4: {pk4:7.1f} MiB (x{pk / pk4:4.2f} for 4x the rows)"
        print(
            f"   {name:29s} peak {pk:8.1f} MiB  = {pk / nn_mib:.4f} x (n x n)  "
            f"= {pk / nm_mib:5.2f} x (n x m)   [{dt:5.1f} s incl. tracing]{extra}"
        )


def _load() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:  # pragma: no cover
        return "n/a"


def speed(n: int, d: int, m: int, repeats: int, gap: float | None = None) -> None:
    if gap is None:  # a long pause only where calls are long enough for it to matter
        gap = 0.15 if n >= 4096 else 0.02
    rng = np.random.default_rng(7)
    Q, K, V = 0.5 * rng.standard_normal((3, n, d)) / d**0.25
    ests = {
        "bidirectional": att.RFA(rk.features.Positive(m)),
        "causal": att.RFA(rk.features.Positive(m), causal=True),
    }
    W = rng.standard_normal((m, d))
    Phi = np.exp(0.01 * rng.standard_normal((n, m)))
    S = Phi.T @ V
    X = rng.standard_normal((n, m)) * 0.1

    def one(fn) -> float:
        if gap:
            time.sleep(gap)  # let BLAS worker threads of the previous call go idle
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    for est in ests.values():
        est(Q, K, V, rng=0)  # warm-up
    rows = []
    load0 = _load()
    ctx = Contention() if Contention is not None else None
    if ctx is not None:
        ctx.__enter__()
    # Interleaved: each repeat times the floor's pieces and both RFAs back to back, so they see
    # the same machine load (other jobs share the cores); the ratios are taken per repeat.
    for _ in range(repeats):
        t_proj = one(lambda: Q @ W.T)
        t_kv = one(lambda: Phi.T @ V)
        t_qs = one(lambda: Phi @ S)
        t_exp = one(lambda: np.exp(X))
        floor = 2 * t_proj + t_kv + t_qs + 2 * t_exp
        t_bi = one(lambda: ests["bidirectional"](Q, K, V, rng=0))
        t_c = one(lambda: ests["causal"](Q, K, V, rng=0))
        rows.append((t_proj, t_kv, t_qs, t_exp, floor, t_bi, t_bi / floor, t_c, t_c / floor))
    if ctx is not None:
        ctx.__exit__(None, None, None)
    med = [statistics.median(col) for col in zip(*rows)]
    t_proj, t_kv, t_qs, t_exp, floor, t_rfa, ratio, t_causal, ratio_c = med
    best_floor = min(r[4] for r in rows)
    best_rfa = min(r[5] for r in rows)
    best_causal = min(r[7] for r in rows)
    flops = 2 * n * m * (2 * d + 2 * d)
    print(
        f"\n== speed: bidirectional RFA, Positive(m), n={n}, d={d}, m={m}, float64, {repeats} interleaved repeats =="
    )
    print(
        f"   matmul rate  {2 * n * d * m / t_proj / 1e9:6.1f} GFLOP/s (n x d @ d x m),"
        f" {2 * n * m * d / t_kv / 1e9:6.1f} (Phi^T V), {2 * n * m * d / t_qs / 1e9:6.1f} (Phi S)   [medians]"
    )
    print(f"   exp rate     {n * m / t_exp / 1e6:6.1f} M exp/s")
    print(
        f"   floor = 2 matmul(Q W^T) + Phi^T V + Phi S + 2 n m exp: median {floor * 1e3:7.2f} ms, "
        f"best {best_floor * 1e3:7.2f} ms ({flops / 1e9:.2f} GFLOP)"
    )
    print(
        f"   RFA:                                                 median {t_rfa * 1e3:7.2f} ms, best {best_rfa * 1e3:7.2f} ms"
    )
    print(
        f"   ratio RFA / floor: median of per-repeat ratios {ratio:5.2f}; best/best {best_rfa / best_floor:5.2f}"
    )
    print(
        f"   causal RFA (same floor):                             median {t_causal * 1e3:7.2f} ms, "
        f"best {best_causal * 1e3:7.2f} ms"
    )
    print(
        f"   causal ratio to the floor: median of per-repeat ratios {ratio_c:5.2f}; "
        f"best over best {best_causal / best_floor:5.2f}"
    )
    share = f"{ctx.share:.2f}" if ctx is not None else "n/a"
    print(
        f"   machine: {os.cpu_count()} CPUs, load average {load0} before / {_load()} after; "
        f"others' CPU share while timed {share}; pause before every timed call {gap * 1e3:.0f} ms"
    )
    # thread scaling and context (medians of 3)
    nt = rk._parallel.resolve_threads(None, "bench")
    for name, est in ests.items():
        one_t = median_time(
            lambda est=est: type(est)(**{**est.__dict__, "n_threads": 1})(Q, K, V, rng=0), 3, gap
        )
        all_t = median_time(lambda est=est: est(Q, K, V, rng=0), 3, gap)
        print(
            f"   threads: {name} RFA {one_t * 1e3:.1f} ms with 1 thread, {all_t * 1e3:.1f} ms with {nt} "
            f"(speed-up {one_t / all_t:.2f})"
        )
    Qc, Kc, Vc = Q[:2048], K[:2048], V[:2048]
    t_sm = median_time(lambda: att.softmax(Qc, Kc, Vc), 3, gap)
    t_sn = median_time(lambda: att.SNIS(n_samples=m)(Q, K, V, rng=0), 3, gap)
    t_snc = median_time(lambda: att.SNIS("chunk-mean", n_samples=m, causal=True)(Q, K, V, rng=0), 3, gap)
    t_la = median_time(lambda: att.LARA(n_proposals=64, samples_per_proposal=4)(Q, K, V, rng=0), 3, gap)
    t_lac = median_time(
        lambda: att.LARA(n_proposals=64, samples_per_proposal=4, weights="balance", causal=True)(
            Q, K, V, rng=0
        ),
        3,
        gap,
    )
    print(
        f"   (context, medians of 3) SNIS(S={m}) {t_sn * 1e3:.1f} ms, causal chunk-mean {t_snc * 1e3:.1f} ms; "
        f"LARA(C=64, k=4) {t_la * 1e3:.1f} ms, causal balance {t_lac * 1e3:.1f} ms; "
        f"exact softmax at n=2048 {t_sm * 1e3:.1f} ms"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="smaller n for a smoke run")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--gap", type=float, default=None, help="pause before every timed call, seconds")
    p.add_argument("--speed-only", action="store_true", help="skip the memory table")
    a = p.parse_args()
    print(
        f"python {sys.version.split()[0]}, numpy {np.__version__}, {platform.machine()}, "
        f"rfkit {rk.__version__}, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, "
        f"cpus={os.cpu_count()}"
    )
    if a.quick:
        if not a.speed_only:
            memory(4096, 64, 256)
        speed(1024, 64, 256, 3, gap=a.gap)
    else:
        if not a.speed_only:
            memory(65536, 64, 256)
        speed(8192, 64, 256, a.repeats, gap=a.gap)


if __name__ == "__main__":
    main()
