"""On-disk cache of extracted attention arrays (plain ``.npz``, no pickle).

A cache entry is one ``.npz`` named by a SHA-256 of everything that decides its content
(texts, layers, heads, truncation, dtype, scaling, the weights' own hash, a format
number). Writes are atomic (temporary file, then rename); an unreadable or mismatched
entry is ignored and recomputed; a read-only or full cache directory only costs
recomputation.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..exceptions import InvalidParameterError

__all__ = ["cache_dir", "cache_key", "resolve", "read_arrays", "write_arrays"]


def cache_dir(model: str) -> Path:
    """``$RFKIT_CACHE``, else ``$XDG_CACHE_HOME/rfkit``, else ``~/.cache/rfkit``; then ``model``."""
    env = os.environ.get("RFKIT_CACHE")
    if env:
        return Path(env).expanduser() / model
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "rfkit" / model


def resolve(cache: Any, owner: str, default: Callable[[], Path]) -> Path | None:
    """The directory a ``cache`` argument names: True -> ``default()``, False/None -> None, or a path."""
    if cache is True:
        return default()
    if cache is False or cache is None:
        return None
    if isinstance(cache, (str, os.PathLike)):
        return Path(cache)
    raise InvalidParameterError(
        f"The `cache` parameter of {owner} must be a bool or a directory path. Got {cache!r} instead."
    )


def cache_key(payload: dict[str, Any]) -> str:
    """SHA-256 (hex) of a JSON-serialisable description of an entry."""
    return hashlib.sha256(json.dumps(payload, ensure_ascii=True).encode("ascii")).hexdigest()


def read_arrays(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """The named arrays of ``path``, or None if it is missing, unreadable or incomplete."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return {name: z[name] for name in names}
    except (OSError, ValueError, KeyError, EOFError):
        return None


def write_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` atomically; silently gives up if the directory is not writable."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, **arrays)  # type: ignore[arg-type]
            os.replace(tmp, path)  # atomic: readers never see a half-written file
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError:
        pass
