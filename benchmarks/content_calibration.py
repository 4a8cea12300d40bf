"""Keys by content: one split of the budget for all heads against a split calibrated per head.

For each panel (SmolLM2-135M-Instruct decoder heads, causal, at n = 1,024 and 512; all-MiniLM-L6-v2
encoder heads, bidirectional, at n = 512), each cost c (exact logits per query) and each head:

* one split for all heads (window 4 + 4 sinks, the rest split as a study's record splits it,
  ``rfkit.study._builtin_records.hybrid_budget``): "quest top-k" (Quest blocks of 4, no
  remainder), "proxy top-k+IS" (proxy scorer, importance-sampled remainder) and "window+uniform";
* the same three calibrated per head by ``rk.attention.calibrate_split`` on text A (the long text
  starting at passage 0) and evaluated, like every row, on text B (the long text starting at
  passage 1);
* FAVOR+ (positive orthogonal random features, m = c) as the reference.

The ratio is a head's output MSE (mean over queries, value dimensions and ``--trials`` draws)
over FAVOR+'s on the same head with common random numbers (every row of a (seed, head, trial)
draws from the same seed). Calibration draws come from one fixed seed (``CAL_SEED``); the
evaluation is repeated for each root seed. Panels can run in separate processes
(``--panels``); ``--report`` joins their JSON files into the markdown.

Usage: ``nice -n 5 python benchmarks/content_calibration.py --panels dec1024`` (and ``dec512``,
``enc512``), then ``python benchmarks/content_calibration.py --report``.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
import warnings
from pathlib import Path

import numpy as np

import rfkit as rk
from rfkit.exceptions import RFKitWarning
from rfkit.study._builtin_records import hybrid_budget

PANELS = {
    "dec1024": {"model": "smollm2", "n": 1024, "layers": [0, 3, 5], "heads": [0, 4]},
    "dec512": {"model": "smollm2", "n": 512, "layers": [0, 3, 5], "heads": [0, 4]},
    "enc512": {"model": "minilm", "n": 512, "layers": [0, 2, 5], "heads": [0, 4]},
}
COSTS = (32, 64, 128)
SEEDS = (7007, 7008)
CAL_SEED = 20261128
ROWS = {  # label: (scorer, remainder, extra Hybrid options)
    "quest top-k": ("quest", "none", {"block_size": 4}),
    "proxy top-k+IS": ("proxy", "importance", {}),
    "window+uniform": (None, "uniform", {}),
}
OUT = Path("benchmarks/results/content-calibration-2026-11-28.md")
RAW = Path("benchmarks/results/content-calibration-2026-11-28.json")


def _data(panel: str) -> tuple[np.ndarray, ...]:
    """Q, K, V (2 texts, H, n, d) of the panel's heads, and whether causal."""
    p = PANELS[panel]
    load = rk.data.smollm2_qk if p["model"] == "smollm2" else rk.data.minilm_qk
    d = load(list(rk.data.long_passages(2)), layers=p["layers"], heads=p["heads"], max_len=p["n"])
    assert d.mask.all(), "the long texts fill every position"
    H = len(p["layers"]) * len(p["heads"])
    shape = (2, H, p["n"], -1)
    return d.q.reshape(shape), d.k.reshape(shape), d.v.reshape(shape), p["model"] == "smollm2"


def _fixed(cost: int, scorer: str | None, remainder: str, causal: bool, opts: dict) -> rk.attention.Hybrid:
    split = hybrid_budget(
        cost, {"window": 4, "n_global": 4, "causal": causal, "scorer": scorer, "remainder": remainder}
    )
    return rk.attention.Hybrid(
        window=4, n_global=4, scorer=scorer, remainder=remainder, causal=causal, **split, **opts
    )


def _mse(est, q, k, v, exact, seed: int, trials: int) -> tuple[float, float]:
    """Mean over trials of the output MSE, and the mean measured cost (exact logits + features per query)."""
    errs, cost = [], 0.0
    for t in range(trials):
        gen = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(t,)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RFKitWarning)
            r = est(q, k, v, rng=gen)
        errs.append(float(np.mean((np.asarray(r.output) - exact) ** 2)))
        if r.cost is not None:
            cost = float(np.mean(r.cost.exact_logits + r.cost.random_features))
    return float(np.mean(errs)), cost


def run_panel(panel: str, trials: int, cal_trials: int) -> dict:
    Q, K, V, causal = _data(panel)
    H = Q.shape[1]
    out: dict = {"panel": panel, "causal": causal, "n": int(Q.shape[2]), "cells": []}
    for cost in COSTS:
        t0 = time.perf_counter()
        ests: dict[str, object] = {}
        splits: dict[str, list] = {}
        for label, (scorer, remainder, opts) in ROWS.items():
            ests[label] = _fixed(cost, scorer, remainder, causal, opts)
            cal = rk.attention.calibrate_split(
                Q[0], K[0], V[0], budget=cost, scorer=scorer, remainder=remainder, causal=causal,
                trials=cal_trials, rng=CAL_SEED, **opts,
            )  # fmt: skip
            ests[label + " calibrated"] = cal
            splits[label + " calibrated"] = cal.splits
        t_cal = time.perf_counter() - t0
        for seed in SEEDS:
            for h in range(H):
                q, k, v = Q[1, h], K[1, h], V[1, h]
                exact = np.asarray(rk.attention.softmax(q, k, v, causal=causal))
                fav = rk.attention.RFA(rk.features.Positive(cost, projection="orthogonal"), causal=causal)
                s = np.random.SeedSequence(seed, spawn_key=(cost, h)).entropy
                f_mse, _ = _mse(fav, q, k, v, exact, s, trials)
                for label, est in ests.items():
                    if isinstance(est, rk.attention.HybridPerHead):
                        est = est.heads[h]
                    m, c = _mse(est, q, k, v, exact, s, trials)
                    row = {"cost": cost, "seed": seed, "head": h, "row": label, "mse": m, "favor_mse": f_mse}
                    out["cells"].append({**row, "ratio": m / f_mse, "measured_cost": c})
        out.setdefault("splits", {})[str(cost)] = splits
        out.setdefault("seconds", {})[str(cost)] = {"calibration": t_cal, "total": time.perf_counter() - t0}
        print(panel, cost, f"{time.perf_counter() - t0:.0f} s", flush=True)
    return out


