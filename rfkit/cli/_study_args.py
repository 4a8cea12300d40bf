"""The arguments of ``rfkit list`` and ``rfkit run``; the commands themselves are in :mod:`._study`.

Registering the arguments imports nothing of the study harness, so ``rfkit --help`` and
``rfkit bound`` do not load pandas, statsmodels or the estimators' study code.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._parallel import resolve_threads, start_process_server

__all__ = ["add_study_commands", "scheduler_address", "FIGURE_WORKER_PRELOAD"]

#: what the fork server of ``rfkit run``'s worker processes imports (the figure workers' plotting
#: code); equal to :data:`rfkit.report._parallel_figures.PRELOAD` (tested), named here so that
#: the server starts before this process imports the study harness
FIGURE_WORKER_PRELOAD = "rfkit.report._worker_warmup"


def _start_worker_server(args: argparse.Namespace) -> None:
    """Start the fork server of ``rfkit run``'s worker processes before the harness is imported.

    With more than one worker (``--workers K``, else rfkit's threads: all CPUs or
    ``RFKIT_NUM_THREADS``) the report's figures are drawn in worker processes. The server
    imports the plotting code in a process of its own, so it loads while this process imports
    the harness and runs the study, and the figure workers start in milliseconds. Sets
    ``args.worker_server``: False where no server could start, and the figures that were to be
    drawn in workers by default are then drawn in this process.
    """
    workers = args.workers if args.workers is not None else resolve_threads(None, "rfkit run")
    args.worker_server = workers > 1 and start_process_server([FIGURE_WORKER_PRELOAD])


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """A study command that loads the study harness when it runs, not when the parser is built."""

    def call(args: argparse.Namespace) -> int:
        if name == "cmd_run":
            _start_worker_server(args)
        from . import (
            _study,
        )  # lazy: the study harness loads pandas; `rfkit --help` and `rfkit bound` must not

        return int(getattr(_study, name)(args))

    return call


def _integer(name: str, low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low`` (the message names the option's key and the value)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            got = text if value is not None else repr(text)
            raise argparse.ArgumentTypeError(f"`{name}` must be an integer >= {low}. Got {got} instead.")
        return value

    return parse


def _out_dir(text: str) -> str:
    """``--out``: a folder name that is not empty or blank, and a folder or a path where one can be made.

    Refused before anything runs (exit status 2): a path that is a file, one that lies under a
    file, and a symbolic link to nothing (the link itself, or a folder above it).
    """
    if not text.strip() or "\0" in text:
        raise argparse.ArgumentTypeError(f"must be a folder name (not empty); got {text!r}")
    rule = "must be a folder, or a path where one can be made"
    path = Path(text)
    try:
        for p in (path, *path.parents):
            if p.is_symlink() and not p.exists():
                where = "is" if p == path else f"lies under {str(p)!r}, which is"
                raise argparse.ArgumentTypeError(
                    f"{rule}; got {text!r}, which {where} a symbolic link to {os.readlink(p)!r}, which does "
                    "not exist"
                )
            if p.exists():
                if not p.is_dir():
                    where = "is a file" if p == path else f"lies under {str(p)!r}, which is a file"
                    raise argparse.ArgumentTypeError(f"{rule}; got {text!r}, which {where}, not a folder")
                break
    except OSError as exc:  # e.g. a name too long for the file system
        raise argparse.ArgumentTypeError(f"{rule}; got {text!r}: {exc.strerror or exc}") from None
    return text


_SCHEMES = ("tcp", "tls", "inproc", "ucx", "ws", "wss")


def scheduler_address(text: str) -> str:
    """``--scheduler``: a Dask scheduler address, ``[tcp|tls|inproc|ucx|ws|wss://]host[:port]``.

    Only the form is checked here (the runner reports a scheduler it cannot reach).

    >>> scheduler_address("tcp://127.0.0.1:8786"), scheduler_address("localhost:8786")
    ('tcp://127.0.0.1:8786', 'localhost:8786')
    """
    rule = f"must be a Dask scheduler address such as tcp://host:8786 (schemes: {', '.join(_SCHEMES)})"
    scheme, sep, rest = text.strip().partition("://")
    if not sep:
        scheme, rest = "tcp", text.strip()
    host, colon, port = rest.rpartition(":") if ":" in rest else (rest, "", "")
    ok = scheme in _SCHEMES and bool(host or rest) and not any(c.isspace() for c in rest) and "/" not in rest
    if scheme != "inproc" and colon:
        ok = ok and port.isdigit() and 0 < int(port) < 65536 and bool(host)
    if not ok:
        raise argparse.ArgumentTypeError(f"{rule}; got {text!r}")
    return text.strip()


def _seconds(text: str) -> float | None:
    """``--wait-lock``: seconds >= 0, or ``inf`` (wait without limit: None)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0 or 'inf'; got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0 or 'inf'; got {text!r}")
    return None if value == float("inf") else value


def add_study_commands(sub: Any) -> None:
    """Register ``list`` and ``run`` on a subparsers object."""
    p_list = sub.add_parser(
        "list",
        help="list the built-in studies, or describe one",
        description="List the study files in ./studies and the built-in ones: name and one-line description; "
        "with NAME, describe that study: description, kind, grid, estimators, metrics, figures, profiles.",
    )
    p_list.add_argument(
        "name",
        nargs="?",
        default=None,
        metavar="NAME",
        help="a study's name (as listed) or a study file: describe that study",
    )
    p_list.add_argument(
        "--paths", action="store_true", help="also print the path of each study file (a third column)"
    )
    p_list.set_defaults(func=_command("cmd_list"))

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
        "--profile",
        default=None,
        metavar="NAME",
        help="apply the study's profile NAME ([profiles.NAME], e.g. long; with --quick: that profile's "
        "quick table); default output folder out/<study>-<NAME>",
    )
    # options that take a value and default to the study file's (None)
    for flag, kind, metavar, text in (
        (
            "--trials",
            _integer("trials", 1),
            "N",
            "override the number of trials per cell (also that of --quick)",
        ),
        (
            "--workers",
            _integer("workers", 1),
            "K",
            "run work units (cell, chunk of trials) in K local worker processes, and draw the report's "
            "figures in K processes (default: work units serially in this process, figures in as many "
            "processes as rfkit's threads: all CPUs, or RFKIT_NUM_THREADS)",
        ),
        (
            "--scheduler",
            scheduler_address,
            "ADDRESS",
            "run work units on the Dask scheduler at ADDRESS (e.g. tcp://host:8786)",
        ),
        ("--seed", _integer("seed", 0), "S", "root seed (default: the study file's seed)"),
        ("--device", str, "DEV", "device of the backend, e.g. cuda, cuda:1 (default: the library's)"),
    ):
        p_run.add_argument(flag, type=kind, default=None, metavar=metavar, help=text)
    p_run.add_argument(
        "--out", type=_out_dir, default=None, metavar="DIR", help="output folder (default: out/<study name>)"
    )
    again = p_run.add_mutually_exclusive_group()
    again.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run in --out: finished work units are verified (SHA-256) and "
        "kept, damaged ones reported and recomputed, none repeated",
    )
    again.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run in --out: remove the files it wrote (those its manifests list) first, "
        "and nothing else; refused if --out holds files no run wrote",
    )
    p_run.add_argument(
        "--keep-parts",
        action="store_true",
        help="keep the per-work-unit part files (--out/parts/) of a finished run (default: removed once "
        "the final tables are written and verified)",
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
        "--draws",
        default=None,
        choices=["numpy", "backend"],
        help="where random directions (and RA's, SNIS's and LARA's samples) are drawn: NumPy streams per "
        "trial (the same numbers on every backend), or the backend's own generator on its device "
        "(statistically equivalent, other numbers; default: the study file's, else numpy)",
    )
    p_run.add_argument(
        "--allow-large",
        action="store_true",
        help="run a study whose estimated work or memory is beyond this machine (refused otherwise, "
        "with the estimate)",
    )
    p_run.add_argument(
        "--paper-size",
        choices=["one-column", "two-column"],
        default="two-column",
        help="width of the report's figures: one column (3.5 in) or two columns (7 in) of a paper",
    )
    p_run.add_argument("--no-progress", action="store_true", help="no progress bar")
    p_run.set_defaults(func=_command("cmd_run"))
