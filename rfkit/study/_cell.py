"""Evaluation of work units: (cell, chunk of trials), every estimator, vectorised over the chunk.

A cell's trials are cut into chunks of ``design.chunk_trials``; each (cell, chunk) is one work
unit (:func:`run_unit`), so a study has ``cells x chunks`` units to spread over workers. A unit
covering a whole cell returns the cell's tables; otherwise it returns per-trial arrays, which
:func:`finalize_cell` concatenates in chunk order and reduces exactly as a single unit would.
Trial ``t`` of cell ``c`` always uses ``SeedSequence(entropy, spawn_key=spawn_key + (c, t))``.

Runs inside workers: takes and returns plain, picklable data only.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd

from .. import data as rkdata
from .._backend import backend_for, get_backend, to_numpy
from ..exceptions import InvalidParameterError, NumericalOverflowError, RFKitError, StudyError
from ._design import Design
from ._estimators import build_feature_map

__all__ = [
    "run_cell",
    "run_unit",
    "finalize_cell",
    "n_chunks",
    "chunk_range",
    "cell_data",
    "DATA_NAMESPACE",
    "trial_streams",
]

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
    if src == "benchmark":
        return rkdata.kernel_benchmark_pairs(p.pop("set"), n, p.pop("dim", 32), rng=gen)
    if src == "minilm":
        # layers/heads as data axes select one model head per cell; `gen` is unused (no randomness)
        layer = int(p.pop("layer", (p.pop("layers", [0]) or [0])[0]))
        head = int(p.pop("head", (p.pop("heads", [0]) or [0])[0]))
        n_texts = p.pop("n_texts", None)
        texts = None if n_texts is None else list(rkdata.PASSAGES[: int(n_texts)])
        load = rkdata.smollm2_qk if p.pop("causal", False) else rkdata.minilm_qk  # decoder or encoder
        res = load(
            texts,
            layers=[layer],
            heads=[head],
            max_len=p.pop("max_len", 64),
            scale=p.pop("scale", "symmetric"),
        )
        return res.q[:, 0, 0], res.k[:, 0, 0], res.v[:, 0, 0]  # type: ignore[return-value]
    if src == "sequence":
        return rkdata.sequence_qkv(p.pop("n_tokens", 256), p.pop("dim"), rng=gen, **p)  # type: ignore[return-value]
    raise InvalidParameterError(f"unknown data source {src!r}")  # pragma: no cover - validated in Design


def cell_is_causal(design: Design, cell: dict[str, Any]) -> bool:
    """True for a cell of real decoder data (``causal`` in ``[data]`` or as a grid axis): causal attention."""
    return design.data["source"] == "minilm" and bool(design.data_params(cell).get("causal", False))


def study_backend(design: Design) -> Any:
    """The array backend a design's estimates run on (NumPy unless ``backend``/``device`` say otherwise).

    Raises
    ------
    BackendNotInstalledError
        If the design's library (PyTorch, CuPy) is not installed.
    """
    return backend_for(design.backend, design.device)


def _theory_mse(fm: Any, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Closed-form MSE per pair: the map's own ``mse(x, y)`` if it has one, else rfkit.theory's, else NaN."""
    own = getattr(fm, "mse", None)  # a map of your own may bring its closed form (checked at load)
    if callable(own):
        return np.broadcast_to(np.asarray(own(X, Y), dtype=float), X.shape[:1]).copy()
    try:
        from .. import theory
    except ImportError:  # pragma: no cover - theory module always ships
        return np.full(X.shape[0], np.nan)
    try:
        return np.asarray(theory.mse(fm, X, Y), dtype=float)
    except InvalidParameterError:  # no closed form in rfkit.theory for this map / projection
        return np.full(X.shape[0], np.nan)
    except NumericalOverflowError:  # the MSE itself exceeds float64: keep it infinite, never silently NaN
        return np.exp(np.asarray(theory.log_mse(fm, X, Y), dtype=float))


