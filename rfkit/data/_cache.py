"""On-disk cache of extracted attention arrays (plain ``.npz``, no pickle).

A cache entry is one ``.npz`` named by a SHA-256 of everything that decides its content
(texts, layers, heads, truncation, dtype, scaling, the weights' own hash, a format
number): its key. Writes are atomic (a temporary file named uniquely per process and thread,
then a rename). Beside each entry ``<name>.npz`` a checksum file ``<name>.npz.sha256`` records,
as JSON, the entry's full key and the SHA-256 of that key and the arrays' names, dtypes, shapes
and bytes. On read, an entry that cannot be decoded (truncated, not a zip file), whose arrays do
not match the checksum (contents replaced) or whose stored key is not the key asked for (an
entry copied or renamed over another's: it would be another request's arrays) is reported by
path in a :class:`~rfkit.exceptions.DamagedCacheWarning` and recomputed; an entry without a
checksum file, or with the bare digest of an older rfkit, is recomputed silently. A folder that
cannot be read is a miss; one that cannot be written (read-only, full, permission denied) is
reported in a :class:`~rfkit.exceptions.CacheNotWritableWarning` naming the path and the OS
error, and only costs recomputation.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import threading
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

from ..exceptions import CacheNotWritableWarning, DamagedCacheWarning, InvalidParameterError

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


def arrays_digest(arrays: dict[str, np.ndarray], key: str = "") -> str:
    """SHA-256 (hex) of an entry's ``key`` and its arrays' names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    if key:
        h.update(f"key|{key}|".encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def checksum_path(path: Path) -> Path:
    """The checksum file written beside the cache entry ``path``."""
    return path.with_name(path.name + ".sha256")


def _stacklevel() -> int:
    """The ``stacklevel`` of a warning that points at the first caller outside rfkit."""
    package = str(Path(__file__).resolve().parents[1])
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _damaged(path: Path, why: str) -> None:
    warnings.warn(
        f"The cache entry {str(path)!r} is damaged ({why}); it is ignored and recomputed.",
        DamagedCacheWarning,
        stacklevel=_stacklevel(),
    )


def _short(key: str) -> str:
    return key if len(key) <= 24 else f"{key[:20]}..."


def read_arrays(path: Path, names: tuple[str, ...], *, key: str) -> dict[str, np.ndarray] | None:
    """The named arrays of ``path`` verified against their checksum and ``key``, or None to recompute.

    None when the entry or its checksum file is missing, when the checksum file is the bare
    digest of an older rfkit, or when the folder cannot be read; a
    :class:`~rfkit.exceptions.DamagedCacheWarning` naming the path as well when the entry
    cannot be decoded, its arrays do not match the checksum, or the key stored in it is not
    ``key`` (the entry of another request, copied or renamed over this one).
    """
    try:
        text = checksum_path(path).read_text(encoding="utf-8").strip()
    except OSError:  # missing, or a folder that cannot be read: not damage, a miss
        return None
    except UnicodeDecodeError as exc:
        _damaged(path, f"its checksum file is not UTF-8 text: {exc}")
        return None
    if len(text) == 64 and all(c in "0123456789abcdef" for c in text):
        return None  # the bare digest of an older rfkit, without the key: recomputed silently
    try:
        record = json.loads(text)
        stored_key, expected = record["key"], record["sha256"]
        if not isinstance(stored_key, str) or not isinstance(expected, str):
            raise TypeError("key and sha256 must be strings")
    except (ValueError, KeyError, TypeError) as exc:
        _damaged(path, f"its checksum file is not a checksum record: {type(exc).__name__}: {exc}")
        return None
    if stored_key != key:
        _damaged(
            path,
            f"it holds the arrays of another request: its stored key is {_short(stored_key)!r}, this "
            f"request's is {_short(key)!r}; an entry copied or renamed over this one?",
        )
        return None
    try:
        fh = open(path, "rb")
    except OSError:  # missing, or not readable: a miss
        return None
    try:
        with fh, np.load(fh, allow_pickle=False) as z:  # our handle: closed on errors too
            arrays = {name: z[name] for name in z.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        _damaged(path, f"unreadable: {type(exc).__name__}: {exc}")
        return None
    if arrays_digest(arrays, key) != expected:
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


def write_arrays(path: Path, arrays: dict[str, np.ndarray], *, key: str) -> None:
    """Write ``arrays`` and their checksum record (``key`` and digest) beside ``path`` atomically.

    Where the folder cannot be written (read-only, full, permission denied, a file in its
    place) nothing is stored and a :class:`~rfkit.exceptions.CacheNotWritableWarning` names the
    path and the OS error.
    """
    record = json.dumps({"key": key, "sha256": arrays_digest(arrays, key)}, ensure_ascii=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, lambda fh: np.savez(fh, **arrays))  # type: ignore[arg-type]
        _atomic_write(checksum_path(path), lambda fh: fh.write(record.encode("ascii")))
    except OSError as exc:
        why = f"{type(exc).__name__}: {exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
        if isinstance(exc, FileExistsError) and exc.filename and not os.path.isdir(exc.filename):
            why = f"{exc.filename!r} is a file, not a folder ({type(exc).__name__})"
        warnings.warn(
            f"Could not write the cache entry {str(path)!r}: {why}. The arrays were computed "
            "but not stored, so the next call computes them again; make the folder writable, pass "
            "another `cache` folder, or cache=False.",
            CacheNotWritableWarning,
            stacklevel=_stacklevel(),
        )
