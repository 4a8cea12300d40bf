r"""rfkit's CPU thread pool: fixed row blocks, scheduled on threads, BLAS coordinated.

The elementwise-heavy steps of the NumPy backend (building feature blocks: one matrix
product, a max-shift and an ``exp``; RFA's row blocks; RA, SNIS and LARA passes; the
exact softmax) run as **fixed** blocks of rows. NumPy releases the GIL inside its
ufuncs and BLAS calls, so a pool of threads runs the blocks concurrently.

Determinism: the block layout depends only on the array sizes, never on the number of
threads, and while blocks run the BLAS library is held at one thread (through
``threadpoolctl``), so every block does the same arithmetic whichever thread runs it and
however many there are. Results are bit-identical for every ``n_threads`` (tested).
This also keeps cores from being oversubscribed: ``n_threads`` workers each run a
one-thread BLAS.

``n_threads``: the argument of the public call (attention estimators take one), else the
innermost :func:`threads` context, else the environment variable ``RFKIT_NUM_THREADS``,
else the number of CPUs this process may use. Other libraries (PyTorch, CuPy) use their
own parallelism and ignore it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ._params import check_int
from .exceptions import InvalidParameterError

__all__ = [
    "resolve_threads",
    "run_blocks",
    "blas_limited",
    "blas_held",
    "available_cpus",
    "threads",
    "ENV_VAR",
    "process_context",
    "start_process_server",
    "lead_state",
    "adopt_lead_state",
    "shutdown_pool",
]

ENV_VAR = "RFKIT_NUM_THREADS"

T = TypeVar("T")

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_blas: Any = None  # threadpoolctl controller of the BLAS libraries (created on first use)
_depth = threading.local()
_context = threading.local()


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


@contextlib.contextmanager
def threads(n_threads: int) -> Iterator[None]:
    """Use ``n_threads`` threads for rfkit's NumPy computations inside the ``with`` block.

    Results do not depend on the number of threads (fixed blocks, one-thread BLAS inside
    them); only the wall time does.

    Parameters
    ----------
    n_threads : int
        The number of threads, at least 1.

    Yields
    ------
    None
        The block runs with ``n_threads`` threads; the previous setting is restored on exit.

    Examples
    --------
    >>> import numpy as np, rfkit as rk
    >>> X = np.random.default_rng(0).normal(size=(512, 16)) * 0.3
    >>> draw = rk.features.Positive(64).sample(16, rng=0)
    >>> with rk.threads(1):
    ...     one = draw.kernel(X, X)
    >>> with rk.threads(2):
    ...     two = draw.kernel(X, X)
    >>> bool((one == two).all())
    True
    """
    n = check_int(n_threads, "n_threads", "rfkit.threads", low=1)
    old = getattr(_context, "n", None)
    _context.n = n
    try:
        yield
    finally:
        _context.n = old


def resolve_threads(n_threads: Any, owner: str) -> int:
    """``n_threads`` as an int >= 1: the argument, else :func:`threads`, else ``RFKIT_NUM_THREADS``, else all CPUs.

    Raises
    ------
    InvalidParameterError
        A non-integer or non-positive value (argument or environment variable).
    """
    if n_threads is not None:
        return check_int(n_threads, "n_threads", owner, low=1)
    ctx = getattr(_context, "n", None)
    if ctx is not None:
        return int(ctx)
    env = os.environ.get(ENV_VAR)
    if env is None or env.strip() == "":
        return available_cpus()
    try:
        value = int(env)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidParameterError(
            f"The environment variable {ENV_VAR} must be an integer >= 1 (threads of rfkit's pool). "
            f"Got {env!r} instead."
        )
    return value


def _executor(n: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size < n:
            old = _pool
            _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="rfkit")
            _pool_size = n
            if old is not None:
                old.shutdown(wait=False)
        return _pool


def _blas_controller() -> Any:
    global _blas
    if _blas is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - a declared dependency
            _blas = False
        else:
            _blas = ThreadpoolController().select(user_api="blas")
    return _blas


@contextlib.contextmanager
def blas_limited() -> Iterator[None]:
    """Hold the BLAS libraries at one thread (re-entrant; process-wide while active)."""
    depth = getattr(_depth, "n", 0)
    ctl = _blas_controller() if depth == 0 else None
    _depth.n = depth + 1
    try:
        if ctl:
            with ctl.limit(limits=1):
                yield
        else:
            yield
    finally:
        _depth.n = depth


def blas_held() -> bool:
    """Whether this thread runs with BLAS held at one thread (inside :func:`blas_limited`, e.g. a study's
    work unit, or inside a block of :func:`run_blocks`)."""
    return getattr(_depth, "n", 0) > 0 or getattr(_depth, "inner", False)


def run_blocks(fn: Callable[[T], Any], blocks: Sequence[T], n_threads: int) -> list[Any]:
    """``[fn(b) for b in blocks]``, the blocks spread over at most ``n_threads`` threads.

    The caller fixes ``blocks`` from array sizes only. BLAS runs single-threaded inside
    (see the module docstring), so the results do not depend on ``n_threads``. Calls made
    from inside a block run serially (no nested pools).
    """
    with blas_limited():
        if n_threads <= 1 or len(blocks) <= 1 or getattr(_depth, "inner", False):
            return [fn(b) for b in blocks]
        lanes = min(n_threads, len(blocks))
        pool = _executor(lanes)
        results: list[Any] = [None] * len(blocks)
        order = iter(range(len(blocks)))
        take = threading.Lock()

        def lane() -> None:  # each lane pulls the next block until none is left
            _depth.inner = True
            try:
                while True:
                    with take:
                        i = next(order, None)
                    if i is None:
                        return
                    results[i] = fn(blocks[i])
            finally:
                _depth.inner = False

        futures = [pool.submit(lane) for _ in range(lanes)]
        for f in futures:
            f.result()
        return results


_PRELOAD: set[str] = set()


def process_context(preload: Sequence[str] = ()) -> Any:
    """Where rfkit's worker processes come from: a fork server (POSIX), else fresh interpreters.

    A fork server is a clean single-threaded process started for the purpose, so forking it is
    safe even though the calling process runs threads; each worker forks from it with the
    modules of ``preload`` (and those asked for by earlier calls) already imported, which takes
    milliseconds instead of the half second of a spawned interpreter's imports. The modules are
    imported when the server starts (the first pool of the process); asked for later, a worker
    imports them itself. Without ``fork`` (Windows) workers are spawned.
    """
    import multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods():  # pragma: no cover - Windows
        return mp.get_context("spawn")
    with _lock:
        _PRELOAD.update(preload)
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(sorted(_PRELOAD))
    return ctx


def start_process_server(preload: Sequence[str] = ()) -> bool:
    """Start the fork server now, with the modules asked for so far, instead of at the first pool.

    The server imports its modules in a process of its own, so they load while the caller goes
    on (a study's trials, say) and its first pool then starts in milliseconds. Modules asked for
    after this call are imported by each worker itself. Returns whether a server runs: False
    where there is none (Windows) or where it could not start (the operating system refused its
    process or its socket); the caller then does without worker processes.
    """
    ctx = process_context(preload)
    if ctx.get_start_method() != "forkserver":
        return False  # pragma: no cover - Windows
    from multiprocessing import forkserver

    try:
        with _sigint_ignored():
            forkserver.ensure_running()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored in the block (main thread only), so that a process started in it inherits that.

    A Ctrl-C in a terminal reaches every process of the command. A fork server ignores it only
    once its imports are done; one that starts with it ignored (an ignored signal stays ignored
    across exec, and Python then installs no handler) never prints a KeyboardInterrupt traceback
    of its own. Its workers get the usual handler back in :func:`adopt_lead_state`.
    """
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def lead_state() -> tuple[dict[str, str], list[str], str]:
    """The calling process's environment, import path and working folder, for its worker processes."""
    return dict(os.environ), list(sys.path), os.getcwd()


def adopt_lead_state(state: tuple[dict[str, str], list[str], str]) -> None:
    """In a worker process: take the lead's environment, import path and working folder.

    A worker forked from the fork server starts with the server's, which are the lead's of when
    the server started (perhaps long before: a notebook that changed folder, a test that put a
    folder of modules on the path); ``state`` (:func:`lead_state` when the pool starts) makes
    them the lead's of now, as a freshly spawned interpreter would have them, with Python's
    usual Ctrl-C handler.
    """
    import signal

    env, path, folder = state
    # a server started by start_process_server ignores Ctrl-C, and its children inherit that
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(env)
    sys.path[:] = path
    with contextlib.suppress(OSError):
        os.chdir(folder)


def shutdown_pool(pool: Any, futures: Sequence[Any], *, cancel: bool = True) -> None:
    """End a process pool: cancel its ``futures`` not yet started (``cancel``), then wait for its workers.

    The futures are cancelled here rather than by ``shutdown(cancel_futures=True)``: on Python 3.11
    and earlier that call can wait forever once a task could not be pickled for the workers
    (https://github.com/python/cpython/issues/116685), so a pool whose tasks cannot be sent would hang instead of raising.
    """
    if cancel:
        for f in futures:
            f.cancel()
    pool.shutdown(wait=True)
