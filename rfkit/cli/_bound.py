"""``rfkit bound``: the max-relative-error and concentration bounds of :mod:`rfkit.theory.bounds`.

``ARR`` arguments are a JSON literal (``"[0.1, 0.2]"``, ``"[[1, 0], [0, 1]]"``) or a path to a
``.npy`` / text file; a scalar covariance ``c`` means ``c * I``. ``--kind`` picks the map
(hcexp, cexp, positive, hyperbolic, trig) and ``--projection`` its directions (iid, orthogonal).
A bound >= 1 is vacuous (the estimate 0 has relative error 1): the text output ends with a note,
the JSON output has ``"vacuous": true`` and the note goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..exceptions import VacuousBoundWarning
from ..theory import bounds
from ..theory._max_error import KINDS, PROJECTIONS, TRIVIAL_BOUND

__all__ = ["UserError", "add_bound"]


class UserError(Exception):
    """A problem with the command-line input (reported without traceback)."""


def _parse_array(text: str, name: str) -> np.ndarray:
    """JSON literal or a file (.npy, or whitespace/comma separated text)."""
    if os.path.exists(text):
        try:
            if text.endswith(".npy"):
                raw = np.load(text, allow_pickle=False)
                if raw.dtype.kind not in "fiu":  # complex would lose its imaginary part: refuse
                    raise UserError(
                        f"--{name} must hold real numbers; {text!r} holds an array of dtype {raw.dtype}"
                    )
                return np.asarray(raw, dtype=np.float64)
            with open(text, encoding="utf-8") as fh:
                first = fh.readline()
            delim = "," if "," in first else None
            return np.loadtxt(text, delimiter=delim, dtype=np.float64, ndmin=1)
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot read --{name} from {text!r}: {exc}") from None
    try:
        val = json.loads(text)
    except json.JSONDecodeError:
        raise UserError(
            f"--{name} must be a JSON number/list (e.g. '[0.1, 0.2]') or an existing file; got {text!r}"
        ) from None
    try:
        return np.asarray(val, dtype=np.float64)
    except (TypeError, ValueError):
        raise UserError(f"--{name} must contain numbers only; got {text!r}") from None


def _cov(text: str, name: str, d: int) -> np.ndarray:
    arr = _parse_array(text, name)
    if arr.ndim == 0:
        return float(arr) * np.eye(d)
    return arr


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, tuple):
        return "[" + ", ".join(_fmt(t) for t in v) + "]"
    return str(v)


def _compute(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a bound; its VacuousBoundWarning becomes the note of :func:`_emit` (``result.vacuous``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", VacuousBoundWarning)
        return fn(*args, **kwargs)


def _vacuous_note(result: Any) -> str:
    return (
        f"note: vacuous bound: {result.bound:.4g} >= {TRIVIAL_BOUND:g}, the relative RMS error of the estimate 0 "
        "(no features needed), so it says nothing; use more features or smaller radii."
    )


def _emit(result: Any, as_json: bool, title: str) -> None:
    data = result.as_dict()
    if as_json:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in data.items()}
        print(json.dumps(clean, indent=2, sort_keys=False))
        if result.vacuous:
            print(f"rfkit bound: {_vacuous_note(result)}", file=sys.stderr)
        return
    print(title)
    width = max(len(k) for k in data)
    for k, v in data.items():
        if k == "assumptions":
            continue
        print(f"  {k:<{width}}  {_fmt(v)}")
    print(f"  {'assumptions':<{width}}  {data['assumptions']}")
    if result.vacuous:
        print(_vacuous_note(result))


def _cmd_max_rel(args: argparse.Namespace) -> int:
    res = _compute(
        bounds.max_relative_error,
        args.r,
        args.n_features,
        r_y=args.r_y,
        kind=args.kind,
        projection=args.projection,
        d=args.d,
    )
    _emit(
        res,
        args.json,
        f"max relative RMS error bound ({res.kind.upper()}, {res.projection}; W(r)/sqrt(2m), corrected W)",
    )
    return 0


def _cmd_chi2(args: argparse.Namespace) -> int:
    mx = _parse_array(args.mean_x, "mean-x")
    my = _parse_array(args.mean_y, "mean-y")
    d = int(mx.shape[0]) if mx.ndim == 1 else 1
    A = None if args.A is None else _parse_array(args.A, "A")
    res = _compute(
        bounds.chi2_concentration,
        mx,
        _cov(args.cov_x, "cov-x", d),
        my,
        _cov(args.cov_y, "cov-y", int(my.shape[0]) if my.ndim == 1 else 1),
        A,
        args.n_points,
        args.p,
        args.n_features,
        kind=args.kind,
        projection=args.projection,
    )
    _emit(
        res,
        args.json,
        f"chi^2 concentration bound ({res.kind.upper()}, {res.projection}; Blackwelder (2024), Thm 3.3, restated)",
    )
    return 0


def _cmd_hotelling(args: argparse.Namespace) -> int:
    X = _parse_array(args.x, "x")
    Y = _parse_array(args.y, "y")
    A = None if args.A is None else _parse_array(args.A, "A")
    res = _compute(
        bounds.hotelling_concentration,
        X,
        Y,
        A,
        args.p,
        args.n_features,
        n_points=args.n_points,
        points=args.points,
        kind=args.kind,
        projection=args.projection,
    )
    _emit(
        res,
        args.json,
        f"Hotelling T^2 concentration bound ({res.kind.upper()}, {res.projection}; estimated parameters, union bound)",
    )
    return 0


def add_bound(sub: Any) -> None:
    p = sub.add_parser("bound", help="max-relative-error and concentration bounds (rfkit.theory.bounds)")
    bsub = p.add_subparsers(dest="bound_kind", metavar="{max-relative-error,chi2,hotelling}")
    bsub.required = True

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--n-features", "-m", type=int, required=True, help="number of random directions m")
        q.add_argument(
            "--kind",
            choices=KINDS,
            default="hcexp",
            help="the map: hcexp, cexp (transform A), positive (PRF), hyperbolic, trig (no A)",
        )
        q.add_argument(
            "--projection",
            choices=PROJECTIONS,
            default="iid",
            help="directions: iid or orthogonal (chi(d) norms, blocks of d; not for trig)",
        )
        q.add_argument("--json", action="store_true", help="print the result as JSON (with 'vacuous')")

    q = bsub.add_parser(
        "max-relative-error", help="W(r)/sqrt(2m) on a ball (Blackwelder (2024), Lemma 3.2, corrected)"
    )
    q.add_argument("--r", type=float, required=True, help="radius of ||A x|| (and of ||A^-T y||)")
    q.add_argument("--r-y", type=float, default=None, help="separate radius of ||A^-T y||")
    q.add_argument("--d", type=int, default=None, help="dimension (needed for --projection orthogonal)")
    common(q)
    q.set_defaults(func=_cmd_max_rel)

    q = bsub.add_parser("chi2", help="chi^2 concentration theorem (known Gaussian parameters)")
    for nm in ("mean-x", "cov-x", "mean-y", "cov-y"):
        q.add_argument(f"--{nm}", required=True, help="JSON array or file (scalar covariance c means c*I)")
    q.add_argument("--A", default=None, help="diagonal (d,) or (d, d) transform; default identity")
    q.add_argument("--n-points", "-s", type=int, required=True, help="s queries and s keys")
    q.add_argument("--p", type=float, required=True, help="probability in (0, 1)")
    common(q)
    q.set_defaults(func=_cmd_chi2)

    q = bsub.add_parser("hotelling", help="concentration with estimated means/covariances (Hotelling T^2)")
    q.add_argument("--x", required=True, help="query sample (n, d): .npy, text file or JSON")
    q.add_argument("--y", required=True, help="key sample (n, d)")
    q.add_argument("--A", default=None, help="diagonal (d,) or (d, d) transform; default identity")
    q.add_argument("--p", type=float, required=True, help="probability in (0, 1)")
    q.add_argument(
        "--n-points", "-s", type=int, default=None, help="new points per side (default max(n_x, n_y))"
    )
    q.add_argument("--points", choices=["new", "in-sample"], default="new")
    common(q)
    q.set_defaults(func=_cmd_hotelling)
