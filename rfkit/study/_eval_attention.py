"""Attention designs: every estimator's output against exact softmax attention, per trial and per query."""

from __future__ import annotations

import threading
import time
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .._backend import to_numpy
from ..attention import softmax
from ..exceptions import NonPositiveNormalizerWarning, RFKitError
from ._attention_hooks import TrialCalls
from ._cell_data import cell_data, cell_is_causal, data_stats, study_backend
from ._cost import attention_costs
from ._device_draws import DeviceDraws, unit_seed
from ._estimators import build_attention_estimator, check_attention_output
from ._messages import CellTables, PartTables
from ._metric_sources import metric_values, trial_metrics
from ._records import attention_estimator_record, draws_nothing
from ._units import WorkUnit, concat_chunks, frame

if TYPE_CHECKING:
    from ._design import Design

__all__ = [
    "attention_partial",
    "attention_finalize",
    "attention_replay",
    "cell_estimator_params",
    "cell_costs",
    "attention_error_columns",
    "TRIAL_COLUMNS",
]

#: First spawn-key word of the streams that draw a cell's LSH rotations for its cost column
#: (trial streams use (cell, trial), data streams (2**32 - 1, data setting)).
COST_NAMESPACE = 2**32 - 2


def cell_estimator_params(
    design: Design, est: dict[str, Any], cell: dict[str, Any], causal: bool
) -> dict[str, Any]:
    """An estimator's parameters in a cell; on causal data (a decoder) every estimator attends causally.

    A fitted map's ``fit_pairs = "causal"`` (fit on the pairs ``j <= i`` a decoder uses) has no
    causal mask to follow on bidirectional data (an encoder): there it fits on all pairs, and the
    row repeats the one without the option.
    """
    params = dict(design.estimator_params(est, cell))
    if causal:
        params.setdefault("causal", True)
    elif params.get("fit_pairs") == "causal":
        params["fit_pairs"] = "all"
    return params


def attention_partial(unit: WorkUnit, setup: None = None) -> PartTables:
    """Outputs ``(estimator, trial, query, value dim)`` of a chunk, with statuses, counts and times.

    Chunk 0 also carries the cell's exact output, the cell's costs and, for real data, its data
    statistics. Each estimator's record says how it is called (:func:`_run_estimator`): the
    harness names no estimator class.
    """
    design, cell = unit.design, unit.cell
    Q, K, V = cell_data(design, cell, unit.entropy, unit.spawn_key)
    causal = cell_is_causal(design, cell)
    exact = softmax(Q, K, V, causal=causal)  # the reference, in NumPy float64
    calls = _trial_calls(unit, Q, K, V)
    E, Tk = len(design.estimators), len(unit.trials)
    out = _Outputs(E, Tk, int(np.prod(exact.shape[:-1])), exact.shape[-1])  # rows: texts x tokens
    fits: dict[Any, Any] = {}  # fits of the records' ``fit`` hooks in this unit
    done: dict[Any, int] = {}  # estimators already run in this unit, by their (unfitted) selves
    for i, est in enumerate(design.estimators):
        params = cell_estimator_params(design, est, cell, causal)
        record = attention_estimator_record(params["estimator"])
        built = record.build(params)
        i0 = _repeat_call(record, built, calls.device, done, i)
        if i0 is not None:  # the same call on the same streams: its results
            out.copy(i, i0)
            continue
        estimator = built if record.fit is None else record.fit(built, calls.Q, calls.K, fits)
        once = draws_nothing(record, estimator)
        _run_estimator(unit, design.label(est), record, estimator, calls, out, i, exact.shape, once=once)
    part: dict[str, Any] = out.part()
    if unit.chunk == 0:
        part["exact"] = exact.reshape(out.n, out.dv)
        part["cost"] = cell_costs(design, cell, Q, K, causal, unit)  # once per cell, not per trial
        stats = data_stats(design, Q, K, causal)  # real data: its statistics
        if stats is not None:
            part["data_stats"] = stats.assign(cell=unit.cell_index)
    return part


def _trial_calls(unit: WorkUnit, Q: Any, K: Any, V: Any) -> TrialCalls:
    """The unit's data on the design's backend, its trial streams, and with ``draws = "backend"``
    its device draws (seeded from the unit's own node of the seed tree)."""
    bk = study_backend(unit.design)
    streams = unit.streams()
    device = None
    if unit.design.draws == "backend":
        seed = unit_seed(unit.entropy, unit.spawn_key, unit.cell_index, unit.chunk)
        device = DeviceDraws(bk, seed, len(unit.trials))
    Qb, Kb, Vb = bk.asarray(Q), bk.asarray(K), bk.asarray(V)  # the estimates run on the design's backend
    return TrialCalls(Qb, Kb, Vb, int(Q.shape[-1]), streams, bk, device)


