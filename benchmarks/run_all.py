"""All rfkit benchmarks in one run: machine limits, rfkit, peers; Markdown + JSON report.

Run (the ``make bench`` entry point)::

    .venv/bin/python benchmarks/run_all.py            # full run, about 4 minutes here
    .venv/bin/python benchmarks/run_all.py --quick    # smoke run, well under a minute
    .venv/bin/python benchmarks/run_all.py --no-peers --out /tmp/bench

Writes ``OUT/bench.md`` and ``OUT/bench.json`` (default OUT: ``benchmarks/results``).

1. Machine: BLAS library and threads (``numpy.show_config``, threadpoolctl), environment,
   load averages at start and end (other jobs share the cores: re-run when they are high).
2. Limits, measured in this process: GEMM rates for every shape used below (float64 and
   float32), exp/cos/sin/multiply/normal throughput (``_limits.py``).
3. rfkit: feature maps of every family, ``kernel``/``pairwise``, exact attention, RFA
   (bidirectional, causal; float64 and float32), RA, SNIS, LARA for n = 1024 .. 65536 and
   the performer-mse study: median time, peak traced memory, floor and ratio to it
   (``_cases.py`` states the counts). Then the existing single-purpose scripts are called:
   ``bench_attention.speed`` (interleaved RFA-vs-floor), ``bench_study`` (harness vs
   per-trial loop), ``bench_kernel`` (draw.kernel vs GEMM rate).
4. Would a multithreaded exp pay (``_elementwise.py``)?
5. Peers, when installed (``_peers.py``): performer-pytorch FastAttention, scikit-learn
   RBFSampler. Missing peers are skipped with a message.
6. Scaling (``bench_scale.py``): RFA at 1, 2 and all cores against performer-pytorch
   at equal threads and the per-thread-count floor; when PyTorch sees a CUDA device, rfkit on
   torch/CuPy against performer-pytorch on the GPU and exact SDPA. Also written alone as
   ``scale-<device>.md``.
7. Targets, met or missed, by how much.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import _cases  # noqa: E402
import _report  # noqa: E402
import numpy as np  # noqa: E402
from _limits import Contention, Limits, load, machine, peak_mib, quiet_median_time  # noqa: E402

FULL = {
    "feature_ns": [1024, 8192, 65536],
    "taylor_ns": [1024, 8192],
    "feature_f32_ns": [8192, 65536],
    "kernel_ns": [1024, 4096],
    "pair_ns": [1024, 8192, 65536],
    "exact_ns": [1024, 4096, 16384],
    "linear_ns": [1024, 2048, 4096, 8192, 16384, 32768, 65536],
    "ra_ns": [1024, 2048, 4096],
    "rfa_f32_ns": [1024, 4096, 8192, 16384, 65536],
    "study_trials": 200,
    "performer_ns": [1024, 4096, 8192, 16384, 65536],
    "sklearn_ns": [1024, 8192, 65536],
    "exp_n": 8192,
    "budget_s": 2.0,
    "target_n": 8192,
    "causal_chunks": [128, 256, 512, 1024],
}
QUICK = {
    "feature_ns": [1024],
    "taylor_ns": [512],
    "feature_f32_ns": [1024],
    "kernel_ns": [512],
    "pair_ns": [1024],
    "exact_ns": [1024],
    "linear_ns": [512, 1024, 2048],
    "ra_ns": [256],
    "rfa_f32_ns": [1024],
    "study_trials": 20,
    "performer_ns": [1024, 4096],
    "sklearn_ns": [1024],
    "exp_n": 8192,
    "budget_s": 0.2,
    "target_n": 2048,
    "causal_chunks": [512],
}


def capture(fn: Any, *args: Any) -> tuple[float, str]:
    """Run a reused script's function, echo and return its output and the others' CPU share."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), Contention() as c:
        fn(*args)
    text = buf.getvalue()
    print(text, end="", flush=True)
    print(f"   [others' CPU share while this ran: {c.share:.2f}]", flush=True)
    return c.share, text


