"""FAVOR+ in every layer of SmolLM2-135M: does the draw scheme or the average move the next-token KL?

Run: ``nice -n 10 .venv/bin/python benchmarks/favor_dropin_check.py [--draws 10] [--out FILE]``

The setting of the drop-in study's cell (64 tokens, D = 64, page *Drop-in*): SmolLM2-135M-Instruct
in float32, its two 64-token texts (:func:`rfkit.study._dropin_data.passage_texts`), every one of the
30 layers' softmax attention replaced by FAVOR+ (positive random features, m = 64 directions,
causal), the next-token KL(p_exact || p_approx) per position against the exact model on the same
tokens. rfkit's own forward pass runs every variant; only the attention hook changes:

* ``study``: the study's estimator (``RFA(Positive(64, projection="orthogonal"), causal=True,
  shared_across_heads=False)`` through :func:`rfkit.data.estimator_attention`): orthogonal
  directions, an independent draw per query head (so the three query heads that share a key/value
  head get three draws), a fresh draw in every layer, one draw for both texts (the texts are a
  batch axis), q and k each scaled by 64^(-1/4). With the study's own streams
  (``study-streams``), its first four draws are the study's four trials.
* one change at a time: ``iid`` directions; ``shared-heads`` (one draw for the 9 heads of a
  layer); ``kv-groups`` (one draw per key/value head, shared by its 3 query heads);
  ``same-every-layer`` (each head's draw reused in all 30 layers); ``per-text`` (each text its
  own draw); ``query-scale`` (the 1/sqrt(64) folded into q, k unscaled: ``scale="query"``);
  ``float64`` (the forward pass in float64);
* a common simple implementation: ``shared-heads+iid+same-every-layer``;
* an independent FAVOR+ in plain NumPy (:func:`favor_plus`, not rfkit code), with its own
  orthogonal draws in the ``study`` scheme (``independent``) and with the scale folded into q
  (``independent, query-scale``), to cross-check rfkit's estimator;

and, on the same draws, the KL averaged four ways: over all positions of both texts (the study's
``kl``), over positions 1-63 (position 0 sees one key, so every estimator is exact there), at the
last position only, and per text. Each number is the mean over draws ± its Monte Carlo standard
error (standard deviation over draws / sqrt(draws)). A second check gives the independent
implementation rfkit's own directions on one layer's exact q, k, v: the outputs must agree to
round-off.
"""

from __future__ import annotations

import argparse
import math
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import rfkit as rk
from rfkit.data import estimator_attention, layer_stream, next_token_kl
from rfkit.study._design import load_design
from rfkit.study._dropin_data import dropin_model, passage_texts
from rfkit.study._estimators import build_attention_estimator
from rfkit.study._eval_dropin import model_estimator_params

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "studies" / "drop-in.toml"
N_TOKENS, M = 64, 64
SEED = 20261128  # root of this script's draws (draw r: SeedSequence(SEED, spawn_key=(r,)))
AVERAGES = ("all positions", "positions 1-63", "last position", "text 0", "text 1")

Hook = Callable[..., Any]