def _frame(parts: list[dict[str, Any]]) -> pd.DataFrame:
    """One DataFrame from per-estimator column dicts (scalars broadcast to each part's length)."""
    cols = list(parts[0])
    lengths = [max(np.size(v) for v in p.values()) for p in parts]
    data = {
        c: np.concatenate([np.broadcast_to(np.asarray(p[c]), (n,)) for p, n in zip(parts, lengths)])
        for c in cols
    }
    return pd.DataFrame(data)


def _evaluate(
    fm: Any,
    X: np.ndarray,
    Y: np.ndarray,
    log_truth: np.ndarray,
    streams: list[Any],
    cache: dict[tuple[Any, ...], np.ndarray] | None = None,
) -> np.ndarray:
    """Ratios estimate/truth, (trials, pairs), for the given trial streams.

    With ``cache``, directions are shared between estimators that draw the same ones: with
    common random numbers, maps that declare ``shares_projection`` and have equal
    (projection, n_features, dim) get identical directions from identical streams, so they are
    drawn once per chunk. Other maps (yours, unless they declare it) draw through
    ``sample_streams``.
    """
    d = X.shape[1]
    if cache is not None and fm.is_random and fm.shares_projection:
        key = (fm.projection, fm.n_features, d)  # the cache lives for one chunk of streams
        W = cache.get(key)
        if W is None:
            W = cache[key] = fm.projection_streams(d, streams)
        draw = fm.from_projection(d, len(streams), W)
    else:
        draw = fm.sample_streams(d, streams)
    sign, logabs = draw.slog_pairwise(X, Y)  # on the data's backend and device
    sign, logabs = to_numpy(sign), to_numpy(logabs)
    if np.shape(sign) != (len(streams), X.shape[0]) or np.shape(logabs) != np.shape(sign):
        raise InvalidParameterError(
            f"{type(fm).__qualname__} does not follow the rfkit feature-map protocol: slog_pairwise of "
            f"{len(streams)} draws on {X.shape[0]} pairs must give arrays of shape ({len(streams)}, "
            f"{X.shape[0]}). Got shapes {np.shape(sign)} and {np.shape(logabs)} instead."
        )
    with np.errstate(over="ignore"):
        return sign * np.exp(logabs - log_truth)  # ratio estimate / truth, (trials, pairs)


