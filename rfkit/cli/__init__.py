"""The ``rfkit`` command.

Subcommands are registered by one ``add_*`` function each: ``list`` and ``run``
(:mod:`rfkit.cli._study_args`; the study harness is imported only when one of them runs, so
``import rfkit.cli`` and ``rfkit --help`` stay light) and ``bound`` (:mod:`rfkit.cli._bound`)::

    rfkit list
    rfkit run STUDY.toml [--quick] [--trials N] [--workers K] [--scheduler ADDRESS] [--out DIR] [--resume]

    rfkit bound max-relative-error --r 0.5 --n-features 64 [--r-y R] [--kind hcexp|cexp] [--json]
    rfkit bound chi2 --mean-x ARR --cov-x ARR --mean-y ARR --cov-y ARR [--A ARR] \\
                     --n-points S --p P --n-features M [--json]
    rfkit bound hotelling --x FILE --y FILE [--A ARR] --p P --n-features M \\
                     [--n-points S] [--points new|in-sample] [--json]

``ARR`` is a JSON literal (``"[0.1, 0.2]"``, ``"[[1, 0], [0, 1]]"``) or a path to a ``.npy`` /
text file; a scalar covariance ``c`` means ``c * I``. User errors print one line to stderr and
return exit status 2 (no traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..exceptions import RFKitError, StudyError
from ._bound import UserError, add_bound
from ._study_args import add_study_commands

__all__ = ["main", "build_parser"]

_EXIT_USAGE = 2


# ----------------------------------------------------------------------------- entry point
_SUBCOMMANDS: list[Callable[[Any], None]] = [add_study_commands, add_bound]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (one ``add_*`` registration function per subcommand)."""
    parser = argparse.ArgumentParser(
        prog="rfkit", description="Random-feature estimators of the softmax kernel: theory, bounds, studies."
    )
    sub = parser.add_subparsers(dest="command", metavar="{list,run,bound}")
    sub.required = True
    for add in _SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rfkit`` command; returns the exit status (0 ok, 1 failed study trial, 2 user error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or usage error (2)
        return int(exc.code) if isinstance(exc.code, int) else _EXIT_USAGE
    try:
        return int(args.func(args))
    except StudyError as exc:
        print(f"rfkit {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except (UserError, RFKitError) as exc:
        print(f"rfkit {args.command}: error: {exc}", file=sys.stderr)
        return _EXIT_USAGE
    except BrokenPipeError:  # output piped into e.g. `head`, which closed early: not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return 0
