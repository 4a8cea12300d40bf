"""Cost and variance of randomised Sobol' directions (not a test).

Run: ``.venv/bin/python benchmarks/bench_qmc.py [--draws 2000] [--repeats 5]``

Times ``T`` draws of ``m x d`` directions (default 2000 draws, m = 256, d = 64; medians over
repeats, interleaved so machine load hits every variant alike):

* ``iid``: ``sample_projection("iid", ...)`` (one ``standard_normal`` call), the reference;
* ``qmc``: ``sample_projection("qmc", ...)``: cached Sobol' columns, linear matrix scramble +
  digital shift (Matoušek 1998) vectorised over draws, Gaussian quantile of cell midpoints;
* ``qmc, shift only``: the same without the matrix scramble (digital shift alone);
* ``qmc, Owen nested``: a vectorised prototype of Owen's (1995) nested scrambling of the top
  ``k`` digits plus independent uniform lower digits per point, written here only to compare
  costs (same transform to Gaussians);
* ``scipy per draw``: the previous implementation, one ``scipy.stats.qmc.Sobol(d,
  scramble=True)`` engine per draw (timed on fewer draws and scaled, since it is slow);
* the streams path used by studies (``sample_projection_streams``, one SeedSequence per draw),
  for iid and qmc.

Then the relative MSE of the Positive and Trig estimators of exp(x.y) with each randomisation
against iid directions (same pairs, ``--var-draws`` draws each), so the variance gain that
the cost buys is visible. Target: qmc / iid <= 2 for the timing.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from scipy.special import ndtri
from scipy.stats import qmc

import rfkit as rk
from rfkit.projections import (
    _SOBOL_DIGITS,
    _net_digits,
    _scrambled_columns,
    _scrambled_sobol_normal,
    _sobol_log2,
    sample_projection,
    sample_projection_streams,
)

TARGET = 2.0


def owen_normal(gen: np.random.Generator, T: int, m: int, d: int) -> np.ndarray:
    """Owen-scrambled Sobol' points through the Gaussian quantile (prototype, for cost comparison)."""
    k = _sobol_log2(m)
    b = _SOBOL_DIGITS
    n = 1 << k
    R0 = np.zeros((1, k + 1, d), dtype=np.int64)
    top = (_net_digits(_scrambled_columns(R0, scramble="shift"), R0[:, k], n)[0] >> (b - k)).T  # (d, n)
    bits = gen.integers(0, 2, size=(T, d, n), dtype=np.int64)  # 2^k - 1 tree bits per (draw, dim)
    flip = np.zeros((T, d, n), dtype=np.int64)
    for r in range(k):  # digit r is flipped by the bit of the node named by the digits above it
        node = bits[:, :, (1 << r) - 1 : (1 << (r + 1)) - 1]
        flip |= np.repeat(node, 1 << (k - r), axis=-1) << (k - 1 - r)
    scrambled = np.take_along_axis(flip, np.broadcast_to(top, (T, d, n)), axis=-1) ^ top  # (T, d, n)
    low = gen.integers(0, 1 << (b - k), size=(T, n, d), dtype=np.int64)
    Y = (np.swapaxes(scrambled, 1, 2)[:, :m] << (b - k)) | low[:, :m]
    return ndtri((Y + 0.5) * 2.0**-b)


def scipy_per_draw(gen: np.random.Generator, T: int, m: int, d: int) -> np.ndarray:
    k = _sobol_log2(m)
    U = np.empty((T, m, d))
    for t in range(T):
        U[t] = qmc.Sobol(d, scramble=True, rng=int(gen.integers(0, 2**63))).random_base2(k)[:m]
    return ndtri(U)


def interleaved(fns: dict, repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()  # warm caches
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--var-draws", type=int, default=2000)
    args = ap.parse_args(argv)
    T, m, d = args.draws, args.m, args.d
    k = _sobol_log2(m)
    root = np.random.SeedSequence(1)
    streams = [np.random.SeedSequence(root.entropy, spawn_key=(0, t)) for t in range(T)]
    t_scipy = max(1, T // 20)

    def shift_only() -> np.ndarray:
        R = np.random.default_rng(0).integers(0, 1 << _SOBOL_DIGITS, size=(T, k + 1, d), dtype=np.int64)
        return _scrambled_sobol_normal(R, m, d, scramble="shift")

    fns = {
        "iid": lambda: sample_projection("iid", m, d, rng=0, n_draws=T),
        "qmc (LMS + digital shift)": lambda: sample_projection("qmc", m, d, rng=0, n_draws=T),
        "qmc, digital shift only": shift_only,
        "qmc, Owen nested (prototype)": lambda: owen_normal(np.random.default_rng(0), T, m, d),
        "iid, streams": lambda: sample_projection_streams("iid", m, d, streams),
        "qmc, streams": lambda: sample_projection_streams("qmc", m, d, streams),
    }
    med = interleaved(fns, args.repeats)
    med[f"scipy Sobol per draw (timed on {t_scipy} draws, scaled)"] = (
        interleaved(
            {"s": lambda: scipy_per_draw(np.random.default_rng(0), t_scipy, m, d)}, max(1, args.repeats // 2)
        )["s"]
        * T
        / t_scipy
    )
    print(f"{T} draws of m={m} x d={d} directions, median of {args.repeats} (interleaved)")
    base = {"streams": med["iid, streams"], "": med["iid"]}
    for name, t in med.items():
        ref = base["streams"] if "streams" in name else base[""]
        print(f"  {name:<58s} {t:8.3f} s   x{t / ref:5.2f} of iid")
    ratio = med["qmc (LMS + digital shift)"] / med["iid"]
    print(f"qmc / iid = {ratio:.2f} (target <= {TARGET})")

    # variance: relative MSE of exp(x.y) estimates, 8 pairs at |x| = |y| = radius
    print(f"\nrelative MSE vs iid directions ({args.var_draws} draws each; lower is better)")
    V = args.var_draws
    for dd, mm, radius in [(4, 64, 0.5), (16, 64, 0.5), (64, 256, 0.5), (64, 256, 1.0)]:
        rng = np.random.default_rng(dd * 7 + mm)
        X = rng.normal(size=(8, dd))
        Y = rng.normal(size=(8, dd))
        X *= radius / np.linalg.norm(X, axis=1, keepdims=True)
        Y *= radius / np.linalg.norm(Y, axis=1, keepdims=True)
        truth = np.exp(np.sum(X * Y, axis=1))
        kk = _sobol_log2(mm)
        Rv = np.random.default_rng(3).integers(0, 1 << _SOBOL_DIGITS, size=(V, kk + 1, dd), dtype=np.int64)
        Ws = {
            "iid": sample_projection("iid", mm, dd, rng=3, n_draws=V),
            "orthogonal": sample_projection("orthogonal", mm, dd, rng=3, n_draws=V),
            "qmc": sample_projection("qmc", mm, dd, rng=3, n_draws=V),
            "shift only": _scrambled_sobol_normal(Rv, mm, dd, scramble="shift"),
            "Owen": owen_normal(np.random.default_rng(3), V, mm, dd),
        }
        for cls in (rk.features.Positive, rk.features.Trig):
            mse = {}
            for name, W in Ws.items():
                est = cls(mm)._from_projection(dd, V, W).pairwise(X, Y)
                mse[name] = np.mean(((est - truth) / truth) ** 2)
            row = "  ".join(f"{n}={v / mse['iid']:.3f}" for n, v in mse.items())
            print(f"  d={dd:3d} m={mm:4d} |x|=|y|={radius}: {cls.__name__:<8s} {row}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
