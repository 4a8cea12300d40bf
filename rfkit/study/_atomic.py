"""Atomic, checksummed file writes: temporary file + rename, and each file's size and SHA-256.

A file written here is never seen half-written: the bytes go to ``NAME.tmp``, which is then
renamed over ``NAME`` (optionally after ``fsync``). Every write returns the file's record
``{"size": int, "sha256": str}``, which the run manifests keep, and :func:`check_file` compares
a file with its record (missing, truncated, altered).

Test hook: with ``RFKIT_STUDY_HOOK`` set to a point name (``after-unit:N``, after the run has
recorded its N-th work unit; ``after-file:NAME``, after the file NAME was written), the process
writes its pid to ``RFKIT_STUDY_HOOK_FILE`` (if set) and then pauses (default), or kills
itself (``RFKIT_STUDY_HOOK_ACTION=kill``): crash tests stop a run at a named point instead of
relying on timing.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "Record",
    "hook",
    "write_atomic",
    "atomic_parquet",
    "atomic_text",
    "parquet_bytes",
    "npy_bytes",
    "check_file",
    "canonical_json",
]

HOOK_ENV = "RFKIT_STUDY_HOOK"

Record = dict[str, Any]  # {"size": int, "sha256": str}


# ----------------------------------------------------------------------------- test hook
def hook(point: str) -> None:
    """Pause or kill this process at a named point when ``RFKIT_STUDY_HOOK`` names it (crash tests)."""
    if os.environ.get(HOOK_ENV) != point:
        return
    marker = os.environ.get(HOOK_ENV + "_FILE")
    if marker:
        Path(marker).write_text(str(os.getpid()))
    if os.environ.get(HOOK_ENV + "_ACTION", "pause") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    while True:  # pragma: no cover - ended from outside (kill -9)
        time.sleep(3600)


# ----------------------------------------------------------------------------- writes
def _record(data: bytes) -> Record:
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def write_atomic(path: Path, data: bytes, *, fsync: bool = False) -> Record:
    """Write ``data`` to ``path`` atomically (temporary file + rename); return its size and SHA-256."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)
    hook(f"after-file:{path.name}")
    return _record(data)


def parquet_bytes(df: pd.DataFrame) -> bytes:
    """A table as the bytes of a Parquet file (no index)."""
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


def npy_bytes(arr: np.ndarray) -> bytes:
    """An array as the bytes of a ``.npy`` file (no pickles)."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


def atomic_parquet(df: pd.DataFrame, path: Path) -> Record:
    """Write a Parquet file atomically (never a half-written file); return its size and SHA-256."""
    return write_atomic(Path(path), parquet_bytes(df))


def atomic_text(path: Path, text: str) -> Record:
    """Write a text file atomically; return its size and SHA-256."""
    return write_atomic(Path(path), text.encode("utf-8"))


def check_file(path: Path, rec: Mapping[str, Any]) -> tuple[bytes | None, str | None]:
    """Read ``path`` and compare it with its record: (bytes, None) or (None, what is wrong)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, "missing"
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    size = rec.get("size")
    if len(data) != size:
        if isinstance(size, int) and len(data) < size:
            return None, f"truncated ({len(data)} of {size} bytes)"
        return None, f"wrong size ({len(data)} bytes, the manifest records {size})"
    if hashlib.sha256(data).hexdigest() != rec.get("sha256"):
        return None, "altered (its SHA-256 differs from the one recorded in the manifest)"
    return data, None


def canonical_json(body: Mapping[str, Any]) -> str:
    """Compact JSON with sorted keys: the exact text a manifest's checksum covers."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