class _Outputs:
    """A unit's outputs ``(estimators, trials, rows, d_v)``, statuses, non-positive rows and times."""

    def __init__(self, E: int, T: int, n: int, dv: int) -> None:
        self.n, self.dv = n, dv
        self.outs = np.full((E, T, n, dv), np.nan)
        self.status = np.full((E, T), "ok", dtype=object)
        self.nonpos = np.zeros((E, T))
        self.seconds = np.full((E, T), np.nan)

    def copy(self, i: int, i0: int) -> None:
        """Estimator ``i`` takes estimator ``i0``'s results (the same call on the same streams)."""
        for a in (self.outs, self.status, self.nonpos, self.seconds):
            a[i] = a[i0]

    def repeat_first(self, i: int) -> None:
        """Every trial of estimator ``i`` takes its first trial's results (an estimator that draws nothing)."""
        for a in (self.outs, self.status, self.nonpos, self.seconds):
            a[i, 1:] = a[i, :1]

    def part(self) -> dict[str, Any]:
        return {
            "outs": self.outs,
            "status": self.status.astype(str),
            "nonpos": self.nonpos,
            "seconds": self.seconds,
        }


def _repeat_call(record: Any, estimator: Any, device: Any, done: dict[Any, int], i: int) -> int | None:
    """The earlier estimator of the unit whose calls are this one's (its results are taken), else None.

    Every estimator of a unit draws from the same trial streams, and equal unfitted estimators
    share one fit (the record's ``fit`` hook): two estimators whose record allows it
    (``deduplicate``) that compare equal in a cell (a "causal-fit" map in a bidirectional cell is
    the plain one, :func:`cell_estimator_params`) make the same calls on the same numbers, so the
    second takes the first's outputs, statuses and measured times instead of computing them
    again. Only with NumPy draws; estimators whose record does not allow it are always called.
    """
    key = _same_call(record, estimator, device)
    if key is None:
        return None
    if key in done:
        return done[key]
    done[key] = i
    return None


def _same_call(record: Any, estimator: Any, device: Any) -> Any:
    """A key equal for two estimators of a unit whose calls are one computation, else None."""
    if device is not None or not record.deduplicate:
        return None
    try:
        hash(estimator)
    except TypeError:  # e.g. proposal means given as an array
        return None
    return estimator


def _run_estimator(
    unit: WorkUnit,
    label: str,
    record: Any,
    estimator: Any,
    calls: TrialCalls,
    out: _Outputs,
    i: int,
    shape: tuple[int, ...],
    *,
    once: bool = False,
) -> None:
    """Every trial of the unit for estimator ``i``: batched where its record's ``batched`` hook says
    how (several trials per call), else one call per trial (its record's ``call_trial``); with
    ``once`` (its record's ``deterministic`` hook says it draws nothing) the first trial's call alone,
    whose results every trial takes.

    A batched call that fails is replayed trial by trial, to name (and record) the failing trials.
    """
    Tk = 1 if once else len(unit.trials)
    batched = None if once or record.batched is None else record.batched(estimator, calls)
    j = 0
    while j < Tk:
        if batched is not None:  # several trials in one call (round-off apart, the same)
            j1 = min(Tk, j + batched.size)
            try:
                _batched_call(batched.call, estimator, out, i, j, j1, shape)
                j = j1
                continue
            except Exception:  # noqa: BLE001 - replay these trials one by one to name the failing ones
                batched = None
        try:
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NonPositiveNormalizerWarning)  # counted below instead
                res = record.call_trial(estimator, calls, j)
                # on the host (synchronises an accelerator: part of the time), shape checked
                output = check_attention_output(res, shape, estimator)
            out.seconds[i, j] = time.perf_counter() - t0
            out.outs[i, j] = output.reshape(out.n, out.dv)
            out.nonpos[i, j] = res.n_nonpositive
        except Exception as exc:  # noqa: BLE001
            if unit.on_error == "raise":
                raise unit.failure(exc, label, unit.trials[j]) from exc
            out.status[i, j] = f"error:{type(exc).__name__}"
        j += 1
    if once:
        out.repeat_first(i)


