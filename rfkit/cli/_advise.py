"""``rfkit advise QK.npz --budget 64``: which attention estimator for these heads (:func:`rfkit.advise`).

The ``.npz`` file holds the queries and keys as arrays ``q`` and ``k`` (or ``Q``, ``K``), shaped
(..., n, d) and (..., M, d) with leading axes for heads, and optionally the values ``v`` (``V``).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import numpy as np

from ._bound import UserError

__all__ = ["add_advise"]


def _positive_int(text: str, option: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1 or str(value) != text.strip().lstrip("+"):
        raise UserError(f"{option} must be an int >= 1 (a count per query); got {text!r}")
    return value


def _array(data: Any, names: tuple[str, ...], path: str, required: bool) -> Any:
    for name in names:
        if name in data.files:
            arr = data[name]
            if arr.dtype.kind not in "fiu":
                raise UserError(f"{path}: array {name!r} must hold real numbers; it has dtype {arr.dtype}")
            return np.asarray(arr, dtype=np.float64)
    if required:
        raise UserError(
            f"{path} must hold an array named {' or '.join(map(repr, names))}; it holds {data.files}"
        )
    return None


def _cmd_advise(args: argparse.Namespace) -> int:
    budget = _positive_int(args.budget, "--budget")
    draws = _positive_int(args.draws, "--draws")
    if not os.path.isfile(args.file):
        raise UserError(f"QK.npz: no such file {args.file!r}")
    try:
        data = np.load(args.file, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read QK.npz {args.file!r} as a .npz file: {exc}") from None
    with data:
        Q = _array(data, ("q", "Q"), args.file, True)
        K = _array(data, ("k", "K"), args.file, True)
        V = _array(data, ("v", "V"), args.file, False)
    estimators = (
        None if args.estimators is None else [e.strip() for e in args.estimators.split(",") if e.strip()]
    )
    from ..advice import advise  # lazy: pandas and the estimators load only when the command runs

    adv = advise(
        Q,
        K,
        V,
        budget=budget,
        causal=args.causal,
        estimators=estimators,
        rng=args.seed,
        n_draws=max(draws, 2),
    )
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        ax = adv.plot()
        ax.figure.savefig(args.figure, bbox_inches="tight")
    if args.json:
        print(json.dumps(adv.as_dict(), indent=2))
    else:
        print(adv.to_text())
        if adv.skipped:
            print("left out: " + "; ".join(f"{k} ({v})" for k, v in adv.skipped.items()))
    return 0


def add_advise(sub: Any) -> None:
    """Register ``rfkit advise``."""
    p = sub.add_parser(
        "advise", help="which attention estimator for your heads at a cost per query (rk.advise)"
    )
    p.add_argument("file", metavar="QK.npz", help="arrays q, k (..., n, d) and optionally v (..., M, dv)")
    p.add_argument("--budget", required=True, help="exact logits or random features per query (int >= 1)")
    p.add_argument("--causal", action="store_true", help="decoder (causal) attention")
    p.add_argument(
        "--estimators", default=None, help="comma-separated names or families to keep (default: all)"
    )
    p.add_argument(
        "--draws", default="4", help="simulation draws per head and candidate (int >= 2, default 4)"
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--figure", default=None, help="also save the figure of MSE against cost to this path")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_cmd_advise)
