"""Whole-process time of every built-in study: ``rfkit run NAME [--quick]`` (the ``make bench-studies`` entry point).

Each run is a fresh process (imports, the run, the report and its figures: what a user waits
for), into a fresh output folder; the table gives the median and the range over ``--repeats``
runs, interleaved across studies so that a burst of load on the machine hits every study
alike. The load averages at start and end are recorded: other jobs share the cores, so re-run
when they are high.

Run::

    .venv/bin/python benchmarks/bench_studies.py                  # quick profiles, 3 runs each
    .venv/bin/python benchmarks/bench_studies.py --full performer-mse --repeats 3
    .venv/bin/python benchmarks/bench_studies.py --rfkit /path/to/other/checkout --label before

``--rfkit`` times another checkout of rfkit (its ``rfkit/cli`` or ``rfkit/cli.py`` run with
that checkout first on ``PYTHONPATH``), to put numbers before and after a change side by side;
``--before PATH --before-label NAME`` times a second checkout alternately with it, study by
study (the machine's speed drifts by several per cent over minutes: compare such pairs only);
results accumulate in ``benchmarks/results/studies.json`` keyed by label (name the commit and
the change in it, e.g. ``--label "24bc175: attention tables once"``) and are rendered to
``benchmarks/results/studies.md``, one dated section per label, newest first.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
STUDIES = sorted(p.stem for p in (ROOT / "rfkit" / "studies").glob("*.toml"))


def _time_one(rfkit_root: Path, study: Path | str, quick: bool, out: Path, workers: int = 1) -> float:
    env = dict(os.environ, PYTHONPATH=str(rfkit_root), MPLBACKEND="Agg")
    cmd = [sys.executable, "-m", "rfkit.cli", "run", str(study), "--out", str(out), "--no-progress"]
    if quick:
        cmd.append("--quick")
    if workers > 1:
        cmd += ["--workers", str(workers)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed


def _study_path(rfkit_root: Path, name: str) -> Path:
    for folder in (rfkit_root / "rfkit" / "studies", rfkit_root / "studies"):
        if (folder / f"{name}.toml").exists():
            return folder / f"{name}.toml"
    raise SystemExit(f"no study {name!r} in {rfkit_root}")


def measure(
    rfkit_root: Path,
    names: list[str],
    quick: bool,
    repeats: int,
    workers: int = 1,
    before: Path | None = None,
) -> dict[str, list[float]] | tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Times per study of ``rfkit_root``; with ``before``, of both checkouts, alternating.

    Studies are interleaved within a repeat (a burst of load hits every study alike); with
    ``before`` the two checkouts alternate for every study, first one then the other, the order
    flipped each repeat, so a slow drift of the machine hits both alike.
    """
    roots = [rfkit_root] if before is None else [before, rfkit_root]
    times: list[dict[str, list[float]]] = [{n: [] for n in names} for _ in roots]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            for name in names:
                order = list(enumerate(roots)) if r % 2 == 0 else list(enumerate(roots))[::-1]
                for k, root in order:
                    out = Path(tmp) / f"{name}-{r}-{k}"
                    times[k][name].append(_time_one(root, _study_path(root, name), quick, out, workers))
                    print(
                        f"{name} ({'quick' if quick else 'full'}) {root.name} run {r + 1}: {times[k][name][-1]:.2f} s",
                        flush=True,
                    )
    return times[0] if before is None else (times[0], times[1])


def render(db: dict) -> str:
    lines = [
        "# Built-in studies: whole-process time",
        "",
        "`rfkit run NAME [--quick]` in a fresh process (imports, run, report and figures), median and",
        "range over interleaved repeats; written by `benchmarks/bench_studies.py` (`make bench-studies`).",
        "Each section is one checkout of rfkit (its commit in the label), measured at the date and on the",
        "machine named with it, newest first; compare sections only where the machine and the load are alike.",
        "",
    ]
    for label, entry in sorted(db.items(), key=lambda item: item[1]["when"], reverse=True):
        lines += [
            f"## {entry['when']}: {label}",
            "",
            f"{entry['when']}, {entry['machine']}, load average {entry['load_start']} at start, "
            f"{entry['load_end']} at end; rfkit {entry['commit']}"
            + (
                f"; timed alternately with *{entry['alternated_with']}*."
                if entry.get("alternated_with")
                else "."
            ),
            "",
            "| study | profile | median (s) | min-max (s) | runs |",
            "|---|---|---|---|---|",
        ]
        for row in entry["rows"]:
            lines.append(
                f"| {row['study']} | {row['profile']} | {row['median']:.2f} | "
                f"{row['min']:.2f}-{row['max']:.2f} | {row['runs']} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("studies", nargs="*", help="built-in study names (default: all)")
    ap.add_argument("--full", action="store_true", help="full profiles instead of the quick ones")
    ap.add_argument("--repeats", type=int, default=3, help="runs per study (default 3)")
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="rfkit run --workers K (default 1: rfkit run without --workers, the default command)",
    )
    ap.add_argument("--rfkit", type=Path, default=ROOT, help="checkout of rfkit to time (default: this one)")
    ap.add_argument("--label", default="current", help="name of this set of numbers in the results")
    ap.add_argument("--out", type=Path, default=RESULTS, help="folder of studies.json / studies.md")
    ap.add_argument(
        "--before",
        type=Path,
        default=None,
        help="another checkout, timed alternately with --rfkit study by study (its numbers under --before-label)",
    )
    ap.add_argument("--before-label", default="before", help="name of the --before checkout's numbers")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    names = args.studies or STUDIES
    load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    got = measure(
        args.rfkit.resolve(),
        names,
        not args.full,
        args.repeats,
        args.workers,
        before=None if args.before is None else args.before.resolve(),
    )
    runs = (
        [(args.label, args.rfkit, got)]
        if args.before is None
        else [(args.before_label, args.before, got[0]), (args.label, args.rfkit, got[1])]
    )
    args.out.mkdir(parents=True, exist_ok=True)
    db_path = args.out / "studies.json"
    db = json.loads(db_path.read_text(encoding="utf-8")) if db_path.exists() else {}
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load_end = " ".join(f"{x:.2f}" for x in os.getloadavg())
    for label, root, times in runs:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        rows = [
            {
                "study": n,
                "profile": ("full" if args.full else "quick")
                + (f", {args.workers} workers" if args.workers > 1 else ""),
                "median": statistics.median(t),
                "min": min(t),
                "max": max(t),
                "runs": len(t),
            }
            for n, t in times.items()
        ]
        entry = db.get(label, {})
        keep = [
            r
            for r in entry.get("rows", [])
            if (r["study"], r["profile"]) not in {(x["study"], x["profile"]) for x in rows}
        ]
        db[label] = {
            "when": when,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "load_start": load_start,
            "load_end": load_end,
            "commit": commit or "unknown",
            "rows": keep + rows,
        }
        if args.before is not None:
            db[label]["alternated_with"] = runs[1][0] if label == runs[0][0] else runs[0][0]
    db_path.write_text(json.dumps(db, indent=2) + "\n", encoding="utf-8")
    (args.out / "studies.md").write_text(render(db) + "\n", encoding="utf-8")
    print(f"wrote {db_path} and {args.out / 'studies.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
