"""Scaling benchmarks: threads, GPUs and study workers. Not a test.

Run (``make bench`` calls it through ``run_all.py``; alone)::

    .venv/bin/python benchmarks/bench_scale.py [--quick] [--out DIR] [--sections threads,gpu,studies]

Writes ``DIR/scale-<device>.md`` and ``.json`` (default DIR: ``benchmarks/results``), where
``<device>`` names the machine (``cpu<N>`` or the GPU's name).

1. **Threads** (CPU, NumPy backend): RFA with ``Positive(256, "orthogonal")`` features,
   d = dv = 64, n = 8192, float64 and float32, bidirectional and causal, at 1, 2 and all
   cores (``rk.threads``); performer-pytorch's ``FastAttention`` on the CPU with the same
   number of torch threads when it is installed (the same projection, outputs compared
   first); the GEMM+exp floor at that thread count: the four matrix products RFA cannot
   avoid timed with BLAS at that many threads, plus the 2 n m exponentials at the one-thread
   rate divided by the thread count (ideal parallel exp). Medians of interleaved repeats.
2. **GPU** (when PyTorch sees a CUDA device, and CuPy when installed): rfkit RFA on torch and
   on CuPy arrays vs performer-pytorch on the same device, and exact attention with torch's
   ``scaled_dot_product_attention``; float32, n = 8192 .. 65536; the device is synchronised
   around every timed call.
3. **Studies**: ``performer-mse`` (full profile) serial NumPy, with K worker processes, and on
   the GPU backend, wall time of ``rk.study.run`` (the tables are compared for equality).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
import rfkit as rk  # noqa: E402
from rfkit import attention as att  # noqa: E402
from rfkit._parallel import available_cpus  # noqa: E402

D, DV, M = 64, 64, 256


def qkv(n: int, dtype: Any, seed: int = 7) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    Q = (0.5 * rng.standard_normal((n, D)) / D**0.25).astype(dtype)
    K = (0.5 * rng.standard_normal((n, D)) / D**0.25).astype(dtype)
    V = rng.standard_normal((n, DV)).astype(dtype)
    return Q, K, V


def timed(fn: Callable[[], Any], sync: Callable[[], None] | None = None) -> float:
    if sync:
        sync()
    t0 = time.perf_counter()
    fn()
    if sync:
        sync()
    return time.perf_counter() - t0


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int, sync: Any = None) -> dict[str, list[float]]:
    """Time each function once per repeat, in turn (all see the same machine load)."""
    for fn in fns.values():  # warm-up
        timed(fn, sync)
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            out[k].append(timed(fn, sync))
    return out


def med(ts: list[float]) -> float:
    return statistics.median(ts)


# --------------------------------------------------------------------------- threads
def _performer_cpu() -> Any:
    try:
        import torch
        from performer_pytorch import FastAttention
        from performer_pytorch import performer_pytorch as pp
    except Exception as err:  # ImportError or a broken install
        print(f"[scale] performer-pytorch not available ({type(err).__name__}: {err}); peer rows skipped")
        return None
    return torch, FastAttention, pp


def _performer_fn(
    peer: Any, ours: Any, Q: np.ndarray, K: np.ndarray, V: np.ndarray, device: str = "cpu"
) -> Any:
    """performer FastAttention with rfkit's projection and eps = 0; checks the outputs agree."""
    import functools

    torch, FastAttention, pp = peer
    tdt = torch.float64 if Q.dtype == np.float64 else torch.float32
    raw = [
        torch.as_tensor(np.ascontiguousarray(a * (D**0.25 if i < 2 else 1.0)), dtype=tdt, device=device)[
            None, None
        ]
        for i, a in enumerate((Q, K, V))
    ]
    fa = FastAttention(D, nb_features=M).to(device=device, dtype=tdt)
    fa.projection_matrix.copy_(torch.as_tensor(np.asarray(ours.draw.projection), dtype=tdt, device=device))
    orig = pp.softmax_kernel
    pp.softmax_kernel = functools.partial(orig, eps=0.0)
    out = rk._backend.to_numpy(ours.output)
    with torch.inference_mode():
        theirs = fa(*raw)[0, 0].detach().cpu().numpy()
    err = float(np.max(np.abs(theirs - out)) / np.max(np.abs(out)))

    def run() -> Any:
        with torch.inference_mode():
            return fa(*raw)

    return run, err, orig


