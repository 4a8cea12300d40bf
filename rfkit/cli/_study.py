"""``rfkit list`` and ``rfkit run``: the command-line front end of the study harness.

``rfkit run`` runs a study into its output folder (holding the folder's lock across the run and
its report), writes the Markdown report (:func:`rfkit.report.write_report`) and prints how the
measured MSEs compare with their closed forms.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

from ..exceptions import DamagedResultWarning, RFKitError
from ..plots import display_names, set_paper_size
from ..report import figure_workers, theory_verdict, write_report
from ..study import builtin_study_dirs, find_study, load_design, run
from ..study.outputs import RunLock, units_done
from ..study.summaries import not_ok
from ._summary import closing_lines

__all__ = ["cmd_list", "cmd_run"]


def _one_line(text: str) -> str:
    """The first sentence of a description, on one line."""
    flat = " ".join(text.split())
    end = re.search(r"(?<! al)(?<!e\.g)(?<!i\.e)\.\s+(?=[A-Z])", flat)
    return flat if end is None else flat[: end.start() + 1]


def _width() -> int:
    """Columns of the terminal (``COLUMNS`` first), 100 where it cannot be told."""
    return shutil.get_terminal_size((100, 24)).columns


def _values(values: Any) -> str:
    return ", ".join(map(str, values)) if isinstance(values, (list, tuple)) else str(values)


def _describe(path: Path) -> int:
    """``rfkit list NAME``: one study in full, each field on its own line, wrapped at word boundaries."""
    design = load_design(path, allow_large=True)
    width = max(40, _width())
    lines = [f"{design.name}  ({path})", ""]
    lines += textwrap.wrap(" ".join(design.description.split()) or "(no description)", width) + [""]

    def field(label: str, text: str) -> None:
        lines.extend(
            textwrap.wrap(
                text, width, initial_indent=f"{label}: ", subsequent_indent="  ", break_on_hyphens=False
            )
        )

    field("kind", design.kind)
    field("trials", f"{design.trials} per cell, {len(design.cells())} cells")
    lines.append("grid:")
    for axis, values in design.grid.items():
        lines.extend(
            textwrap.wrap(_values(values), width, initial_indent=f"  {axis}: ", subsequent_indent="    ")
        )
    # each by its display name (as figures, reports and the closing lines show it), its study label after it
    shown = [f"{name} [{lab}]" for name, lab in zip(display_names(design.estimators), design.labels)]
    field("estimators", ", ".join(shown))
    field("metrics", ", ".join(design.metrics) or "(the kind's defaults)")
    field("figures", _values(design.outputs.get("figures", [])) or "(none)")
    profiles = (["quick"] if design.quick else []) + sorted(design.profiles)
    field("profiles", ", ".join(profiles) or "(none)")
    if design.quick:
        quick = ", ".join(f"{k} = {v}" for k, v in design.quick.items())
        lines.extend(textwrap.wrap(quick, width, initial_indent="  quick: ", subsequent_indent="    "))
    for name in sorted(design.profiles):
        text = ", ".join(f"{k} = {v}" for k, v in design.profiles[name].items())
        lines.extend(textwrap.wrap(text, width, initial_indent=f"  {name}: ", subsequent_indent="    "))
    print("\n".join(lines))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """``rfkit list``: every study file in ./studies and the built-in ones: name, one-line description.

    ``rfkit list NAME``: that study in full (:func:`_describe`); an unknown name is a usage error
    with the closest names.
    """
    if getattr(args, "name", None) is not None:
        return _describe(find_study(args.name))
    rows: list[tuple[str, str, str]] = []
    seen = set()
    for d in builtin_study_dirs():
        for f in sorted(d.glob("*.toml")):
            if f.name in seen:
                continue
            seen.add(f.name)
            try:
                design = load_design(f, allow_large=True)
                rows.append((design.name, _one_line(design.description) or "(no description)", str(f)))
            except RFKitError as exc:
                rows.append((f.stem, f"INVALID: {_one_line(str(exc))}", str(f)))
    if not rows:
        print("no study files found (looked in ./studies and next to the package)")
        return 0
    width = max(len(r[0]) for r in rows)
    paths = bool(getattr(args, "paths", False))
    room = max(20, _width() - width - 2)
    for name, desc, path in rows:
        wrapped = textwrap.wrap(desc, room, break_long_words=False, break_on_hyphens=False) or [""]
        print(f"{name:<{width}}  {wrapped[0]}")
        for line in wrapped[1:]:
            print(f"{'':<{width}}  {line}")
        if paths:
            print(f"{'':<{width}}  {path}")
    return 0


def _resume_command(args: argparse.Namespace, out: Path) -> str:
    """The command line that resumes this run: the one given, with ``--resume`` and ``--out``."""
    argv = [a for a in getattr(args, "argv", None) or sys.argv[1:] if a != "--resume"]
    has_out = any(a == "--out" or a.startswith("--out=") for a in argv)
    extra = ["--resume"] + ([] if has_out else ["--out", str(out)])
    return shlex.join(["rfkit", *argv, *extra])


def _print_warning(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
    """Warnings during ``rfkit run`` (e.g. a damaged part being recomputed): one plain line on stderr."""
    print(f"rfkit run: warning: {message}", file=sys.stderr)


def process_seconds() -> float | None:
    """Seconds since this process started, from Linux's ``/proc``; None where that cannot be read."""
    try:
        stat = Path("/proc/self/stat").read_text()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime, in clock ticks
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def timing_line(run_s: float, units_s: float, report_s: float, whole_s: float | None) -> str:
    """The spans of one ``rfkit run``, each named: the run, its work units, the report, the whole command.

    Parameters
    ----------
    run_s : float
        Seconds in :func:`rfkit.study.run`: the work units plus loading the data, merging and
        writing the tables (and any wait for the folder's lock).
    units_s : float
        Seconds computing the work units only (the run's recorded ``seconds``, which ``report.md``
        prints).
    report_s : float
        Seconds writing ``report.md``, its tables and figures.
    whole_s : float or None
        Seconds from the start of the process (interpreter start-up and imports included) to now,
        or None where the platform does not say.

    Returns
    -------
    str
        E.g. ``"run 13.1 s (work units 12.9 s), report + figures 4.2 s, whole command 17.7 s
        (process start to here)"``.
    """
    whole = (
        f"whole command {whole_s:.1f} s (process start to here)"
        if whole_s is not None
        else "whole command not measured (no process start time on this platform)"
    )
    return f"run {run_s:.1f} s (work units {units_s:.1f} s), report + figures {report_s:.1f} s, {whole}"


