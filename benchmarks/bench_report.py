"""Time ``write_report`` of a finished study run in fresh processes, as ``rfkit run`` writes it.

The fixed-cost target: the report and figures of performer-mse (full profile) in 0.6 s.
Each timing is one fresh process: the imports happen first and are excluded, then the report is
written into a copy of the run folder. Two ways are timed, alternately:

- ``serial``: ``write_report(result, out)``; the calling process draws every figure (and imports
  matplotlib when it draws the first);
- ``workers``: what ``rfkit run`` does by default on a machine with K CPUs: the fork server is
  started before the imports (``start_process_server``), the process waits ``--settle`` seconds
  (the study's run, during which the server imports matplotlib), then ``write_report(result, out,
  workers=K)``.

Run::

    .venv/bin/rfkit run performer-mse --out /tmp/pm-full --no-progress
    .venv/bin/python benchmarks/bench_report.py /tmp/pm-full --repeats 7 [--rfkit PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _child(run_dir: Path, workers: int, settle: float) -> None:
    if workers > 1:
        from rfkit._parallel import start_process_server

        start_process_server(["rfkit.report._worker_warmup"])
    import rfkit.study as st
    from rfkit.report import write_report

    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / "run"
        shutil.copytree(run_dir, dst)
        result = st.StudyResult.load(dst)
        if workers > 1:
            time.sleep(settle)
        t0 = time.perf_counter()
        write_report(result, dst, workers=workers)
        print(f"{time.perf_counter() - t0:.4f}")


def _time(root: Path, run_dir: Path, workers: int, settle: float) -> float:
    env = {**os.environ, "PYTHONPATH": str(root)}
    cmd = [sys.executable, str(Path(__file__).resolve()), str(run_dir), "--child", str(workers)]
    cmd += ["--settle", str(settle)]
    out = subprocess.run(cmd, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path, help="a finished run folder (rfkit run ... --out DIR)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="K of the workers way")
    ap.add_argument("--settle", type=float, default=1.5, help="seconds between the imports and the report")
    ap.add_argument("--rfkit", type=Path, default=ROOT, help="checkout of rfkit to time")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        _child(args.run_dir, args.child, args.settle)
        return 0
    times: dict[str, list[float]] = {"serial": [], "workers": []}
    for _ in range(args.repeats):
        times["serial"].append(_time(args.rfkit, args.run_dir, 1, args.settle))
        times["workers"].append(_time(args.rfkit, args.run_dir, args.workers, args.settle))
    for way, t in times.items():
        print(f"{way}: median {statistics.median(t):.3f} s, range {min(t):.3f}-{max(t):.3f} s, {len(t)} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
