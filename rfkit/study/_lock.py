"""One writer per run folder: the exclusive lock file ``out/run.lock``.

``run.lock`` holds the holder's pid, host, process start time and command while a run writes
the folder; ``.run.lock.guard`` is an empty file whose ``flock`` serialises lock checks and
takeovers. Both are removed when the holder releases the folder: the guard under its own
``flock``, and whoever opened it before then finds the name gone (or another file under it)
once its ``flock`` is granted, and opens the guard again. A lock whose holder is gone (same host, pid not running or reused) is stale and
taken over (and the takeover recorded). The lock excludes threads too: within one process the
folder belongs to the thread that took it (which may take it again, re-entrantly); another
thread of the same process is refused like another process.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..exceptions import InvalidParameterError, StudyError

__all__ = ["RunLock", "lock_holder", "describe_holder", "LOCK", "GUARD"]

LOCK = "run.lock"
GUARD = ".run.lock.guard"
#: seconds after which a lock file without readable holder information counts as abandoned
_UNREADABLE_LOCK_AGE = 5.0

#: lock path -> {"token", "depth", "thread", "thread_name", "taken_over"}: re-entrant within one thread
_HELD: dict[str, dict[str, Any]] = {}
_HELD_GUARD = threading.Lock()


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
def _guard(out: Path, *, remove: bool = False) -> Iterator[None]:
    """Exclusive ``flock`` on ``out/.run.lock.guard``: lock checks and takeovers never interleave.

    The kernel drops it when its holder dies. Where ``fcntl`` is missing (Windows) the lock
    file's atomic creation still excludes a second writer; only takeover of a stale lock is
    then not race-free. ``remove``: the guard file is deleted before its ``flock`` is let go
    (the holder's release), so a finished run leaves no lock file behind; the ``flock`` is taken
    only on the file that the name still points to once it is granted.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    path = out / GUARD
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:  # removed by the holder that released it meanwhile
            same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        if remove:
            with contextlib.suppress(OSError):
                path.unlink()
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


def describe_holder(info: Mapping[str, Any]) -> str:
    """The holder of a lock in words: pid, host, start time and command."""
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
    if out.exists() and not out.is_dir():
        raise StudyError(f"output directory {str(out)!r} is not writable: it is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        # The probe is named like rfkit's temporary files so that no run counts it as a foreign
        # file; the run holding the lock sweeps such files when it opens the folder, so the probe
        # may already be gone here: it was written, and that is all the probe asks.
        probe = out / f".write-test-{os.getpid()}-{threading.get_ident()}.rfkit-tmp"
        probe.write_text("ok")
        probe.unlink(missing_ok=True)
    except OSError as exc:
        raise StudyError(f"output directory {str(out)!r} is not writable: {exc.strerror or exc}") from None


class RunLock:
    """One writer per output folder: an exclusive lock file ``out/run.lock``.

    The lock file is created atomically (``O_CREAT | O_EXCL``) and holds the holder's pid, host,
    process start time and command. A lock whose holder is gone (same host, pid not running, or
    the pid now belongs to another process) is taken over; a live holder makes the second run
    wait up to ``timeout`` seconds and then refuse with a message naming the holder. Re-entrant
    within one thread (the CLI holds the folder across the run and its report); another thread
    of the same process is a second writer and is refused the same way.

    Parameters
    ----------
    out : path
        The output folder (created if needed).
    timeout : float or None, default=0
        Seconds to wait for a live holder; 0 refuses at once, None waits without limit.
    poll : float, default=0.1
        Seconds between the first two tries while waiting.
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

    def _claim(self, key: str) -> dict[str, Any] | None:
        """Take the lock for this thread: None when taken, else the holder (another thread or process)."""
        me = threading.get_ident()
        with _HELD_GUARD:
            held = _HELD.get(key)
            if held is not None:
                if held["thread"] == me:  # this thread holds it already: re-entrant
                    held["depth"] += 1
                    self.taken_over = held["taken_over"]
                    self._key = key
                    return None
                return {**(_read_lock(self.path) or {}), "thread": held["thread_name"]}
            holder = self._try()
            if holder is None:
                _HELD[key] = {
                    "token": self.token,
                    "depth": 1,
                    "thread": me,
                    "thread_name": threading.current_thread().name,
                    "taken_over": self.taken_over,
                }
                self._key = key
            return holder

    def acquire(self) -> RunLock:
        _make_dir(self.out)
        key = os.path.realpath(self.path)
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        delay = self.poll
        while True:
            holder = self._claim(key)
            if holder is None:
                return self
            if deadline is not None and time.monotonic() >= deadline:
                waited = f" after waiting {self.timeout:g} s" if self.timeout else ""
                who = describe_holder(holder)
                if "thread" in holder:
                    who = f"{who}, in its thread {holder['thread']!r} (another thread of this process)"
                raise StudyError(
                    f"output folder {str(self.out)!r} is in use by another rfkit run{waited}: "
                    f"{who}. One writer per folder: wait for it to finish, or pass lock_timeout=SECONDS "
                    f"to wait for it; if that run is gone (e.g. it ran on "
                    f"another machine), delete {self.path}."
                )
            time.sleep(delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic())))
            delay = min(delay * 1.5, 2.0)

    def release(self) -> None:
        key = self._key
        if key is None:
            return
        self._key = None
        with _HELD_GUARD:
            held = _HELD.get(key)
            if held is None:
                return
            held["depth"] -= 1
            if held["depth"] > 0:
                return
            token = _HELD.pop(key)["token"]
            with _guard(self.out, remove=True):
                info = _read_lock(self.path)
                if info and info.get("token") == token:
                    with contextlib.suppress(FileNotFoundError):
                        self.path.unlink()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
