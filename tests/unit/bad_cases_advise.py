"""Bad inputs of ``rk.advise`` and ``rfkit advise``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from bad_input_kit import Bad, Cli

import rfkit as rk
from rfkit.exceptions import InvalidParameterError, ShapeError

_rng = np.random.default_rng(0)
_Q, _K = 0.3 * _rng.normal(size=(2, 2, 16, 4))


def _npz(tmp: Path, **arrays: np.ndarray) -> str:
    path = tmp / "qk.npz"
    np.savez(path, **arrays)
    return str(path)


CASES = [
    Bad("advise-budget-zero", lambda t: rk.advise(_Q, _K, budget=0), InvalidParameterError, "`budget`", "0"),
    Bad(
        "advise-budget-float",
        lambda t: rk.advise(_Q, _K, budget=8.0),
        InvalidParameterError,
        "`budget`",
        "8.0",
    ),
    Bad(
        "advise-budget-bool",
        lambda t: rk.advise(_Q, _K, budget=True),
        InvalidParameterError,
        "`budget`",
        "True",
    ),
    Bad(
        "advise-budget-str",
        lambda t: rk.advise(_Q, _K, budget="64"),
        InvalidParameterError,
        "`budget`",
        "'64'",
    ),
    Bad(
        "advise-d-mismatch",
        lambda t: rk.advise(_Q, _K[..., :3], budget=8),
        ShapeError,
        "`K`",
        "(2, 16, 3)",
    ),
    Bad(
        "advise-heads-mismatch",
        lambda t: rk.advise(_Q, _K[:1], budget=8),
        ShapeError,
        "`Q`",
        "(1, 16, 4)",
    ),
    Bad(
        "advise-V-mismatch",
        lambda t: rk.advise(_Q, _K, np.zeros((2, 15, 3)), budget=8),
        ShapeError,
        "`V`",
        "(2, 15, 3)",
    ),
    Bad(
        "advise-causal-n-ne-M",
        lambda t: rk.advise(_Q, _K[:, :8], budget=8, causal=True),
        ShapeError,
        "causal",
        "M = 8",
    ),
    Bad(
        "advise-estimators-none-match",
        lambda t: rk.advise(_Q, _K, budget=8, estimators=["nope"]),
        InvalidParameterError,
        "`estimators`",
        "['nope']",
    ),
    Bad(
        "advise-n-draws-one",
        lambda t: rk.advise(_Q, _K, budget=8, n_draws=1),
        InvalidParameterError,
        "`n_draws`",
        "1",
    ),
]

CLI_CASES = [
    Cli(
        "advise-budget-zero", lambda t: ["advise", _npz(t, q=_Q, k=_K), "--budget", "0"], 2, "--budget", "'0'"
    ),
    Cli(
        "advise-budget-text", lambda t: ["advise", _npz(t, q=_Q, k=_K), "--budget", "x"], 2, "--budget", "'x'"
    ),
    Cli("advise-no-k", lambda t: ["advise", _npz(t, q=_Q), "--budget", "8"], 2, "'k'", "['q']"),
    Cli(
        "advise-no-file", lambda t: ["advise", str(t / "none.npz"), "--budget", "8"], 2, "QK.npz", "none.npz"
    ),
    Cli(
        "advise-shape",
        lambda t: ["advise", _npz(t, q=_Q, k=_K[..., :3]), "--budget", "8"],
        2,
        "`K`",
        "(2, 16, 3)",
    ),
]
