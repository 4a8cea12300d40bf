"""Checks of scalar parameters (ints, reals, options): the lowest rung of rfkit's validation.

Messages name the argument in backticks, state the rule and show the value received:
``"The `n_features` parameter of Positive must be an int in the range [1, inf). Got 0 instead."``
Array checks, which need the array backends, live in :mod:`rfkit._validation` (which
re-exports these). Ground floor order: ``exceptions < _random < _params < _parallel <
_backend < _validation``.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np

from .exceptions import InvalidParameterError

__all__ = ["check_int", "check_n_features", "check_real", "check_option"]


def _range_text(low: float | None, high: float | None, closed: str) -> str:
    lo = "-inf" if low is None else repr(low)
    hi = "inf" if high is None else repr(high)
    left = "[" if closed in ("left", "both") and low is not None else "("
    right = "]" if closed in ("right", "both") and high is not None else ")"
    return f"{left}{lo}, {hi}{right}"


def check_int(value: Any, name: str, owner: str, *, low: int | None = 1, high: int | None = None) -> int:
    """Return ``value`` as an int in ``[low, high]`` or raise InvalidParameterError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidParameterError(
            f"The `{name}` parameter of {owner} must be an int in the range "
            f"{_range_text(low, high, 'both')}. Got {value!r} instead."
        )
    v = int(value)
    if (low is not None and v < low) or (high is not None and v > high):
        raise InvalidParameterError(
            f"The `{name}` parameter of {owner} must be an int in the range "
            f"{_range_text(low, high, 'both')}. Got {v!r} instead."
        )
    return v


def check_n_features(value: Any, owner: str) -> int:
    """The one rule for a map's or projection's ``n_features``: an int >= 1.

    Every feature map and projection sampler validates its ``n_features`` here, so the
    rule and its message are the same everywhere.

    Raises
    ------
    InvalidParameterError
        A non-integer (or bool) or a value below 1.
    """
    return check_int(value, "n_features", owner, low=1)


def check_real(
    value: Any,
    name: str,
    owner: str,
    *,
    low: float | None = None,
    high: float | None = None,
    closed: str = "both",
) -> float:
    """Return ``value`` as a finite float inside the interval or raise InvalidParameterError.

    ``closed`` is one of ``"both"``, ``"left"``, ``"right"``, ``"neither"``.
    """
    rng_txt = _range_text(low, high, closed)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidParameterError(
            f"The `{name}` parameter of {owner} must be a real number in the range {rng_txt}. "
            f"Got {value!r} instead."
        )
    v = float(value)
    ok = np.isfinite(v)
    if ok and low is not None:
        ok = v >= low if closed in ("left", "both") else v > low
    if ok and high is not None:
        ok = v <= high if closed in ("right", "both") else v < high
    if not ok:
        raise InvalidParameterError(
            f"The `{name}` parameter of {owner} must be a real number in the range {rng_txt}. "
            f"Got {v!r} instead."
        )
    return v


def check_option(value: Any, name: str, owner: str, options: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``options`` or raise InvalidParameterError."""
    opts = tuple(options)
    if not isinstance(value, str) or value not in opts:
        raise InvalidParameterError(
            f"The `{name}` parameter of {owner} must be a str among {sorted(opts)}. Got {value!r} instead."
        )
    return value
