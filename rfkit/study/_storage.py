"""Run folders: verified part files, the run manifest, checksummed tables, one writer per folder.

A study run writes into its output folder ``out/``::

    run.json                  run manifest: the run's identity (design hash, seed entropy and
                              spawn key), its design, and for every finished work unit
                              (cell, chunk of trials) the size and SHA-256 of each part file;
                              rewritten atomically (temporary file, fsync, rename) after each unit
    parts/cell-CCCCCC.chunk-KKKKK.NAME.{parquet,npy}
                              part files of one work unit (tables or per-trial arrays)
    run.lock                  present while a run holds the folder: pid, host, start time
    .run.lock.guard           empty file whose ``flock`` serialises lock takeover
    trials.parquet, pairs.parquet, summary.parquet (+ timings, data_stats)   final tables
    manifest.json             provenance and the size and SHA-256 of each final table; written
                              last, so it exists only when the tables are whole
    summary.csv, theory.csv, report.md, figures/, tables/   derived outputs

Every part is verified (size, then SHA-256) before a resumed run uses it; a missing, truncated
or altered part is reported by path and its trials are recomputed (they are deterministic). The
same checks run when a finished folder is reopened (:meth:`StudyResult.load`,
:func:`verify_run`): a damaged folder is an error, never a silently partial result.

Test hook: with ``RFKIT_STUDY_HOOK`` set to a point name (``after-unit:N``, after the run has
recorded its N-th work unit; ``after-file:NAME``, after the file NAME was written), the process
writes its pid to ``RFKIT_STUDY_HOOK_FILE`` (if set) and then pauses (default), or kills
itself (``RFKIT_STUDY_HOOK_ACTION=kill``): crash tests stop a run at a named point instead of
relying on timing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..exceptions import DamagedResultWarning, InvalidParameterError, StudyError

__all__ = [
    "RunFolder",
    "RunLock",
    "RunReport",
    "verify_run",
    "verify_result_folder",
    "write_result_manifest",
    "atomic_parquet",
    "atomic_text",
    "units_done",
    "hook",
]

FORMAT = "rfkit-run/2"
RUN_MANIFEST = "run.json"
RESULT_MANIFEST = "manifest.json"
PARTS = "parts"
LOCK = "run.lock"
GUARD = ".run.lock.guard"
HOOK_ENV = "RFKIT_STUDY_HOOK"
#: seconds after which a lock file without readable holder information counts as abandoned
_UNREADABLE_LOCK_AGE = 5.0

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


# ----------------------------------------------------------------------------- atomic, checksummed writes
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


def _parquet_bytes(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


def atomic_parquet(df: pd.DataFrame, path: Path) -> Record:
    """Write a Parquet file atomically (never a half-written file); return its size and SHA-256."""
    return write_atomic(Path(path), _parquet_bytes(df))


def atomic_text(path: Path, text: str) -> Record:
    """Write a text file atomically; return its size and SHA-256."""
    return write_atomic(Path(path), text.encode("utf-8"))


def _check_file(path: Path, rec: Mapping[str, Any]) -> tuple[bytes | None, str | None]:
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


# ----------------------------------------------------------------------------- the run manifest
def _canonical(body: Mapping[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)


class ManifestDamagedError(StudyError):
    """The run manifest (``run.json``) cannot be read or fails its own checksum."""


def _read_run_manifest(path: Path) -> dict[str, Any]:
    """Parse ``run.json`` and check its checksum; raises :class:`ManifestDamagedError`."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestDamagedError(f"it cannot be parsed ({type(exc).__name__}: {exc})") from None
    if not isinstance(raw, dict):
        raise ManifestDamagedError(f"it holds a {type(raw).__name__}, not a JSON object")
    if "format" not in raw:  # written by rfkit before verified parts (per-cell files in cells/)
        return raw
    checksum = raw.pop("checksum", None)
    if checksum != hashlib.sha256(_canonical(raw).encode()).hexdigest():
        raise ManifestDamagedError("its content does not match its checksum (the file was altered)")
    if raw.get("format") != FORMAT or not isinstance(raw.get("units"), dict):
        raise ManifestDamagedError(f"unknown format {raw.get('format')!r} (expected {FORMAT!r})")
    return raw