def check_device(backend: str, device: str | None) -> None:
    """Refuse a PyTorch device this machine does not have, naming it and what is installed.

    Only the format of a device is checked with the design; whether a CUDA, MPS or XPU device
    is present is asked of PyTorch here, before the run starts.
    """
    if backend != "torch" or device is None or device.startswith("cpu"):
        return
    try:
        import torch
    except ImportError:
        return  # the backend names the missing library
    kind, _, index = device.partition(":")
    if kind not in ("cuda", "xpu", "mps") or (index and not index.isdigit()):
        return  # not a device kind asked of torch here: the design checks its format
    module: Any = getattr(torch, kind) if kind != "mps" else torch.backends.mps
    available = bool(module.is_available())
    count = int(module.device_count()) if available and hasattr(module, "device_count") else 1
    if not available or (index and int(index) >= count):
        have = f"{count} {kind} device(s)" if available else f"no {kind} device"
        raise RFKitError(
            f"`--device` {device!r} is not available: torch {torch.__version__} sees {have} on this machine "
            "(use --device cpu, or install a PyTorch build for your GPU)"
        )


def cmd_run(args: argparse.Namespace) -> int:
    """``rfkit run``: run a study into its output folder, write its report, print the theory check."""
    path = find_study(args.study)
    design = load_design(path, allow_large=bool(getattr(args, "allow_large", False)))
    profile = getattr(args, "profile", None)
    if profile is not None and profile != "quick":
        design = design.profile(f"{profile}.quick" if args.quick and "." not in profile else profile)
    elif args.quick or profile == "quick":
        design = design.quick_profile()
    check_device(args.backend or design.backend, args.device or design.device)
    folder = design.name if profile in (None, "quick") else f"{design.name}-{profile}"
    out = Path(args.out) if args.out else Path("out") / folder
    workers = args.workers
    executor = "serial" if (workers is None or workers == 1) and not args.scheduler else "processes"
    if args.scheduler:
        executor = "dask"
    rng = args.seed if args.seed is not None else None
    # the report's figures are drawn in worker processes: --workers of them, else as many as
    # rfkit's threads (all CPUs unless RFKIT_NUM_THREADS says otherwise), forked from the server
    # that _study_args started, with the plotting code, before the harness was imported
    drawers = figure_workers(workers)
    if workers is None and not getattr(args, "worker_server", True):
        drawers = 1  # no process server could start: the default draws the figures here
    t0 = time.perf_counter()
    try:
        # one writer per folder: held across the run and its report (run() re-enters it)
        with RunLock(out, args.wait_lock) as lock, warnings.catch_warnings():
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
                overwrite=args.overwrite,
                keep_parts=args.keep_parts,
                trials=args.trials,
                on_error=args.on_error,
                progress=not args.no_progress,
                lock_timeout=args.wait_lock,
                backend=args.backend,
                device=args.device,
                draws=args.draws,
            )
            t_run = time.perf_counter()
            set_paper_size(args.paper_size)
            report = write_report(result, out, workers=drawers)
    except KeyboardInterrupt:
        print(
            f"\ninterrupted: {units_done(out)} finished work unit(s) are kept in {out}; continue with "
            f"`{_resume_command(args, out)}`.",
            file=sys.stderr,
        )
        return 130
    t_report = time.perf_counter()
    taken = getattr(lock, "taken_over", None) or result.provenance.get("lock_taken_over")
    if taken:
        if isinstance(taken, dict):
            who = f"pid {taken.get('pid', '?')} on {taken.get('host', '?')}, started {taken.get('started', '?')}"
            who += f": {taken['command']}" if taken.get("command") else ""
        else:
            who = str(taken)
        print(f"took over the stale lock of an earlier run that is gone ({who})")
    ran = result.design  # what really ran: --profile, --quick and --trials applied
    which = f" (profile {ran.applied_profile})" if getattr(ran, "applied_profile", None) else ""
    print(
        f"{ran.name}{which}: {len(ran.cells())} cells x {len(ran.estimators)} estimators x {ran.trials} trials; "
        + timing_line(
            t_run - t0,
            float(result.provenance.get("seconds", float("nan"))),
            t_report - t_run,
            process_seconds(),
        )
    )
    verdict = theory_verdict(result)
    if verdict is not None:
        print(verdict)
    bad = not_ok(result.summary())
    if not bad.empty:  # non-finite trial values or failed trials: never only in the files
        counts = ", ".join(f"{k}: {v}" for k, v in bad["status"].value_counts().items())
        failed = int((result.trials["status"] != "ok").sum())
        print(
            f"{len(bad)} summary rows are not ok ({counts}): {int(bad['n_nonfinite'].sum())} non-finite "
            f"trial values, {failed} failed trials; see the status column of summary.csv and the report"
        )
    print("\n".join(closing_lines(result, out, report)))
    return 0
