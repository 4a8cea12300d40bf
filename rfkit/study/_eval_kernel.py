"""Kernel designs: every feature map's estimates of exp(x.y) against the truth, per trial and per pair.

A unit's trials draw every map from the same streams (common random numbers); maps that share
their directions (``shares_projection``) draw them once per chunk. The closed-form MSE of each
map comes from its :class:`~rfkit.study.ClosedFormRecord` (else the map's own ``mse``, else
:func:`rfkit.theory.mse`, else NaN).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .._backend import to_numpy
from .._random import RewoundGenerators
from ..exceptions import InvalidParameterError, RFKitError, StudyError
from ._builtin_records import theory_mse
from ._cell_data import cell_data, study_backend
from ._device_draws import DeviceDraws, device_map, unit_seed
from ._estimators import build_feature_map
from ._messages import CellTables, PartTables
from ._metric_sources import metric_values, trial_metrics
from ._records import closed_form_record
from ._units import WorkUnit, concat_chunks, frame

if TYPE_CHECKING:
    from ._design import Design

__all__ = [
    "kernel_ratios",
    "closed_form_mse",
    "kernel_setup",
    "kernel_partial",
    "kernel_finalize",
    "kernel_replay",
    "TRIAL_COLUMNS",
]

#: rfkit's metric columns of a kernel trial table, in the order saved tables have them
TRIAL_COLUMNS = (
    "err",
    "sq_err",
    "rel_err",
    "rel_sq_err",
    "abs_rel_err",
    "max_rel_err",
    "med_rel_sq_err",
    "sq_dev",
)


def closed_form_mse(map_name: str, fm: Any, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Closed-form MSE per pair: the map's registered closed form, else its own ``mse(x, y)``, else
    :func:`rfkit.theory.mse` (NaN where none applies)."""
    record = closed_form_record(map_name)
    if record is not None:
        return np.asarray(record.mse(fm, X, Y), dtype=float)
    own = getattr(fm, "mse", None)  # a map of your own may bring its closed form (checked at load)
    if callable(own):
        return np.broadcast_to(np.asarray(own(X, Y), dtype=float), X.shape[:1]).copy()
    return theory_mse(fm, X, Y)


def kernel_ratios(
    fm: Any,
    X: np.ndarray,
    Y: np.ndarray,
    log_truth: np.ndarray,
    streams: list[Any],
    cache: dict[Any, Any] | None = None,
    device: DeviceDraws | None = None,
) -> np.ndarray:
    """Ratios estimate/truth, (trials, pairs), for the given trial streams.

    With ``cache``, directions are shared between estimators that draw the same ones: with
    common random numbers, maps that declare ``shares_projection`` and have equal
    (projection, n_features, dim) get identical directions from identical streams, so they are
    drawn once per chunk. Other maps (yours, unless they declare it) draw through
    ``sample_streams``.
    """
    d = X.shape[1]
    if device is not None and device_map(fm):  # draws = "backend": directions drawn on the device
        draw = fm.from_projection(d, len(streams), device.projection(fm, d))
    elif cache is not None and fm.is_random and fm.shares_projection:
        key = (fm.projection, fm.n_features, d)  # the cache lives for one chunk of streams
        W = cache.get(key)
        if W is None:
            gens = cache.get("generators")  # the chunk's streams as generators, rewound for each draw
            if gens is None:
                gens = cache["generators"] = RewoundGenerators(streams)
            W = cache[key] = fm.projection_streams(d, gens.fresh())
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


def kernel_setup(unit: WorkUnit) -> dict[str, Any]:
    """What every unit of a kernel cell shares: the cell's pairs (on the host and the design's backend),
    the log of the exact kernel, and the feature maps, fitted to the pairs where they need data."""
    design, cell = unit.design, unit.cell
    X, Y = cell_data(design, cell, unit.entropy, unit.spawn_key)
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
    labels = [design.label(est) for est in design.estimators]
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
        "maps": [est["map"] for est in design.estimators],
    }


