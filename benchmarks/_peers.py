"""Peer libraries measured in the same process as rfkit (optional; skipped when not installed).

* performer-pytorch's ``FastAttention`` (CPU, ``torch.set_num_threads`` = the BLAS thread
  count) against ``rfkit.attention.RFA(Positive(m, projection="orthogonal"))``: the same
  projection matrix (rfkit's draw is copied into the module's buffer) and performer's
  feature epsilon set to 0 (its ``softmax_kernel`` adds ``eps=1e-4`` to every feature; the
  module-level function is wrapped with ``eps=0.0`` while these benchmarks run). performer
  scales q and k by ``d**-0.25`` inside; rfkit (no hidden temperature) is given the scaled
  inputs, prepared outside the timed region. Outputs must agree before anything is timed.
* scikit-learn's ``RBFSampler(gamma=0.5, n_components=2m)`` (random Fourier features of
  exp(-||x - y||^2 / 2)) against ``rfkit.features.Trig(m).sample(d).queries`` (sin/cos
  features of the same Gaussian part, 2m columns): the same output width and floor counts.
  The two are different randomisations, so the agreement check is statistical: both
  estimate the Gaussian kernel on 512 x 512 pairs with a relative RMSE of the same order.

Timings are interleaved (peer, rfkit, peer, rfkit, ...) and the ratio is the median of the
per-repeat ratios, so both see the same machine load.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
from collections.abc import Iterator
from typing import Any

import numpy as np
from _cases import D_QK, M_FEAT, qkv
from _limits import Contention, Counts, Limits, peak_mib, timed

import rfkit as rk

TOL = {"float64": 1e-10, "float32": 1e-4}  # max |diff| / max |output|


def _skip(name: str, err: BaseException, how: str) -> dict[str, Any]:
    msg = f"[peers] {name} skipped: {type(err).__name__}: {err}. Install with: {how}"
    print(msg, flush=True)
    return {"skipped": msg}


@contextlib.contextmanager
def _performer_eps_zero(pp: Any) -> Iterator[None]:
    orig = pp.softmax_kernel
    pp.softmax_kernel = functools.partial(orig, eps=0.0)
    try:
        yield
    finally:
        pp.softmax_kernel = orig


def performer(ns: list[int], repeats: int, threads: int, limits: Limits) -> dict[str, Any]:
    how = "docs/benchmarks.md (torch==2.13.0 CPU wheel, then performer-pytorch --no-deps + its small deps)"
    try:
        import torch
        from performer_pytorch import FastAttention
        from performer_pytorch import performer_pytorch as pp
    except Exception as err:  # ImportError, or a broken torch install
        return _skip("performer-pytorch", err, how)
    import importlib.metadata as md

    torch.set_num_threads(threads)
    info = {
        "torch": torch.__version__,
        "performer_pytorch": md.version("performer-pytorch"),
        "torch_threads": torch.get_num_threads(),
        "tolerance": TOL,
    }
    m, d = M_FEAT, D_QK
    rows = []
    with _performer_eps_zero(pp), torch.inference_mode():
        for n in ns:
            for dt, tdt in ((np.float64, torch.float64), (np.float32, torch.float32)):
                Q, K, V = qkv(n, dt)
                raw = [
                    torch.from_numpy(np.ascontiguousarray(a * (d**0.25 if i < 2 else 1.0)).astype(dt))[
                        None, None
                    ]
                    for i, a in enumerate((Q, K, V))
                ]
                est = rk.attention.RFA(rk.features.Positive(m, projection="orthogonal"))
                ours = est(Q, K, V, rng=0)
                fa = FastAttention(d, nb_features=m).to(tdt)
                fa.projection_matrix.copy_(torch.from_numpy(np.asarray(ours.draw.projection)))
                theirs = fa(*raw)[0, 0].numpy()
                err = float(np.max(np.abs(theirs - ours.output)) / np.max(np.abs(ours.output)))
                name = np.dtype(dt).name
                ok = bool(err <= TOL[name])
                row: dict[str, Any] = {"n": n, "dtype": name, "rel_max_diff": err, "agree": ok}
                if not ok:
                    print(
                        f"[peers] performer-pytorch n={n} {name}: outputs differ ({err:.2e}); not timed",
                        flush=True,
                    )
                    rows.append(row)
                    continue
                fa(*raw)
                est(Q, K, V, rng=0)
                t_peer, t_ours, ratios = [], [], []
                reps = repeats if n <= 16384 else max(3, repeats // 2)
                with Contention() as cont:
                    for _ in range(reps):
                        a = timed(lambda fa=fa, raw=raw: fa(*raw))
                        b = timed(lambda est=est, Q=Q, K=K, V=V: est(Q, K, V, rng=0))
                        t_peer.append(a)
                        t_ours.append(b)
                        ratios.append(b / a)
                floor = limits.floor(_performer_counts(n), dt)
                row.update(
                    {
                        "performer_s": statistics.median(t_peer),
                        "rfkit_s": statistics.median(t_ours),
                        "rfkit_over_performer": statistics.median(ratios),
                        "floor_s": floor,
                        "rfkit_peak_mib": peak_mib(lambda est=est, Q=Q, K=K, V=V: est(Q, K, V, rng=0)),
                        "repeats": reps,
                        "others_cpu_share": cont.share,
                    }
                )
                print(
                    f"[peers] performer n={n:6d} {name}: performer {row['performer_s'] * 1e3:8.1f} ms, rfkit "
                    f"{row['rfkit_s'] * 1e3:8.1f} ms, rfkit/performer {row['rfkit_over_performer']:.2f} "
                    f"(agree {err:.1e})",
                    flush=True,
                )
                rows.append(row)
    return {"info": info, "rows": rows}


def _performer_counts(n: int, m: int = M_FEAT, d: int = D_QK, dv: int = 64) -> Counts:
    # the same algorithm as RFA: 2 projections, k^T v, q (k^T v), normaliser; 2 n m exp
    return Counts(exp=2 * n * m).gemm(n, d, m, 2).gemm(m, n, dv + 1).gemm(n, m, dv + 1)


def sklearn_rbf(ns: list[int], repeats: int, limits: Limits) -> dict[str, Any]:
    try:
        import sklearn
        from sklearn.kernel_approximation import RBFSampler
    except Exception as err:
        return _skip("scikit-learn", err, "pip install scikit-learn")
    m, d = M_FEAT, D_QK
    out: dict[str, Any] = {"info": {"sklearn": sklearn.__version__}}
    # statistical agreement: both estimate exp(-||x - y||^2 / 2) on 512 x 512 pairs
    X, Y, _ = qkv(512, np.float64, seed=3)
    G = np.exp(-0.5 * np.sum((X[:, None, :] - Y[None, :, :]) ** 2, axis=-1))
    draw = rk.features.Trig(m).sample(d, rng=0)
    norms = 0.5 * (np.sum(X * X, -1)[:, None] + np.sum(Y * Y, -1)[None, :])
    ours = draw.kernel(X, Y) * np.exp(-norms)
    rbf = RBFSampler(gamma=0.5, n_components=2 * m, random_state=0).fit(X)
    theirs = rbf.transform(X) @ rbf.transform(Y).T
    rel = lambda est: float(np.sqrt(np.mean((est - G) ** 2)) / np.sqrt(np.mean(G**2)))  # noqa: E731
    out["agreement"] = {
        "rfkit_trig_rel_rmse": rel(ours),
        "sklearn_rbf_rel_rmse": rel(theirs),
        "pairs": 512 * 512,
    }
    print(
        f"[peers] RBFSampler vs Trig: relative RMSE of the Gaussian-kernel estimate, rfkit {rel(ours):.4f}, "
        f"sklearn {rel(theirs):.4f} (m={m}, 2m columns each)",
        flush=True,
    )
    rows = []
    for n in ns:
        for dt in (np.float64, np.float32):
            X, _, _ = qkv(n, dt)
            rbf = RBFSampler(gamma=0.5, n_components=2 * m, random_state=0).fit(X)
            draw = rk.features.Trig(m).sample(d, rng=0)
            rbf.transform(X)
            draw.queries(X)
            tp, to, ratios = [], [], []
            with Contention() as cont:
                for _ in range(repeats):
                    a = timed(lambda rbf=rbf, X=X: rbf.transform(X))
                    b = timed(lambda draw=draw, X=X: draw.queries(X))
                    tp.append(a)
                    to.append(b)
                    ratios.append(b / a)
            c_ours = Counts(sin=n * m, cos=n * m).gemm(n, d, m)
            c_peer = Counts(cos=2 * n * m).gemm(n, d, 2 * m)
            row = {
                "n": n,
                "dtype": np.dtype(dt).name,
                "sklearn_s": statistics.median(tp),
                "rfkit_s": statistics.median(to),
                "rfkit_over_sklearn": statistics.median(ratios),
                "sklearn_floor_s": limits.floor(c_peer, dt),
                "rfkit_floor_s": limits.floor(c_ours, dt),
                "sklearn_out_dtype": str(rbf.transform(X[:4]).dtype),
                "others_cpu_share": cont.share,
            }
            print(
                f"[peers] RBFSampler n={n:6d} {row['dtype']}: sklearn {row['sklearn_s'] * 1e3:7.1f} ms, rfkit Trig "
                f"{row['rfkit_s'] * 1e3:7.1f} ms, rfkit/sklearn {row['rfkit_over_sklearn']:.2f}",
                flush=True,
            )
            rows.append(row)
    out["rows"] = rows
    return out
