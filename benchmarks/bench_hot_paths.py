"""Hot paths of rfkit, one checkout against another: the calls a change to them must not slow down.

Run (each checkout in a fresh process, alternating, so both see the same machine)::

    .venv/bin/python benchmarks/bench_hot_paths.py --before /path/to/old/checkout --rounds 2 \
        --out benchmarks/results/hot-paths.md

``--out`` adds the measurement as a dated section on top of that file (newest first), naming
both commits and the machine.

Cases (CPU, NumPy, float64; n = 8192 queries and keys, d = d_v = 64 unless said): RFA with
Positive(256, orthogonal), bidirectional and causal, float64 and float32; SNIS (S = 256); LARA
(C = 16 proposals, 16 samples each); causal RA (S = 128) on 16 heads of 64 tokens, the shape of
real-attention's decoder heads (default threads and one thread); ``draw.kernel`` at 4096 x 4096; and the kernel-study path:
orthogonal directions for 2000 trial streams (m = 64, d = 16) and the paired estimates of 2000
draws on 32 pairs. Each figure is the median of 7 calls after one warm-up call, in ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CASES = r"""
import json, statistics, time
import numpy as np
import rfkit as rk
att = rk.attention
rng = np.random.default_rng(7)
n, d = 8192, 64
Q, K, V = (0.5 * rng.standard_normal((n, d)) / d**0.25 for _ in range(3))
fm = rk.features.Positive(256, projection="orthogonal")
draw = fm.sample(d, rng=0)
X4 = 0.5 * rng.standard_normal((4096, d)) / d**0.25
streams = [np.random.SeedSequence(3, spawn_key=(0, t)) for t in range(2000)]
small = rk.features.Positive(64, projection="orthogonal")
W = small.projection_streams(16, streams)
pd_ = small.from_projection(16, 2000, W)
Xp, Yp = (0.5 * rng.standard_normal((32, 16)) / 2 for _ in range(2))
Qr, Kr, Vr = (0.4 * rng.standard_normal((16, 64, 64)) for _ in range(3))
cases = {
    "RFA": lambda: att.RFA(fm)(Q, K, V, draw=draw),
    "RFA causal": lambda: att.RFA(fm, causal=True)(Q, K, V, draw=draw),
    "RFA float32": lambda: att.RFA(fm)(*(a.astype(np.float32) for a in (Q, K, V)), draw=draw),
    "RFA causal float32": lambda: att.RFA(fm, causal=True)(*(a.astype(np.float32) for a in (Q, K, V)), draw=draw),
    "SNIS": lambda: att.SNIS(n_samples=256)(Q, K, V, rng=0),
    "LARA": lambda: att.LARA(n_proposals=16, samples_per_proposal=16)(Q, K, V, rng=0),
    "RA, 16 x 64 tokens, S = 128, causal": lambda: att.RA(n_samples=128, causal=True)(Qr, Kr, Vr, rng=0),
    "RA, the same, one thread": lambda: att.RA(n_samples=128, causal=True, n_threads=1)(Qr, Kr, Vr, rng=0),
    "draw.kernel 4096 x 4096": lambda: draw.kernel(X4, X4),
    "orthogonal directions, 2000 streams": lambda: small.projection_streams(16, streams),
    "paired estimates, 2000 draws x 32 pairs": lambda: pd_.slog_pairwise(Xp, Yp),
}
out = {}
for name, fn in cases.items():
    fn()
    ts = []
    for _ in range(7):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    out[name] = statistics.median(ts) * 1e3
print(json.dumps(out))
"""


def measure(checkout: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    proc = subprocess.run([sys.executable, "-c", _CASES], env=env, capture_output=True, text=True, cwd="/")
    if proc.returncode:
        raise SystemExit(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _commit(path: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="checkout to compare with")
    ap.add_argument(
        "--after", type=Path, default=ROOT, help="checkout measured as 'after' (default: this one)"
    )
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds (default 2)")
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="Markdown results file to add a dated section to (newest first)",
    )
    args = ap.parse_args(argv)
    runs: list[tuple[str, dict[str, float]]] = []
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    for r in range(args.rounds):
        for label, path in (("before", args.before), ("after", args.after)):
            runs.append((f"{label}, run {r + 1}", measure(path.resolve())))
            print(runs[-1][0], json.dumps({k: round(v, 1) for k, v in runs[-1][1].items()}), flush=True)
    names = list(runs[0][1])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        f"## {when}: {_commit(args.before)} (before) and {_commit(args.after)} (after)",
        "",
        f"`benchmarks/bench_hot_paths.py`, {when}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {load} at start; medians of 7 calls in ms, each checkout in a "
        "fresh process, alternating. Cases: see the script's docstring.",
        "",
        "| case | " + " | ".join(label for label, _ in runs) + " | after / before (medians) |",
        "|---|" + "---|" * (len(runs) + 1),
    ]
    for name in names:
        before = statistics.median([res[name] for label, res in runs if label.startswith("before")])
        after = statistics.median([res[name] for label, res in runs if label.startswith("after")])
        cells = " | ".join(f"{res[name]:.1f}" for _, res in runs)
        lines.append(f"| {name} | {cells} | {after / before:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        _add_section(args.out, text)
    return 0


def _add_section(path: Path, section: str) -> None:
    """Put ``section`` above the newest section of the results file ``path`` (newest first)."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    at = old.find("\n## ")
    if at >= 0:
        text = old[: at + 1] + section + "\n" + old[at + 1 :]
    elif old.strip():
        text = old.rstrip("\n") + "\n\n" + section
    else:
        text = "# Hot paths\n\n" + section
    path.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
