"""Hybrid attention on a CUDA device: agreement with NumPy, and timings against RFA and exact SDPA.

Run from the source tree (numpy, torch and scipy; rfkit's one pure-Python dependency for its
array backends, ``array_api_compat``, is taken from the environment or, when missing, from the
checkout's ``.venv/lib/python*/site-packages``)::

    PYTHONPATH=. python3 benchmarks/device_hybrid.py --out $OUT/hybrid.md
    PYTHONPATH=. python3 benchmarks/device_hybrid.py --device cpu --small --out /tmp/hybrid.md

(a) **Agreement**: ``rk.attention.Hybrid`` with a window, sinks, both, LSH buckets and LSH with a
window; plain and ratio; causal and bidirectional; float32 and float64; with a key padding mask;
on the device against the NumPy reference on the same inputs (float64: relative error <= 1e-9;
float32: <= 1e-3 of the largest output, the features' float32 round-off amplified by the
ratio). One line ``PASS``/``FAIL`` per case.

(b) **Timings** (float32, batch 1, 4 heads, d = dv = 64, m = 64 orthogonal positive features,
n = 8192 and 65536; ``--small``: n = 256 and 512): Hybrid (window 16 + 4 sinks, plain and
ratio; LSH with n/64 buckets), RFA and torch's ``scaled_dot_product_attention`` (exact softmax,
``scale=1`` as rfkit's kernel ``exp(q.k)``), bidirectional and causal; the median and minimum
of 7 calls after one warm-up call, the device synchronised around each call, and the peak
device memory. A Markdown report goes to ``--out``.

Exit status: 0 when every agreement case passes, 1 when one fails, 2 when the device is missing
(nothing is run then).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _find_compat() -> bool:
    try:
        import array_api_compat  # noqa: F401
    except ImportError:
        for site in sorted(ROOT.glob(".venv/lib/python*/site-packages")):
            if (site / "array_api_compat").is_dir():
                sys.path.append(str(site))
                break
        try:
            import array_api_compat  # noqa: F401
        except ImportError:
            return False
    return True


def _inputs(np: Any, seed: int, lead: tuple[int, ...], n: int, d: int, dv: int) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    scale = 0.8 / d**0.25  # logits q.k of order 0.6: attention neither uniform nor one-hot
    Q = scale * rng.standard_normal(lead + (n, d))
    K = scale * rng.standard_normal(lead + (n, d))
    V = rng.standard_normal(lead + (n, dv))
    mask = np.zeros(lead + (n,), dtype=bool)
    mask[..., n - n // 16 :] = True  # the last keys are padding
    return Q, K, V, mask


SUPPORTS = {
    "window": {"window": 16},
    "sinks": {"n_global": 4},
    "window+sinks": {"window": 16, "n_global": 4},
    "lsh": {"lsh_buckets": 8},
    "lsh+window": {"lsh_buckets": 8, "window": 4},
}


def check_cases(rk: Any, np: Any, torch: Any, device: str, small: bool) -> list[dict[str, Any]]:
    """Hybrid on ``device`` against NumPy for every support, variant, causality and dtype."""
    n = 128 if small else 512
    Q, K, V, mask = _inputs(np, 1, (2, 2), n, 32, 16)
    rows = []
    for name, kw in SUPPORTS.items():
        for variant in ("plain", "ratio"):
            for causal in (False, True):
                for dt, tol in (("float64", 1e-9), ("float32", 1e-3)):
                    est = rk.attention.Hybrid(
                        rk.features.Positive(32, projection="orthogonal"),
                        variant=variant,
                        causal=causal,
                        **kw,
                    )
                    host = [a.astype(dt) for a in (Q, K, V)] + [mask]
                    ref = est(*host[:3], rng=11, key_padding_mask=host[3]).output
                    dev = [torch.as_tensor(a, device=device) for a in host]
                    out = est(*dev[:3], rng=11, key_padding_mask=dev[3]).output
                    on_device = str(out.device).startswith(device)
                    got = out.detach().cpu().numpy()
                    same_nan = bool(np.array_equal(np.isnan(got), np.isnan(ref)))
                    ok = np.isfinite(ref)
                    err = float(np.max(np.abs(got[ok] - ref[ok]))) / max(
                        float(np.max(np.abs(ref[ok]))), 1e-300
                    )
                    passed = on_device and same_nan and err <= tol and got.dtype == ref.dtype
                    case = f"{name} {variant} {'causal' if causal else 'bidirectional'} {dt}"
                    print(
                        f"{'PASS' if passed else 'FAIL'}  {case}  rel. error {err:.2e} (tol {tol:g})",
                        flush=True,
                    )
                    rows.append({"case": case, "error": err, "tol": tol, "passed": passed})
    return rows


def _time(torch: Any, fn: Any, cuda: bool, repeats: int = 7) -> tuple[float, float, float]:
    """Median and minimum seconds of ``repeats`` calls after one warm-up; peak device MiB."""

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    fn()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    ts = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else float("nan")
    return statistics.median(ts), min(ts), peak


def _cases(rk: Any, torch: Any, q: Any, k: Any, v: Any, causal: bool) -> dict[str, Any]:
    """The timed calls at one length and causality (closures over that length's tensors)."""
    n = int(q.shape[-2])
    fm = rk.features.Positive(64, projection="orthogonal")
    draw = fm.sample(64, rng=0)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rfa = rk.attention.RFA(fm, causal=causal)
    cases = {
        "exact SDPA (torch)": lambda: sdpa(q, k, v, is_causal=causal, scale=1.0),
        "RFA m=64": lambda: rfa(q, k, v, draw=draw).output,
    }
    for variant in ("plain", "ratio"):
        est = rk.attention.Hybrid(fm, window=16, n_global=4, variant=variant, causal=causal)
        cases[f"Hybrid {variant}, window 16 + 4 sinks (cost 37+64)"] = lambda e=est: (
            e(q, k, v, draw=draw, rng=0).output
        )
    lsh = rk.attention.Hybrid(fm, lsh_buckets=n // 64, variant="ratio", causal=causal)
    cases[f"Hybrid ratio, LSH {n // 64} buckets"] = lambda: lsh(q, k, v, draw=draw, rng=0).output
    return cases


def time_cases(rk: Any, np: Any, torch: Any, device: str, small: bool) -> list[dict[str, Any]]:
    """Hybrid vs RFA vs exact SDPA, float32, at two lengths."""
    cuda = device.startswith("cuda")
    rows = []
    for n in (256, 512) if small else (8192, 65536):
        Q, K, V, _ = _inputs(np, 2, (1, 4), n, 64, 64)
        q, k, v = (torch.as_tensor(a.astype("float32"), device=device) for a in (Q, K, V))
        for causal in (False, True):
            mode = "causal" if causal else "bidirectional"
            for name, fn in _cases(rk, torch, q, k, v, causal).items():
                try:
                    med, lo, peak = _time(torch, fn, cuda)
                    rows.append({"n": n, "mode": mode, "name": name, "median": med, "min": lo, "peak": peak})
                    print(
                        f"n={n} {mode:13s} {name:45s} median {1e3 * med:9.2f} ms  min {1e3 * lo:9.2f} ms",
                        flush=True,
                    )
                except Exception as exc:  # out of memory at a length is a result too
                    rows.append(
                        {"n": n, "mode": mode, "name": name, "error": f"{type(exc).__name__}: {exc}"[:120]}
                    )
                    print(f"n={n} {mode} {name}: {type(exc).__name__}", flush=True)
                if cuda:
                    torch.cuda.empty_cache()
    return rows


def report(
    path: Path, meta: dict[str, str], checks: list[dict[str, Any]], times: list[dict[str, Any]]
) -> None:
    lines = [f"# Hybrid on {meta['device']}", ""]
    lines += [f"- {k}: {v}" for k, v in meta.items()]
    n_pass = sum(r["passed"] for r in checks)
    lines += ["", f"## Agreement with NumPy: {n_pass} of {len(checks)} cases pass", ""]
    lines += ["| case | relative error | tolerance | result |", "|---|---|---|---|"]
    lines += [
        f"| {r['case']} | {r['error']:.2e} | {r['tol']:g} | {'PASS' if r['passed'] else 'FAIL'} |"
        for r in checks
    ]
    lines += [
        "",
        "## Timings (float32, batch 1, 4 heads, d = dv = 64; medians of 7 calls after a warm-up)",
        "",
    ]
    lines += ["| n | mode | estimator | median ms | min ms | peak MiB |", "|---|---|---|---|---|---|"]
    for r in times:
        if "error" in r:
            lines.append(f"| {r['n']} | {r['mode']} | {r['name']} | {r['error']} | | |")
        else:
            lines.append(
                f"| {r['n']} | {r['mode']} | {r['name']} | {1e3 * r['median']:.2f} | {1e3 * r['min']:.2f} | "
                f"{'-' if r['peak'] != r['peak'] else format(r['peak'], '.0f')} |"
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="Markdown report to write")
    ap.add_argument("--device", default="cuda", help="torch device (default cuda; cpu to check the script)")
    ap.add_argument("--small", action="store_true", help="small sizes (n = 128 checks; 256, 512 timings)")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("device_hybrid: PyTorch is not installed; nothing was run.", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "device_hybrid: no CUDA device is visible to PyTorch; nothing was run. "
            "(Check the script on a CPU with --device cpu --small.)",
            file=sys.stderr,
        )
        return 2
    if not _find_compat():
        print(
            "device_hybrid: rfkit needs the pure-Python package array_api_compat; install it or carry the "
            "checkout's .venv/lib/python*/site-packages/array_api_compat. Nothing was run.",
            file=sys.stderr,
        )
        return 2
    import numpy as np

    if args.device == "cpu":
        torch.set_num_threads(1)  # the CPU mode checks the script; one thread keeps shared machines calm
    sys.path.insert(0, str(ROOT))
    import rfkit as rk

    t0 = time.perf_counter()
    dev_name = (
        torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else platform.processor()
    )
    meta = {
        "device": f"{args.device} ({dev_name or platform.machine()})",
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "sizes": "small" if args.small else "full",
    }
    checks = check_cases(rk, np, torch, args.device, args.small)
    times = time_cases(rk, np, torch, args.device, args.small)
    meta["wall time"] = f"{time.perf_counter() - t0:.1f} s"
    report(args.out, meta, checks, times)
    failed = [r["case"] for r in checks if not r["passed"]]
    print(f"{len(checks) - len(failed)} of {len(checks)} agreement cases pass; report: {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