# ----------------------------------------------------------------------------- work units
def n_chunks(design: Design) -> int:
    """Work units per cell: chunks of ``design.chunk_trials`` trials (the last one may be shorter)."""
    return -(-design.trials // design.chunk_trials)


def chunk_range(design: Design, chunk: int) -> range:
    """Trial indices of chunk ``chunk`` of a cell."""
    start = chunk * design.chunk_trials
    return range(start, min(design.trials, start + design.chunk_trials))


def run_unit(
    design_dict: dict[str, Any],
    cell_index: int,
    chunk: int,
    entropy: int,
    spawn_key: tuple[int, ...],
    on_error: str = "raise",
) -> dict[str, Any]:
    """One work unit: the trials of chunk ``chunk`` of cell ``cell_index``, every estimator.

    Trial ``t`` uses the stream ``SeedSequence(entropy, spawn_key=spawn_key + (cell, t))``
    whatever unit computes it, so the tables do not depend on how units are distributed.

    Returns
    -------
    dict
        ``{"cell", "chunk", "final", "tables", "pid"}``. When the chunk is the whole cell (``final``),
        ``tables`` are the cell's tables (``trials``, ``pairs``, maybe ``timings`` and
        ``data_stats``); otherwise the chunk's per-trial results (arrays and frames) that
        :func:`finalize_cell` merges, in chunk order, once every chunk of the cell is done.
    """
    design = Design.trusted(design_dict)  # validated once by run(); workers skip the checks
    single = n_chunks(design) == 1
    part: dict[str, Any]
    tables: dict[str, Any]
    if design.kind == "attention":
        part = _attention_partial(design, cell_index, chunk, entropy, spawn_key, on_error)
        tables = _attention_finalize(design, cell_index, [part]) if single else part
    elif design.kind == "concentration":
        part = _concentration_partial(design, cell_index, chunk, entropy, spawn_key, on_error)
        tables = _concentration_finalize(design, [part]) if single else part
    else:
        setup = _kernel_setup(design, cell_index, entropy, spawn_key)
        part = _kernel_partial(design, setup, cell_index, chunk, entropy, spawn_key, on_error)
        tables = _kernel_finalize(design, setup, cell_index, [part]) if single else part
    return {"cell": cell_index, "chunk": chunk, "final": single, "tables": tables, "pid": os.getpid()}


def finalize_cell(
    design_dict: dict[str, Any],
    cell_index: int,
    parts: list[dict[str, Any]],
    entropy: int,
    spawn_key: tuple[int, ...],
) -> dict[str, pd.DataFrame]:
    """The tables of a cell from the partial results of all its chunks, in chunk order.

    The per-trial arrays are concatenated in chunk order and reduced exactly as one unit
    covering the whole cell would, so the tables do not depend on executor or worker count.
    """
    design = Design.trusted(design_dict)
    if design.kind == "attention":
        return _attention_finalize(design, cell_index, parts)
    if design.kind == "concentration":
        return _concentration_finalize(design, parts)
    setup = _kernel_setup(design, cell_index, entropy, spawn_key)
    return _kernel_finalize(design, setup, cell_index, parts)


def run_cell(
    design_dict: dict[str, Any],
    cell_index: int,
    entropy: int,
    spawn_key: tuple[int, ...],
    on_error: str = "raise",
) -> dict[str, Any]:
    """All trials of every estimator in one cell (its work units one after another, merged).

    Returns ``{"cell": c, "trials": DataFrame, "pairs": DataFrame, ...}`` as :func:`finalize_cell`.
    """
    units = [
        run_unit(design_dict, cell_index, k, entropy, spawn_key, on_error)
        for k in range(n_chunks(Design.trusted(design_dict)))
    ]
    if units[0]["final"]:
        return {"cell": cell_index, **units[0]["tables"]}
    tables = finalize_cell(design_dict, cell_index, [u["tables"] for u in units], entropy, spawn_key)
    return {"cell": cell_index, **tables}


def _concat(parts: list[dict[str, Any]], name: str) -> np.ndarray:
    """Per-trial arrays (estimator, trial, ...) of all chunks, in chunk order."""
    if len(parts) == 1:
        return np.asarray(parts[0][name])
    return np.concatenate([np.asarray(p[name]) for p in parts], axis=1)


# ----------------------------------------------------------------------------- kernel designs
def _kernel_setup(
    design: Design, cell_index: int, entropy: int, spawn_key: tuple[int, ...]
) -> dict[str, Any]:
    cell = design.cells()[cell_index]
    X, Y = cell_data(design, cell, entropy, spawn_key)
    fms, fit_errors = [], []
    for est in design.estimators:
        fm = build_feature_map(est["map"], design.estimator_params(est, cell))
        err = None
        if fm.needs_data:
            try:
                fm = fm.fit(X, Y)  # parameters from the cell's own pairs
            except RFKitError as exc:  # e.g. a singular second-moment matrix: no fit on this data
                err = exc
        fms.append(fm)
        fit_errors.append(err)
    labels = [design._label(est) for est in design.estimators]
    bk = study_backend(design)
    return {
        "cell": cell,
        "X": X,
        "Y": Y,
        "Xb": bk.asarray(X),  # the estimates run on the design's backend and device
        "Yb": bk.asarray(Y),
        "log_truth": np.sum(X * Y, axis=1),
        "fms": fms,
        "fit_errors": fit_errors,
        "labels": labels,
    }


def _kernel_partial(
    design: Design,
    setup: dict[str, Any],
    cell_index: int,
    chunk: int,
    entropy: int,
    spawn_key: tuple[int, ...],
    on_error: str,
) -> dict[str, Any]:
    """Ratios estimate/truth ``(estimator, trial, pair)`` and statuses ``(estimator, trial)`` of a chunk."""
    X, Y, log_truth = setup["Xb"], setup["Yb"], setup["log_truth"]
    trials = chunk_range(design, chunk)
    streams = trial_streams(entropy, spawn_key, cell_index, trials)  # shared by all estimators (CRN)
    fms = setup["fms"]
    ratio = np.full((len(fms), len(trials), X.shape[0]), np.nan)
    status = np.full((len(fms), len(trials)), "ok", dtype=object)
    cache: dict[tuple[Any, ...], np.ndarray] = {}  # directions shared within this chunk
    for i, (label, fm) in enumerate(zip(setup["labels"], fms)):
        fit_error = setup["fit_errors"][i]
        if fit_error is not None:  # the map could not be fitted to this cell's data: no trial can run
            if on_error == "raise":
                raise StudyError(
                    f"fitting {label!r} to the data of cell {cell_index} ({setup['cell']}) failed: "
                    f"{type(fit_error).__name__}: {fit_error} (with on_error='record' its trials are recorded "
                    "as failed instead)",
                    cell=cell_index,
                ) from fit_error
            status[i] = f"error:{type(fit_error).__name__}"
            continue
        try:
            ratio[i] = _evaluate(fm, X, Y, log_truth, streams, cache=cache)
        except Exception:  # noqa: BLE001 - replay trial by trial to name the failing ones
            for j, t in enumerate(trials):
                try:
                    ratio[i, j] = _evaluate(fm, X, Y, log_truth, streams[j : j + 1])[0]
                except Exception as exc:  # noqa: BLE001
                    if on_error == "raise":
                        raise _failure(exc, label, setup["cell"], cell_index, t, entropy, spawn_key) from exc
                    status[i, j] = f"error:{type(exc).__name__}"
    return {"ratio": ratio, "status": status.astype(str)}


def _kernel_finalize(
    design: Design, setup: dict[str, Any], cell_index: int, parts: list[dict[str, Any]]
) -> dict[str, pd.DataFrame]:
    """Trial and pair tables of a kernel cell.

    ``trials`` has one row per (estimator, trial) with per-trial metrics averaged over the
    cell's pairs, ``pairs`` one row per (estimator, pair) with per-pair moments and the
    closed-form MSE.
    """
    X, Y, log_truth = setup["X"], setup["Y"], setup["log_truth"]
    with np.errstate(over="ignore"):
        truth = np.exp(log_truth)
    T, N = design.trials, X.shape[0]
    ratios, statuses = _concat(parts, "ratio"), _concat(parts, "status")
    trial_frames, pair_frames = [], []
    for label, fm, ratio, status in zip(setup["labels"], setup["fms"], ratios, statuses):
        ok = status == "ok"
        rel = ratio - 1.0
        with np.errstate(over="ignore", invalid="ignore"):
            err = rel * truth
            est_vals = ratio * truth
        okr = rel[ok]
        mean_est = est_vals[ok].mean(axis=0) if ok.any() else np.full(N, np.nan)
        with np.errstate(over="ignore", invalid="ignore"):
            sq_dev = ((est_vals - mean_est) ** 2).mean(axis=1)
        tf = dict(
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
                "med_rel_sq_err": np.median(rel**2, axis=1),
                "sq_dev": sq_dev,
            }
        )
        n_ok = int(ok.sum())
        nan = np.full(N, np.nan)  # per-pair moments of an estimator none of whose trials succeeded
        with np.errstate(over="ignore", invalid="ignore"):
            e2 = err[ok] ** 2
            pf = dict(
                {
                    "cell": cell_index,
                    "estimator": label,
                    "pair": np.arange(N),
                    "log_truth": log_truth,
                    "truth": truth,
                    "mean_est": mean_est,
                    "est_trial0": est_vals[0],  # one draw's estimates (scatter plots), NaN if it failed
                    "var_est": est_vals[ok].var(axis=0, ddof=1) if n_ok > 1 else np.nan,
                    "bias": err[ok].mean(axis=0) if n_ok else nan,
                    "bias_se": err[ok].std(axis=0, ddof=1) / np.sqrt(n_ok) if n_ok > 1 else np.nan,
                    "mse": e2.mean(axis=0) if n_ok else nan,
                    "mse_se": e2.std(axis=0, ddof=1) / np.sqrt(n_ok) if n_ok > 1 else np.nan,
                    "rel_mse": (okr**2).mean(axis=0) if n_ok else nan,
                    "theory_mse": _theory_mse(fm, X, Y) if not fm.needs_data else np.nan,
                    "m": getattr(fm, "n_features", np.nan),
                    "feature_dim": fm.feature_dim(X.shape[1]),
                }
            )
        trial_frames.append(tf)
        pair_frames.append(pf)
    return {"trials": _frame(trial_frames), "pairs": _frame(pair_frames)}


