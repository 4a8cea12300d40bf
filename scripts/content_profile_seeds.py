"""The ``content`` profiles of ``real-attention`` and ``drop-in`` over several root seeds, from finished runs.

Run each profile once per seed (about 6 and 15 minutes with ``--workers 2`` on a 2-core
machine), then summarise the run folders::

    rfkit run real-attention --profile content --workers 2 --seed 7007 --out out/ra-content-7007
    rfkit run drop-in --profile content --workers 2 --seed 24005 --out out/dropin-content-24005
    python scripts/content_profile_seeds.py --real-attention out/ra-content-* \
        --drop-in out/dropin-content-* --out benchmarks/results/seed-spread

Writes, for real-attention, each row's median output-MSE ratio to FAVOR+ over the 54 heads of a
panel (encoder n = 512, decoder n = 512 and 1,024) and cost, per seed and over the seeds
(``real-attention-content-<date>.csv``, as ``scripts/real_attention_long_seeds.py``); for
drop-in, each row's mean damage per cell, per seed and pooled over every draw of every seed with
its Monte Carlo standard error (``drop-in-content-<date>.csv``).
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import numpy as np
import pandas as pd
from real_attention_long_seeds import head_ratios, panel_table

import rfkit as rk

DROPIN_METRICS = ["kl", "top1_agree", "ppl_ratio", "emb_cos", "hidden_cos", "dec_head_mse", "enc_head_mse"]


def real_attention(folders: list[Path]) -> pd.DataFrame:
    """Per seed, panel, cost and row: median ratio to FAVOR+, heads better, extremes."""
    tables = []
    for folder in folders:
        res = rk.study.load(folder)
        seed = int(res.provenance["entropy"])
        tables.append(panel_table(head_ratios(res.summary())).assign(seed=seed).reset_index())
    return pd.concat(tables, ignore_index=True)


def drop_in(folders: list[Path]) -> pd.DataFrame:
    """Per cell, row and metric: the mean of each seed's draws, and of every draw pooled, with its MCSE."""
    rows = []
    for folder in folders:
        res = rk.study.load(folder)
        t = res.trials[res.trials["status"] == "ok"].copy()
        cells = res.design.cells()
        for key in ("n_tokens", "feature_dim"):
            t[key] = [cells[c][key] for c in t["cell"]]
        t["seed"] = int(res.provenance["entropy"])
        rows.append(t)
    t = pd.concat(rows, ignore_index=True)
    long = t.melt(
        id_vars=["seed", "n_tokens", "feature_dim", "estimator", "trial"],
        value_vars=[m for m in DROPIN_METRICS if m in t],
        var_name="metric",
    ).dropna(subset=["value"])
    keys = ["n_tokens", "feature_dim", "estimator", "metric"]
    per_seed = long.groupby([*keys, "seed"])["value"].mean().unstack("seed")
    per_seed.columns = [f"seed_{s}" for s in per_seed.columns]
    g = long.groupby(keys)["value"]
    pooled = pd.DataFrame(
        {
            "mean": g.mean(),
            "mcse": g.std(ddof=1) / np.sqrt(g.size()),
            "draws": g.size(),
            "seed_min": per_seed.min(axis=1),
            "seed_max": per_seed.max(axis=1),
        }
    )
    return pooled.join(per_seed).reset_index()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real-attention", type=Path, nargs="*", default=[])
    ap.add_argument("--drop-in", type=Path, nargs="*", default=[])
    ap.add_argument("--out", type=Path, default=Path("out/content-seeds"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    date = datetime.date.today().isoformat()
    pd.set_option("display.width", 220)
    pd.set_option("display.max_rows", 400)
    if args.real_attention:
        per_seed = real_attention(args.real_attention)
        per_seed.to_csv(args.out / f"real-attention-content-{date}.csv", index=False)
        agg = per_seed.groupby(["causal", "max_len", "feature_dim", "estimator"]).agg(
            median_of_medians=("median", "median"),
            min_median=("median", "min"),
            max_median=("median", "max"),
            better_min=("better", "min"),
            better_max=("better", "max"),
            lowest=("lowest", "min"),
            highest=("highest", "max"),
            seeds=("seed", "nunique"),
        )
        print(agg.round(4))
    if args.drop_in:
        table = drop_in(args.drop_in)
        table.to_csv(args.out / f"drop-in-content-{date}.csv", index=False)
        print(table.round(4).to_string(index=False))


if __name__ == "__main__":
    main()
