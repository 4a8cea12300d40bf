"""Speed of ``draw.kernel`` against this machine's float64 matrix-multiply rate.

Target: ``draw.kernel`` for 4096 x 4096 points, d = 64, m = 256 runs at no less than half the
float64 matrix-multiply rate reached in the same process. The work counted is the floating-point
work of the two projections and the feature product (2 n d m per side + 2 n n D); the rate is
that work divided by the median time. Prints medians over repeats and the ratio; not a test.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import rfkit as rk


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    n, d, m = args.n, args.d, args.m
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d)) / d**0.5
    Y = rng.normal(size=(n, d)) / d**0.5

    # machine limit: float64 GEMM of the same shape as the feature product
    A = rng.normal(size=(n, m))
    B = rng.normal(size=(m, n))
    t_mm = median_time(lambda: A @ B, args.repeats)
    rate_mm = 2.0 * n * n * m / t_mm

    print(f"float64 GEMM ({n}x{m} @ {m}x{n}): median {t_mm * 1e3:.1f} ms, {rate_mm / 1e9:.1f} GFLOP/s")
    print(f"{'map':<22}{'D':>6}{'median ms':>12}{'GFLOP/s':>10}{'ratio to GEMM':>16}")
    for name, fm in [
        ("Positive (iid)", rk.features.Positive(m)),
        ("Positive (orthogonal)", rk.features.Positive(m, projection="orthogonal")),
        ("Hyperbolic", rk.features.Hyperbolic(m // 2)),
        ("Trig", rk.features.Trig(m // 2)),
        ("OPRF", rk.features.OPRF(m, A=-0.05)),
    ]:
        draw = fm.sample(d, rng=1)
        D = fm.feature_dim(d)
        t = median_time(lambda draw=draw: draw.kernel(X, Y), args.repeats)
        work = 2.0 * n * n * D + 2 * 2.0 * n * d * (D if name != "Trig" and name != "Hyperbolic" else D // 2)
        rate = work / t
        print(f"{name:<22}{D:>6}{t * 1e3:>12.1f}{rate / 1e9:>10.1f}{rate / rate_mm:>16.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