def _failure(
    exc: Exception,
    label: str,
    cell: dict[str, Any],
    cell_index: int,
    t: int,
    entropy: int,
    spawn_key: tuple[int, ...],
) -> StudyError:
    return StudyError(
        f"trial {t} of cell {cell_index} ({label!r}, {cell}) failed: {type(exc).__name__}: {exc}. "
        f"Replay it with rfkit.study.run_trial(design, cell={cell_index}, trial={t}, entropy={entropy}).",
        cell=cell_index,
        trial=t,
        spawn_key=tuple(spawn_key) + (cell_index, t),
    )


# ----------------------------------------------------------------------------- attention designs
def _attention_partial(
    design: Design,
    cell_index: int,
    chunk: int,
    entropy: int,
    spawn_key: tuple[int, ...],
    on_error: str,
) -> dict[str, Any]:
    """Outputs ``(estimator, trial, query, value dim)`` of a chunk, with statuses, counts and times.

    Chunk 0 also carries the cell's exact output and, for real data, its data statistics.
    """
    import time
    import warnings

    from .. import attention
    from ..exceptions import NonPositiveNormalizerWarning
    from ._estimators import build_attention_estimator, check_attention_output

    cell = design.cells()[cell_index]
    Q, K, V = cell_data(design, cell, entropy, spawn_key)  # type: ignore[misc]
    causal = cell_is_causal(design, cell)
    exact = attention.softmax(Q, K, V, causal=causal)  # the reference, in NumPy float64
    bk = study_backend(design)
    Qb, Kb, Vb = bk.asarray(Q), bk.asarray(K), bk.asarray(V)  # the estimates run on the design's backend
    dv = exact.shape[-1]
    n = int(np.prod(exact.shape[:-1]))  # all query rows (texts x tokens for real data)
    trials = chunk_range(design, chunk)
    streams = trial_streams(entropy, spawn_key, cell_index, trials)
    E, Tk = len(design.estimators), len(trials)
    outs = np.full((E, Tk, n, dv), np.nan)
    status = np.full((E, Tk), "ok", dtype=object)
    nonpos = np.zeros((E, Tk))
    seconds = np.full((E, Tk), np.nan)
    for i, est in enumerate(design.estimators):
        label = design._label(est)
        params = dict(design.estimator_params(est, cell))
        if causal:  # real decoder data: every estimator attends causally
            params.setdefault("causal", True)
        estimator = _fit_once(build_attention_estimator(params), Qb, Kb)
        for j, t in enumerate(trials):
            try:
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", NonPositiveNormalizerWarning)  # counted below instead
                    res = estimator(Qb, Kb, Vb, rng=streams[j])
                    # on the host (synchronises an accelerator: part of the time), shape checked
                    output = check_attention_output(res, exact.shape, estimator)
                seconds[i, j] = time.perf_counter() - t0
                outs[i, j] = output.reshape(n, dv)
                nonpos[i, j] = res.n_nonpositive
            except Exception as exc:  # noqa: BLE001
                if on_error == "raise":
                    raise _failure(exc, label, cell, cell_index, t, entropy, spawn_key) from exc
                status[i, j] = f"error:{type(exc).__name__}"
    part: dict[str, Any] = {
        "outs": outs,
        "status": status.astype(str),
        "nonpos": nonpos,
        "seconds": seconds,
    }
    if chunk == 0:
        part["exact"] = exact.reshape(n, dv)
        if design.data["source"] == "minilm":
            from ..data import describe

            st = (
                describe(Q, K, causal=causal).select_dtypes("number").drop(columns=["axis0"], errors="ignore")
            )
            st = st.mean().to_frame().T  # averaged over texts
            part["data_stats"] = st.assign(cell=cell_index)
    return part


