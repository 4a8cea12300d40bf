"""Where bidirectional RFA's time goes (n x m float64, Positive features), step by step.

Re-runs the loop of ``rfkit.attention._rfa._bidirectional`` with the library's own
``_Featurizer`` and block sizes, timing each step (read-only use of private internals: if
they change, this section is skipped with a message). Steps: the two projections
("logits"), the max-shifts, the two exps, ``[V | 1]``, the key reduction
``Phi_K^T [V | 1]``, the rescales, the query product ``Phi_Q S`` and the final ratio.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
from _cases import D_QK, M_FEAT, qkv
from _limits import Contention


def rfa_breakdown(n: int, repeats: int) -> dict[str, Any]:
    try:
        import rfkit as rk
        from rfkit._backend import NUMPY
        from rfkit.attention import _rfa
        from rfkit.attention._common import row_blocks, with_ones
    except ImportError as err:  # pragma: no cover
        return {"skipped": str(err)}
    Q, K, V = (a[None] for a in qkv(n, np.float64))
    try:
        draw = rk.features.Positive(M_FEAT).sample(D_QK, rng=0)
        fz = _rfa._Featurizer(draw, np.dtype(np.float64))
        budget = _rfa._BLOCK_ELEMS
    except Exception as err:  # private API changed
        print(f"[breakdown] skipped: {err}", flush=True)
        return {"skipped": f"{type(err).__name__}: {err}"}

    def once() -> dict[str, float]:
        acc: dict[str, float] = {}

        def add(key: str, t0: float) -> None:
            acc[key] = acc.get(key, 0.0) + time.perf_counter() - t0

        t_all = time.perf_counter()
        S1 = top = None
        for ks in row_blocks(n, M_FEAT, budget=budget):
            t0 = time.perf_counter()
            P, r = fz.logits(K[:, ks], "key")
            add("key projection (GEMM)", t0)
            t0 = time.perf_counter()
            P += r[..., None]
            new = np.max(P, axis=-2)
            if top is not None:
                new = np.maximum(top, new)
            P -= new[..., None, :]
            add("key max-shift (3 passes)", t0)
            t0 = time.perf_counter()
            np.exp(P, out=P)
            add("key exp", t0)
            old = np.full_like(new, -np.inf) if top is None else top
            top = new
            t0 = time.perf_counter()
            V1 = with_ones(NUMPY, V[:, ks])
            add("[V | 1] copy", t0)
            t0 = time.perf_counter()
            part = np.swapaxes(P, -1, -2) @ V1
            add("key reduction Phi^T [V|1] (GEMM)", t0)
            t0 = time.perf_counter()
            if S1 is None:
                S1 = part
            else:
                fz.rescale(S1, old, top)
                S1 += part
            add("rescale + accumulate", t0)
        assert S1 is not None and top is not None
        nd = np.empty((1, n, V.shape[-1] + 1))
        ls = np.empty((1, n))
        for qs in row_blocks(n, M_FEAT, budget=budget):
            t0 = time.perf_counter()
            P, r = fz.logits(Q[:, qs], "query")
            add("query projection (GEMM)", t0)
            t0 = time.perf_counter()
            P += top[..., None, :]
            rm = np.max(P, axis=-1)
            P -= rm[..., None]
            add("query max-shift (3 passes)", t0)
            t0 = time.perf_counter()
            np.exp(P, out=P)
            add("query exp", t0)
            t0 = time.perf_counter()
            np.matmul(P, S1, out=nd[..., qs, :])
            add("query product Phi S (GEMM)", t0)
            ls[..., qs] = rm + r
        t0 = time.perf_counter()
        _rfa.finish_ratio(ls, nd[..., :-1], nd[..., -1])
        add("ratio num/den", t0)
        acc["total (steps above)"] = time.perf_counter() - t_all
        return acc

    once()
    est = rk.attention.RFA(rk.features.Positive(M_FEAT))
    runs, calls = [], []
    with Contention() as c:
        for _ in range(repeats):
            runs.append(once())
            t0 = time.perf_counter()
            est(Q[0], K[0], V[0], rng=0)
            calls.append(time.perf_counter() - t0)
    steps = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    out = {"n": n, "steps_s": steps, "rfa_call_s": statistics.median(calls), "others_cpu_share": c.share}
    print(
        f"[breakdown] RFA n={n}: "
        + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in steps.items())
        + f"; whole call {out['rfa_call_s'] * 1e3:.2f} ms",
        flush=True,
    )
    return out