def _floor(n: int, dtype: Any, threads: int, repeats: int) -> float:
    """GEMMs at ``threads`` BLAS threads + 2 n m exp at the one-thread rate / threads."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(1)
    Q = rng.standard_normal((n, D)).astype(dtype)
    W = rng.standard_normal((M, D)).astype(dtype)
    Phi = np.exp(0.01 * rng.standard_normal((n, M))).astype(dtype)
    V1 = rng.standard_normal((n, DV + 1)).astype(dtype)
    S = (Phi.T @ V1).astype(dtype)
    X = (0.1 * rng.standard_normal((n, M))).astype(dtype)
    out = np.empty_like(X)
    with threadpool_limits(threads, user_api="blas"):
        ts = interleaved(
            {
                "proj": lambda: Q @ W.T,
                "kv": lambda: Phi.T @ V1,
                "qs": lambda: Phi @ S,
            },
            repeats,
        )
    t_exp = med(interleaved({"exp": lambda: np.exp(X, out=out)}, repeats)["exp"])
    return 2 * med(ts["proj"]) + med(ts["kv"]) + med(ts["qs"]) + 2 * t_exp / threads


def threads_section(quick: bool, peers: bool = True, counts: list[int] | None = None) -> dict[str, Any]:
    n = 2048 if quick else 8192
    reps = 3 if quick else 7
    cpus = available_cpus()
    counts = sorted({min(c, cpus) for c in (counts or [1, 2, cpus])})
    peer = _performer_cpu() if peers else None
    rows = []
    for dtype in (np.float64, np.float32):
        Q, K, V = qkv(n, dtype)
        for causal in (False, True):
            est = att.RFA(rk.features.Positive(M, projection="orthogonal"), causal=causal)
            ref = est(Q, K, V, rng=0)
            for T in counts:
                fns: dict[str, Callable[[], Any]] = {}

                def ours(T: int = T, est: Any = est, Q: Any = Q, K: Any = K, V: Any = V) -> Any:
                    with rk.threads(T):
                        return est(Q, K, V, rng=0)

                def ours_fixed(
                    T: int = T, est: Any = est, Q: Any = Q, K: Any = K, V: Any = V, draw: Any = ref.draw
                ) -> Any:  # the same features every call, as performer keeps its projection
                    with rk.threads(T):
                        return est(Q, K, V, draw=draw)

                with rk.threads(T):
                    same = bool(np.array_equal(est(Q, K, V, rng=0).output, ref.output))
                fns["rfkit"] = ours
                fns["rfkit_fixed"] = ours_fixed
                err = None
                orig = None
                if peer is not None and not causal:
                    peer[0].set_num_threads(T)
                    run, err, orig = _performer_fn(peer, ref, Q, K, V)
                    fns["performer"] = run
                try:
                    ts = interleaved(fns, reps)
                finally:
                    if orig is not None:
                        peer[2].softmax_kernel = orig
                floor = _floor(n, dtype, T, reps)
                row = {
                    "n": n,
                    "dtype": np.dtype(dtype).name,
                    "causal": causal,
                    "threads": T,
                    "rfkit_ms": med(ts["rfkit"]) * 1e3,
                    "rfkit_fixed_draw_ms": med(ts["rfkit_fixed"]) * 1e3,
                    "floor_ms": floor * 1e3,
                    "rfkit_over_floor": med(ts["rfkit_fixed"]) / floor,
                    "bit_identical_to_default_threads": same,
                }
                if "performer" in ts:
                    row["performer_ms"] = med(ts["performer"]) * 1e3
                    row["rfkit_over_performer"] = med(
                        [a / b for a, b in zip(ts["rfkit_fixed"], ts["performer"])]
                    )
                    row["performer_rel_diff"] = err
                rows.append(row)
                print(
                    f"[threads] n={n} {row['dtype']} causal={causal} T={T}: rfkit {row['rfkit_ms']:.1f} ms, "
                    f"floor {row['floor_ms']:.1f} ms (x{row['rfkit_over_floor']:.2f})"
                    + (
                        f", performer {row['performer_ms']:.1f} ms (rfkit/performer {row['rfkit_over_performer']:.2f})"
                        if "performer_ms" in row
                        else ""
                    ),
                    flush=True,
                )
    return {"cpus": cpus, "rows": rows}


# --------------------------------------------------------------------------- GPU
def gpu_section(quick: bool, peers: bool = True) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"skipped": "PyTorch is not installed"}
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA device"}
    ns = [8192] if quick else [8192, 16384, 65536]
    reps = 5 if quick else 21
    sync = torch.cuda.synchronize
    try:
        import cupy
    except ImportError:
        cupy = None
    peer = _performer_cpu() if peers else None
    rows = []
    for n in ns:
        Q, K, V = qkv(n, np.float32)
        est = att.RFA(rk.features.Positive(M, projection="orthogonal"))
        Qt, Kt, Vt = (torch.as_tensor(a, device="cuda") for a in (Q, K, V))
        ref = est(Qt, Kt, Vt, rng=0)
        cpu = est(Q, K, V, rng=0)
        agree = float(
            np.max(np.abs(rk._backend.to_numpy(ref.output) - cpu.output)) / np.max(np.abs(cpu.output))
        )
        fixed = ref.draw  # the same features every call, as performer keeps its projection
        fns: dict[str, Callable[[], Any]] = {
            "rfkit_torch": lambda est=est, Qt=Qt, Kt=Kt, Vt=Vt, fixed=fixed: est(Qt, Kt, Vt, draw=fixed),
            "rfkit_torch_fresh_draw": lambda est=est, Qt=Qt, Kt=Kt, Vt=Vt: est(Qt, Kt, Vt, rng=0),
        }
        if cupy is not None:
            Qc, Kc, Vc = (cupy.asarray(a) for a in (Q, K, V))
            fns["rfkit_cupy"] = lambda est=est, Qc=Qc, Kc=Kc, Vc=Vc, fixed=fixed: est(Qc, Kc, Vc, draw=fixed)
        err = None
        orig = None
        if peer is not None:
            run, err, orig = _performer_fn(peer, ref, Q, K, V, device="cuda")
            fns["performer"] = run
        q4, k4, v4 = (t[None, None] for t in (Qt, Kt, Vt))

        def sdpa(q4: Any = q4, k4: Any = k4, v4: Any = v4) -> Any:
            # exact softmax(Q K^T) V: rfkit's convention has no 1/sqrt(d), so scale=1
            return torch.nn.functional.scaled_dot_product_attention(q4, k4, v4, scale=1.0)

        fns["exact_sdpa"] = sdpa
        try:
            ts = interleaved(fns, reps, sync)
        finally:
            if orig is not None:
                peer[2].softmax_kernel = orig
        row: dict[str, Any] = {"n": n, "dtype": "float32", "torch_vs_numpy_rel_diff": agree}
        for k, v in ts.items():
            row[f"{k}_ms"] = med(v) * 1e3
        if "performer" in ts:
            row["rfkit_torch_over_performer"] = med(
                [a / b for a, b in zip(ts["rfkit_torch"], ts["performer"])]
            )
            row["performer_rel_diff"] = err
        rows.append(row)
        print(
            "[gpu] "
            + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
        )
    return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}


# --------------------------------------------------------------------------- studies
def studies_section(
    quick: bool, workers: list[int], backend: str | None, trials: int | None = None
) -> dict[str, Any]:
    import tempfile

    study = HERE.parent / "studies" / "performer-mse.toml"
    rows = []
    tables = {}

    def run(label: str, **kw: Any) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            res = rk.study.run(
                study, rng=0, quick=quick, trials=trials, out=Path(tmp) / "o", progress=False, **kw
            )
            dt = time.perf_counter() - t0
        tables[label] = res.summary()
        rows.append({"run": label, "seconds": dt})
        size = "quick" if quick else "full"
        print(f"[studies] performer-mse {size} (trials={trials or 'design'}) {label}: {dt:.2f} s", flush=True)

    run(f"serial numpy ({available_cpus()} CPUs)")
    for k in workers:
        run(f"{k} processes", executor="processes", workers=k)
    if backend:
        dev = _gpu_device(backend)
        run(f"serial {backend}", backend=backend, device=dev)
        run(f"serial {backend}, draws on the device", backend=backend, device=dev, draws="backend")
    base = tables[rows[0]["run"]]
    for row in rows:
        other = tables[row["run"]]
        if "draws on the device" in row["run"]:  # other numbers by design: compared within MCSE
            m = base.merge(other, on=["cell", "estimator", "metric"], suffixes=("", "_dev"))
            z = (m["estimate"] - m["estimate_dev"]) / np.sqrt(m["mcse"] ** 2 + m["mcse_dev"] ** 2)
            row["summary_identical_to_serial"] = f"no (other draws; max |z| = {np.nanmax(np.abs(z)):.2f})"
            row["speedup_vs_serial"] = rows[0]["seconds"] / row["seconds"]
            continue
        same = base.drop(columns=["n_failed"]).equals(other.drop(columns=["n_failed"]))
        row["summary_identical_to_serial"] = bool(same)
        if not same:
            a = base["estimate"].to_numpy()
            b = other["estimate"].to_numpy()
            row["max_rel_diff"] = float(np.nanmax(np.abs(a - b) / np.abs(a)))
        row["speedup_vs_serial"] = rows[0]["seconds"] / row["seconds"]
    return {"rows": rows, "trials": trials}


def _gpu_device(backend: str) -> str | None:
    """``"cuda"`` where the backend sees a GPU, else its CPU (a smoke run on a machine without one)."""
    if backend == "cupy":
        return "cuda"
    if backend == "torch":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return None


def gpu_studies_section(
    specs: list[str], backend: str, cap_seconds: float, draws_list: tuple[str, ...] = ("backend", "numpy")
) -> dict[str, Any]:
    """Built-in studies (``name[:profile][:set=a,b]``) on the GPU with ``draws = "backend"``: whole
    ``rk.study.run`` wall time (imports excluded), one run each, stopped after ``cap_seconds``."""
    import tempfile

    from rfkit.study import Design, load_design
    from rfkit.study._builtin import find_study

    rows = []
    for spec in specs:
        name, *opts = spec.split(":")
        design = load_design(find_study(name))
        label = name
        for opt in opts:
            if opt == "quick":
                design = design.quick_profile()
                label += " (quick)"
            elif opt.startswith("set="):
                d = design.to_dict()
                d["grid"] = {**d["grid"], "set": opt[4:].split(",")}
                design = Design.from_dict(d, source=f"{name} [{opt}]")
                label += f" [{opt}]"
        for draws in draws_list:
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                try:
                    res = rk.study.run(
                        design,
                        backend=backend,
                        device=_gpu_device(backend),
                        draws=draws,
                        out=Path(tmp) / "o",
                        progress=False,
                        executor="serial",
                    )
                    ok = f"{len(res.trials)} trial rows"
                except Exception as exc:  # noqa: BLE001 - recorded, the next study runs
                    ok = f"failed: {type(exc).__name__}: {exc}"
                dt = time.perf_counter() - t0
            rows.append({"study": label, "draws": draws, "seconds": dt, "result": ok})
            print(f"[gpu-studies] {label} draws={draws}: {dt:.1f} s ({ok})", flush=True)
            if dt > cap_seconds:
                break
    return {"rows": rows, "backend": backend}


# --------------------------------------------------------------------------- report
def device_name() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0).replace(" ", "-")
    except ImportError:
        pass
    return f"cpu{available_cpus()}"


def markdown(res: dict[str, Any]) -> str:
    lines = [
        f"# Scaling benchmarks: {res['device']}",
        "",
        f"- machine: {res['machine']}",
        f"- date: {res['date']}; python {res['python']}, numpy {res['numpy']}",
        "- medians of interleaved repeats; ratios are medians of per-repeat ratios (bench_scale.py).",
        "",
    ]
    th = res.get("threads")
    if th:
        lines += [
            f"## Threads (NumPy backend, {th['cpus']} CPUs)",
            "",
            "rfkit: a fresh draw per call (the estimator); rfkit fixed: the same draw every call (`draw=`), "
            "as performer keeps its projection; rfkit/floor and rfkit/performer use the fixed-draw times.",
            "",
            "| n | dtype | causal | threads | rfkit ms | rfkit fixed ms | floor ms | rfkit/floor | performer ms "
            "| rfkit/performer | bit-identical |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in th["rows"]:
            lines.append(
                f"| {r['n']} | {r['dtype']} | {r['causal']} | {r['threads']} | {r['rfkit_ms']:.1f} | "
                f"{r.get('rfkit_fixed_draw_ms', float('nan')):.1f} | {r['floor_ms']:.1f} | "
                f"{r['rfkit_over_floor']:.2f} | {r.get('performer_ms', float('nan')):.1f} | "
                f"{r.get('rfkit_over_performer', float('nan')):.2f} | {r['bit_identical_to_default_threads']} |"
            )
        lines.append("")
    gpu = res.get("gpu")
    if gpu and "rows" in gpu:
        keys = sorted({k for r in gpu["rows"] for k in r if k.endswith("_ms")})
        lines += [
            f"## GPU ({gpu['device']}, torch {gpu['torch']})",
            "",
            "| n | " + " | ".join(keys) + " | rfkit/performer |",
        ]
        lines.append("|---|" + "---|" * (len(keys) + 1))
        for r in gpu["rows"]:
            lines.append(
                f"| {r['n']} | "
                + " | ".join(f"{r.get(k, float('nan')):.3f}" for k in keys)
                + f" | {r.get('rfkit_torch_over_performer', float('nan')):.2f} |"
            )
        lines.append("")
    elif gpu:
        lines += ["## GPU", "", f"skipped: {gpu['skipped']}", ""]
    st = res.get("studies")
    if st:
        lines += [
            "## Studies (performer-mse)",
            "",
            f"Trials per cell: {st.get('trials') or 'the design default'}.",
            "",
            "| run | seconds | speed-up vs serial | summary identical |",
            "|---|---|---|---|",
        ]
        for r in st["rows"]:
            lines.append(
                f"| {r['run']} | {r['seconds']:.2f} | {r['speedup_vs_serial']:.2f} | {r['summary_identical_to_serial']} |"
            )
        lines.append("")
    gs = res.get("gpu_studies")
    if gs:
        lines += [
            f"## Studies on the GPU ({gs['backend']})"
            if gs["backend"] != "numpy"
            else "## The same studies on the CPU (NumPy backend, serial)",
            "",
            "| study | draws | seconds | result |",
            "|---|---|---|---|",
        ]
        for r in gs["rows"]:
            lines.append(f"| {r['study']} | {r['draws']} | {r['seconds']:.1f} | {r['result']} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes, few repeats (smoke run)")
    p.add_argument("--out", default=str(HERE / "results"))
    p.add_argument("--sections", default="threads,gpu,studies")
    p.add_argument("--workers", default="8", help="worker counts for the studies section, e.g. 2,8")
    p.add_argument("--study-backend", default=None, help="backend for the GPU study run (torch or cupy)")
    p.add_argument(
        "--study-trials",
        type=int,
        default=None,
        help="trials per cell for the studies section (default: the design's; more trials show the "
        "scaling once start-up and table writing are a small part of the run)",
    )
    p.add_argument("--threads", default=None, help="thread counts of the threads section, e.g. 1,2,4,8,16")
    p.add_argument(
        "--gpu-studies",
        default="",
        help="studies to run on the GPU with draws on the device: name[:quick][:set=a,b], comma-free "
        "specs separated by ';'",
    )
    p.add_argument(
        "--gpu-study-cap",
        type=float,
        default=240.0,
        help="seconds after which a study's second run is skipped",
    )
    p.add_argument(
        "--gpu-study-draws", default="backend,numpy", help="draws of the gpu-studies runs, in order"
    )
    a = p.parse_args()
    sections = set(a.sections.split(","))
    res: dict[str, Any] = {
        "device": device_name(),
        "machine": f"{platform.machine()}, {available_cpus()} CPUs, {platform.platform()}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "quick": a.quick,
    }
    if "threads" in sections:
        counts = [int(c) for c in a.threads.split(",")] if a.threads else None
        res["threads"] = threads_section(a.quick, counts=counts)
    if "gpu" in sections:
        res["gpu"] = gpu_section(a.quick)
    if "studies" in sections:
        res["studies"] = studies_section(
            a.quick, [int(k) for k in a.workers.split(",") if k], a.study_backend, a.study_trials
        )
    if "gpu-studies" in sections and a.gpu_studies:
        res["gpu_studies"] = gpu_studies_section(
            [x for x in a.gpu_studies.split(";") if x],
            a.study_backend or "torch",
            a.gpu_study_cap,
            tuple(a.gpu_study_draws.split(",")),
        )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"scale-{res['device']}{'-quick' if a.quick else ''}"
    if a.study_trials:
        stem += f"-trials{a.study_trials}"
    (out / f"{stem}.json").write_text(json.dumps(res, indent=2, default=str))
    (out / f"{stem}.md").write_text(markdown(res))
    print(f"[scale] wrote {out / stem}.md and .json")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
