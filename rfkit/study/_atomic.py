"""Atomic, checksummed file writes: temporary file + rename, and each file's size and SHA-256.

A file written here is never seen half-written: the bytes go to a temporary file next to it,
``.NAME.<pid>-<thread>.rfkit-tmp`` (unique per process and thread, so two writers never share
one), and renamed over ``NAME``. Every write returns the file's record
``{"size": int, "sha256": str}``, which the run manifests keep, and :func:`check_file` compares a
file with its record (missing, truncated, altered). Data files are not flushed to disk one by one
(``fsync`` costs milliseconds per file, more than a small work unit's arithmetic): the rename makes
them whole for every reader, and should the machine itself crash before the operating system has
written them, their checksums in the manifest catch it and a resume recomputes them. The final
result manifest (``manifest.json``) is flushed (``fsync=True``), so a finished run is on disk.

A write that fails (disk full, permission denied, a folder where the file should be) raises
:class:`OutputWriteError` naming the path; the temporary file is removed and the file it would
have replaced is untouched, so the run can be resumed once the cause is fixed.

Test hook: with ``RFKIT_STUDY_HOOK`` set to a point name (``after-unit:N``, after the run has
recorded its N-th work unit; ``after-file:NAME``, after the file NAME was written), the process
writes its pid to ``RFKIT_STUDY_HOOK_FILE`` (if set) and then pauses (default), or kills
itself (``RFKIT_STUDY_HOOK_ACTION=kill``): crash tests stop a run at a named point instead of
relying on timing.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..exceptions import StudyError

__all__ = [
    "Record",
    "OutputWriteError",
    "TMP_SUFFIX",
    "tmp_name",
    "ensure_dir",
    "file_record",
    "hook",
    "write_atomic",
    "atomic_parquet",
    "atomic_text",
    "atomic_csv",
    "write_error",
    "parquet_bytes",
    "npy_bytes",
    "check_file",
    "canonical_json",
]

HOOK_ENV = "RFKIT_STUDY_HOOK"

Record = dict[str, Any]  # {"size": int, "sha256": str}
#: suffix of rfkit's temporary files (the only files a run removes without having recorded them)
TMP_SUFFIX = ".rfkit-tmp"


class OutputWriteError(StudyError):
    """A file of a run could not be written (disk full, permission denied, a folder in the way).

    The message names the path and the cause; what was written before is intact, so the run
    can be resumed (``resume=True``, ``--resume``) once the cause is fixed.

    Parameters
    ----------
    message : str
        What failed.
    cell, trial : int, optional
        Grid cell and trial index, when a trial's output failed.
    spawn_key : tuple of int, optional
        ``SeedSequence`` spawn key of that trial.
    """


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


def tmp_name(path: Path) -> Path:
    """The temporary file a write of ``path`` goes through: unique per process and thread."""
    return path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}{TMP_SUFFIX}")


_CAUSES = {
    errno.ENOSPC: "the disk is full",
    getattr(errno, "EDQUOT", -1): "the disk quota is exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "the file system is read-only",
    errno.EISDIR: "a folder of that name is in the way",
    errno.ENOTDIR: "a file is in the way of a folder on its path",
    errno.EEXIST: "a file of that name is in the way of a folder",
}


def write_error(path: Path, exc: OSError, what: str = "write") -> OutputWriteError:
    """The named error for an ``OSError`` while writing ``path``: the path, the cause, how to resume.

    Parameters
    ----------
    path : path
        The file or folder being written.
    exc : OSError
        The error raised.
    what : str, default="write"
        What was being done, as a verb phrase (``"create the folder"``).

    Returns
    -------
    OutputWriteError
        The error to raise.
    """
    cause = _CAUSES.get(exc.errno or 0, exc.strerror or str(exc))
    return OutputWriteError(
        f"cannot {what} {str(path)!r}: {cause} ({type(exc).__name__}, errno {exc.errno}). Nothing written "
        "before was lost: fix the cause (free disk space, fix permissions, move the thing in the way) and "
        "rerun with --resume (resume=True) to continue the run."
    )


def ensure_dir(path: Path) -> Path:
    """Create folder ``path`` (and its parents) or raise :class:`OutputWriteError` naming it.

    Parameters
    ----------
    path : path
        The folder.

    Returns
    -------
    pathlib.Path
        The folder.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise write_error(path, FileExistsError(errno.EEXIST, "File exists"), "create the folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(path, exc, "create the folder") from None
    return path


def write_atomic(path: Path, data: bytes, *, fsync: bool = False) -> Record:
    """Write ``data`` to ``path`` atomically (temporary file, rename); return its size and SHA-256.

    ``fsync=True`` also flushes the file to disk before the rename (the final manifest).

    Raises
    ------
    OutputWriteError
        Naming ``path`` when the disk is full, permission is denied or a folder is in the way;
        ``path`` itself is then unchanged and no temporary file is left.
    """
    path = Path(path)
    if path.is_dir():
        raise write_error(path, IsADirectoryError(errno.EISDIR, "Is a directory"))
    tmp = tmp_name(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise write_error(path, exc) from None
    hook(f"after-file:{path.name}")
    return _record(data)


def file_record(path: Path) -> Record:
    """Size and SHA-256 of a file on disk (for a file written by a library that writes it itself).

    Parameters
    ----------
    path : path
        The file.

    Returns
    -------
    dict
        The file's record ``{"size": int, "sha256": str}``.
    """
    return _record(Path(path).read_bytes())


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
    """Write a text file (UTF-8) atomically; return its size and SHA-256.

    Parameters
    ----------
    path : path
        The file to write (replaced atomically).
    text : str
        Its content.

    Returns
    -------
    dict
        The file's record ``{"size": int, "sha256": str}``.
    """
    return write_atomic(Path(path), text.encode("utf-8"))


def atomic_csv(df: pd.DataFrame, path: Path) -> Record:
    """Write a table as CSV (no index) atomically; return its size and SHA-256.

    Parameters
    ----------
    df : pandas.DataFrame
        The table.
    path : path
        The file to write (replaced atomically).

    Returns
    -------
    dict
        The file's record ``{"size": int, "sha256": str}``.
    """
    return atomic_text(Path(path), df.to_csv(index=False))


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