# ----------------------------------------------------------------------------- an independent FAVOR+
def orthogonal_directions(m: int, d: int, gen: np.random.Generator) -> np.ndarray:
    """m directions (m, d): blocks of d orthonormal rows (Haar: QR with the sign fix), each row times a chi(d) norm."""
    blocks = []
    for _ in range(-(-m // d)):
        q, r = np.linalg.qr(gen.standard_normal((d, d)))
        blocks.append((q * np.sign(np.diag(r))).T)
    w = np.concatenate(blocks)[:m]
    return w * np.sqrt(gen.chisquare(d, size=m))[:, None]


def favor_plus(q: np.ndarray, k: np.ndarray, v: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Causal FAVOR+ in float64: phi(x) = exp(w x - |x|^2 / 2) / sqrt(m), prefix sums over keys.

    ``q``, ``k``, ``v`` (..., heads, T, d); ``w`` (heads, m, d) or (m, d). The running sums
    carry one shift per feature column, the running maximum over the keys seen so far, folded
    into the query features (exact: phi(q).phi(k) = sum_i phi_i(q) e^c_i phi_i(k) e^-c_i), and each
    query row is shifted by its own maximum (it cancels in the ratio).
    """
    q, k, v, w = (np.asarray(a, dtype=np.float64) for a in (q, k, v, w))
    m = w.shape[-2]
    wt = np.swapaxes(w, -1, -2)
    if w.ndim == 3:
        wt = wt[None]  # (1, heads, d, m) against (texts, heads, T, d)
    lq = q @ wt - 0.5 * np.sum(q * q, axis=-1, keepdims=True) - 0.5 * math.log(m)
    lk = k @ wt - 0.5 * np.sum(k * k, axis=-1, keepdims=True) - 0.5 * math.log(m)
    T = q.shape[-2]
    lead = lk.shape[:-2]
    s = np.zeros(lead + (m, v.shape[-1]))
    z = np.zeros(lead + (m,))
    c = np.full(lead + (m,), -np.inf)
    out = np.empty(q.shape[:-1] + (v.shape[-1],))
    for t in range(T):
        cn = np.maximum(c, lk[..., t, :])
        f = np.exp(c - cn)
        e = np.exp(lk[..., t, :] - cn)
        s = s * f[..., None] + e[..., None] * v[..., t, None, :]
        z = z * f + e
        c = cn
        a = lq[..., t, :] + cn
        u = np.exp(a - np.max(a, axis=-1, keepdims=True))
        out[..., t, :] = np.einsum("...i,...ij->...j", u, s) / np.einsum("...i,...i->...", u, z)[..., None]
    return out


class IndependentFavor:
    """The independent FAVOR+ as a forward-pass hook: a fresh orthogonal draw per head in every layer."""

    def __init__(self, root: np.random.SeedSequence) -> None:
        self.gen = np.random.default_rng(root)

    def __call__(self, q: Any, k: Any, v: Any, *, causal: bool, layer: int, key_padding_mask: Any) -> Any:
        assert causal and key_padding_mask is None
        w = np.stack([orthogonal_directions(M, q.shape[-1], self.gen) for _ in range(q.shape[-3])])
        return favor_plus(q, k, v, w).astype(q.dtype)


# ----------------------------------------------------------------------------- rfkit's FAVOR+, drawn several ways
def rfa(projection: str = "orthogonal", shared: bool = False) -> Any:
    return rk.attention.RFA(
        rk.features.Positive(M, projection=projection), causal=True, shared_across_heads=shared
    )


class SameEveryLayer:
    """Every layer draws from the root itself: the same directions (per head) in all layers."""

    def __init__(self, est: Any, root: np.random.SeedSequence) -> None:
        self.est, self.root = est, root

    def __call__(self, q: Any, k: Any, v: Any, *, causal: bool, layer: int, key_padding_mask: Any) -> Any:
        return self.est(q, k, v, rng=self.root).output


class PerText:
    """Each text its own draw: text ``b`` of layer ``l`` draws from ``spawn_key + (l, b)``."""

    def __init__(self, est: Any, root: np.random.SeedSequence) -> None:
        self.est, self.root = est, root

    def __call__(self, q: Any, k: Any, v: Any, *, causal: bool, layer: int, key_padding_mask: Any) -> Any:
        ls = layer_stream(self.root, layer)
        return np.stack(
            [
                self.est(
                    q[b], k[b], v[b], rng=np.random.SeedSequence(ls.entropy, spawn_key=ls.spawn_key + (b,))
                ).output
                for b in range(q.shape[0])
            ]
        )


class KVGroups:
    """One draw per key/value head, shared by its query heads (heads 3g, 3g+1, 3g+2 read kv head g)."""

    def __init__(self, root: np.random.SeedSequence, group: int = 3) -> None:
        self.est, self.root, self.group = rfa(shared=True), root, group

    def __call__(self, q: Any, k: Any, v: Any, *, causal: bool, layer: int, key_padding_mask: Any) -> Any:
        ls = layer_stream(self.root, layer)
        out = np.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
        for g in range(q.shape[-3] // self.group):
            h = slice(self.group * g, self.group * (g + 1))
            rng = np.random.SeedSequence(ls.entropy, spawn_key=ls.spawn_key + (g,))
            out[:, h] = self.est(q[:, h], k[:, h], v[:, h], rng=rng).output
        return out


def study_estimator() -> tuple[Any, Callable[[int], np.random.SeedSequence]]:
    """The study's FAVOR+ of the cell (64 tokens, D = 64) and its SmolLM2 root for trial t."""
    design = load_design(STUDY)
    cells = design.cells()
    c = next(i for i, cell in enumerate(cells) if cell == {"n_tokens": N_TOKENS, "feature_dim": M})
    spec = next(e for e in design.estimators if design.label(e) == "favor+")
    est = build_attention_estimator(model_estimator_params(design, spec, cells[c], "smollm2"))
    seed = int(design.seed)  # the run's entropy; spawn key () ; SmolLM2 is model 0
    return est, lambda t: np.random.SeedSequence(seed, spawn_key=(c, t, 0))


def ours(r: int) -> np.random.SeedSequence:
    return np.random.SeedSequence(SEED, spawn_key=(r,))


def variants() -> list[tuple[str, str, str, Callable[[int], Hook]]]:
    """(name, dtype, scale, draw r -> hook)."""
    study_est, study_root = study_estimator()
    return [
        ("study", "float32", "symmetric", lambda r: estimator_attention(rfa(), rng=ours(r))),
        (
            "study-streams",
            "float32",
            "symmetric",
            lambda r: estimator_attention(study_est, rng=study_root(r)),
        ),
        ("iid", "float32", "symmetric", lambda r: estimator_attention(rfa("iid"), rng=ours(r))),
        (
            "shared-heads",
            "float32",
            "symmetric",
            lambda r: estimator_attention(rfa(shared=True), rng=ours(r)),
        ),
        ("kv-groups", "float32", "symmetric", lambda r: KVGroups(ours(r))),
        ("same-every-layer", "float32", "symmetric", lambda r: SameEveryLayer(rfa(), ours(r))),
        ("per-text", "float32", "symmetric", lambda r: PerText(rfa(), ours(r))),
        ("query-scale", "float32", "query", lambda r: estimator_attention(rfa(), rng=ours(r))),
        ("float64", "float64", "symmetric", lambda r: estimator_attention(rfa(), rng=ours(r))),
        (
            "shared-heads+iid+same-every-layer",
            "float32",
            "symmetric",
            lambda r: SameEveryLayer(rfa("iid", shared=True), ours(r)),
        ),
        ("independent", "float32", "symmetric", lambda r: IndependentFavor(ours(r))),
        ("independent, query-scale", "float32", "query", lambda r: IndependentFavor(ours(r))),
    ]


# ----------------------------------------------------------------------------- measurement
def averages(kl: np.ndarray) -> dict[str, float]:
    """The KL (texts, tokens) of one draw averaged the ways of :data:`AVERAGES`."""
    return {
        "all positions": float(np.mean(kl)),
        "positions 1-63": float(np.mean(kl[:, 1:])),
        "last position": float(np.mean(kl[:, -1])),
        "text 0": float(np.mean(kl[0])),
        "text 1": float(np.mean(kl[1])),
    }


def mean_mcse(x: list[float]) -> tuple[float, float]:
    a = np.asarray(x)
    return float(np.mean(a)), float(np.std(a, ddof=1) / math.sqrt(len(a)))


def same_directions_check() -> float:
    """Max |rfkit - independent| / max |output| on layer 0's exact q, k, v with rfkit's draw (one per head)."""
    model = dropin_model("smollm2", "float64", "symmetric")
    ids, mask = passage_texts("smollm2", N_TOKENS, 2)
    got: dict[str, np.ndarray] = {}

    def capture(q: Any, k: Any, v: Any, *, causal: bool, layer: int, key_padding_mask: Any) -> Any:
        got.update(q=q, k=k, v=v)
        return rk.data.exact_attention(q, k, v, causal=causal)

    model.run(ids, mask, attention=capture, layers=[0], stop=1)
    res = rfa()(got["q"], got["k"], got["v"], rng=ours(0))
    draws = res.draw if isinstance(res.draw, (list, tuple)) else [res.draw]
    w = np.stack([np.asarray(dr.exp_form().W) for dr in draws])
    if w.shape[0] == 1:
        w = w[0]
    ref = favor_plus(got["q"], got["k"], got["v"], w)
    return float(np.max(np.abs(np.asarray(res.output) - ref)) / np.max(np.abs(ref)))


def run(n_draws: int, only: list[str] | None) -> tuple[list[str], list[str]]:
    """The table (one row per variant) and notes; the last column is the z of the difference of the
    all-positions mean from the ``study`` variant's (independent draws: MCSEs added in quadrature)."""
    lines: list[str] = []
    notes: list[str] = []
    ids, mask = passage_texts("smollm2", N_TOKENS, 2)
    refs: dict[str, np.ndarray] = {}
    head = "| variant | " + " | ".join(f"KL, {a}" for a in AVERAGES) + " | z vs study | s/draw |"
    lines += [head, "|" + "---|" * (len(AVERAGES) + 3)]
    print(head, flush=True)
    base: tuple[float, float] | None = None
    for name, dtype, scale, make in variants():
        if only and name not in only:
            continue
        model = dropin_model("smollm2", dtype, scale)
        if dtype not in refs:
            refs[dtype] = np.asarray(model.logits(model.run(ids, mask).hidden), dtype=np.float64)
        vals: dict[str, list[float]] = {a: [] for a in AVERAGES}
        t0 = time.perf_counter()
        for r in range(n_draws):
            z = np.asarray(model.logits(model.run(ids, mask, attention=make(r)).hidden), dtype=np.float64)
            for a, x in averages(next_token_kl(refs[dtype], z)).items():
                vals[a].append(x)
        per = (time.perf_counter() - t0) / n_draws
        cells = []
        for a in AVERAGES:
            mu, se = mean_mcse(vals[a])
            cells.append(f"{mu:.3f} ± {se:.3f}")
        mu, se = mean_mcse(vals["all positions"])
        if name == "study":
            base = (mu, se)
        zs = "" if base is None or name == "study" else f"{(mu - base[0]) / math.hypot(se, base[1]):+.1f}"
        if name == "study-streams" and n_draws >= 4:
            m4, s4 = mean_mcse(vals["all positions"][:4])
            each = ", ".join(f"{x:.3f}" for x in vals["all positions"][:4])
            notes.append(f"study-streams, draws 0-3 (the study's four trials): {m4:.3f} ± {s4:.3f} ({each}).")
            print("   " + notes[-1], flush=True)
        row = f"| {name} | " + " | ".join(cells) + f" | {zs} | {per:.1f} |"
        lines.append(row)
        print(row, flush=True)
    return lines, notes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--draws", type=int, default=10, help="draws per variant (default 10)")
    p.add_argument("--only", nargs="*", help="variants to run (default: all)")
    p.add_argument("--out", type=Path, help="also write the Markdown table here")
    a = p.parse_args(argv)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    rel = same_directions_check()
    print(
        f"same directions, layer 0 (float64): max |rfkit - independent| / max |out| = {rel:.2e}", flush=True
    )
    t0 = time.perf_counter()
    lines, notes = run(a.draws, a.only)
    info = (
        f"{a.draws} draws per variant; commit {commit}; numpy {np.__version__}; python "
        f"{platform.python_version()}; {time.perf_counter() - t0:.0f} s"
    )
    print(info)
    if a.out is not None:
        text = [
            "# FAVOR+ in SmolLM2-135M: next-token KL by draw scheme and average",
            "",
            f"`benchmarks/favor_dropin_check.py --draws {a.draws}`: {info}.",
            f"Same directions, layer 0 (float64): max |rfkit - independent| / max |output| = {rel:.2e}.",
            "",
            *lines,
            "",
            *notes,
            "",
        ]
        a.out.write_text("\n".join(text), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