def _ident_of(old: Mapping[str, Any], like: Mapping[str, Any]) -> dict[str, Any]:
    """The identity recorded in an old manifest (runs from before backends were recorded ran on NumPy)."""
    return {k: old.get(k, "numpy:default" if k == "backend" else None) for k in like}


def _manifest_damaged_message(out: Path, reason: str) -> str:
    path = out / RUN_MANIFEST
    return (
        f"the run manifest {path} is damaged: {reason}. The sizes and checksums of the part files "
        f"it lists cannot be trusted, so no part is used. To recover, delete {path} and rerun with "
        f"--resume (resume=True): every part is then recomputed from its deterministic trial streams, "
        f"so the tables equal those of an undamaged run. Or start a fresh run in another folder."
    )


def _part_name(cell: int, chunk: int, name: str, ext: str) -> str:
    return f"{PARTS}/cell-{cell:06d}.chunk-{chunk:05d}.{name}.{ext}"


def units_done(out: str | Path) -> int:
    """Number of work units recorded in the run manifest of ``out`` (0 if none can be read)."""
    try:
        units = _read_run_manifest(Path(out) / RUN_MANIFEST).get("units", {})
    except (ManifestDamagedError, FileNotFoundError):
        return 0
    return len(units) if isinstance(units, dict) else 0


# ----------------------------------------------------------------------------- the lock
_HELD: dict[str, list[Any]] = {}  # lock path -> [token, depth]: re-entrant within one process


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks) of a process from /proc, or None where unavailable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = stat[stat.rindex(")") + 2 :].split()
    return rest[0], rest[19]  # fields 3 (state) and 22 (starttime)


def _holder_alive(info: Mapping[str, Any]) -> bool:
    """Whether the process that wrote a lock (on this host) still runs."""
    pid = info.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    if os.name == "nt":  # pragma: no cover - os.kill(pid, 0) would signal the process on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by another user
    stat = _proc_stat(pid)
    if stat is not None:
        state, start = stat
        if state in ("Z", "X"):  # killed, not yet reaped
            return False
        if info.get("pid_start") is not None and start != info.get("pid_start"):
            return False  # the pid was reused by another process
    return True


@contextlib.contextmanager
def _guard(out: Path) -> Iterator[None]:
    """Exclusive ``flock`` on ``out/.run.lock.guard``: lock checks and takeovers never interleave.

    The kernel drops it when its holder dies. Where ``fcntl`` is missing (Windows) the lock
    file's atomic creation still excludes a second writer; only takeover of a stale lock is
    then not race-free.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    fd = os.open(out / GUARD, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read_lock(path: Path) -> dict[str, Any] | None:
    """Holder information of a lock file, ``{}`` if unreadable, None if there is no lock."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return {}
    try:
        info = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return info if isinstance(info, dict) else {}


def _describe_holder(info: Mapping[str, Any]) -> str:
    if not info:
        return "a process whose lock file is unreadable"
    cmd = info.get("command")
    return f"pid {info.get('pid')} on host {info.get('host')!r}, started {info.get('started')}" + (
        f" ({cmd})" if cmd else ""
    )


def lock_holder(out: str | Path) -> dict[str, Any] | None:
    """Holder of the lock on ``out`` if a live process (or one on another host) holds it, else None."""
    info = _read_lock(Path(out) / LOCK)
    if not info:
        return None
    if info.get("host") == socket.gethostname() and not _holder_alive(info):
        return None
    return info