def _batched_call(
    call: Any, estimator: Any, out: _Outputs, i: int, j: int, j1: int, shape: tuple[int, ...]
) -> None:
    """Trials ``j .. j1 - 1`` of estimator ``i`` in one call, their time shared equally."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPositiveNormalizerWarning)  # counted below
        res = call(j, j1)
        output = check_attention_output(res, (j1 - j, *shape), estimator)
    out.seconds[i, j:j1] = (time.perf_counter() - t0) / (j1 - j)
    out.outs[i, j:j1] = output.reshape(j1 - j, out.n, out.dv)
    out.nonpos[i, j:j1] = _nonpositive_rows(res, j1 - j)


def _nonpositive_rows(res: Any, T: int) -> np.ndarray:
    """Per trial of a stacked call: the query rows whose estimated normaliser is not > 0 (NaN output)."""
    if res.denominator_values is None:  # RA: no normaliser to estimate
        if res.n_nonpositive:
            raise RFKitError("a stacked call counted non-positive rows it cannot attribute to trials")
        return np.zeros(T)
    den = to_numpy(res.denominator_values)
    with np.errstate(invalid="ignore"):
        bad = ~(den > 0) | ~np.isfinite(den)
    return bad.reshape(T, -1).sum(axis=1)


def cell_costs(
    design: Design, cell: dict[str, Any], Q: Any, K: Any, causal: bool, unit: WorkUnit
) -> np.ndarray:
    """Cost per query of every estimator of a cell (:mod:`rfkit.study._cost`): its record's ``cost``.

    A cost that draws (LSH supports) draws from the cell's own stream ``(COST_NAMESPACE, cell)``.
    """
    params = [cell_estimator_params(design, e, cell, causal) for e in design.estimators]
    records = [attention_estimator_record(p["estimator"]) for p in params]
    built = [rec.build(p) for rec, p in zip(records, params)]
    ss = np.random.SeedSequence(
        unit.entropy, spawn_key=tuple(unit.spawn_key) + (COST_NAMESPACE, unit.cell_index)
    )
    return attention_costs(built, Q, K, causal=causal, rng=ss, records=records)


def attention_finalize(unit: WorkUnit, setup: None, parts: list[PartTables]) -> CellTables:
    """Attention designs: every estimator's output against exact softmax attention.

    Per trial: the mean signed and squared error over all (query, value-dimension) entries,
    the mean and maximum absolute error, and the number of rows with a non-positive
    normaliser (NaN output, never clipped): each metric's record computes its column
    (``compute``), rfkit's columns in the layout :data:`TRIAL_COLUMNS`, then the design's metrics
    of your own. Per query: bias, variance and MSE over trials. The median wall time per call is
    kept apart (``timings``): it is not reproducible. An estimator whose outputs equal an earlier
    one's bit for bit takes its error tables (:func:`_repeat_of`).
    """
    design, cell_index = unit.design, unit.cell_index
    exact2 = np.asarray(parts[0]["exact"])
    n, dv = exact2.shape
    T = design.trials
    all_outs, all_status = concat_chunks(parts, "outs"), concat_chunks(parts, "status")
    all_nonpos, all_seconds = concat_chunks(parts, "nonpos"), concat_chunks(parts, "seconds")
    trial_frames: list[dict[str, Any]] = []
    query_frames: list[dict[str, Any]] = []
    timing_rows: list[dict[str, Any]] = []
    metrics = trial_metrics("attention", design.metrics, TRIAL_COLUMNS)
    costs = parts[0].get("cost")  # None in parts saved before the cost column existed
    seen: dict[bytes, list[int]] = {}  # estimators by a fingerprint of their outputs and statuses
    for i, est in enumerate(design.estimators):
        label = design.label(est)
        outs, status, nonpos = all_outs[i], all_status[i], all_nonpos[i]
        cost = np.nan if costs is None else float(costs[i])
        i0 = _repeat_of(i, all_outs, all_status, all_nonpos, seen)
        if i0 is not None:  # the outputs of an earlier estimator, bit for bit (a call made once)
            trial_frames.append({**trial_frames[i0], "estimator": label, "cost": cost})
            query_frames.append({**query_frames[i0], "estimator": label})
        else:
            ok = status == "ok"
            trials, queries = attention_error_columns(outs, exact2, ok, nonpos)
            with np.errstate(invalid="ignore"), warnings.catch_warnings():
                warnings.filterwarnings(
                    "ignore", r"Mean of empty slice|All-NaN slice|Degrees of freedom", RuntimeWarning
                )
                columns = {  # each metric's record computes its column (rfkit's from ``trials``, memoised)
                    m.column: metric_values(m, T, output=outs, exact=exact2, ok=ok, nonpositive_rows=nonpos)
                    for m in metrics
                }
            head = {"cell": cell_index, "estimator": label, "trial": np.arange(T)}
            layout = {c: columns.pop(c) for c in TRIAL_COLUMNS if c in columns}
            tail = {"n_nan_rows": trials["n_nan_rows"], "cost": cost, **columns}  # then metrics of your own
            trial_frames.append({**head, "status": status.astype(str), **layout, **tail})
            query_frames.append({"cell": cell_index, "estimator": label, "pair": np.arange(n), **queries})
        times = all_seconds[i][np.isfinite(all_seconds[i])]
        timing_rows.append(
            {
                "cell": cell_index,
                "estimator": label,
                "seconds_median": float(np.median(times)) if times.size else np.nan,
                "calls": int(times.size),
            }
        )
    _LAST_ERRORS.entry = None  # the memo holds no outputs past the cell
    return CellTables(
        trials=frame(trial_frames),
        pairs=frame(query_frames),
        timings=pd.DataFrame(timing_rows),
        data_stats=parts[0].get("data_stats"),
    )


def _repeat_of(
    i: int, outs: np.ndarray, status: np.ndarray, nonpos: np.ndarray, seen: dict[bytes, list[int]]
) -> int | None:
    """An earlier estimator whose outputs, statuses and non-positive row counts equal estimator
    ``i``'s bit for bit, else None (and ``i`` is remembered in ``seen``).

    Its error tables are then the same numbers: a "causal-fit" map in a bidirectional cell is the
    plain map, whose outputs :func:`attention_partial` copies. A fingerprint (the statuses and the
    first outputs) picks the candidates; the whole arrays are compared as bytes.
    """
    first = outs[i].reshape(-1)[:64]
    key = status[i].astype(str).tobytes() + nonpos[i].tobytes() + first.tobytes()
    for j in seen.get(key, ()):
        if (
            np.array_equal(status[j], status[i])
            and np.array_equal(nonpos[j].view(np.uint8), nonpos[i].view(np.uint8))
            and np.array_equal(outs[j].view(np.uint8), outs[i].view(np.uint8))
        ):
            return j
    seen.setdefault(key, []).append(i)
    return None


#: rfkit's metric columns of an attention trial table, in the order saved tables have them
TRIAL_COLUMNS = ("err", "sq_err", "abs_err", "max_abs_err", "sq_dev", "nonpositive_rows")
#: the last call of :func:`attention_error_columns` in this thread: (key, its arrays, result)
_LAST_ERRORS = threading.local()


def attention_error_columns(
    output: np.ndarray, exact: np.ndarray, ok: np.ndarray, nonpositive_rows: np.ndarray
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One estimator's per-trial and per-query error columns (:func:`_error_tables`), remembered: rfkit's
    attention metrics read theirs from one pass over the outputs. The memo holds the last call of
    the thread (by the arrays' identity) until the next, or until :func:`attention_finalize` ends."""
    key = (id(output), id(exact), id(ok), id(nonpositive_rows))
    last = getattr(_LAST_ERRORS, "entry", None)
    if last is not None and last[0] == key:
        return last[2]  # type: ignore[no-any-return]
    status = np.where(ok, "ok", "failed")
    result = _error_tables(output, status, nonpositive_rows, exact)
    _LAST_ERRORS.entry = (key, (output, exact, ok, nonpositive_rows), result)
    return result