def kernel_partial(unit: WorkUnit, setup: dict[str, Any]) -> dict[str, Any]:
    """Ratios estimate/truth ``(estimator, trial, pair)`` and statuses ``(estimator, trial)`` of a chunk."""
    X, Y, log_truth = setup["Xb"], setup["Yb"], setup["log_truth"]
    trials, on_error, cell_index = unit.trials, unit.on_error, unit.cell_index
    streams = unit.streams()  # shared by all estimators (CRN)
    fms = setup["fms"]
    ratio = np.full((len(fms), len(trials), X.shape[0]), np.nan)
    status = np.full((len(fms), len(trials)), "ok", dtype=object)
    cache: dict[Any, Any] = {}  # directions shared within this chunk
    device = None
    if unit.design.draws == "backend":
        seed = unit_seed(unit.entropy, unit.spawn_key, cell_index, unit.chunk)
        device = DeviceDraws(study_backend(unit.design), seed, len(trials))
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
            ratio[i] = kernel_ratios(fm, X, Y, log_truth, streams, cache=cache, device=device)
        except Exception:  # noqa: BLE001 - replay trial by trial to name the failing ones
            for j, t in enumerate(trials):
                try:
                    one = None if device is None else device.only(j)
                    ratio[i, j] = kernel_ratios(fm, X, Y, log_truth, streams[j : j + 1], device=one)[0]
                except Exception as exc:  # noqa: BLE001
                    if on_error == "raise":
                        raise unit.failure(exc, label, t) from exc
                    status[i, j] = f"error:{type(exc).__name__}"
    return {"ratio": ratio, "status": status.astype(str)}


def kernel_finalize(unit: WorkUnit, setup: dict[str, Any], parts: list[PartTables]) -> CellTables:
    """Trial and pair tables of a kernel cell.

    ``trials`` has one row per (estimator, trial) with per-trial metrics averaged over the
    cell's pairs (each metric's record computes its column, ``compute``: rfkit's in the layout
    :data:`TRIAL_COLUMNS`, then the design's metrics of your own), ``pairs`` one row per
    (estimator, pair) with per-pair moments and the closed-form MSE.
    """
    design, cell_index = unit.design, unit.cell_index
    X, Y, log_truth = setup["X"], setup["Y"], setup["log_truth"]
    with np.errstate(over="ignore"):
        truth = np.exp(log_truth)
    T, N = design.trials, X.shape[0]
    ratios, statuses = concat_chunks(parts, "ratio"), concat_chunks(parts, "status")
    trial_frames, pair_frames = [], []
    metrics = trial_metrics("kernel", design.metrics, TRIAL_COLUMNS)
    for label, name, fm, ratio, status in zip(setup["labels"], setup["maps"], setup["fms"], ratios, statuses):
        ok = status == "ok"
        rel = ratio - 1.0
        with np.errstate(over="ignore", invalid="ignore"):
            err = rel * truth
            est_vals = ratio * truth
        okr = rel[ok]
        # an overflowing estimate gives inf or NaN: kept, counted in the summary (``n_nonfinite``)
        with np.errstate(over="ignore", invalid="ignore"):
            mean_est = est_vals[ok].mean(axis=0) if ok.any() else np.full(N, np.nan)
            tf: dict[str, Any] = {
                "cell": cell_index,
                "estimator": label,
                "trial": np.arange(T),
                "status": status.astype(str),
            }
            for m in metrics:  # each metric's record computes its column
                tf[m.column] = metric_values(m, T, ratio=ratio, truth=truth, ok=ok)
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
                    "theory_mse": closed_form_mse(name, fm, X, Y) if not fm.needs_data else np.nan,
                    "m": getattr(fm, "n_features", np.nan),
                    "feature_dim": fm.feature_dim(X.shape[1]),
                }
            )
        trial_frames.append(tf)
        pair_frames.append(pf)
    return CellTables(trials=frame(trial_frames), pairs=frame(pair_frames))


def kernel_replay(
    design: Design, cell_index: int, stream: Any, entropy: int, spawn_key: tuple[int, ...]
) -> pd.DataFrame:
    """One trial of every map of a cell alone: the ratios estimate/truth per estimator and pair."""
    cell = design.cells()[cell_index]
    X, Y = cell_data(design, cell, entropy, spawn_key)
    log_truth = np.sum(X * Y, axis=1)
    rows = []
    for est in design.estimators:
        fm = build_feature_map(est["map"], design.estimator_params(est, cell))
        if fm.needs_data:
            fm = fm.fit(X, Y)
        r = kernel_ratios(fm, X, Y, log_truth, [stream])[0]
        rows.append(pd.DataFrame({"estimator": design.label(est), "pair": np.arange(len(r)), "ratio": r}))
    return pd.concat(rows, ignore_index=True)
