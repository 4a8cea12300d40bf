"""The benchmark targets and the Markdown report of ``run_all.py``."""

from __future__ import annotations

from typing import Any

from _limits import Limits

RFA_TARGET = 1.5
HARNESS_TARGET = 2.0


def limits_line(limits: Limits) -> str:
    d = limits.to_dict()
    g = ", ".join(f"{r['dtype'][-2:]} {r['shape']} {r['gflops']:.0f}" for r in d["gemm"])
    e = ", ".join(f"{r['op']} {r['dtype'][-2:]} {r['per_second'] / 1e6:.0f}M" for r in d["elementwise_block"])
    return f"GEMM GFLOP/s: {g}; elementwise /s: {e}"


def _row(rows: list[dict[str, Any]], name: str, n: int, dtype: str) -> dict[str, Any] | None:
    return next((r for r in rows if r["name"] == name and r["n"] == n and r["dtype"] == dtype), None)


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    rows = res["rfkit"]
    n_t = res["config"]["target_n"]
    # 1. RFA float64 within 1.5x of its floor
    r = _row(rows, "RFA Positive", n_t, "float64")
    inter = res.get("reused", {}).get("bench_attention.speed", {}).get("ratio_median")
    if r is not None:
        ratio = inter if inter is not None else r["ratio"]
        strict = r["ratio"]
        if ratio <= RFA_TARGET and strict <= RFA_TARGET:
            status = "met"
        elif ratio <= RFA_TARGET:
            status = f"met against the interleaved floor; missed by {strict / RFA_TARGET:.2f}x against the strict floor"
        else:
            status = f"missed by {ratio / RFA_TARGET:.2f}x"
        out.append(
            {
                "target": f"bidirectional RFA n={n_t}, d=64, m=256, float64 within {RFA_TARGET}x of its floor",
                "status": status,
                "measured": (
                    f"{ratio:.2f}x against bench_attention.speed's interleaved floor (median rates, allocating "
                    f"outputs, as RFA does); {strict:.2f}x against the strict floor of the table (best rates, "
                    f"preallocated outputs, in-cache exp): median {r['median_s'] * 1e3:.1f} ms vs floor "
                    f"{r['floor_s'] * 1e3:.1f} ms"
                ),
                "value": ratio,
            }
        )
    # 2. float32 RFA vs performer-pytorch at n >= 4096
    perf = res.get("peers", {}).get("performer_pytorch", {})
    prow = [
        p for p in perf.get("rows", []) if p.get("dtype") == "float32" and p["n"] >= 4096 and "rfkit_s" in p
    ]
    if prow:
        worst = max(p["rfkit_over_performer"] for p in prow)
        out.append(
            {
                "target": "float32 RFA no slower than performer-pytorch FastAttention at n >= 4096, equal threads",
                "status": "met" if worst <= 1.0 else "missed",
                "measured": "rfkit/performer time "
                + ", ".join(f"n={p['n']}: {p['rfkit_over_performer']:.2f}" for p in prow),
                "value": worst,
            }
        )
    else:
        out.append(
            {
                "target": "float32 RFA no slower than performer-pytorch at n >= 4096",
                "status": "not measured",
                "measured": perf.get("skipped", "peers skipped"),
            }
        )
    # 3. multithreaded exp: does a 2-thread variant beat the best 1-thread variant of the step?
    ex = res.get("exp_threads", {})
    f64 = [x for x in ex.get("rows", []) if x["dtype"] == "float64"]
    if f64:
        single = [x for x in f64 if "x2" not in x["variant"] and "prange" not in x["variant"]]
        multi = [x for x in f64 if x not in single]
        best1 = min(single, key=lambda x: x["step_s"])
        bestm = min(multi, key=lambda x: x["step_s"])
        gain = best1["step_s"] / bestm["step_s"]
        out.append(
            {
                "target": (
                    f"elementwise-heavy step (features {ex['n']}x{ex['m']}, float64) uses both cores when that pays"
                ),
                "status": "pays" if gain >= 1.2 else "does not pay",
                "measured": (
                    f"best 2-thread variant ({bestm['variant']}, {bestm['step_s'] * 1e3:.2f} ms) vs best 1-thread "
                    f"({best1['variant']}, {best1['step_s'] * 1e3:.2f} ms): x{gain:.2f} for the step; "
                    + ", ".join(
                        f"{x['variant']}: x{x['step_speedup']:.2f}" for x in f64 if x["variant"] != "numpy"
                    )
                    + " vs plain numpy"
                ),
                "value": gain,
            }
        )
    # 4. harness vs loop, for every grid bench_study.py reports
    grids = res.get("reused", {}).get("bench_study", {}).get("grids", [])
    if grids:
        worst = min(g["loop_over_harness"] for g in grids)
        out.append(
            {
                "target": f"study harness >= {HARNESS_TARGET}x faster than a per-trial loop (bench_study.py)",
                "status": (
                    "met"
                    if worst >= HARNESS_TARGET
                    else f"missed by {HARNESS_TARGET / worst:.2f}x on at least one grid"
                    if all(g["loop_over_harness"] < HARNESS_TARGET for g in grids)
                    else f"met on {sum(g['loop_over_harness'] >= HARNESS_TARGET for g in grids)} of "
                    f"{len(grids)} grids; missed by {HARNESS_TARGET / worst:.2f}x on the other"
                ),
                "measured": "; ".join(
                    f"{g['grid']}: loop/harness = {g['loop_over_harness']:.2f}, harness/bare = "
                    f"{g['harness_over_bare']:.2f}"
                    for g in grids
                ),
                "value": worst,
            }
        )
    # 5. memory linear in n
    fits = res.get("memory_fit", [])
    if fits:
        ok = all(f["loglog_slope"] <= 1.2 and f["linear_r2"] >= 0.98 for f in fits)
        out.append(
            {
                "target": "linear estimators' peak memory grows linearly in n",
                "status": "met" if ok else "missed",
                "measured": ", ".join(
                    f"{f['name']}: log-log slope {f['loglog_slope']:.2f} (n >= {f['loglog_from_n']}), "
                    f"{f['linear_bytes_per_row']:.0f} B/row, R2 {f['linear_r2']:.3f}"
                    for f in fits
                ),
            }
        )
    return out