def _fit_once(estimator: Any, Q: Any, K: Any) -> Any:
    """RFA whose map needs data, with the map fitted once on the cell's (Q, K) instead of per trial.

    The fit is deterministic and RFA with shared draws fits on exactly these pooled rows, so every
    trial's output is unchanged; numerical fits (the hyperbolic OPRF's optimum) then run once per
    chunk rather than once per trial. A fit that fails is left to fail (and be recorded) per trial.
    """
    import dataclasses

    from .. import attention

    if not (
        isinstance(estimator, attention.RFA)
        and estimator.shared_across_heads
        and estimator.feature_map.needs_data
    ):
        return estimator
    d = Q.shape[-1]
    xp = get_backend(("Q", Q)).xp
    try:
        fitted = estimator.feature_map.fit(xp.reshape(Q, (-1, d)), xp.reshape(K, (-1, d)))
    except RFKitError:
        return estimator
    return dataclasses.replace(estimator, feature_map=fitted)


def _attention_finalize(
    design: Design, cell_index: int, parts: list[dict[str, Any]]
) -> dict[str, pd.DataFrame]:
    """Attention designs: every estimator's output against exact softmax attention.

    Per trial: the mean signed and squared error over all (query, value-dimension) entries,
    the mean and maximum absolute error, and the number of rows with a non-positive
    normaliser (NaN output, never clipped). Per query: bias, variance and MSE over trials.
    The median wall time per call is kept apart (``timings``): it is not reproducible.
    """
    exact2 = np.asarray(parts[0]["exact"])
    n, dv = exact2.shape
    T = design.trials
    all_outs, all_status = _concat(parts, "outs"), _concat(parts, "status")
    all_nonpos, all_seconds = _concat(parts, "nonpos"), _concat(parts, "seconds")
    trial_frames, query_frames, timing_rows = [], [], []
    for i, est in enumerate(design.estimators):
        label = design._label(est)
        outs, status = all_outs[i], all_status[i]
        ok = status == "ok"
        err = outs - exact2
        with np.errstate(invalid="ignore"):
            mean_out = np.nanmean(outs[ok], axis=0) if ok.any() else np.full((n, dv), np.nan)
            sq_dev = np.nanmean((outs - mean_out) ** 2, axis=(1, 2))
            trial_frames.append(
                pd.DataFrame(
                    {
                        "cell": cell_index,
                        "estimator": label,
                        "trial": np.arange(T),
                        "status": status.astype(str),
                        "err": np.nanmean(err, axis=(1, 2)),
                        "sq_err": np.nanmean(err**2, axis=(1, 2)),
                        "abs_err": np.nanmean(np.abs(err), axis=(1, 2)),
                        "max_abs_err": np.nanmax(np.abs(err), axis=(1, 2)),
                        "sq_dev": sq_dev,
                        "nonpositive_rows": all_nonpos[i],
                    }
                )
            )
            n_ok = int(ok.sum())
            e = err[ok]
            query_frames.append(
                pd.DataFrame(
                    {
                        "cell": cell_index,
                        "estimator": label,
                        "pair": np.arange(n),  # query index
                        "bias2": np.mean((mean_out - exact2) ** 2, axis=-1),
                        "variance": np.mean(np.nanvar(outs[ok], axis=0, ddof=1), axis=-1)
                        if n_ok > 1
                        else np.nan,
                        "mse": np.nanmean(e**2, axis=(0, 2)) if n_ok else np.nan,
                        "theory_mse": np.nan,
                        "truth": np.nan,
                    }
                )
            )
        times = all_seconds[i][np.isfinite(all_seconds[i])]
        timing_rows.append(
            {
                "cell": cell_index,
                "estimator": label,
                "seconds_median": float(np.median(times)) if times.size else np.nan,
                "calls": int(times.size),
            }
        )
    out = {
        "trials": pd.concat(trial_frames, ignore_index=True),
        "pairs": pd.concat(query_frames, ignore_index=True),
        "timings": pd.DataFrame(timing_rows),
    }
    if "data_stats" in parts[0]:
        out["data_stats"] = parts[0]["data_stats"]
    return out


