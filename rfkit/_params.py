"""Checks of scalar parameters (ints, reals, options): the lowest rung of rfkit's validation.

Messages name the argument in backticks, state the rule and show the value received:
``"The `n_features` parameter of Positive must be an int in the range [1, inf). Got 0 instead."``
Array checks, which need the array backends, live in :mod:`rfkit._validation` (which
re-exports these). Ground floor order: ``exceptions < _random < _params < _parallel <
_backend < _validation``.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from .exceptions import InvalidParameterError, MemoryLimitError

__all__ = [
    "int_rule",
    "check_int",
    "check_ints",
    "check_n_features",
    "check_real",
    "check_option",
    "MAX_BYTES_ENV",
    "max_bytes",
    "check_allocation",
]

#: Environment variable holding rfkit's allocation limit in bytes (suffixes K, M, G, T allowed).
MAX_BYTES_ENV = "RFKIT_MAX_BYTES"
#: Share of the physical memory one allocation may take when ``RFKIT_MAX_BYTES`` is not set.
DEFAULT_MEMORY_FRACTION = 0.5
_FALLBACK_BYTES = 8 << 30  # where the physical memory cannot be read
_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _range_text(low: float | None, high: float | None, closed: str) -> str:
    lo = "-inf" if low is None else repr(low)
    hi = "inf" if high is None else repr(high)
    left = "[" if closed in ("left", "both") and low is not None else "("
    right = "]" if closed in ("right", "both") and high is not None else ")"
    return f"{left}{lo}, {hi}{right}"


def int_rule(value: Any, *, low: int | None = 1, high: int | None = None, plain: bool = False) -> str | None:
    """The rule of :func:`check_int` that ``value`` breaks, or None where it keeps it.

    For callers that word their own message around the rule (a study file's ``{source}: `key`
    <rule>. Got <value> instead.``). ``plain=True`` takes Python ints only (a study file's
    integers), refusing NumPy integers; bools are never ints.

    >>> int_rule(0), int_rule(3), int_rule(2.5, low=0, high=9)
    ('must be an int in the range [1, inf)', None, 'must be an int in the range [0, 9]')
    """
    rule = f"must be an int in the range {_range_text(low, high, 'both')}"
    if isinstance(value, bool) or not isinstance(value, int if plain else numbers.Integral):
        return rule
    v = int(value)
    return rule if (low is not None and v < low) or (high is not None and v > high) else None


def check_int(value: Any, name: str, owner: str, *, low: int | None = 1, high: int | None = None) -> int:
    """Return ``value`` as an int in ``[low, high]`` or raise InvalidParameterError."""
    rule = int_rule(value, low=low, high=high)
    if rule is not None:
        shown = value if isinstance(value, bool) or not isinstance(value, numbers.Integral) else int(value)
        raise InvalidParameterError(f"The `{name}` parameter of {owner} {rule}. Got {shown!r} instead.")
    return int(value)


def check_ints(value: Any, name: str, owner: str, *, low: int = 1) -> np.ndarray:
    """Return ``value`` as an integer array whose entries are all ``>= low``, or raise InvalidParameterError.

    For counts that broadcast (``n_features`` or ``n_samples`` of a closed form, one per row):
    an integer dtype, no entry below ``low``. A scalar that breaks the rule gets
    :func:`check_int`'s message.
    """
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu" or np.any(arr < low):
        if arr.ndim == 0:
            check_int(value, name, owner, low=low)
        raise InvalidParameterError(
            f"The `{name}` parameter of {owner} must be ints in the range {_range_text(low, None, 'both')}. "
            f"Got {value!r} instead."
        )
    return arr


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


def _physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return _FALLBACK_BYTES


def max_bytes() -> int:
    """The allocation limit in bytes: ``RFKIT_MAX_BYTES``, else half of the physical memory.

    Read at every call, so setting the environment variable takes effect at once.

    Raises
    ------
    InvalidParameterError
        If ``RFKIT_MAX_BYTES`` is set but is not a positive number of bytes (``"64G"``,
        ``"500M"``, ``"1e9"``).
    """
    raw = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not raw:
        return int(DEFAULT_MEMORY_FRACTION * _physical_memory())
    text = raw.upper().removesuffix("B").removesuffix("I")
    unit = text[-1:] if text[-1:] in _SUFFIX else ""
    try:
        value = float(text[: len(text) - len(unit)]) * _SUFFIX[unit]
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 1):
        raise InvalidParameterError(
            f"The environment variable `{MAX_BYTES_ENV}` must be a positive number of bytes "
            f"(e.g. 8G, 500M, 1e9). Got {raw!r} instead."
        )
    return int(value)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} PiB"  # pragma: no cover


def check_allocation(shape: Iterable[int], itemsize: int, what: str, owner: str, hint: str = "") -> int:
    """Refuse an allocation of ``prod(shape) * itemsize`` bytes beyond :func:`max_bytes`, before making it.

    Parameters
    ----------
    shape : iterable of int
        Shape of the array about to be allocated (Python ints: no overflow).
    itemsize : int
        Bytes per element (8 for float64).
    what : str
        The array, named in the message (``"the directions (T, m, d)"``).
    owner : str
        The call that needs it (``"Positive.sample"``).
    hint : str, optional
        What to reduce, appended to the message.

    Returns
    -------
    int
        The estimate in bytes.

    Raises
    ------
    MemoryLimitError
        If the estimate exceeds the limit.
    """
    dims = tuple(int(n) for n in shape)
    need = math.prod(dims) * int(itemsize)
    limit = max_bytes()
    if need > limit:
        more = f" {hint}" if hint else ""
        raise MemoryLimitError(
            f"{owner} would allocate {what} of shape {dims}: about {_size(need)} ({need} bytes), more than "
            f"rfkit's limit of {_size(limit)}.{more} Set the environment variable {MAX_BYTES_ENV} "
            "(bytes, or e.g. 64G) to raise the limit."
        )
    return need
