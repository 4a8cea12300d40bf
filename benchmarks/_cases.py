"""rfkit operations benchmarked by ``run_all.py``, each with the counts its floor is built from.

Shapes: d = 64 (query/key dimension), dv = 64 (value dimension), m = 256 random features /
samples, n rows (queries = keys). Inputs are 0.5 * N(0, 1) / d**0.25 per coordinate (the
scaling of ``bench_attention.py``: logits of order 0.25, no overflow anywhere).

Counts (GEMM ``(a,k)@(k,b)``, elementwise operations) are the unavoidable arithmetic of the
algorithm, not of rfkit's implementation of it (extra passes such as max-shifts, the
log-space construction of generic features, checks and copies are what the ratio to the
floor exposes):

* exponential feature maps (Positive, OPRF, CEXP): ``(n,d)@(d,m)``, ``n m`` exp;
  hyperbolic ones (Hyperbolic, HCEXP): ``(n,d)@(d,m)``, ``2 n m`` exp (2m columns);
  Trig: ``(n,d)@(d,m)``, ``n m`` sin + ``n m`` cos; Taylor/Limit (degree 2, D = C(d+2, 2)
  columns, built in log space): ``2 x (n,d)@(d,D)`` (log-magnitudes and sign counts),
  ``n D`` exp;
* ``kernel`` (n x n): both feature sets plus ``(n,D)@(D,n)``;
  ``pairwise``: one projection of ``x + y`` (``x - y`` for Trig) and ``n m`` exp (cos);
* exact softmax: ``(n,d)@(d,n) + (n,n)@(n,dv)``, ``n^2`` exp;
* RFA, bidirectional, Positive(m): ``2 x (n,d)@(d,m) + (m,n)@(n,dv+1) + (n,m)@(m,dv+1)``
  (numerator and normaliser in one product), ``2 n m`` exp; causal RFA: the same floor (the
  ratio shows what causality costs);
* SNIS (S = m samples): the same as RFA with m = S; LARA (C proposals x k samples, S = Ck):
  SNIS plus ``(n,d)@(d,C)`` and ``2 n C`` exp for the query-specific weights;
* RA (S samples per query): ``(n,d)@(d,n) + S x [(n,d)@(d,n) + (n,n)@(n,dv)]``,
  ``(1 + S) n^2`` exp.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from math import comb
from typing import Any

import numpy as np
from _limits import Counts

import rfkit as rk
from rfkit import attention as att

D_QK, D_V, M_FEAT = 64, 64, 256


@dataclasses.dataclass
class Case:
    group: str
    name: str
    n: int
    dtype: str
    fn: Callable[[], Any]
    counts: Counts
    params: dict[str, Any] = dataclasses.field(default_factory=dict)


def qkv(n: int, dtype: Any, d: int = D_QK, dv: int = D_V, seed: int = 7) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    Q = (0.5 * rng.standard_normal((n, d)) / d**0.25).astype(dtype)
    K = (0.5 * rng.standard_normal((n, d)) / d**0.25).astype(dtype)
    V = rng.standard_normal((n, dv)).astype(dtype)
    return Q, K, V


def feature_maps(X: np.ndarray, m: int = M_FEAT) -> dict[str, rk.features.FeatureMap]:
    """Every family; data-dependent ones fitted on X (CEXP/HCEXP: diagonal "variance" A)."""
    return {
        "Positive": rk.features.Positive(m),
        "Trig": rk.features.Trig(m),
        "Hyperbolic": rk.features.Hyperbolic(m),
        "CEXP": rk.features.CEXP(m, A="variance").fit(X, X),
        "HCEXP": rk.features.HCEXP(m, A="variance").fit(X, X),
        "OPRF": rk.features.OPRF(m).fit(X, X),
        "Taylor": rk.features.Taylor(degree=2),
        "Limit": rk.features.Limit(n=2),
    }


def feature_counts(family: str, n: int, d: int = D_QK, m: int = M_FEAT) -> Counts:
    if family in ("Taylor", "Limit"):
        D = comb(d + 2, 2)
        return Counts(exp=n * D).gemm(n, d, D, 2)
    c = Counts().gemm(n, d, m)
    if family == "Trig":
        c.sin, c.cos = n * m, n * m
    elif family in ("Hyperbolic", "HCEXP"):
        c.exp = 2 * n * m
    else:
        c.exp = n * m
    if family in ("CEXP", "HCEXP"):
        c.multiply = n * d  # diagonal A
    return c


def feature_cases(ns: list[int], taylor_ns: list[int], f32_ns: list[int]) -> list[Case]:
    out = []
    for n in sorted(set(ns) | set(taylor_ns) | set(f32_ns)):
        for dt in (np.float64, np.float32):
            X, _, _ = qkv(n, dt)
            for fam, fm in feature_maps(X).items():
                if dt == np.float32 and (n not in f32_ns or fam not in ("Positive", "Trig")):
                    continue
                if dt == np.float64 and n not in (taylor_ns if fam in ("Taylor", "Limit") else ns):
                    continue
                draw = fm.sample(D_QK, rng=0)
                out.append(
                    Case(
                        "features",
                        f"{fam}.queries",
                        n,
                        np.dtype(dt).name,
                        lambda draw=draw, X=X: draw.queries(X),
                        feature_counts(fam, n),
                        {"map": repr(fm)[:80], "columns": fm.feature_dim(D_QK)},
                    )
                )
    return out


def kernel_cases(kernel_ns: list[int], pair_ns: list[int]) -> list[Case]:
    out = []
    m, d = M_FEAT, D_QK
    for n in sorted(set(kernel_ns) | set(pair_ns)):
        X, Y, _ = qkv(n, np.float64)
        for fam in ("Positive", "Trig", "Hyperbolic"):
            fm = feature_maps(X)[fam]
            draw = fm.sample(d, rng=0)
            Dcols = fm.feature_dim(d)
            if n in kernel_ns:
                c = Counts().gemm(n, d, m, 2).gemm(n, Dcols, n)
                if fam == "Trig":
                    c.sin = c.cos = 2 * n * m
                else:
                    c.exp = 2 * n * Dcols
                out.append(
                    Case(
                        "kernel",
                        f"{fam}.kernel",
                        n,
                        "float64",
                        lambda draw=draw, X=X, Y=Y: draw.kernel(X, Y),
                        c,
                    )
                )
            if n in pair_ns:
                c = Counts().gemm(n, d, m)
                if fam == "Trig":
                    c.cos = n * m
                else:
                    c.exp = n * Dcols
                out.append(
                    Case(
                        "kernel",
                        f"{fam}.pairwise",
                        n,
                        "float64",
                        lambda draw=draw, X=X, Y=Y: draw.pairwise(X, Y),
                        c,
                    )
                )
    return out


def rfa_counts(n: int, m: int = M_FEAT, d: int = D_QK, dv: int = D_V) -> Counts:
    return Counts(exp=2 * n * m).gemm(n, d, m, 2).gemm(m, n, dv + 1).gemm(n, m, dv + 1)


def attention_cases(
    exact_ns: list[int], linear_ns: list[int], ra_ns: list[int], f32_ns: list[int], lara_c: int = 64
) -> list[Case]:
    out = []
    m, d, dv = M_FEAT, D_QK, D_V
    S_ra = 1
    k_lara = m // lara_c
    for n in sorted(set(exact_ns) | set(linear_ns) | set(ra_ns) | set(f32_ns)):
        for dt in (np.float64, np.float32):
            if dt == np.float32 and n not in f32_ns:
                continue
            Q, K, V = qkv(n, dt)
            name = np.dtype(dt).name
            rfa = att.RFA(rk.features.Positive(m))
            if dt == np.float32:
                out.append(
                    Case(
                        "attention",
                        "RFA Positive",
                        n,
                        name,
                        lambda e=rfa, Q=Q, K=K, V=V: e(Q, K, V, rng=0),
                        rfa_counts(n),
                    )
                )
                continue
            if n in exact_ns:
                c = Counts(exp=n * n).gemm(n, d, n).gemm(n, n, dv)
                out.append(
                    Case("attention", "exact softmax", n, name, lambda Q=Q, K=K, V=V: att.softmax(Q, K, V), c)
                )
            if n in linear_ns:
                causal = att.RFA(rk.features.Positive(m), causal=True)
                snis = att.SNIS(n_samples=m)
                lara = att.LARA(n_proposals=lara_c, samples_per_proposal=k_lara)
                lc = rfa_counts(n).gemm(n, d, lara_c)
                lc.exp += 2 * n * lara_c
                out += [
                    Case(
                        "attention",
                        "RFA Positive",
                        n,
                        name,
                        lambda e=rfa, Q=Q, K=K, V=V: e(Q, K, V, rng=0),
                        rfa_counts(n),
                    ),
                    Case(
                        "attention",
                        "RFA Positive causal",
                        n,
                        name,
                        lambda e=causal, Q=Q, K=K, V=V: e(Q, K, V, rng=0),
                        rfa_counts(n),
                    ),
                    Case(
                        "attention",
                        f"SNIS S={m}",
                        n,
                        name,
                        lambda e=snis, Q=Q, K=K, V=V: e(Q, K, V, rng=0),
                        rfa_counts(n),
                    ),
                    Case(
                        "attention",
                        f"LARA C={lara_c} k={k_lara}",
                        n,
                        name,
                        lambda e=lara, Q=Q, K=K, V=V: e(Q, K, V, rng=0),
                        lc,
                    ),
                ]
            if n in ra_ns:
                ra = att.RA(n_samples=S_ra)
                c = Counts(exp=(1 + S_ra) * n * n).gemm(n, d, n, 1 + S_ra).gemm(n, n, dv, S_ra)
                out.append(
                    Case(
                        "attention", f"RA S={S_ra}", n, name, lambda e=ra, Q=Q, K=K, V=V: e(Q, K, V, rng=0), c
                    )
                )
    return out


def tuning_cases(n: int, chunks: list[int]) -> list[Case]:
    """Causal RFA with larger row blocks than the default 128 (a knob users already have)."""
    Q, K, V = qkv(n, np.float64)
    out = []
    for c in chunks:
        est = att.RFA(rk.features.Positive(M_FEAT), causal=True, chunk_size=c)
        out.append(
            Case(
                "tuning",
                f"RFA Positive causal chunk_size={c}",
                n,
                "float64",
                lambda e=est, Q=Q, K=K, V=V: e(Q, K, V, rng=0),
                rfa_counts(n),
                {"chunk_size": c},
            )
        )
    return out


def study_case(trials: int, quick: bool) -> Case:
    """The performer-mse study (serial executor) at ``trials`` trials per cell."""
    from pathlib import Path

    import rfkit.study as st

    path = Path(__file__).resolve().parents[1] / "studies" / "performer-mse.toml"
    design = st.load_design(path)
    if quick:
        design = design.quick_profile()
    design = design.with_trials(trials)
    c = Counts()
    n_pairs = int(design.to_dict()["data"]["n_pairs"])
    for cell in design.cells():
        dim, mm = int(cell["dim"]), int(cell["n_features"])
        for e in design.estimators:
            c.gemm(n_pairs, dim, trials * mm)
            c.normal += trials * mm * dim
            if e["map"] == "Trig":
                c.cos += n_pairs * trials * mm
            elif e["map"] == "Hyperbolic":
                c.exp += 2 * n_pairs * trials * mm
            else:
                c.exp += n_pairs * trials * mm
    return Case(
        "study",
        "performer-mse (serial)",
        len(design.cells()) * len(design.estimators) * trials,
        "float64",
        lambda: st.run(design, rng=1, executor="serial", progress=False),
        c,
        {"cells": len(design.cells()), "estimators": len(design.estimators), "trials": trials},
    )