def _make_dir(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise StudyError(f"output directory {str(out)!r} is not writable: {exc.strerror or exc}") from None


class RunLock:
    """One writer per output folder: an exclusive lock file ``out/run.lock``.

    The lock file is created atomically (``O_CREAT | O_EXCL``) and holds the holder's pid, host,
    process start time and command. A lock whose holder is gone (same host, pid not running, or
    the pid now belongs to another process) is taken over; a live holder makes the second run
    wait up to ``timeout`` seconds and then refuse with a message naming the holder. Re-entrant
    within one process (the CLI holds the folder across the run and its report).

    Parameters
    ----------
    out : path
        The output folder (created if needed).
    timeout : float or None, default=0
        Seconds to wait for a live holder; 0 refuses at once, None waits without limit.
    """

    def __init__(self, out: str | Path, timeout: float | None = 0.0, poll: float = 0.1) -> None:
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0
        ):
            raise InvalidParameterError(
                f"The `lock_timeout` parameter must be None or a number of seconds >= 0. Got {timeout!r} instead."
            )
        self.out = Path(out)
        self.path = self.out / LOCK
        self.timeout = timeout
        self.poll = poll
        self.token = uuid.uuid4().hex
        self.taken_over: dict[str, Any] | None = None
        self._key: str | None = None

    def _info(self) -> dict[str, Any]:
        stat = _proc_stat(os.getpid())
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "pid_start": None if stat is None else stat[1],
            "command": " ".join(sys.argv)[:300],
            "token": self.token,
        }

    def _try(self) -> dict[str, Any] | None:
        """One attempt under the guard: None when acquired, else the live holder's information."""
        with _guard(self.out):
            info = _read_lock(self.path)
            if info is not None:
                stale = False
                if not info:  # unreadable: abandoned if old (the guard excludes a half-written lock)
                    with contextlib.suppress(OSError):
                        stale = time.time() - self.path.stat().st_mtime > _UNREADABLE_LOCK_AGE
                elif info.get("host") == socket.gethostname() and not _holder_alive(info):
                    stale = True
                if not stale:
                    return info
                self.taken_over = info
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:  # pragma: no cover - only without fcntl (no guard)
                return _read_lock(self.path) or {}
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(self._info(), indent=1))
                fh.flush()
                os.fsync(fh.fileno())
            return None

    def acquire(self) -> RunLock:
        _make_dir(self.out)
        key = os.path.realpath(self.path)
        if key in _HELD:  # this process holds it already
            _HELD[key][1] += 1
            self._key = key
            return self
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        delay = self.poll
        while True:
            holder = self._try()
            if holder is None:
                _HELD[key] = [self.token, 1]
                self._key = key
                return self
            if deadline is not None and time.monotonic() >= deadline:
                waited = f" after waiting {self.timeout:g} s" if self.timeout else ""
                raise StudyError(
                    f"output folder {str(self.out)!r} is in use by another rfkit run{waited}: "
                    f"{_describe_holder(holder)}. Wait for it to finish, or pass lock_timeout=SECONDS "
                    f"(--wait-lock SECONDS) to wait for it; if that run is gone (e.g. it ran on "
                    f"another machine), delete {self.path}."
                )
            time.sleep(delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic())))
            delay = min(delay * 1.5, 2.0)

    def release(self) -> None:
        key = self._key
        if key is None or key not in _HELD:
            return
        self._key = None
        _HELD[key][1] -= 1
        if _HELD[key][1] > 0:
            return
        token = _HELD.pop(key)[0]
        with _guard(self.out):
            info = _read_lock(self.path)
            if info and info.get("token") == token:
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# ----------------------------------------------------------------------------- a run's folder
PartTables = dict[str, Any]  # part name -> DataFrame or ndarray


