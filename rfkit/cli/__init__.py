"""The ``rfkit`` command.

Subcommands are registered by one ``add_*`` function each: ``list`` and ``run``
(:mod:`rfkit.cli._study_args`; the study harness is imported only when one of them runs, so
``import rfkit.cli`` and ``rfkit --help`` stay light) and ``bound`` (:mod:`rfkit.cli._bound`)::

    rfkit [--version] [--debug] COMMAND ...
    rfkit list [NAME] [--paths]
    rfkit run STUDY.toml [--quick] [--profile NAME] [--trials N] [--workers K] [--scheduler ADDRESS] [--out DIR]
              [--resume | --overwrite] [--keep-parts] [--wait-lock SECONDS] [--seed S] [--on-error raise|record] [--backend B] [--device DEV]
              [--allow-large] [--no-progress]

    rfkit bound max-relative-error --r 0.5 --n-features 64 [--r-y R] [--kind KIND]
                     [--projection iid|orthogonal --d D] [--json]
    rfkit bound chi2 --mean-x ARR --cov-x ARR --mean-y ARR --cov-y ARR [--A ARR] \\
                     --n-points S --p P --n-features M [--kind KIND] [--projection P] [--json]
    rfkit bound hotelling --x FILE --y FILE [--A ARR] --p P --n-features M \\
                     [--n-points S] [--points new|in-sample] [--kind KIND] [--projection P] [--json]

``KIND`` is hcexp (default), cexp, positive, hyperbolic or trig; a bound >= 1 is reported as
vacuous (a note; ``"vacuous": true`` in JSON).

``ARR`` is a JSON literal (``"[0.1, 0.2]"``, ``"[[1, 0], [0, 1]]"``) or a path to a ``.npy`` /
text file; a scalar covariance ``c`` means ``c * I``.

Exit status: 0 done; 1 the run failed (a trial failed and the study says ``on_error = "raise"``,
or an unexpected error, whose traceback is saved to a file named in the message, or shown with
``rfkit --debug ...``); 2 a usage or validation error (one line on stderr naming the option or
key, with a did-you-mean for a misspelt option or command; also an ``--out`` that holds a run, without
``--resume`` or ``--overwrite``, or files no run wrote); 130 interrupted (Ctrl-C; finished
work is kept and the message gives the command that resumes it).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from .._version import __version__
from ..exceptions import RFKitError, RunFolderError, StudyError
from ._advise import add_advise
from ._bound import UserError, add_bound
from ._study_args import add_study_commands

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_INTERRUPTED"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_EXIT_USAGE = EXIT_USAGE

_EPILOG = """exit status:
  0    done
  1    the run failed: a trial failed (on_error = "raise"), or an unexpected error
       (its traceback is saved to a file named in the message; --debug shows it)
  2    usage or validation error (a bad option, study file or value, or an --out that
       holds a run without --resume or --overwrite; nothing was run)
  130  interrupted (Ctrl-C): finished work is kept; the message says how to resume"""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors suggest the closest command or option ("did you mean")."""

    def error(self, message: str) -> NoReturn:
        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            choices = re.findall(r"'([^']*)'", m.group(2)) or [c.strip() for c in m.group(2).split(",")]
            close = difflib.get_close_matches(m.group(1), choices, n=1)
            if close:
                message += f"; did you mean {close[0]!r}?"
        super().error(message)


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [o for a in parser._actions for o in a.option_strings if o.startswith("--")]


