"""On-disk cache of extracted attention arrays (plain ``.npz``, no pickle).

A cache entry is one ``.npz`` named by a SHA-256 of everything that decides its content
(texts, layers, heads, truncation, dtype, scaling, the weights' own hash, a format
number). Writes are atomic (a temporary file named uniquely per process and thread, then
a rename). Beside each entry ``<key>.npz`` a checksum file ``<key>.npz.sha256`` records the
SHA-256 of the arrays' names, dtypes, shapes and bytes. On read, an entry that cannot be
read (truncated, not a zip file) or whose arrays do not match the checksum (contents
replaced) is reported by path in a :class:`~rfkit.exceptions.DamagedCacheWarning` and
recomputed; an entry without a checksum file (written by an older rfkit) is recomputed
silently. A read-only or full cache directory only costs recomputation.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..exceptions import DamagedCacheWarning, InvalidParameterError

__all__ = [
    "cache_dir",
    "cache_key",
    "resolve",
    "read_arrays",
    "write_arrays",
    "arrays_digest",
    "checksum_path",
]


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


def arrays_digest(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 (hex) of the arrays' names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def checksum_path(path: Path) -> Path:
    """The checksum file written beside the cache entry ``path``."""
    return path.with_name(path.name + ".sha256")


def _damaged(path: Path, why: str) -> None:
    warnings.warn(
        f"The cache entry {str(path)!r} is damaged ({why}); it is ignored and recomputed.",
        DamagedCacheWarning,
        stacklevel=4,
    )


def read_arrays(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """The named arrays of ``path`` verified against their checksum, or None to recompute.

    None when the entry or its checksum file is missing; a
    :class:`~rfkit.exceptions.DamagedCacheWarning` naming the path as well when the entry
    cannot be read or its arrays do not match the checksum.
    """
    try:
        expected = checksum_path(path).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        _damaged(path, f"its checksum file cannot be read: {exc}")
        return None
    if not path.exists():
        return None
    try:
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as z:  # our handle: closed on errors too
            arrays = {name: z[name] for name in z.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        _damaged(path, f"unreadable: {type(exc).__name__}: {exc}")
        return None
    if arrays_digest(arrays) != expected:
        _damaged(path, "its arrays do not match the SHA-256 recorded when it was written")
        return None
    if any(name not in arrays for name in names):
        return None
    return {name: arrays[name] for name in names}


def _atomic_write(path: Path, write: Callable[[Any], None]) -> None:
    """Write through ``write(fh)`` to a temporary file unique to this process and thread, then rename."""
    prefix = f"{path.name}.{os.getpid()}.{threading.get_ident()}."
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)  # atomic: readers never see a half-written file
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` and their checksum beside ``path`` atomically; gives up silently if not writable."""
    digest = arrays_digest(arrays).encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, lambda fh: np.savez(fh, **arrays))  # type: ignore[arg-type]
        _atomic_write(checksum_path(path), lambda fh: fh.write(digest))
    except OSError:
        pass
