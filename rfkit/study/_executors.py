"""Executors of work units: serial, a pool of worker processes, or Dask; worker thread settings.

Each yields the results of the tasks in the order they finish. A worker process that dies
(killed, out of memory) or a Dask scheduler that cannot be reached is a :class:`StudyError`
naming the work unit or the address.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .._parallel import adopt_lead_state, lead_state, process_context, shutdown_pool
from ..exceptions import InvalidParameterError, StudyError
from ._messages import UnitTask

__all__ = ["THREAD_ENV", "worker_env"]

#: thread-count variables set in each worker process (rfkit's pool, OpenMP and the BLAS libraries)
THREAD_ENV = (
    "RFKIT_NUM_THREADS",
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def _worker_threads(workers: int) -> int:
    """Threads per worker process: the machine's CPUs shared out, at least one each."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def worker_env(workers: int) -> dict[str, str]:
    """Thread settings of each worker process, so ``workers`` processes never oversubscribe the cores.

    ``RFKIT_NUM_THREADS`` (rfkit's own thread pool) and the BLAS/OpenMP variables are all set to
    ``max(1, cpus // workers)``.
    """
    n = str(_worker_threads(workers))
    return {name: n for name in THREAD_ENV}


@contextlib.contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    """Set environment variables for processes spawned inside the block; restore them after."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _init_worker(
    env: dict[str, str], lead: int, where: tuple[dict[str, str], list[str], str] | None = None
) -> None:
    """Worker start: the lead's environment, import path and folder; thread settings; and exit
    when the lead process dies (e.g. kill -9).

    A worker forked from a fork server starts with the server's environment, ``sys.path`` and
    working folder, which are those of the lead when the server started; ``where`` (the lead's
    ``os.environ``, ``sys.path`` and working folder when the pool starts) makes them the lead's of
    now, as a freshly spawned interpreter would have them. Pool workers block on a queue whose
    write end they hold themselves, so they would outlive a killed lead; a daemon thread notices
    that the lead is gone (or that the worker was re-parented: its fork server ends with the
    lead) and ends the worker.
    """
    import threading

    if where is not None:
        adopt_lead_state(where)
    os.environ.update(env)
    try:  # the BLAS libraries read their thread count when NumPy loads: in the fork server, earlier
        from threadpoolctl import threadpool_limits

        threadpool_limits(int(env["OMP_NUM_THREADS"]))
    except (ImportError, KeyError, ValueError):  # pragma: no cover - threadpoolctl is a dependency
        pass
    parent = os.getppid()

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # pragma: no cover - a pid taken by another user's process
            return False
        return True

    def watch() -> None:
        while os.getppid() == parent and alive(lead):
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="rfkit-lead-watch", daemon=True).start()


#: modules a fork server imports once, so that each worker starts with them loaded (not 0.5 s of imports each)
_PRELOAD = ["rfkit.study._cell"]


def _context() -> Any:
    """Where worker processes come from: :func:`rfkit._parallel.process_context` (a fork server that
    has imported rfkit's study code, on POSIX)."""
    return process_context(_PRELOAD)


def _died(tasks: list[tuple[Any, ...]], task: tuple[Any, ...], left: int, hint: str, why: str) -> StudyError:
    """The named error for a worker process that died while computing a work unit (or another task)."""
    what = task[0].name if task and isinstance(task[0], UnitTask) else f"task {tasks.index(task)}"
    return StudyError(
        f"a worker process died ({why}) while computing {what}; "
        f"{left} of {len(tasks)} units of this call were not finished. {hint}"
    )


def _iter_results(
    fn: Callable[..., Any],
    tasks: list[tuple[Any, ...]],
    executor: Any,
    workers: int | None,
    scheduler: str | None,
    hint: str = "",
) -> Iterable[Any]:
    """Yield ``fn(*task)`` for every task (a tuple of arguments; a study's: one
    :class:`~rfkit.study._messages.UnitTask`), in the order they finish.

    A worker process that dies (killed, out of memory) raises :class:`StudyError` naming the
    work unit and ending with ``hint`` (how to resume).
    """
    if not tasks:
        return
    if executor == "serial":
        for t in tasks:
            yield fn(*t)
        return
    if executor == "processes":
        from concurrent.futures import ProcessPoolExecutor, as_completed
        from concurrent.futures.process import BrokenProcessPool

        n = min(workers or os.cpu_count() or 1, len(tasks))
        env = worker_env(n)
        # workers inherit the environment when they start (during the submits); the initializer
        # sets it again, and caps the BLAS threads, for what was read before
        with _environ(env):
            pool = ProcessPoolExecutor(
                max_workers=n,
                mp_context=_context(),
                initializer=_init_worker,
                initargs=(env, os.getpid(), lead_state()),
            )
            futs: list[Any] = []
            try:
                futs.extend(pool.submit(fn, *t) for t in tasks)
            except BaseException:
                shutdown_pool(pool, futs)
                raise
        unit_of = dict(zip(futs, tasks))
        left = len(futs)
        try:
            for f in as_completed(futs):
                try:
                    res = f.result()
                except BrokenProcessPool:
                    raise _died(tasks, unit_of[f], left, hint, "killed, or out of memory") from None
                left -= 1
                yield res
        finally:
            shutdown_pool(pool, futs)
        return
    # dask: a Client, a scheduler address, or a local cluster
    try:
        from dask.distributed import Client, LocalCluster
        from dask.distributed import as_completed as das_completed
    except ImportError:
        raise InvalidParameterError(
            "executor='dask' needs dask.distributed: pip install 'dask[distributed]'"
        ) from None
    own_client = None
    cluster = None
    if isinstance(executor, Client):
        client = executor
    else:
        try:
            if scheduler:
                client = own_client = Client(scheduler, timeout="5s")
            else:
                n = min(workers or os.cpu_count() or 1, len(tasks))
                cluster = LocalCluster(
                    n_workers=n,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=":0",  # any free port: a fixed one may be taken (and warn)
                    env=worker_env(n),
                )
                client = own_client = Client(cluster)
        except Exception as exc:  # noqa: BLE001 - a bad address raises ValueError, TypeError, OSError, ...
            where = f"the Dask scheduler {scheduler!r}" if scheduler else "a local Dask cluster"
            raise StudyError(
                f"cannot reach {where}: {type(exc).__name__}: {exc}. Check the address (for example "
                "'tcp://host:8786') and that the scheduler runs; nothing was computed."
            ) from None
    from distributed import KilledWorker

    try:
        dfuts: list[Any] = [client.submit(fn, *t, pure=False) for t in tasks]
        dunit = dict(zip((f.key for f in dfuts), tasks))
        dleft = len(dfuts)
        for f in das_completed(dfuts):
            try:
                res = f.result()
            except KilledWorker:
                raise _died(tasks, dunit[f.key], dleft, hint, "a Dask worker was lost") from None
            dleft -= 1
            yield res
    finally:
        if own_client is not None:
            own_client.close()
        if cluster is not None:
            cluster.close()
