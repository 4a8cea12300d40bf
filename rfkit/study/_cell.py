"""Evaluation of one grid cell: data, every estimator, all trials (vectorised in chunks).

Runs inside workers: takes and returns plain, picklable data only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .. import data as rkdata
from ..exceptions import InvalidParameterError, StudyError
from ._design import Design
from ._estimators import build_feature_map

__all__ = ["run_cell", "cell_data", "DATA_NAMESPACE", "trial_streams"]

#: First spawn-key word of the data streams; trial streams use (cell, trial).
DATA_NAMESPACE = 2**32 - 1


def trial_streams(
    entropy: int, spawn_key: tuple[int, ...], cell: int, trials: range
) -> list[np.random.SeedSequence]:
    """``SeedSequence(entropy, spawn_key=spawn_key + (cell, t))`` for each trial ``t``."""
    return [np.random.SeedSequence(entropy, spawn_key=tuple(spawn_key) + (cell, t)) for t in trials]


def cell_data(
    design: Design, cell: dict[str, Any], entropy: int, spawn_key: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Paired queries and keys (n_pairs, d) of a cell, from the stream of its data setting."""
    p = design.data_params(cell)
    ss = np.random.SeedSequence(entropy, spawn_key=tuple(spawn_key) + (DATA_NAMESPACE, design.data_key(cell)))
    gen = np.random.default_rng(ss)
    src = p.pop("source")
    p.pop("dataset", None)  # only selects the data stream (via data_key)
    n = p.pop("n_pairs", 64)
    if src == "pairs":
        norm = p.pop("norm", None)
        nx = p.pop("norm_x", 1.0 if norm is None else norm)
        ny = p.pop("norm_y", 1.0 if norm is None else norm)
        return rkdata.pairs_with_norms(
            n, p.pop("dim"), norm_x=nx, norm_y=ny, cosine=p.pop("cosine", None), rng=gen
        )
    if src == "gaussian":
        sq, sk = p.pop("scale_q", 1.0), p.pop("scale_k", 1.0)
        s = rkdata.gaussian_qk(n, p.pop("dim"), rng=gen, **p)
        return sq * s.q, sk * s.k
    if src == "hard":
        s = rkdata.hard_qk(n, p.pop("dim"), rng=gen, **p)
        return s.q, s.k
    raise InvalidParameterError(f"unknown data source {src!r}")  # pragma: no cover - validated in Design


