"""Timing helpers, the machine description and the machine's limits for ``run_all.py``.

The limits are rates measured in the running process, so a floor computed from them and an
rfkit time measured minutes later see the same BLAS, threads and (roughly) the same load:

* matrix multiply: the time of ``(a, k) @ (k, b)`` for every shape an rfkit operation uses,
  measured lazily (and cached) in float64 and float32; when ``a`` is large the product is
  timed on a block of ``GEMM_ROW_CAP`` rows and scaled, so no n x n operand is ever formed;
* elementwise: ``exp``, ``cos``, ``sin``, ``multiply`` (out of place into a preallocated
  output) and standard-normal generation, in elements per second, on blocks of
  ``ELEM_BLOCK`` elements (the block size rfkit's chunked loops use) and, for information,
  on one large array.

A floor is ``sum(mult * t_gemm(a, k, b)) + n_exp / exp_rate + n_cos / cos_rate + ...``: what
the machine needs for the unavoidable arithmetic of an operation, with nothing else.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

GEMM_ROW_CAP = 2048
ELEM_BLOCK = 1 << 19  # 4 MiB in float64, as rfkit's RFA blocks
ELEMENTWISE = ("exp", "cos", "sin", "multiply", "normal")


# ---------------------------------------------------------------- timing
def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_time(
    fn: Callable[[], Any], repeats: int, *, warmup: bool = True, budget_s: float | None = None
) -> tuple[float, list[float]]:
    """Median over ``repeats`` calls (fewer, >= 3, if ``budget_s`` would be exceeded).

    The warm-up call's time decides the count when ``budget_s`` is given; a warm-up that
    itself exceeds the budget is kept as one of the measurements.
    """
    times: list[float] = []
    reps = repeats
    if warmup:
        t0 = timed(fn)
        if budget_s is not None:
            reps = max(1, min(repeats, int(budget_s / max(t0, 1e-9))))
            if t0 > budget_s:
                times.append(t0)
                reps = 1 if t0 > 3 * budget_s else 2
    while len(times) < max(reps, 1):
        times.append(timed(fn))
    return statistics.median(times), times


def peak_mib(fn: Callable[[], Any]) -> float:
    """Peak traced allocation of one call (NumPy reports its buffers to tracemalloc), MiB.

    Arrays that exist before the call (the inputs) are not counted.
    """
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20


class Contention:
    """Share of the machine's CPU time used by *other* processes while a block runs.

    From ``/proc/stat`` (all CPUs) minus ``/proc/self/stat`` (this process, all threads):
    ``others / (wall x cpus)``. 0 on an idle machine; 0.5 on 2 CPUs means one core was
    busy with someone else's work. NaN where /proc is unavailable. Resolution: 10 ms of CPU.
    """

    def __init__(self) -> None:
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.cpus = os.cpu_count() or 1

    @staticmethod
    def _read() -> tuple[int, int] | None:
        try:
            f = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
            vals = [int(x) for x in f]
            busy = sum(vals) - vals[3] - (vals[4] if len(vals) > 4 else 0)  # minus idle, iowait
            st = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
            own = int(st[11]) + int(st[12])  # utime, stime (fields 14, 15)
            return busy, own
        except (OSError, ValueError, IndexError):
            return None

    def __enter__(self) -> Contention:
        self.t0 = time.perf_counter()
        self.s0 = self._read()
        self.share = float("nan")
        return self

    def __exit__(self, *exc: Any) -> None:
        wall = time.perf_counter() - self.t0
        s1 = self._read()
        if self.s0 is None or s1 is None or wall <= 0:
            return
        others = (s1[0] - self.s0[0]) - (s1[1] - self.s0[1])
        self.share = min(1.0, max(0.0, others / self.tick / (wall * self.cpus)))


def quiet_median_time(
    fn: Callable[[], Any],
    repeats: int,
    *,
    budget_s: float | None = None,
    max_share: float = 0.15,
    attempts: int = 3,
    pause_s: float = 2.0,
) -> tuple[float, list[float], float]:
    """:func:`median_time`, retried (after a pause) while other processes used more than
    ``max_share`` of the CPUs; returns the attempt with the least contention and its share."""
    best: tuple[float, list[float], float] | None = None
    for _ in range(attempts):
        with Contention() as c:
            med, times = median_time(fn, repeats, budget_s=budget_s, warmup=True)
        share = c.share if c.share == c.share else 0.0
        if best is None or share < best[2]:
            best = (med, times, share)
        if share <= max_share or sum(times) > 20:
            break
        time.sleep(pause_s)
    assert best is not None
    return best


def load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on Linux
        return [float("nan")] * 3


# ---------------------------------------------------------------- machine
def blas_threads() -> int:
    """Threads of the BLAS NumPy uses (threadpoolctl when importable, else the environment)."""
    try:
        from threadpoolctl import threadpool_info

        for info in threadpool_info():
            if info.get("user_api") == "blas":
                return int(info["num_threads"])
    except ImportError:
        pass
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return os.cpu_count() or 1


def machine() -> dict[str, Any]:
    """BLAS library and threads, NumPy build, the relevant environment, CPU and commit."""
    cfg = np.show_config(mode="dicts")
    deps = cfg.get("Build Dependencies", {}) if isinstance(cfg, dict) else {}
    blas = deps.get("blas", {})
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "blas": {k: blas.get(k) for k in ("name", "version", "openblas configuration") if k in blas},
        "blas_threads": blas_threads(),
        "simd": cfg.get("SIMD Extensions", {}) if isinstance(cfg, dict) else {},
        "env": {
            k: v
            for k, v in sorted(os.environ.items())
            if k.startswith(("OPENBLAS", "OMP_", "MKL_", "BLIS", "NUMEXPR", "NUMBA_NUM", "KMP_", "GOTO"))
        },
        "load_start": load(),
    }
    try:
        from threadpoolctl import threadpool_info

        info["threadpoolctl"] = [
            {k: d.get(k) for k in ("user_api", "internal_api", "num_threads", "version", "threading_layer")}
            for d in threadpool_info()
        ]
    except ImportError:
        info["threadpoolctl"] = "not installed"
    try:
        cpu = Path("/proc/cpuinfo").read_text()
        info["cpu_model"] = next(
            (ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("model name")), None
        )
    except OSError:  # pragma: no cover
        info["cpu_model"] = None
    try:
        root = Path(__file__).resolve().parents[1]
        info["commit"] = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:  # pragma: no cover
        info["commit"] = None
    return info


# ---------------------------------------------------------------- counts and floors
@dataclasses.dataclass
class Counts:
    """Unavoidable arithmetic of one call: GEMMs ``(a, k, b, mult)`` and elementwise counts."""

    gemms: list[tuple[int, int, int, int]] = dataclasses.field(default_factory=list)
    exp: int = 0
    cos: int = 0
    sin: int = 0
    multiply: int = 0
    normal: int = 0

    def gemm(self, a: int, k: int, b: int, mult: int = 1) -> Counts:
        self.gemms.append((int(a), int(k), int(b), int(mult)))
        return self

    @property
    def flops(self) -> int:
        return sum(2 * a * k * b * m for a, k, b, m in self.gemms)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gemm_flops": self.flops, "gemms": [list(g) for g in self.gemms]}
        for name in ELEMENTWISE:
            if getattr(self, name):
                out[name] = getattr(self, name)
        return out

    def describe(self) -> str:
        parts = []
        if self.gemms:
            parts.append(
                " + ".join(
                    f"{m}x({a},{k})@({k},{b})" if m > 1 else f"({a},{k})@({k},{b})"
                    for a, k, b, m in self.gemms
                )
            )
        for name in ELEMENTWISE:
            v = getattr(self, name)
            if v:
                parts.append(f"{name} {_si(v)}")
        return "; ".join(parts)


def _si(v: float) -> str:
    for unit, s in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= unit:
            return f"{v / unit:.3g}{s}"
    return f"{v:.3g}"


class Limits:
    """Lazily measured, cached rates of this machine in this process.

    A limit is the best of the repeats (what the machine reaches; other jobs only slow it
    down), the median is kept for information; floors use the best.
    """

    def __init__(self, repeats: int = 5, attempts: int = 3) -> None:
        self.repeats = repeats
        self.attempts = attempts
        self.gemm_s: dict[tuple[str, int, int, int], float] = {}
        self.elem_rate: dict[tuple[str, str], float] = {}
        self.elem_rate_large: dict[tuple[str, str], float] = {}
        self.share: dict[tuple[Any, ...], float] = {}
        self.gemm_median_s: dict[tuple[str, int, int, int], float] = {}
        self.elem_rate_median: dict[tuple[str, str], float] = {}
        self._rng = np.random.default_rng(12345)

    # -- matrix multiply
    def gemm_time(self, a: int, k: int, b: int, dtype: Any) -> float:
        """Seconds for one ``(a, k) @ (k, b)`` (timed on at most GEMM_ROW_CAP rows, scaled)."""
        name = np.dtype(dtype).name
        key = (name, a, k, b)
        if key not in self.gemm_s:
            rows = min(a, GEMM_ROW_CAP)
            A = self._rng.standard_normal((rows, k)).astype(dtype)
            B = self._rng.standard_normal((k, b)).astype(dtype)
            out = np.empty((rows, b), dtype=dtype)
            t, times, share = quiet_median_time(
                lambda: np.matmul(A, B, out=out), max(self.repeats, 9), budget_s=1.0, attempts=self.attempts
            )
            self.gemm_s[key] = min(times) * a / rows
            self.gemm_median_s[key] = t * a / rows
            self.share[key] = share
        return self.gemm_s[key]

    def gemm_rate(self, a: int, k: int, b: int, dtype: Any) -> float:
        return 2.0 * a * k * b / self.gemm_time(a, k, b, dtype)

    # -- elementwise
    def _elem_fn(self, op: str, X: np.ndarray, out: np.ndarray) -> Callable[[], Any]:
        if op == "exp":
            return lambda: np.exp(X, out=out)
        if op == "cos":
            return lambda: np.cos(X, out=out)
        if op == "sin":
            return lambda: np.sin(X, out=out)
        if op == "multiply":
            return lambda: np.multiply(X, X, out=out)
        if op == "normal":
            gen = np.random.default_rng(0)
            if out.dtype == np.float64:
                return lambda: gen.standard_normal(out=out)
            return lambda: gen.standard_normal(dtype=out.dtype, out=out)
        raise ValueError(op)

    def elementwise_rate(self, op: str, dtype: Any) -> float:
        """Elements per second of ``op`` on ELEM_BLOCK-element arrays (cache-sized, as rfkit's blocks)."""
        key = (op, np.dtype(dtype).name)
        if key not in self.elem_rate:
            X = (0.3 * self._rng.standard_normal(ELEM_BLOCK)).astype(dtype)
            out = np.empty_like(X)
            t, times, share = quiet_median_time(
                self._elem_fn(op, X, out), max(self.repeats, 9), budget_s=0.5, attempts=self.attempts
            )
            self.elem_rate[key] = ELEM_BLOCK / min(times)
            self.elem_rate_median[key] = ELEM_BLOCK / t
            self.share[key] = share
        return self.elem_rate[key]

    def elementwise_rate_large(self, op: str, dtype: Any, size: int) -> float:
        key = (op, np.dtype(dtype).name)
        X = (0.3 * self._rng.standard_normal(size)).astype(dtype)
        out = np.empty_like(X)
        t, _, _ = quiet_median_time(
            self._elem_fn(op, X, out), self.repeats, budget_s=1.0, attempts=self.attempts
        )
        self.elem_rate_large[key] = size / t
        return self.elem_rate_large[key]

    # -- floors
    def floor(self, counts: Counts, dtype: Any) -> float:
        total = sum(m * self.gemm_time(a, k, b, dtype) for a, k, b, m in counts.gemms)
        for op in ELEMENTWISE:
            v = getattr(counts, op)
            if v:
                # standard normals are generated in float64 by rfkit's projections
                total += v / self.elementwise_rate(op, np.float64 if op == "normal" else dtype)
        return total

    def to_dict(self) -> dict[str, Any]:
        return {
            "gemm": [
                {
                    "dtype": dt,
                    "shape": f"({a},{k})@({k},{b})",
                    "seconds": s,
                    "gflops": 2.0 * a * k * b / s / 1e9,
                    "gflops_median": 2.0 * a * k * b / self.gemm_median_s[(dt, a, k, b)] / 1e9,
                    "others_cpu_share": self.share.get((dt, a, k, b)),
                }
                for (dt, a, k, b), s in sorted(self.gemm_s.items())
            ],
            "elementwise_block": [
                {
                    "op": op,
                    "dtype": dt,
                    "elements": ELEM_BLOCK,
                    "per_second": r,
                    "per_second_median": self.elem_rate_median[(op, dt)],
                    "others_cpu_share": self.share.get((op, dt)),
                }
                for (op, dt), r in sorted(self.elem_rate.items())
            ],
            "elementwise_large": [
                {"op": op, "dtype": dt, "per_second": r}
                for (op, dt), r in sorted(self.elem_rate_large.items())
            ],
        }