def _error_tables(
    outs: np.ndarray,
    status: np.ndarray,
    nonpos: np.ndarray,
    exact2: np.ndarray,
    *,
    masked: bool | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One estimator's per-trial columns and per-query columns from its outputs ``(T, n, dv)``.

    Failed trials (``status`` not "ok") and rows with a NaN or infinite output (a non-positive
    normaliser, an overflow) are masked: such rows are counted per trial, and that trial's errors
    are NaN (the error of its other rows is not its error); a query with a NaN output in some
    finished trial has no mean output, variance or MSE.

    Where every trial ran and every output is finite (the common case) the masks select
    everything, and the plain branch gives the same numbers bit for bit with fewer passes: no
    copies by the masks; ``np.var(outs, axis=0, ddof=1)`` is the sum over trials of
    ``(outs - mean)**2`` divided by ``T - 1`` with the mean ``np.mean(outs, axis=0)`` (NumPy's own
    sums and divisions), so these squared deviations give both the per-query variance and the
    per-trial ``sq_dev``. ``masked=True`` takes the masked branch anyway (a test compares the two).
    """
    T, n, dv = outs.shape
    ok = status == "ok"
    finite = np.isfinite(outs)
    all_finite = bool(finite.all())
    if masked is None:
        masked = not (all_finite and bool(ok.all()))
    n_ok = int(ok.sum())
    err = outs - exact2
    nanmean, nanmax, nanvar = _reductions(all_finite)
    # a cell where every trial failed has only NaN outputs: its values are NaN, and its status
    # column says why (NumPy's "Mean of empty slice" would only repeat it, as a raw warning)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", r"Mean of empty slice|All-NaN slice|Degrees of freedom", RuntimeWarning
        )
        if masked:
            nan_rows = np.where(ok, (~finite).any(axis=-1).sum(axis=-1), 0)
            mean_out = nanmean(outs[ok], axis=0) if n_ok else np.full((n, dv), np.nan)
            if n_ok:  # a query with a NaN output in some trial has no mean output
                mean_out[~finite[ok].all(axis=0)] = np.nan
        else:
            nan_rows = np.zeros(T, dtype=np.int_)
            mean_out = np.mean(outs, axis=0)
        dev2 = outs - mean_out
        np.square(dev2, out=dev2)
        sq_dev = nanmean(dev2, axis=(1, 2))
        sq_dev[~np.isfinite(mean_out).all()] = np.nan
        sq = np.square(err)
        err_mean = nanmean(err, axis=(1, 2))
        abs_err = np.abs(err, out=err)  # err is this call's own array, no longer needed as it was
        if masked:
            variance = np.mean(nanvar(outs[ok], axis=0, ddof=1), axis=-1) if n_ok > 1 else np.full(n, np.nan)
            mse = nanmean(sq[ok], axis=(0, 2)) if n_ok else np.full(n, np.nan)
            if n_ok:  # per query: NaN where some trial's output is NaN, never a mean of the others
                bad_q = ~finite[ok].all(axis=(0, 2))
                variance[bad_q] = np.nan
                mse[bad_q] = np.nan
        else:
            variance = (
                np.mean(np.add.reduce(dev2, axis=0) / (T - 1), axis=-1) if T > 1 else np.full(n, np.nan)
            )
            mse = np.mean(sq, axis=(0, 2))
        whole = nan_rows == 0
        trials = {
            "status": status.astype(str),
            "err": _whole(err_mean, whole),
            "sq_err": _whole(nanmean(sq, axis=(1, 2)), whole),
            "abs_err": _whole(nanmean(abs_err, axis=(1, 2)), whole),
            "max_abs_err": _whole(nanmax(abs_err, axis=(1, 2)), whole),
            "sq_dev": _whole(sq_dev, whole),
            "nonpositive_rows": nonpos,
            "n_nan_rows": nan_rows,
        }
    return trials, _query_columns(mean_out, exact2, variance, mse)


def _query_columns(
    mean_out: np.ndarray, exact2: np.ndarray, variance: np.ndarray, mse: np.ndarray
) -> dict[str, Any]:
    """The per-query columns of one estimator (no closed form for attention outputs: NaN theory)."""
    return {
        "bias2": np.mean((mean_out - exact2) ** 2, axis=-1),
        "variance": variance,
        "mse": mse,
        "theory_mse": np.nan,
        "truth": np.nan,
    }


def _reductions(all_finite: bool) -> tuple[Any, Any, Any]:
    """``(mean, max, var)`` for an estimator's outputs: NaN-aware, or plain when every output is finite.

    Without a NaN the plain reductions give the NaN-aware ones' numbers bit for bit (the same sums
    and divisions; a test compares the tables) at a fraction of their cost (no NaN-replaced copies).
    """
    return (np.mean, np.max, np.var) if all_finite else (np.nanmean, np.nanmax, np.nanvar)


def _whole(values: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """Per-trial values, NaN for the trials whose output has NaN rows (``whole`` False)."""
    return np.where(whole, values, np.nan)


def attention_replay(
    design: Design, cell_index: int, stream: Any, entropy: int, spawn_key: tuple[int, ...]
) -> pd.DataFrame:
    """One trial of every estimator of a cell alone: the squared error of each query's output."""
    cell = design.cells()[cell_index]
    Q, K, V = cell_data(design, cell, entropy, spawn_key)
    causal = cell_is_causal(design, cell)
    exact = softmax(Q, K, V, causal=causal)
    rows = []
    for est in design.estimators:
        estimator = build_attention_estimator(cell_estimator_params(design, est, cell, causal))
        out = estimator(Q, K, V, rng=stream).output
        rows.append(
            pd.DataFrame(
                {
                    "estimator": design.label(est),
                    "query": np.arange(out.shape[-2]),
                    "sq_err": np.mean((out - exact) ** 2, axis=-1),
                }
            )
        )
    return pd.concat(rows, ignore_index=True)