class RunFolder:
    """The output folder of one run: lock, run manifest, verified part files, final tables.

    Used by :func:`rfkit.study.run` as a context manager: on entry it takes the lock, checks
    the folder (a fresh run refuses a folder holding results; a resumed one refuses another
    design or seed), verifies every recorded part and loads the intact ones into
    :attr:`resumed`; damaged parts are listed in :attr:`repaired` (and warned about) and their
    units recomputed.
    """

    def __init__(
        self,
        out: Path,
        design: Any,
        entropy: int,
        spawn_key: tuple[int, ...],
        n_chunks: int,
        *,
        resume: bool,
        lock_timeout: float | None = 0.0,
    ) -> None:
        self.out = out
        self.design = design
        self.ident = {
            "design_hash": design.hash(),
            "entropy": str(entropy),
            "spawn_key": [int(k) for k in spawn_key],
        }
        # a run on another backend is another run (same numbers only up to round-off): never mixed
        self.ident["backend"] = (
            f"{getattr(design, 'backend', 'numpy')}:{getattr(design, 'device', None) or 'default'}"
        )
        self.n_cells = len(design.cells())
        self.n_chunks = n_chunks
        self.resume = resume
        self.lock = RunLock(out, lock_timeout)
        self.units: dict[str, dict[str, Any]] = {}
        self.resumed: dict[tuple[int, int], tuple[bool, PartTables]] = {}
        self.repaired: list[dict[str, str]] = []
        self.recorded = 0

    # -------------------------------------------------------------- open
    def __enter__(self) -> RunFolder:
        self.lock.acquire()
        try:
            self._open()
        except BaseException:
            self.lock.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.lock.release()

    def _has_results(self, old: dict[str, Any] | None) -> bool:
        out = self.out
        if (out / "trials.parquet").exists() or (out / RESULT_MANIFEST).exists():
            return True
        if old is not None and old.get("units"):
            return True
        legacy = out / "cells"
        if legacy.is_dir() and any(legacy.glob("*.parquet")):
            return True
        return old is None and (out / PARTS).is_dir() and any((out / PARTS).iterdir())

    def _open(self) -> None:
        out = self.out
        (out / PARTS).mkdir(exist_ok=True)
        for d in (out, out / PARTS):  # leftovers of writes interrupted by a crash
            for tmp in d.glob("*.tmp"):
                with contextlib.suppress(OSError):
                    tmp.unlink()
        mpath = out / RUN_MANIFEST
        old: dict[str, Any] | None = None
        damaged: str | None = None
        if mpath.exists():
            try:
                old = _read_run_manifest(mpath)
            except ManifestDamagedError as exc:
                damaged = str(exc)
        if not self.resume:
            if damaged is not None or self._has_results(old):
                raise StudyError(
                    f"{out} already holds results of a study run; pass resume=True (--resume) to continue "
                    "it, or choose another output directory. Nothing was overwritten."
                )
        elif damaged is not None:
            raise StudyError(_manifest_damaged_message(out, damaged))
        elif old is None or "format" not in old:
            if old is not None and _ident_of(old, self.ident) != self.ident:
                self._refuse_other(old)
            n_old = sum(1 for _ in (out / PARTS).glob("cell-*")) + sum(1 for _ in out.glob("cells/*.parquet"))
            if n_old:
                why = (
                    "has no run manifest" if old is None else "was written by an older rfkit (cells/ layout)"
                )
                self.repaired.append({"path": str(out), "problem": f"{why}: {n_old} unverifiable part files"})
                _warn(
                    f"{out} {why}: its {n_old} part files cannot be verified and are recomputed "
                    "(the trials are deterministic, so the tables are unchanged)."
                )
        else:
            if _ident_of(old, self.ident) != self.ident:
                self._refuse_other(old)
            self._verify_units(old["units"])
        self._save()

    def _refuse_other(self, old: Mapping[str, Any]) -> None:
        theirs = _ident_of(old, self.ident)
        raise StudyError(
            f"cannot resume in {self.out}: it holds a run of a different design, seed or backend "
            f"(design hash {theirs.get('design_hash')} vs {self.ident['design_hash']}, entropy "
            f"{theirs.get('entropy')} vs {self.ident['entropy']}, backend {theirs.get('backend')} vs "
            f"{self.ident['backend']}). Nothing was overwritten."
        )

    def _verify_units(self, units: Mapping[str, Any]) -> None:
        problems = []
        for key, entry in units.items():
            try:
                c, k = (int(v) for v in key.split("."))
                files = entry["files"]
                final = bool(entry["final"])
            except (ValueError, KeyError, TypeError):
                continue  # not a unit of this layout: recomputed
            if not (0 <= c < self.n_cells and 0 <= k < self.n_chunks):
                continue
            tables: PartTables = {}
            bad = []
            for rel, rec in files.items():
                data, problem = _check_file(self.out / rel, rec)
                if data is not None:
                    try:
                        name = rel.rsplit("/", 1)[-1].split(".", 2)[2].rsplit(".", 1)[0]
                        tables[name] = _decode(rel, data)
                    except Exception as exc:  # noqa: BLE001 - any decoding failure is damage
                        problem = f"unreadable ({type(exc).__name__}: {exc})"
                if problem is not None:
                    bad.append((str(self.out / rel), problem))
            if bad:
                problems += bad
                continue
            self.units[key] = {"final": final, "files": dict(files)}
            self.resumed[(c, k)] = (final, tables)
        if problems:
            self.repaired += [{"path": p, "problem": why} for p, why in problems]
            lines = "\n".join(f"  {p}: {why}" for p, why in problems)
            _warn(
                f"{len(problems)} damaged part file(s) in {self.out}; their work units are recomputed "
                f"(the trials are deterministic, so the tables equal an undamaged run's):\n{lines}"
            )

    # -------------------------------------------------------------- write
    def _save(self) -> None:
        body = {
            "format": FORMAT,
            **self.ident,
            "n_cells": self.n_cells,
            "n_chunks": self.n_chunks,
            "trials": self.design.trials,
            "chunk_trials": self.design.chunk_trials,
            "design": self.design.to_dict(),
            "units": self.units,
        }
        body = json.loads(_canonical(body))  # the checksum covers exactly what is read back
        body["checksum"] = hashlib.sha256(_canonical(body).encode()).hexdigest()
        write_atomic(self.out / RUN_MANIFEST, json.dumps(body, indent=1).encode(), fsync=True)

    def record(self, cell: int, chunk: int, final: bool, tables: PartTables) -> None:
        """Write a finished unit's part files, then record their sizes and SHA-256 in ``run.json``."""
        files = {}
        for name, obj in tables.items():
            if isinstance(obj, pd.DataFrame):
                rel, data = _part_name(cell, chunk, name, "parquet"), _parquet_bytes(obj)
            else:
                rel, data = _part_name(cell, chunk, name, "npy"), _npy_bytes(obj)
            files[rel] = write_atomic(self.out / rel, data)
        self.units[f"{cell}.{chunk}"] = {"final": bool(final), "files": files}
        self._save()
        self.recorded += 1
        hook(f"after-unit:{self.recorded}")

    def write_result(self, result: Any) -> None:
        """Write the final tables: ``manifest.json`` goes first (removed) and comes back last."""
        (self.out / RESULT_MANIFEST).unlink(missing_ok=True)
        result.save(self.out)


