"""Accuracy of float16 and bfloat16 PyTorch inputs against float32 (docs page *Backends and scaling*,
section "Gradients and half precision").

rfkit computes half-precision inputs in float32 and rounds the output to the input's dtype, so the
error against the float32 call has two sources: the inputs' rounding to the half dtype and the
output's. For each estimator and seed: Q, K with entries N(0, d^-1/2) (logits q.k of unit
variance), V standard normal, n = 256, d = dv = 64; the relative error is
||out_half - out_float32||_F / ||out_float32||_F with the same rng for both calls. Printed: the
median over 5 seeds (and the range).

    python benchmarks/half_precision_accuracy.py
"""

from __future__ import annotations

import numpy as np
import torch

import rfkit as rk

N, D, SEEDS = 256, 64, range(5)

ESTIMATORS = {
    "exact softmax": lambda Q, K, V: rk.attention.softmax(Q, K, V),
    "exact softmax, causal": lambda Q, K, V: rk.attention.softmax(Q, K, V, causal=True),
    "RFA Positive(256, orthogonal)": lambda Q, K, V: (
        rk.attention.RFA(rk.features.Positive(256, projection="orthogonal"))(Q, K, V, rng=0).output
    ),
    "RFA Positive(256, orthogonal), causal": lambda Q, K, V: (
        rk.attention.RFA(rk.features.Positive(256, projection="orthogonal"), causal=True)(
            Q, K, V, rng=0
        ).output
    ),
    "RFA Hyperbolic(128)": lambda Q, K, V: (
        rk.attention.RFA(rk.features.Hyperbolic(128))(Q, K, V, rng=0).output
    ),
    "RFA OPRF(256)": lambda Q, K, V: rk.attention.RFA(rk.features.OPRF(256))(Q, K, V, rng=0).output,
}


def rel_errors(dtype: torch.dtype) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in ESTIMATORS}
    for seed in SEEDS:
        rng = np.random.default_rng(20261128 + seed)
        Q, K = (torch.tensor(rng.normal(scale=D**-0.25, size=(N, D)), dtype=torch.float32) for _ in range(2))
        V = torch.tensor(rng.standard_normal((N, D)), dtype=torch.float32)
        for name, fn in ESTIMATORS.items():
            ref = fn(Q, K, V)
            half = fn(Q.to(dtype), K.to(dtype), V.to(dtype))
            assert half.dtype == dtype
            out[name].append(float(torch.linalg.norm(half.float() - ref) / torch.linalg.norm(ref)))
    return out


def main() -> None:
    print(f"torch {torch.__version__}, n = {N}, d = dv = {D}, median (min-max) over {len(SEEDS)} seeds\n")
    res = {dt: rel_errors(getattr(torch, dt)) for dt in ("float16", "bfloat16")}
    print("| estimator | float16 | bfloat16 |")
    print("|---|---|---|")
    for name in ESTIMATORS:
        cells = [
            f"{np.median(res[dt][name]):.2e} ({min(res[dt][name]):.1e}-{max(res[dt][name]):.1e})"
            for dt in ("float16", "bfloat16")
        ]
        print(f"| {name} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