# ----------------------------------------------------------------------------- concentration designs
def _concentration_partial(
    design: Design,
    cell_index: int,
    chunk: int,
    entropy: int,
    spawn_key: tuple[int, ...],
    on_error: str,
) -> dict[str, Any]:
    r"""Seed 004 Theorem 3.3 in simulation: does the chi-squared bound hold with probability p?

    Each trial draws a fresh data set (``n_pairs = s`` queries and ``s`` keys from the design's
    Gaussians) from its own stream, computes the exact max over all (i, j) of the relative RMS
    error :math:`\sqrt{\mathrm{MSE}}/\mathrm{SM}` (rk.theory, closed form) and compares it with
    the bound :math:`W(r)/\sqrt{2m}` (rk.theory.bounds.chi2_concentration); it also draws one
    feature set and records whether the *realised* max relative error exceeds the bound (the
    theorem does not cover realised errors: THEORY.md §5). Returns the chunk's trial rows.
    """
    from .. import theory

    cell = design.cells()[cell_index]
    p = float(cell["p"] if "p" in cell else design.data["p"])
    params = design.data_params(cell)
    params.pop("source")
    params.pop("dataset", None)
    s_pts = int(params.pop("n_pairs", 16))
    dim = int(params.pop("dim"))
    sq, sk = params.pop("scale_q", 1.0), params.pop("scale_k", 1.0)
    trials = chunk_range(design, chunk)
    streams = trial_streams(entropy, spawn_key, cell_index, trials)
    rows = []
    for est in design.estimators:
        label = design._label(est)
        fm = build_feature_map(est["map"], design.estimator_params(est, cell))
        if fm.needs_data:
            raise InvalidParameterError(
                f"{label!r}: the concentration theorem needs a fixed A (not a rule fitted to the data)."
            )
        A_spec: Any = getattr(fm, "A", None)
        A = np.asarray(A_spec, dtype=np.float64) if not isinstance(A_spec, (str, type(None))) else np.eye(dim)
        if A.ndim == 1:
            A = np.diag(A)
        ref = rkdata.gaussian_qk(1, dim, rng=0, **params)
        bound = theory.bounds.chi2_concentration(
            ref.mean_q * sq,
            ref.cov_q * sq * sq,
            ref.mean_k * sk,
            ref.cov_k * sk * sk,
            A,
            s_pts,
            p,
            int(getattr(fm, "n_features")),  # noqa: B009 - FeatureMap has no n_features in general
        )
        for j, t in enumerate(trials):
            gen = np.random.default_rng(streams[j])
            data = rkdata.gaussian_qk(s_pts, dim, rng=gen, **params)
            X, Y = sq * data.q, sk * data.k
            rel = np.sqrt(theory.relative_mse(fm, X[:, None, :], Y[None, :, :]))
            draw = fm.sample(dim, rng=gen)
            ratio = np.exp(draw.log_kernel(X, Y) - X @ Y.T)
            realized = float(np.max(np.abs(ratio - 1.0)))
            rms_max = float(np.max(rel))
            rows.append(
                {
                    "cell": cell_index,
                    "estimator": label,
                    "trial": t,
                    "status": "ok",
                    "rms_max": rms_max,
                    "bound": bound.bound,
                    "covered": float(rms_max <= bound.bound),
                    "rms_over_bound": rms_max / bound.bound,
                    "realized_max": realized,
                    "realized_exceeds": float(realized > bound.bound),
                    "r": bound.r,
                }
            )
    return {"trials": pd.DataFrame(rows)}


def _concentration_finalize(design: Design, parts: list[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """Trial rows of all chunks, ordered by (estimator, trial); pairs: the bound per estimator."""
    trials = pd.concat([p["trials"] for p in parts], ignore_index=True)
    if len(parts) > 1:
        order = {label: i for i, label in enumerate(design.labels)}
        key = trials["estimator"].map(order).to_numpy() * design.trials + trials["trial"].to_numpy()
        trials = trials.iloc[np.argsort(key, kind="stable")].reset_index(drop=True)
    pairs = trials.groupby(["cell", "estimator"], sort=False)[["bound", "r"]].first().reset_index()
    return {"trials": trials, "pairs": pairs}