def _decode(rel: str, data: bytes) -> Any:
    if rel.endswith(".parquet"):
        return pd.read_parquet(io.BytesIO(data))
    return np.load(io.BytesIO(data), allow_pickle=False)


def _warn(message: str) -> None:
    import warnings

    warnings.warn(message, DamagedResultWarning, stacklevel=4)


# ----------------------------------------------------------------------------- final tables
def write_result_manifest(out: Path, provenance: Mapping[str, Any], files: Mapping[str, Record]) -> None:
    """``manifest.json``: the provenance plus the size and SHA-256 of each final table."""
    text = json.dumps({**provenance, "files": dict(files)}, indent=2, default=str)
    write_atomic(Path(out) / RESULT_MANIFEST, text.encode("utf-8"), fsync=True)


@dataclasses.dataclass
class RunReport:
    """What :func:`verify_run` found in a run folder.

    Attributes
    ----------
    out : Path
    problems : list of (str, str)
        ``(path, what is wrong)`` for every damaged file: a missing, truncated or altered part
        or table, or a damaged manifest.
    units_done, units_total : int
        Work units recorded in ``run.json`` and in the whole study (``units_total`` is None
        without a readable run manifest).
    finished : bool
        The final tables were written (``manifest.json`` exists).
    holder : dict or None
        The live process holding the folder's lock (a run in progress), if any.
    """

    out: Path
    problems: list[tuple[str, str]]
    units_done: int
    units_total: int | None
    finished: bool
    holder: dict[str, Any] | None

    @property
    def ok(self) -> bool:
        """No damaged file."""
        return not self.problems

    def __str__(self) -> str:
        state = "finished" if self.finished else "unfinished"
        total = "?" if self.units_total is None else self.units_total
        lines = [f"{self.out}: {state} run, {self.units_done} of {total} work units recorded"]
        if self.holder:
            lines.append(f"in use by {_describe_holder(self.holder)}")
        lines += [f"  {p}: {why}" for p, why in self.problems] or ["all recorded files verified"]
        return "\n".join(lines)


