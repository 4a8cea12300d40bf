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


def _print_warning(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
    """Warnings during ``rfkit run`` (e.g. a damaged part being recomputed): one plain line on stderr."""
    print(f"rfkit run: warning: {message}", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    import warnings

    from ..exceptions import DamagedResultWarning
    from ._design import load_design
    from ._report import write_report
    from ._runner import run
    from ._storage import RunLock, units_done

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
        from ._report import heavy_tailed

        t = theory[theory["metric"] == "mse"]
        heavy = heavy_tailed(t)
        light = t[~heavy]
        line = (
            f"theory vs simulation (MSE): {int((light['z'].abs() <= 5).sum())} of {len(light)} within 5 MCSE"
        )
        if len(light):
            line += f"; max |z| = {light['z'].abs().max():.2f}"
        if heavy.any():
            line += f" ({int(heavy.sum())} heavy-tailed rows not counted: see the report)"
        print(line)
    print(f"wrote {out}/summary.parquet, summary.csv, trials.parquet, pairs.parquet, report: {report}")
    return 0


def _seconds(text: str) -> float | None:
    """``--wait-lock``: seconds >= 0, or ``inf`` (wait without limit: None)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0 or 'inf'; got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0 or 'inf'; got {text!r}")
    return None if value == float("inf") else value


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
        help="run work units (cell, chunk of trials) in K local worker processes (default: 1, serial)",
    )
    p_run.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="run work units on the Dask scheduler at ADDRESS (e.g. tcp://host:8786)",
    )
    p_run.add_argument("--out", default=None, metavar="DIR", help="output folder (default: out/<study name>)")
    p_run.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run in --out: finished work units are verified (SHA-256) and "
        "kept, damaged ones reported and recomputed, none repeated",
    )
    p_run.add_argument(
        "--wait-lock",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="if another run holds --out, wait up to SECONDS for it ('inf': no limit; default 0: refuse "
        "at once, naming it)",
    )
    p_run.add_argument(
        "--seed", type=int, default=None, metavar="S", help="root seed (default: the study file's seed)"
    )
    p_run.add_argument(
        "--on-error",
        choices=["raise", "record"],
        default=None,
        help="stop at a failing trial or record it and continue (default: the study file's on_error, else raise)",
    )
    p_run.add_argument(
        "--backend",
        default=None,
        choices=["numpy", "torch", "cupy", "array_api_strict"],
        help="array library the estimates run on (default: the study file's, else numpy); tables equal "
        "NumPy's to round-off",
    )
    p_run.add_argument(
        "--device",
        default=None,
        metavar="DEV",
        help="device of the backend, e.g. cuda, cuda:1 (default: the library's)",
    )
    p_run.add_argument("--no-progress", action="store_true", help="no progress bar")
    p_run.set_defaults(func=cmd_run)