def _theory_mse(fm: Any, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Closed-form MSE per pair where rfkit.theory has one, else NaN."""
    try:
        from .. import theory
    except ImportError:  # pragma: no cover - theory module always ships
        return np.full(X.shape[0], np.nan)
    try:
        return np.asarray(theory.mse(fm, X, Y), dtype=float)
    except InvalidParameterError:
        return np.full(X.shape[0], np.nan)


def _evaluate(fm: Any, X: np.ndarray, Y: np.ndarray, log_truth: np.ndarray, streams: list[Any]) -> np.ndarray:
    draw = fm.sample_streams(X.shape[1], streams)
    sign, logabs = draw.slog_pairwise(X, Y)
    with np.errstate(over="ignore"):
        return sign * np.exp(logabs - log_truth)  # ratio estimate / truth, (trials, pairs)


def run_cell(
    design_dict: dict[str, Any],
    cell_index: int,
    entropy: int,
    spawn_key: tuple[int, ...],
    on_error: str = "raise",
) -> dict[str, Any]:
    """All trials of every estimator in one cell.

    Returns
    -------
    dict
        ``{"cell": c, "trials": DataFrame, "pairs": DataFrame}``; ``trials`` has one row per
        (estimator, trial) with per-trial metrics averaged over the cell's pairs, ``pairs``
        one row per (estimator, pair) with per-pair moments and the closed-form MSE.
    """
    design = Design(**design_dict)
    cell = design.cells()[cell_index]
    X, Y = cell_data(design, cell, entropy, spawn_key)
    log_truth = np.sum(X * Y, axis=1)
    with np.errstate(over="ignore"):
        truth = np.exp(log_truth)
    T, N = design.trials, X.shape[0]
    streams = trial_streams(entropy, spawn_key, cell_index, range(T))  # shared by all estimators (CRN)
    trial_frames, pair_frames = [], []
    for est in design.estimators:
        label = est.get("label", est["map"])
        fm = build_feature_map(est["map"], design.estimator_params(est, cell))
        if fm.needs_data:
            fm = fm.fit(X, Y)
        ratio = np.full((T, N), np.nan)
        status = np.array(["ok"] * T, dtype=object)
        for start in range(0, T, design.chunk_trials):
            chunk = range(start, min(T, start + design.chunk_trials))
            try:
                ratio[chunk.start : chunk.stop] = _evaluate(
                    fm, X, Y, log_truth, streams[chunk.start : chunk.stop]
                )
            except Exception:  # noqa: BLE001 - replay trial by trial to name the failing ones
                for t in chunk:
                    try:
                        ratio[t] = _evaluate(fm, X, Y, log_truth, streams[t : t + 1])[0]
                    except Exception as exc:  # noqa: BLE001
                        if on_error == "raise":
                            raise StudyError(
                                f"trial {t} of cell {cell_index} ({label!r}, {cell}) failed: "
                                f"{type(exc).__name__}: {exc}. Replay it with rfkit.study.run_trial("
                                f"design, cell={cell_index}, trial={t}, entropy={entropy}).",
                                cell=cell_index,
                                trial=t,
                                spawn_key=tuple(spawn_key) + (cell_index, t),
                            ) from exc
                        status[t] = f"error:{type(exc).__name__}"
        ok = status == "ok"
        rel = ratio - 1.0
        with np.errstate(over="ignore", invalid="ignore"):
            err = rel * truth
            est_vals = ratio * truth
        okr = rel[ok]
        mean_est = est_vals[ok].mean(axis=0) if ok.any() else np.full(N, np.nan)
        with np.errstate(over="ignore", invalid="ignore"):
            sq_dev = ((est_vals - mean_est) ** 2).mean(axis=1)
        tf = pd.DataFrame(
            {
                "cell": cell_index,
                "estimator": label,
                "trial": np.arange(T),
                "status": status.astype(str),
                "err": err.mean(axis=1),
                "sq_err": (err**2).mean(axis=1),
                "rel_err": rel.mean(axis=1),
                "rel_sq_err": (rel**2).mean(axis=1),
                "abs_rel_err": np.abs(rel).mean(axis=1),
                "max_rel_err": np.abs(rel).max(axis=1),
                "sq_dev": sq_dev,
            }
        )
        n_ok = int(ok.sum())
        with np.errstate(over="ignore", invalid="ignore"):
            e2 = err[ok] ** 2
            pf = pd.DataFrame(
                {
                    "cell": cell_index,
                    "estimator": label,
                    "pair": np.arange(N),
                    "log_truth": log_truth,
                    "truth": truth,
                    "mean_est": mean_est,
                    "est_trial0": est_vals[0],  # one draw's estimates (scatter plots), NaN if it failed
                    "var_est": est_vals[ok].var(axis=0, ddof=1) if n_ok > 1 else np.nan,
                    "bias": err[ok].mean(axis=0),
                    "bias_se": err[ok].std(axis=0, ddof=1) / np.sqrt(n_ok) if n_ok > 1 else np.nan,
                    "mse": e2.mean(axis=0),
                    "mse_se": e2.std(axis=0, ddof=1) / np.sqrt(n_ok) if n_ok > 1 else np.nan,
                    "rel_mse": (okr**2).mean(axis=0),
                    "theory_mse": _theory_mse(fm, X, Y),
                    "m": getattr(fm, "n_features", np.nan),
                    "feature_dim": fm.feature_dim(X.shape[1]),
                }
            )
        trial_frames.append(tf)
        pair_frames.append(pf)
    return {
        "cell": cell_index,
        "trials": pd.concat(trial_frames, ignore_index=True),
        "pairs": pd.concat(pair_frames, ignore_index=True),
    }