def verify_run(out: str | Path) -> RunReport:
    """Verify a run folder: every recorded part and final table against its size and SHA-256.

    Reads ``run.json`` (parts) and ``manifest.json`` (final tables) and checks each file they
    list; changes nothing.

    Parameters
    ----------
    out : path
        A folder written by :func:`rfkit.study.run` (``out=``) or :meth:`StudyResult.save`.

    Returns
    -------
    RunReport
        ``report.ok`` is True when no recorded file is missing, truncated or altered.
    """
    out = Path(out)
    if not out.is_dir():
        raise InvalidParameterError(
            f"The `out` parameter must be an existing folder. Got {str(out)!r} instead."
        )
    problems: list[tuple[str, str]] = []
    done, total = 0, None
    mpath = out / RUN_MANIFEST
    if mpath.exists():
        try:
            old = _read_run_manifest(mpath)
        except ManifestDamagedError as exc:
            problems.append((str(mpath), f"damaged run manifest: {exc}"))
        else:
            if "format" in old:
                total = int(old["n_cells"]) * int(old["n_chunks"])
                for entry in old["units"].values():
                    done += 1
                    for rel, rec in entry.get("files", {}).items():
                        _, problem = _check_file(out / rel, rec)
                        if problem is not None:
                            problems.append((str(out / rel), problem))
    rpath = out / RESULT_MANIFEST
    finished = rpath.exists()
    if finished:
        try:
            prov = json.loads(rpath.read_text(encoding="utf-8"))
            if not isinstance(prov, dict):
                raise ValueError(f"it holds a {type(prov).__name__}, not a JSON object")
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            problems.append((str(rpath), f"damaged result manifest: cannot be parsed ({exc})"))
        else:
            files = prov.get("files", {})
            if not isinstance(files, dict):
                problems.append((str(rpath), "damaged result manifest: `files` is not a table"))
                files = {}
            for rel, rec in files.items():
                _, problem = _check_file(out / rel, rec if isinstance(rec, dict) else {})
                if problem is not None:
                    problems.append((str(out / rel), problem))
    return RunReport(out, problems, done, total, finished, lock_holder(out))


def verify_result_folder(path: str | Path) -> dict[str, Any]:
    """Check a folder before :meth:`StudyResult.load` reads it; return its provenance.

    Raises
    ------
    StudyError
        The folder holds no finished result (an unfinished run says how to finish it), or any
        recorded part or table is missing, truncated or altered (each named by path, with how
        to repair the folder).
    """
    p = Path(path)
    if not p.is_dir():
        raise StudyError(f"{str(p)!r} is not a study result folder: no such directory.")
    report = verify_run(p)
    busy = f"A run is writing it now: {_describe_holder(report.holder)}. " if report.holder else ""
    if not report.finished:
        if (p / RUN_MANIFEST).exists():
            raise StudyError(
                f"{p} holds an unfinished study run ({report.units_done} of "
                f"{'?' if report.units_total is None else report.units_total} work units recorded; no "
                f"final tables). {busy}Finish it with `rfkit run STUDY --resume --out {p}` (or "
                "rfkit.study.run(..., out=..., resume=True)), then load it."
            )
        raise StudyError(f"{p} is not a study result folder: {RESULT_MANIFEST} is missing.")
    if report.problems:
        lines = "\n".join(f"  {f}: {why}" for f, why in report.problems)
        raise StudyError(
            f"study result folder {p} is damaged; nothing was loaded:\n{lines}\n{busy}To repair it, rerun "
            f"the study on this folder with --resume (`rfkit run STUDY --resume --out {p}` with the "
            "original --quick/--trials/--seed): damaged parts are recomputed from their deterministic "
            "trial streams and the tables rewritten. A damaged run.json: delete it first (every part "
            "is then recomputed)."
        )
    prov = json.loads((p / RESULT_MANIFEST).read_text(encoding="utf-8"))
    prov.pop("files", None)
    return prov