def _ms(s: float | None) -> str:
    return "" if s is None else f"{s * 1e3:.2f}" if s < 1 else f"{s * 1e3:.0f}"


def markdown(res: dict[str, Any]) -> str:
    m = res["machine"]
    L: list[str] = []
    add = L.append
    add("# rfkit benchmarks\n")
    add(
        f"Run {res['started']}, {'quick' if res['config']['quick'] else 'full'} mode, {res['elapsed_s']:.0f} s, "
        f"commit `{m.get('commit')}`. Generated by `benchmarks/run_all.py`; see `docs/benchmarks.md`.\n"
    )
    if res["config"]["quick"]:
        add(
            "**Quick (smoke) run: sizes are too small and repeats too few to judge the targets; the "
            "committed numbers come from a full run.**\n"
        )
    add("## Machine\n")
    add(f"- CPU: {m.get('cpu_model')}, {m['cpus']} logical CPUs; {m['platform']}")
    add(f"- Python {m['python']}, NumPy {m['numpy']}; BLAS: {m['blas']}")
    add(f"- BLAS threads: {m['blas_threads']}; threadpoolctl at start: {m['threadpoolctl']}")
    add(f"- threadpoolctl at end (after peers were imported): {m.get('threadpoolctl_end')}")
    add(f"- environment: {m['env'] or 'no BLAS/OpenMP thread variables set'}")
    add(
        f"- load average (1, 5, 15 min) at start {m['load_start']}, at end {m.get('load_end')} "
        f"(other jobs share the {m['cpus']} cores; times are medians, ratios are taken in-process)\n"
    )

    add("## Targets\n")
    add("| target | status | measured |")
    add("|---|---|---|")
    for t in res["targets"]:
        add(f"| {t['target']} | **{t['status']}** | {t['measured']} |")
    add("")

    lim = res["limits"]
    add("## Machine limits (this process)\n")
    add(
        "A limit is the best of the repeats (other jobs only slow the machine down); the median is shown "
        "beside it. Floors below use the best.\n"
    )
    add("Matrix multiply, every shape used by a floor below (timed on at most 2048 rows, scaled):\n")
    add("| dtype | shape | best ms | GFLOP/s best | GFLOP/s median | others |")
    add("|---|---|---:|---:|---:|---:|")
    for r in lim["gemm"]:
        add(
            f"| {r['dtype']} | {r['shape']} | {_ms(r['seconds'])} | {r['gflops']:.1f} | "
            f"{r.get('gflops_median', float('nan')):.1f} | {r.get('others_cpu_share') or 0:.2f} |"
        )
    add(
        "\nElementwise, elements per second (block of 2^19 elements, as rfkit's chunks; large: 16.8M elements):\n"
    )
    add("| op | dtype | block, M/s best | block, M/s median | large array, M/s median |")
    add("|---|---|---:|---:|---:|")
    large = {(r["op"], r["dtype"]): r["per_second"] for r in lim["elementwise_large"]}
    for r in lim["elementwise_block"]:
        lg = large.get((r["op"], r["dtype"]))
        add(
            f"| {r['op']} | {r['dtype']} | {r['per_second'] / 1e6:.0f} | "
            f"{r.get('per_second_median', float('nan')) / 1e6:.0f} | {'' if lg is None else f'{lg / 1e6:.0f}'} |"
        )
    add("")

    add("## rfkit\n")
    add(
        "Median of the repeats (x = repeats; fewer for slow cases), peak traced memory of one call beyond its "
        "inputs, floor = the limits above applied to the counts (last column; `_cases.py` explains them), "
        "ratio = median / floor, best ratio = best / floor; others = share of the CPUs used by other processes while the row was "
        "timed (rows are re-timed, up to 3 times, while it exceeds 0.15). d = 64, dv = 64, m = 256, "
        "queries = keys = n.\n"
    )
    add(
        "| group | operation | n | dtype | median ms | best ms | x | others | peak MiB | floor ms | ratio | "
        "best ratio | counts |"
    )
    add("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in res["rfkit"]:
        add(
            f"| {r['group']} | {r['name']} | {r['n']} | {r['dtype']} | {_ms(r['median_s'])} | {_ms(r['min_s'])} | "
            f"{r['repeats']} | {r['others_cpu_share']:.2f} | {r['peak_mib']:.1f} | {_ms(r['floor_s'])} | "
            f"{r['ratio']:.2f} | {r['min_s'] / r['floor_s']:.2f} | {r['counts_text']} |"
        )
    add("")
    study = [r for r in res["rfkit"] if r["group"] == "study"]
    if study:
        p = study[0].get("params", {})
        add(
            f"The study row's n is the number of (cell, estimator, trial) evaluations: {p.get('cells')} cells x "
            f"{p.get('estimators')} estimators x {p.get('trials')} trials of 32 pairs (d = 16).\n"
        )

    add("### Peak memory against n (linear estimators, float64)\n")
    add(
        "Unavoidable per query row: the output (n, dv) and [numerator | normaliser] (n, dv + 1) plus the "
        f"log-scale, {8 * 130} bytes in float64.\n"
    )
    add("| estimator | n | peak MiB | log-log slope | straight line: MiB + bytes/row x n | R^2 |")
    add("|---|---|---|---:|---|---:|")
    for f in res["memory_fit"]:
        add(
            f"| {f['name']} | {', '.join(map(str, f['ns']))} | {', '.join(f'{v:.1f}' for v in f['peak_mib'])} | "
            f"{f['loglog_slope']:.2f} (n >= {f['loglog_from_n']}) | {f['linear_intercept_mib']:.1f} MiB + "
            f"{f['linear_bytes_per_row']:.0f} B x n | {f['linear_r2']:.4f} |"
        )
    add("")

    bd = res.get("rfa_breakdown", {})
    if "steps_s" in bd:
        tot = bd["steps_s"]["total (steps above)"]
        add(f"### Where bidirectional RFA's time goes (n = {bd['n']}, float64, Positive(256))\n")
        add(
            f"Median over repeats of each step of rfkit's own loop (2048-row blocks); whole `RFA.__call__` "
            f"{bd['rfa_call_s'] * 1e3:.2f} ms; others' CPU share {bd['others_cpu_share']:.2f}.\n"
        )
        add("| step | ms | share |")
        add("|---|---:|---:|")
        for k, v in bd["steps_s"].items():
            add(f"| {k} | {v * 1e3:.2f} | {v / tot:.0%} |")
        add("")

    ex = res.get("exp_threads")
    if ex:
        add(f"## Multithreaded exp: the feature step at n = {ex['n']}, m = {ex['m']}, d = {ex['d']}\n")
        add("Step = `P = X @ W.T; P -= P.max(-1); exp(P)` (RFA's per-side feature computation).\n")
        add("| dtype | exp variant | exp ms | exp speedup | exp M/s | step ms | step speedup |")
        add("|---|---|---:|---:|---:|---:|---:|")
        for x in ex["rows"]:
            add(
                f"| {x['dtype']} | {x['variant']} | {_ms(x['exp_s'])} | {x['exp_speedup']:.2f} | "
                f"{x['exp_elements_per_s'] / 1e6:.0f} | {_ms(x['step_s'])} | {x['step_speedup']:.2f} |"
            )
        add("")

    peers = res.get("peers", {})
    add("## Peers (same process, interleaved repeats)\n")
    if "skipped" in peers:
        add(f"Skipped: {peers['skipped']}\n")
    else:
        pp = peers.get("performer_pytorch", {})
        add("### performer-pytorch FastAttention vs rfkit RFA(Positive, orthogonal)\n")
        if "skipped" in pp:
            add(f"{pp['skipped']}\n")
        else:
            add(
                f"{pp['info']}. Same projection matrix, performer's eps = 0; agreement = max |difference| / "
                "max |output| before timing.\n"
            )
            add(
                "| n | dtype | agreement | performer ms | rfkit ms | rfkit / performer | floor ms | rfkit peak MiB "
                "| others |"
            )
            add("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
            for r in pp["rows"]:
                if "rfkit_s" not in r:
                    add(f"| {r['n']} | {r['dtype']} | {r['rel_max_diff']:.1e} (FAILED) | | | | | |")
                    continue
                add(
                    f"| {r['n']} | {r['dtype']} | {r['rel_max_diff']:.1e} | {_ms(r['performer_s'])} | "
                    f"{_ms(r['rfkit_s'])} | {r['rfkit_over_performer']:.2f} | {_ms(r['floor_s'])} | "
                    f"{r['rfkit_peak_mib']:.1f} | {r.get('others_cpu_share', float('nan')):.2f} |"
                )
            add("")
        sk = peers.get("sklearn_rbf", {})
        add("### scikit-learn RBFSampler vs rfkit Trig features (2m = 512 columns each)\n")
        if "skipped" in sk:
            add(f"{sk['skipped']}\n")
        else:
            a = sk["agreement"]
            add(
                f"scikit-learn {sk['info']['sklearn']}. Statistical agreement on {a['pairs']} pairs: relative RMSE "
                f"of the Gaussian-kernel estimate rfkit {a['rfkit_trig_rel_rmse']:.4f}, sklearn "
                f"{a['sklearn_rbf_rel_rmse']:.4f}.\n"
            )
            add(
                "| n | dtype | sklearn ms | rfkit ms | rfkit / sklearn | sklearn floor ms | rfkit floor ms | sklearn output "
                "| others |"
            )
            add("|---:|---|---:|---:|---:|---:|---:|---|---:|")
            for r in sk["rows"]:
                add(
                    f"| {r['n']} | {r['dtype']} | {_ms(r['sklearn_s'])} | {_ms(r['rfkit_s'])} | "
                    f"{r['rfkit_over_sklearn']:.2f} | {_ms(r['sklearn_floor_s'])} | {_ms(r['rfkit_floor_s'])} | "
                    f"{r['sklearn_out_dtype']} | {r.get('others_cpu_share', float('nan')):.2f} |"
                )
            add("")

    add("## Output of the reused single-purpose scripts\n")
    for name, v in res.get("reused", {}).items():
        add(f"### `{name}` {' '.join(map(str, v.get('args', [])))}\n")
        add(f"Others' CPU share while it ran: {v.get('others_cpu_share', float('nan')):.2f}.\n")
        add("```text")
        add(v["output"].strip())
        add("```\n")
    return "\n".join(L) + "\n"