def _num(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def study_grids(text: str) -> list[dict[str, Any]]:
    """Every grid bench_study.py reports: its title line, harness/bare and loop/harness."""
    grids = []
    for block in re.split(r"\n(?=\S)", text.strip()):
        hb = _num(r"harness/bare = ([\d.]+)", block)
        lh = _num(r"loop/harness = ([\d.]+)", block)
        if hb is not None and lh is not None:
            grids.append(
                {"grid": block.splitlines()[0].strip(), "harness_over_bare": hb, "loop_over_harness": lh}
            )
    return grids


def measure(
    case: _cases.Case, limits: Limits, repeats: int, budget_s: float, attempts: int = 3
) -> dict[str, Any]:
    med, times, share = quiet_median_time(case.fn, repeats, budget_s=budget_s, attempts=attempts)
    peak = peak_mib(case.fn)
    floor = limits.floor(case.counts, case.dtype)
    row = {
        "group": case.group,
        "name": case.name,
        "n": case.n,
        "dtype": case.dtype,
        "median_s": med,
        "min_s": min(times),
        "repeats": len(times),
        "peak_mib": peak,
        "floor_s": floor,
        "ratio": med / floor,
        "counts": case.counts.to_dict(),
        "counts_text": case.counts.describe(),
        "others_cpu_share": share,
        **({"params": case.params} if case.params else {}),
    }
    print(
        f"{case.group:9s} {case.name:28s} n={case.n:6d} {case.dtype:7s} median {med * 1e3:9.2f} ms "
        f"(x{len(times)}) peak {peak:8.1f} MiB floor {floor * 1e3:8.2f} ms ratio {med / floor:6.2f} others {share:.2f}",
        flush=True,
    )
    return row


def memory_fit(rows: list[dict[str, Any]], names: list[str], min_n: int) -> list[dict[str, Any]]:
    """Log-log slope of peak memory in n (n >= min_n) and a straight-line fit (all n)."""
    fits = []
    for name in names:
        pts = sorted((r["n"], r["peak_mib"]) for r in rows if r["name"] == name and r["dtype"] == "float64")
        if len(pts) < 3:
            continue
        n = np.array([p[0] for p in pts], dtype=float)
        mem = np.array([p[1] for p in pts], dtype=float)
        big = n >= min_n if np.count_nonzero(n >= min_n) >= 2 else np.ones_like(n, dtype=bool)
        slope = float(np.polyfit(np.log(n[big]), np.log(mem[big]), 1)[0])
        b, a = np.polyfit(n, mem, 1)
        pred = a + b * n
        r2 = float(1 - np.sum((mem - pred) ** 2) / np.sum((mem - mem.mean()) ** 2))
        fits.append(
            {
                "name": name,
                "ns": n.astype(int).tolist(),
                "peak_mib": mem.tolist(),
                "loglog_slope": slope,
                "loglog_from_n": int(n[big][0]),
                "linear_intercept_mib": float(a),
                "linear_bytes_per_row": float(b * 2**20),
                "linear_r2": r2,
                # unavoidable per row: output (n, dv) and [numerator | normaliser] (n, dv+1), log-scale
                "output_bytes_per_row": 8 * (2 * _cases.D_V + 2),
            }
        )
    return fits


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, few repeats (< 1 minute)")
    ap.add_argument("--no-peers", action="store_true", help="skip performer-pytorch and scikit-learn")
    ap.add_argument("--out", type=Path, default=HERE / "results", help="output folder (bench.md, bench.json)")
    ap.add_argument("--repeats", type=int, default=None, help="timing repeats (default 7; 3 with --quick)")
    args = ap.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    repeats = args.repeats or (3 if args.quick else 7)
    t_start = time.perf_counter()
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    info = machine()
    print(
        f"rfkit benchmarks ({'quick' if args.quick else 'full'}), {started}: numpy {info['numpy']}, "
        f"BLAS {info['blas'].get('name')} {info['blas'].get('version')}, {info['blas_threads']} BLAS threads, "
        f"{info['cpus']} CPUs, load {info['load_start']}",
        flush=True,
    )
    if info["load_start"][0] > 0.5 * (info["cpus"] or 1):
        print(
            f"WARNING: load average {info['load_start'][0]} on {info['cpus']} CPUs: other jobs compete for the "
            "cores; absolute times will be inflated (ratios measured in-process are less affected). Re-run when idle.",
            flush=True,
        )
    limits = Limits(repeats=repeats, attempts=1 if args.quick else 3)
    results: dict[str, Any] = {"config": {**cfg, "repeats": repeats, "quick": args.quick}, "machine": info}

    # -- 1. limits at the headline shapes (everything else is measured lazily, in the same way)
    n0 = cfg["target_n"]
    for dtype in (np.float64, np.float32):
        for a, k, b in ((n0, 64, 256), (n0, 256, 65), (256, n0, 65), (min(n0, 4096), 256, min(n0, 4096))):
            limits.gemm_time(a, k, b, dtype)
        for op in ("exp", "cos", "sin", "multiply"):
            limits.elementwise_rate(op, dtype)
            limits.elementwise_rate_large(op, dtype, (65536 if not args.quick else 8192) * 256)
    limits.elementwise_rate("normal", np.float64)
    print("limits: " + _report.limits_line(limits), flush=True)

    # -- 2. rfkit
    cases = (
        _cases.feature_cases(cfg["feature_ns"], cfg["taylor_ns"], cfg["feature_f32_ns"])
        + _cases.kernel_cases(cfg["kernel_ns"], cfg["pair_ns"])
        + _cases.attention_cases(cfg["exact_ns"], cfg["linear_ns"], cfg["ra_ns"], cfg["rfa_f32_ns"])
        + _cases.tuning_cases(cfg["target_n"], cfg["causal_chunks"])
        + [_cases.study_case(cfg["study_trials"], args.quick)]
    )
    rows = []
    for case in cases:
        rows.append(measure(case, limits, repeats, cfg["budget_s"], 1 if args.quick else 3))
        case.fn = None  # type: ignore[assignment]  # release inputs
    results["rfkit"] = rows
    results["memory_fit"] = memory_fit(
        rows, ["RFA Positive", "RFA Positive causal", "SNIS S=256", "LARA C=64 k=4"], min_n=16384
    )

    # -- 3. existing single-purpose scripts, called (not duplicated)
    import bench_attention
    import bench_kernel
    import bench_study

    reused: dict[str, Any] = {}
    n_t = cfg["target_n"]
    share, txt = capture(bench_attention.speed, n_t, 64, 256, 5 if args.quick else 21)
    reused["bench_attention.speed"] = {
        "others_cpu_share": share,
        "args": [n_t, 64, 256],
        "ratio_median": _num(r"median of per-repeat ratios\s+([\d.]+)", txt),
        "ratio_best": _num(r"best/best\s+([\d.]+)", txt),
        "output": txt,
    }
    st_args = ["--trials", "20", "--repeats", "1"] if args.quick else ["--trials", "200", "--repeats", "5"]
    share, txt = capture(bench_study.main, st_args)
    reused["bench_study"] = {
        "others_cpu_share": share,
        "args": st_args,
        "grids": study_grids(txt),
        "output": txt,
    }
    bk_args = ["--n", "512", "--repeats", "1"] if args.quick else ["--repeats", "7"]
    share, txt = capture(bench_kernel.main, bk_args)
    reused["bench_kernel"] = {"args": bk_args, "output": txt, "others_cpu_share": share}
    results["reused"] = reused

    from _breakdown import rfa_breakdown

    results["rfa_breakdown"] = rfa_breakdown(cfg["target_n"], 5 if args.quick else 15)

    # -- 4. multithreaded exp?
    from _elementwise import exp_threads

    results["exp_threads"] = exp_threads(cfg["exp_n"], 256, 64, 3 if args.quick else 15)

    # -- 5. peers
    if args.no_peers:
        print("[peers] skipped (--no-peers)", flush=True)
        results["peers"] = {"skipped": "--no-peers"}
    else:
        import _peers

        results["peers"] = {
            "performer_pytorch": _peers.performer(
                cfg["performer_ns"], 3 if args.quick else repeats, info["blas_threads"], limits
            ),
            "sklearn_rbf": _peers.sklearn_rbf(cfg["sklearn_ns"], 3 if args.quick else repeats, limits),
        }

    # -- 6. scaling: threads and (when present) a GPU
    import bench_scale

    scale: dict[str, Any] = {
        "device": bench_scale.device_name(),
        "machine": f"{info.get('cpus')} CPUs",
        "date": started,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "quick": args.quick,
        "threads": bench_scale.threads_section(args.quick, peers=not args.no_peers),
        "gpu": bench_scale.gpu_section(args.quick, peers=not args.no_peers),
    }
    results["scale"] = scale
    scale_md = bench_scale.markdown(scale)

    # -- 7. targets, report
    results["limits"] = limits.to_dict()
    info["load_end"] = load()
    info["threadpoolctl_end"] = _threadpools()
    results["elapsed_s"] = time.perf_counter() - t_start
    results["started"] = started
    results["targets"] = _report.targets(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench.json").write_text(json.dumps(results, indent=1, default=_json_default) + "\n")
    (args.out / "bench.md").write_text(
        _report.markdown(results) + "\n" + scale_md.replace("# Scaling", "## Scaling", 1)
    )
    print(f"\nwrote {args.out / 'bench.md'} and {args.out / 'bench.json'} in {results['elapsed_s']:.0f} s")
    for t in results["targets"]:
        print(f"target: {t['target']}: {t['status']} ({t['measured']})")
    return 0


def _threadpools() -> Any:
    try:
        from threadpoolctl import threadpool_info

        return [{k: d.get(k) for k in ("user_api", "internal_api", "num_threads")} for d in threadpool_info()]
    except ImportError:
        return "not installed"


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


if __name__ == "__main__":
    raise SystemExit(main())