def _fmt(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def report(paths: list[Path], commit: str | None = None) -> str:
    if commit is None:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        commit = head.stdout.strip()
    panels = [json.loads(p.read_text()) for p in paths]
    lines = [
        "# Keys by content: per-head calibration (2026-11-28)",
        "",
        f"`benchmarks/content_calibration.py` at commit {commit} on the 2-core machine ({platform.machine()}, "
        "shared with other jobs, `nice -n 5`). Ratio: a head's output MSE over FAVOR+'s (m = cost, positive "
        "orthogonal features) on the same head, common random numbers; evaluated on text B (long text from "
        "passage 1), calibrated rows chose their split per head on text A (long text from passage 0). "
        f"Median over heads for seed {SEEDS[0]}, in brackets the medians' range over seeds {', '.join(map(str, SEEDS))}; "
        "per-head range over all seeds; heads better than FAVOR+ (with every seed); calibrated rows: "
        "per head, their MSE over the one split's (mean over seeds), median over heads, the heads where it is "
        "higher and the highest.",
        "",
    ]
    for p in panels:
        cells = p["cells"]
        H = 1 + max(c["head"] for c in cells)
        kind = (
            "SmolLM2-135M-Instruct decoder, causal"
            if p["causal"]
            else "all-MiniLM-L6-v2 encoder, bidirectional"
        )
        lines += [f"## {kind}, n = {p['n']:,}, {H} heads ({p['panel']})", ""]
        lines += [
            "| row | cost | measured cost | median ratio (seeds) | per-head range | better | vs one split |",
            "|---|---|---|---|---|---|---|",
        ]
        for cost in COSTS:
            for label in [r for base in ROWS for r in (base, base + " calibrated")]:
                sel = [c for c in cells if c["cost"] == cost and c["row"] == label]
                if not sel:
                    continue
                meds = {s: float(np.median([c["ratio"] for c in sel if c["seed"] == s])) for s in SEEDS}
                ratios = [c["ratio"] for c in sel]
                better = sum(all(c["ratio"] < 1 for c in sel if c["head"] == h) for h in range(H))
                mc = np.mean([c["measured_cost"] for c in sel])
                vs = ""
                if label.endswith(" calibrated"):  # per head: MSE over the one split's, mean over seeds
                    one = {
                        (c["seed"], c["head"]): c["mse"]
                        for c in cells
                        if c["cost"] == cost and c["row"] == label[:-11]
                    }
                    per = [
                        np.mean([c["mse"] / one[c["seed"], c["head"]] for c in sel if c["head"] == h])
                        for h in range(H)
                    ]
                    vs = f"{_fmt(float(np.median(per)))} (worse on {sum(r > 1 for r in per)}, worst {_fmt(max(per))})"
                lines.append(
                    f"| {label} | {cost} | {mc:.1f} | {_fmt(meds[SEEDS[0]])} ({_fmt(min(meds.values()))}-"
                    f"{_fmt(max(meds.values()))}) | {_fmt(min(ratios))}-{_fmt(max(ratios))} | {better} of {H} | {vs} |"
                )
        lines += ["", "Splits chosen on text A (window, sinks, top-k, samples per head):", ""]
        for cost, by_row in p["splits"].items():
            for label, sp in by_row.items():
                shown = "; ".join(
                    f"{s['window']}/{s['n_global']}/{s['top_k'] or 0}/{s['n_samples'] or 0}" for s in sp
                )
                lines.append(f"* cost {cost}, {label}: {shown}")
        secs = ", ".join(
            f"cost {c}: {v['total']:.0f} s (calibration {v['calibration']:.0f} s)"
            for c, v in p["seconds"].items()
        )
        lines += ["", f"Time: {secs}.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--panels", nargs="*", default=[], choices=list(PANELS))
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--cal-trials", type=int, default=2)
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--commit", default=None, help="the commit the panels ran at (default: HEAD)")
    args = ap.parse_args()
    for panel in args.panels:
        res = run_panel(panel, args.trials, args.cal_trials)
        RAW.with_suffix(f".{panel}.json").write_text(json.dumps(res))
    if args.report:
        paths = [RAW.with_suffix(f".{p}.json") for p in PANELS if RAW.with_suffix(f".{p}.json").exists()]
        OUT.write_text(report(paths, args.commit) + "\n")
        print(OUT.read_text())


if __name__ == "__main__":
    main()
