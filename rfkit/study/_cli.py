"""``rfkit list`` and ``rfkit run``: command-line front end of the study harness."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..exceptions import RFKitError

__all__ = ["add_study_commands", "builtin_study_dirs", "builtin_study"]


def builtin_study_dirs() -> list[Path]:
    """Folders searched for study files: ./studies, then the one shipped next to the package."""
    here = Path(__file__).resolve().parents[2] / "studies"
    dirs = [Path.cwd() / "studies"]
    if here not in dirs:
        dirs.append(here)
    return [d for d in dirs if d.is_dir()]


def builtin_study(name: str) -> Path:
    """Path of a built-in study file by name (``"performer-mse"``), searched as ``rfkit list`` does."""
    for d in builtin_study_dirs():
        cand = d / f"{name}.toml"
        if cand.exists():
            return cand
    raise FileNotFoundError(f"no built-in study named {name!r}; see `rfkit list`")


def _find_study(name: str) -> Path:
    p = Path(name)
    if p.suffix == ".toml" or p.exists():
        return p
    for d in builtin_study_dirs():
        cand = d / f"{name}.toml"
        if cand.exists():
            return cand
    return p


def cmd_list(args: argparse.Namespace) -> int:
    from ._design import load_design

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


def cmd_run(args: argparse.Namespace) -> int:
    from ._design import load_design
    from ._report import write_report
    from ._runner import run

    path = _find_study(args.study)
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
        )
    except KeyboardInterrupt:
        n_done = len(list((out / "cells").glob("cell-*.pairs.parquet"))) if (out / "cells").is_dir() else 0
        print(
            f"\ninterrupted: {n_done} finished cell(s) are kept in {out}; continue with "
            f"`rfkit run {args.study} --resume --out {out}`{' --quick' if args.quick else ''}.",
            file=sys.stderr,
        )
        return 130
    report = write_report(result, out)
    dt = time.perf_counter() - t0
    print(
        f"{design.name}: {len(design.cells())} cells x {len(design.estimators)} estimators x {design.trials} trials in {dt:.1f} s"
    )
    theory = result.compare_theory()
    if not theory.empty:
        t = theory[theory["metric"] == "mse"]
        print(
            f"theory vs simulation (MSE): {int((t['z'].abs() <= 5).sum())} of {len(t)} within 5 MCSE; max |z| = {t['z'].abs().max():.2f}"
        )
    print(f"wrote {out}/summary.parquet, summary.csv, trials.parquet, pairs.parquet, report: {report}")
    return 0


def add_study_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``list`` and ``run`` on a subparsers object."""
    p_list = sub.add_parser(
        "list",
        help="list the built-in studies",
        description="List study files in ./studies and the built-in ones.",
    )
    p_list.set_defaults(func=cmd_list)

    p_run = sub.add_parser(
        "run",
        help="run a study file",
        description="Run a study (TOML file or built-in name); writes Parquet tables, figures and a Markdown report.",
    )
    p_run.add_argument(
        "study", help="path to a STUDY.toml, or the name of a built-in study (see `rfkit list`)"
    )
    p_run.add_argument(
        "--quick", action="store_true", help="apply the study's [quick] profile (small, for CI)"
    )
    p_run.add_argument(
        "--trials", type=int, default=None, metavar="N", help="override the number of trials per cell"
    )
    p_run.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="K",
        help="run cells in K local worker processes (default: 1, serial)",
    )
    p_run.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="run cells on the Dask scheduler at ADDRESS (e.g. tcp://host:8786)",
    )
    p_run.add_argument("--out", default=None, metavar="DIR", help="output folder (default: out/<study name>)")
    p_run.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run in --out; finished cells are kept, none repeated",
    )
    p_run.add_argument(
        "--seed", type=int, default=None, metavar="S", help="root seed (default: the study file's seed)"
    )
    p_run.add_argument(
        "--on-error",
        choices=["raise", "record"],
        default="raise",
        help="stop at a failing trial (default) or record it and continue",
    )
    p_run.add_argument("--no-progress", action="store_true", help="no progress bar")
    p_run.set_defaults(func=cmd_run)