def _subparser(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The (sub)parser that ``argv`` reaches: ``rfkit run ...`` -> the parser of ``run``."""
    for token in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and token in subs[0].choices:
            parser = subs[0].choices[token]
    return parser


def _unrecognized(parser: argparse.ArgumentParser, argv: Sequence[str], extra: list[str]) -> NoReturn:
    """Refuse unknown arguments with the usage of the subcommand and the closest of its options."""
    sub = _subparser(parser, argv)
    message = f"unrecognized arguments: {' '.join(extra)}"
    hints = []
    for token in extra:
        if token.startswith("-"):
            close = difflib.get_close_matches(token.split("=", 1)[0], _options(sub), n=1, cutoff=0.6)
            if close:
                hints.append((token.split("=", 1)[0], close[0]))
    if len(hints) == 1:
        message += f"; did you mean {hints[0][1]}?"
    elif hints:
        message += "; did you mean " + ", ".join(f"{new} for {old}" for old, new in hints) + "?"
    sub.error(message)


def _add_debug(parser: argparse.ArgumentParser) -> None:
    """``--debug`` after any subcommand too (``rfkit run x --debug``), as before it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.add_argument(
                    "--debug",
                    action="store_true",
                    default=argparse.SUPPRESS,
                    help="show the full traceback of an unexpected error on stderr",
                )
                _add_debug(child)


def _fill_help(parser: argparse.ArgumentParser) -> None:
    """Options registered without help text but with choices get a generated one (every option has help)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _fill_help(child)
        elif action.help is None and action.choices is not None:
            default = "" if action.default is None else f" (default: {action.default})"
            action.help = f"one of {', '.join(map(str, action.choices))}{default}"


# ----------------------------------------------------------------------------- entry point
_SUBCOMMANDS: list[Callable[[Any], None]] = [add_study_commands, add_bound, add_advise]


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of the ``rfkit`` command.

    Returns
    -------
    argparse.ArgumentParser
        The parser, with one subcommand per ``add_*`` registration function.
    """
    parser = _Parser(
        prog="rfkit",
        description="Random-feature estimators of the softmax kernel: theory, bounds, studies.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rfkit {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show the full traceback of an unexpected error on stderr"
    )
    sub = parser.add_subparsers(dest="command", metavar="{list,run,bound,advise}", parser_class=_Parser)
    sub.required = True
    for add in _SUBCOMMANDS:
        add(sub)
    for name, child in sub.choices.items():
        child.epilog = child.epilog or _EPILOG
        child.formatter_class = argparse.RawDescriptionHelpFormatter
        del name
    _add_debug(parser)
    _fill_help(parser)
    return parser


#: the options of ``rk.study.run`` that messages name, as the command line spells them
_CLI_TERMS = (
    ("resume=True", "--resume"),
    ("overwrite=True", "--overwrite"),
    ("keep_parts=True", "--keep-parts"),
    ("lock_timeout=SECONDS", "--wait-lock SECONDS"),
)


def _cli_terms(message: str) -> str:
    """A message of the study harness with the options of ``rk.study.run`` in command-line terms."""
    for python, cli in _CLI_TERMS:
        message = message.replace(f"{python} ({cli})", cli).replace(f"{cli} ({python})", cli)
        # not where a Python call is spelt out, e.g. "rfkit.study.run(..., out=..., resume=True)"
        message = re.sub(rf"(?<!, )(?<!\()\b{re.escape(python)}", cli, message)
    return message


def _unexpected(command: str, exc: BaseException, debug: bool) -> int:
    """An error that is not rfkit's: one line, and where its traceback went."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if debug:
        print(text, file=sys.stderr, end="")
        where = "traceback above"
    else:
        try:
            fd, path = tempfile.mkstemp(prefix="rfkit-traceback-", suffix=".txt")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            where = f"full traceback in {path}; run again with `rfkit --debug ...` to show it"
        except OSError:
            where = "run again with `rfkit --debug ...` to show the traceback"
    print(
        f"rfkit {command}: unexpected error: {type(exc).__name__}: {exc} ({where}). "
        "This is likely a bug in rfkit: please report it with the traceback.",
        file=sys.stderr,
    )
    return EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rfkit`` command.

    Parameters
    ----------
    argv : sequence of str, optional
        The command-line arguments after the program name; None: ``sys.argv[1:]``.

    Returns
    -------
    int
        The exit status: 0 done, 1 failed, 2 usage or validation error, 130 interrupted.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    mp_main = sys.modules.get("__mp_main__")
    if (
        mp_main is not None
        and getattr(mp_main, "__name__", None) == "__mp_main__"
        and sys.modules.get("__main__") is not mp_main
    ):
        # a worker process of multiprocessing re-runs the main script under the name __mp_main__
        # while it starts (it becomes __main__ after; in any other process __mp_main__ is __main__
        # itself, or an older __main__ named so): a script that calls main() at module level,
        # without a guard, would run rfkit again here
        print(
            "rfkit: not run in this worker process, which is re-running the script that started rfkit "
            '(Python\'s multiprocessing does so): call rfkit.cli.main() under `if __name__ == "__main__":`.',
            file=sys.stderr,
        )
        return EXIT_USAGE
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:
            _unrecognized(parser, argv, extra)
    except SystemExit as exc:  # argparse: --help / --version (0) or usage error (2)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    args.argv = argv
    try:
        return int(args.func(args))
    except RunFolderError as exc:  # --out holds a run or others' files: a usage error, nothing was run
        print(f"rfkit {args.command}: error: {exc.worded('cli')}", file=sys.stderr)
        return EXIT_USAGE
    except StudyError as exc:
        print(f"rfkit {args.command}: error: {_cli_terms(str(exc))}", file=sys.stderr)
        return EXIT_FAILED
    except (UserError, RFKitError) as exc:
        print(f"rfkit {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"\nrfkit {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # output piped into e.g. `head`, which closed early: not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the last resort: one line, never a raw traceback
        return _unexpected(args.command, exc, bool(getattr(args, "debug", False)))
