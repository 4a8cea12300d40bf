"""``rfkit list`` and ``rfkit run``: the command-line front end of the study harness.

``rfkit run`` runs a study into its output folder (holding the folder's lock across the run and
its report), writes the Markdown report (:func:`rfkit.report.write_report`) and prints how the
measured MSEs compare with their closed forms.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

from ..exceptions import DamagedResultWarning, RFKitError
from ..report import write_report
from ..study import load_design, run
from ..study._builtin import builtin_study_dirs, find_study
from ..study._lock import RunLock
from ..study._manifest import units_done
from ..study._tables import heavy_tailed, not_ok

__all__ = ["cmd_list", "cmd_run"]


def cmd_list(args: argparse.Namespace) -> int:
    """``rfkit list``: every study file in ./studies and the built-in ones, with its description."""
    seen = set()
    for d in builtin_study_dirs():
        for f in sorted(d.glob("*.toml")):
            if f.name in seen:
                continue
            seen.add(f.name)
            try:
                design = load_design(f)
                desc = " ".join(design.description.split())
                print(f"{design.name:<24} {f}\n    {desc[:150]}{'...' if len(desc) > 150 else ''}")
            except RFKitError as exc:
                print(f"{f.stem:<24} {f}\n    INVALID: {exc}")
    if not seen:
        print("no study files found (looked in ./studies and next to the package)")
    return 0


def _print_warning(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
    """Warnings during ``rfkit run`` (e.g. a damaged part being recomputed): one plain line on stderr."""
    print(f"rfkit run: warning: {message}", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    """``rfkit run``: run a study into its output folder, write its report, print the theory check."""
    path = find_study(args.study)
    design = load_design(path)
    if args.quick:
        design = design.quick_profile()
    out = Path(args.out) if args.out else Path("out") / design.name
    workers = args.workers
    executor = "serial" if (workers is None or workers == 1) and not args.scheduler else "processes"
    if args.scheduler:
        executor = "dask"
    rng = args.seed if args.seed is not None else None
    t0 = time.perf_counter()
    try:
        # one writer per folder: held across the run and its report (run() re-enters it)
        with RunLock(out, args.wait_lock), warnings.catch_warnings():
            warnings.simplefilter("always", DamagedResultWarning)
            warnings.showwarning = _print_warning
            result = run(
                design,
                rng=rng,
                executor=executor,
                workers=workers,
                scheduler=args.scheduler,
                out=out,
                resume=args.resume,
                trials=args.trials,
                on_error=args.on_error,
                progress=not args.no_progress,
                lock_timeout=args.wait_lock,
                backend=args.backend,
                device=args.device,
            )
            report = write_report(result, out)
    except KeyboardInterrupt:
        print(
            f"\ninterrupted: {units_done(out)} finished work unit(s) are kept in {out}; continue with "
            f"`rfkit run {args.study} --resume --out {out}`{' --quick' if args.quick else ''}.",
            file=sys.stderr,
        )
        return 130
    dt = time.perf_counter() - t0
    print(
        f"{design.name}: {len(design.cells())} cells x {len(design.estimators)} estimators x {design.trials} trials in {dt:.1f} s"
    )
    theory = result.compare_theory()
    if not theory.empty:
        t = theory[theory["metric"] == "mse"]
        heavy = heavy_tailed(t)
        light = t[~heavy & t["z"].notna().to_numpy()]  # rows without a z (non-finite) are counted below
        line = (
            f"theory vs simulation (MSE): {int((light['z'].abs() <= 5).sum())} of {len(light)} within 5 MCSE"
        )
        if len(light):
            line += f"; max |z| = {light['z'].abs().max():.2f}"
        if heavy.any():
            line += f" ({int(heavy.sum())} heavy-tailed rows not counted: see the report)"
        print(line)
    bad = not_ok(result.summary())
    if not bad.empty:  # non-finite trial values or failed trials: never only in the files
        counts = ", ".join(f"{k}: {v}" for k, v in bad["status"].value_counts().items())
        failed = int((result.trials["status"] != "ok").sum())
        print(
            f"{len(bad)} summary rows are not ok ({counts}): {int(bad['n_nonfinite'].sum())} non-finite "
            f"trial values, {failed} failed trials; see the status column of summary.csv and the report"
        )
    print(f"wrote {out}/summary.parquet, summary.csv, trials.parquet, pairs.parquet, report: {report}")
    return 0
