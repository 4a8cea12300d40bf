"""Would a multithreaded exp pay on this machine? Measured on rfkit's exp-heavy step.

The step is what ``rfkit.attention.RFA`` does for the features of one side (``_Featurizer``
for the exponential maps): ``P = X @ W^T`` (n x m), a row max, ``P -= max``, ``exp(P)`` in
place; here n = 8192, d = 64, m = 256 (2M elements), float64 and float32. The step is
re-implemented with the same NumPy calls (rfkit is not modified) and the exp line swapped:

* ``numpy``: ``np.exp(P, out=P)`` (one thread; NumPy's SIMD exp) -- what rfkit does;
* ``numpy x2 threads``: the same calls on two row halves in a persistent 2-worker thread pool
  (NumPy releases the GIL in ufunc loops): no new dependency;
* ``numpy, 2048-row blocks`` (one thread) and the same blocks spread over 2 threads: separates
  the effect of cache locality (shift and exp of one block while it is in cache, as RFA's
  loop does) from the effect of a second thread;
* ``numexpr``: ``ne.evaluate("exp(P - r)")`` fused with the shift, with 2 and with 1 thread;
* ``numba``: a ``prange`` loop over rows calling ``np.exp`` (compile time excluded).

Timings are interleaved per repeat, in an order rotated every repeat (whichever variant runs
first after a GEMM competes with OpenBLAS's spinning worker thread); speedups are medians of
per-repeat ratios against ``numpy`` for the exp alone and for the whole step.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from _limits import timed

BLOCK_ROWS = 2048  # rfkit's RFA blocks: 2**19 elements / 256 columns


def _variants(
    P0: np.ndarray, pool: ThreadPoolExecutor
) -> dict[str, Callable[[np.ndarray, np.ndarray], None]]:
    """exp variants: fn(P, rowmax) -> P = exp(P - rowmax) in place."""

    def numpy_1(P: np.ndarray, r: np.ndarray) -> None:
        P -= r[:, None]
        np.exp(P, out=P)

    def numpy_2(P: np.ndarray, r: np.ndarray) -> None:
        h = P.shape[0] // 2

        def half(sl: slice) -> None:
            Ps = P[sl]
            Ps -= r[sl, None]
            np.exp(Ps, out=Ps)

        list(pool.map(half, (slice(0, h), slice(h, None))))

    def blocks(P: np.ndarray) -> list[slice]:
        return [slice(i, min(i + BLOCK_ROWS, P.shape[0])) for i in range(0, P.shape[0], BLOCK_ROWS)]

    def one_block(P: np.ndarray, r: np.ndarray, sl: slice) -> None:
        Ps = P[sl]
        Ps -= r[sl, None]
        np.exp(Ps, out=Ps)

    def numpy_blocked(P: np.ndarray, r: np.ndarray) -> None:
        for sl in blocks(P):
            one_block(P, r, sl)

    def numpy_blocked_2(P: np.ndarray, r: np.ndarray) -> None:
        list(pool.map(lambda sl: one_block(P, r, sl), blocks(P)))

    out: dict[str, Callable[[np.ndarray, np.ndarray], None]] = {
        "numpy": numpy_1,
        "numpy x2 threads (row halves)": numpy_2,
        f"numpy, {BLOCK_ROWS}-row blocks": numpy_blocked,
        f"numpy, {BLOCK_ROWS}-row blocks x2 threads": numpy_blocked_2,
    }
    try:
        import numexpr as ne

        def ne_k(k: int) -> Callable[[np.ndarray, np.ndarray], None]:
            def f(P: np.ndarray, r: np.ndarray) -> None:
                prev = ne.set_num_threads(k)
                r2 = r[:, None]  # noqa: F841  (used by name inside the expression)
                ne.evaluate("exp(P - r2)", out=P, casting="same_kind")
                ne.set_num_threads(prev)

            return f

        out[f"numexpr {ne.__version__} x2 threads"] = ne_k(2)
        out[f"numexpr {ne.__version__} x1 thread"] = ne_k(1)
    except ImportError:
        print("[exp] numexpr not installed (pip install numexpr): skipped", flush=True)
    try:
        import numba

        @numba.njit(parallel=True, cache=False)
        def _nb(P: np.ndarray, r: np.ndarray) -> None:  # pragma: no cover - compiled
            for i in numba.prange(P.shape[0]):
                for j in range(P.shape[1]):
                    P[i, j] = np.exp(P[i, j] - r[i])

        Pc = P0.copy()
        t_compile = timed(lambda: _nb(Pc, Pc.max(axis=1)))
        print(f"[exp] numba {numba.__version__}: compiled in {t_compile:.1f} s (excluded)", flush=True)

        def nb(P: np.ndarray, r: np.ndarray) -> None:
            _nb(P, r)

        out[f"numba {numba.__version__} prange x{numba.get_num_threads()}"] = nb
    except ImportError:
        print("[exp] numba not installed (pip install numba): skipped", flush=True)
    except Exception as err:  # a numba that cannot compile here
        print(f"[exp] numba failed: {err}", flush=True)
    return out


def _step(f: Callable[[np.ndarray, np.ndarray], None], X: np.ndarray, WT: np.ndarray) -> None:
    P = X @ WT
    r = np.max(P, axis=-1)
    f(P, r)


def exp_threads(n: int, m: int, d: int, repeats: int) -> dict[str, Any]:
    rng = np.random.default_rng(5)
    result: dict[str, Any] = {"n": n, "m": m, "d": d, "rows": []}
    pool = ThreadPoolExecutor(max_workers=2)
    try:
        for dt in (np.float64, np.float32):
            X = (0.5 * rng.standard_normal((n, d)) / d**0.25).astype(dt)
            WT = rng.standard_normal((d, m)).astype(dt)
            P0 = X @ WT
            r0 = P0.max(axis=1)
            ref = np.exp(P0 - r0[:, None])
            variants = _variants(P0, pool)
            work = {k: np.empty_like(P0) for k in variants}
            for name, f in variants.items():  # correctness + warm-up
                W = work[name]
                W[...] = P0
                f(W, r0)
                if not np.allclose(W, ref, rtol=1e-5 if dt == np.float32 else 1e-12, atol=0):
                    raise AssertionError(f"exp variant {name} disagrees with numpy")
            t_exp: dict[str, list[float]] = {k: [] for k in variants}
            t_step: dict[str, list[float]] = {k: [] for k in variants}
            names = list(variants)
            for i in range(repeats):
                # rotate the order every repeat: the first variant after a GEMM is not always the same
                for name in names[i % len(names) :] + names[: i % len(names)]:
                    f = variants[name]
                    W = work[name]
                    np.copyto(W, P0)
                    t_exp[name].append(timed(lambda f=f, W=W, r0=r0: f(W, r0)))
                    t_step[name].append(timed(lambda f=f, X=X, WT=WT: _step(f, X, WT)))
            base_e, base_s = t_exp["numpy"], t_step["numpy"]
            for name in variants:
                row = {
                    "dtype": np.dtype(dt).name,
                    "variant": name,
                    "exp_s": statistics.median(t_exp[name]),
                    "step_s": statistics.median(t_step[name]),
                    "exp_speedup": statistics.median(b / a for a, b in zip(t_exp[name], base_e)),
                    "step_speedup": statistics.median(b / a for a, b in zip(t_step[name], base_s)),
                    "exp_elements_per_s": n * m / statistics.median(t_exp[name]),
                }
                result["rows"].append(row)
                print(
                    f"[exp] {row['dtype']} {name:28s} exp {row['exp_s'] * 1e3:6.2f} ms (x{row['exp_speedup']:.2f}), "
                    f"step {row['step_s'] * 1e3:6.2f} ms (x{row['step_speedup']:.2f})",
                    flush=True,
                )
    finally:
        pool.shutdown()
    return result
