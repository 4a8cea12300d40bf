r"""The hooks of rfkit's own attention estimators' records: batched trials, device draws, fits, cost.

:mod:`rfkit.study._builtin_records` registers RFA, RA, SNIS, LARA and Hybrid with these
functions through the same :func:`~rfkit.study.register_attention_estimator` a user calls; the
harness (:mod:`rfkit.study._eval_attention`, :mod:`rfkit.study._cost`,
:mod:`rfkit.study._device_draws`) asks the records and never names a class.

Several trials in one call (``batched``; trial ``t`` is its trial-by-trial output to round-off):

* RFA with shared draws: the trials' draws stacked (``sample_streams``: draw ``t`` is the draw of
  stream ``t`` alone), or, with ``draws = "backend"``, slices of the unit's device directions;
* SNIS, LARA and RA: the inputs repeated along a new leading trial axis and
  :class:`~rfkit._random.TrialStreams`, trial ``t`` drawing from its own stream (with
  ``draws = "backend"``, from the backend's generator on the device, seeded with that stream);
* Hybrid with shared draws, a map without a fit and no LSH buckets (whose rotation is drawn after
  the features): the stacked feature draws, as for RFA (its window and sinks draw nothing).

An estimator whose output does not depend on ``rng`` (``deterministic``: RFA with a deterministic
map such as Taylor; Hybrid with a support chosen by content and no remainder, or with a
deterministic map's features) is called once per work unit; its trials take that call's results.

Large problems (more than :data:`BATCH_ELEMS` feature elements per trial) keep one call per
trial: stacking gains nothing there and would only leave the cache.

Cost per query (``cost``; docs page *Studies*, section "Cost per query"), keys computed exactly
plus the feature count :math:`c = \overline{|S(n)|} + m`:

* RFA: :math:`m` = its map's ``feature_dim(d)`` (columns), no exact keys;
* Hybrid: :math:`|S(n)|` = the keys of its support that query :math:`n` may see (window, sinks,
  LSH bucket; causal: :math:`j \le n`), averaged over the queries (and, with LSH buckets, over
  :data:`~rfkit.study._cost.LSH_ROTATIONS` rotations), plus its map's ``feature_dim(d)`` with the
  ``"features"`` remainder; with keys chosen by content or a sampled remainder, measured by one
  call on the cell's data: the mean of its result's exact logits plus random features (the
  ``top_k`` keys, Quest's whole blocks, :math:`\min(s, N_R)` samples, and for the ``"oracle"``
  scorer every key the query may see);
* SNIS: its ``n_samples``; LARA: its proposals times ``samples_per_proposal`` (Zheng, Wang & Kong
  (ICML 2022));
* RA: every key the query may see (:math:`M`, causal: :math:`(n+1)/2` on average), since RA
  computes the exact softmax weights it samples from.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._backend_random import BackendGenerator
from .._random import TrialStreams, check_rng
from ..attention import LARA, RA, RFA, SNIS, Hybrid
from ..exceptions import RFKitError
from ..features import fit_to_pairs
from ._attention_hooks import BatchedCall, CellSizes, TrialCalls
from ._cost import LSH_ROTATIONS, _codes, mean_visible, support_size
from ._device_draws import device_map

__all__ = [
    "BATCH_ELEMS",
    "BATCH_ELEMS_ACCELERATOR",
    "SAMPLED_BATCH_ELEMS",
    "rfa_batched",
    "rfa_call",
    "rfa_device_draws",
    "rfa_fit",
    "rfa_cost",
    "hybrid_batched",
    "hybrid_cost",
    "is_deterministic",
    "snis_batched",
    "lara_batched",
    "ra_batched",
    "sampled_call",
    "sampled_device_draws",
    "snis_cost",
    "lara_cost",
    "ra_cost",
]

#: Trials of RFA evaluated in one call carry about this many feature elements (slices x rows x D x
#: trials) on NumPy: small problems are bound by per-call overhead and gain from stacking, large
#: ones would only leave the cache (measured in docs page *Benchmarks*); accelerators take more.
BATCH_ELEMS = 1 << 17
BATCH_ELEMS_ACCELERATOR = 1 << 24
#: The same for SNIS, LARA and RA (query rows x samples; RA: x keys). Stacked trials give every
#: slice its own samples, which costs more than RFA's stacked draws: CPU time per trial 0.4-0.5x
#: at 128 rows x 64 samples, 0.6-0.7x at 256, but 0.93-0.98x at 1,024 (docs page *Benchmarks*),
#: hence the smaller budget on NumPy.
SAMPLED_BATCH_ELEMS = 1 << 16


# ----------------------------------------------------------------------------- RFA
def _rfa_on_device(estimator: RFA) -> bool:
    """RFA whose directions can be drawn on the device (shared across heads, a fitted map)."""
    return (
        estimator.shared_across_heads
        and device_map(estimator.feature_map)
        and not estimator.feature_map.needs_data
    )


def rfa_device_draws(estimator: RFA) -> bool:
    """RFA draws on the device when its directions are shared across heads and its map can."""
    return bool(estimator.shared_across_heads and device_map(estimator.feature_map))


def rfa_batched(estimator: RFA, calls: TrialCalls) -> BatchedCall | None:
    """RFA with shared draws: the trials' draws stacked, or slices of the unit's device directions."""
    if not estimator.shared_across_heads:
        return None
    fm, d, device = estimator.feature_map, calls.dim, calls.device
    if fm.needs_data:  # a fit that failed once per chunk: left to fail (and be recorded) per trial
        return None
    budget = BATCH_ELEMS if calls.backend.uses_thread_pool else BATCH_ELEMS_ACCELERATOR
    size = max(1, min(len(calls.streams), budget // (calls.rows * fm.feature_dim(d))))
    if size == 1 and device is None:
        return None  # large problems: one call per trial, not stacked
    qkv = calls.inputs
    if device is not None and _rfa_on_device(estimator):
        return BatchedCall(
            size,
            lambda j0, j1: estimator(
                *qkv, draw=fm.from_projection(d, j1 - j0, device.projection(fm, d)[j0:j1])
            ),
        )
    if device is not None:
        return None
    streams = calls.streams
    return BatchedCall(size, lambda j0, j1: estimator(*qkv, draw=fm.sample_streams(d, streams[j0:j1])))


def rfa_call(estimator: RFA, calls: TrialCalls, j: int) -> Any:
    """Trial ``j`` of RFA: its device directions with ``draws = "backend"`` where it can, else its stream."""
    if calls.device is not None and _rfa_on_device(estimator):
        fm, d = estimator.feature_map, calls.dim
        W = calls.device.projection(fm, d)[j]
        return estimator(*calls.inputs, draw=fm.from_projection(d, None, W))
    return estimator(*calls.inputs, rng=calls.streams[j])


def rfa_fit(estimator: RFA, Q: Any, K: Any, fits: dict[Any, Any] | None = None) -> RFA:
    """RFA whose map needs data, with the map fitted once on the cell's (Q, K) instead of per trial.

    The fit is deterministic and RFA with shared draws fits on exactly these rows, so every
    trial's output is unchanged; numerical fits (the hyperbolic OPRF's optimum) then run once per
    chunk rather than once per trial. A fit that fails is left to fail (and be recorded) per trial.
    ``Q`` and ``K`` keep their sequence axis (texts, tokens, d), so a map with
    ``fit_pairs="causal"`` is fitted on the pairs ``j <= i`` of each text, as RFA would.

    ``fits`` (one per chunk) keeps the fitted maps by the unfitted map: estimators with equal maps
    (a "causal-fit" map is the plain one in a bidirectional cell) share one fit, the same object a
    fit of its own would equal.
    """
    if not (estimator.shared_across_heads and estimator.feature_map.needs_data):
        return estimator
    fm = estimator.feature_map
    try:
        fitted = None if fits is None else fits.get(fm)
        shared = fits is not None
    except TypeError:  # a map of your own that does not hash fits on its own
        fitted, shared = None, False
    if fitted is None:
        try:
            fitted = fit_to_pairs(fm, Q, K)
        except RFKitError:
            return estimator
        if shared:
            fits[fm] = fitted  # type: ignore[index]
    return dataclasses.replace(estimator, feature_map=fitted)


def rfa_cost(estimator: RFA, sizes: CellSizes) -> float:
    """RFA: its map's feature columns, no exact keys."""
    return float(estimator.feature_map.feature_dim(sizes.dim))


# ----------------------------------------------------------------------------- Hybrid
def hybrid_batched(estimator: Hybrid, calls: TrialCalls) -> BatchedCall | None:
    """Hybrid: its features as RFA's where its support draws nothing (no LSH) and its map needs no fit."""
    if not estimator.shared_across_heads or estimator.lsh_buckets is not None:
        return None
    if estimator.feature_map is None or estimator.remainder != "features" or estimator.top_k is not None:
        return None  # no feature draws to batch (or a scorer that may draw)
    fm, d = estimator.feature_map, calls.dim
    if fm.needs_data or calls.device is not None:
        return None
    budget = BATCH_ELEMS if calls.backend.uses_thread_pool else BATCH_ELEMS_ACCELERATOR
    width = fm.feature_dim(d) + (estimator.window or 0) + estimator.n_global
    size = max(1, min(len(calls.streams), budget // (calls.rows * width)))
    if size == 1:
        return None
    qkv, streams = calls.inputs, calls.streams
    return BatchedCall(size, lambda j0, j1: estimator(*qkv, draw=fm.sample_streams(d, streams[j0:j1])))


def is_deterministic(estimator: RFA | Hybrid) -> bool:
    """RFA and Hybrid: the output does not depend on ``rng`` (its ``is_random``, its map's for RFA)."""
    if isinstance(estimator, Hybrid):
        return not estimator.is_random
    return not bool(getattr(estimator.feature_map, "is_random", True))


def hybrid_cost(estimator: Hybrid, sizes: CellSizes) -> float:
    r"""Hybrid: the mean support a query may see (over LSH rotations too) plus its map's columns.

    With keys chosen by content (``top_k``) or a remainder other than the features, measured: one
    call on the cell's queries and keys (values of zeros), the mean over queries of its result's
    exact logits plus random features (:class:`~rfkit.attention.QueryCost`). Those counts depend
    on the data: query :math:`n` computes :math:`\min(s, N_R)` samples and at most the keys it
    may see, and Quest adds whole blocks.
    """
    n, M, d, causal = sizes.n_queries, sizes.n_keys, sizes.dim, sizes.causal
    if estimator.top_k is not None or estimator.remainder != "features":
        S = sizes.n_slices
        Qn = np.asarray(sizes.Q, dtype=np.float64).reshape(S, n, d)
        Kn = np.asarray(sizes.K, dtype=np.float64).reshape(S, M, d)
        cost = estimator(Qn, Kn, np.zeros((S, M, 1)), rng=sizes.rng).cost
        assert cost is not None  # Hybrid always counts its cost
        return float(np.mean(np.asarray(cost.exact_logits) + np.asarray(cost.random_features)))
    fm = estimator.feature_map
    features = float(fm.feature_dim(d)) if fm is not None and estimator.remainder == "features" else 0.0
    features += float((estimator.top_k or 0) + (estimator.n_samples or 0))
    if estimator.scorer == "oracle":
        features += mean_visible(n, M, causal)
    if estimator.lsh_buckets is None:
        sizes_ = support_size(n, M, window=estimator.window, n_global=estimator.n_global, causal=causal)
        return float(sizes_.mean()) + features
    S = sizes.n_slices
    Qn = np.asarray(sizes.Q, dtype=np.float64).reshape(S, n, d)
    Kn = np.asarray(sizes.K, dtype=np.float64).reshape(S, M, d)
    means = []
    for _ in range(LSH_ROTATIONS):
        R = sizes.rng.standard_normal((d, estimator.lsh_buckets // 2))
        codes = (_codes(Qn, R), _codes(Kn, R))
        counts = support_size(
            n, M, window=estimator.window, n_global=estimator.n_global, causal=causal, codes=codes
        )
        means.append(counts.mean())
    return float(np.mean(means)) + features


# ----------------------------------------------------------------------------- SNIS, LARA, RA
def sampled_device_draws(estimator: SNIS | LARA | RA) -> bool:
    """SNIS, LARA and RA draw per trial from the backend's generator with ``draws = "backend"``."""
    return True


def _stacked_trials(estimator: SNIS | LARA | RA, calls: TrialCalls, width: int) -> BatchedCall | None:
    """The inputs repeated along a leading trial axis, each trial drawing from its own stream.

    ``width`` is the elements per query row of one trial's work (its samples; RA: samples x keys).
    """
    bk, streams, device = calls.backend, calls.streams, calls.device
    budget = SAMPLED_BATCH_ELEMS if bk.uses_thread_pool else BATCH_ELEMS_ACCELERATOR
    size = max(1, min(len(streams), budget // (calls.rows * width)))
    if size == 1:
        return None
    xp, qkv = bk.xp, calls.inputs

    def stacked(j0: int, j1: int) -> Any:
        Qs, Ks, Vs = (xp.broadcast_to(a[None, ...], (j1 - j0, *a.shape)) for a in qkv)
        gens = (BackendGenerator(bk, s) if device is not None else check_rng(s) for s in streams[j0:j1])
        return estimator(Qs, Ks, Vs, rng=TrialStreams(tuple(gens)))

    return BatchedCall(size, stacked)


def snis_batched(estimator: SNIS, calls: TrialCalls) -> BatchedCall | None:
    """SNIS: stacked trials, ``n_samples`` elements per query row."""
    return _stacked_trials(estimator, calls, int(estimator.n_samples))


def lara_batched(estimator: LARA, calls: TrialCalls) -> BatchedCall | None:
    """LARA: stacked trials, ``samples_per_proposal x n_proposals`` (8 by default) per query row."""
    return _stacked_trials(estimator, calls, estimator.samples_per_proposal * (estimator.n_proposals or 8))


def ra_batched(estimator: RA, calls: TrialCalls) -> BatchedCall | None:
    """RA: stacked trials, ``n_samples x keys`` elements per query row."""
    return _stacked_trials(estimator, calls, estimator.n_samples * int(calls.K.shape[-2]))


def sampled_call(estimator: SNIS | LARA | RA, calls: TrialCalls, j: int) -> Any:
    """Trial ``j`` of SNIS, LARA or RA: the backend's generator seeded with its stream under
    ``draws = "backend"``, else its NumPy stream."""
    if calls.device is not None:
        return estimator(
            *calls.inputs, rng=TrialStreams((BackendGenerator(calls.backend, calls.streams[j]),))
        )
    return estimator(*calls.inputs, rng=calls.streams[j])


def snis_cost(estimator: SNIS, sizes: CellSizes) -> float:
    """SNIS: its samples."""
    return float(estimator.n_samples)


def lara_cost(estimator: LARA, sizes: CellSizes) -> float:
    """LARA: its proposals times ``samples_per_proposal``."""
    if estimator.n_proposals is not None:
        C = estimator.n_proposals
    elif estimator.proposal_means is not None:
        C = int(np.shape(estimator.proposal_means)[-2])
    else:  # LARA's default: min(8, n) proposals (min(8, n, M) bidirectionally)
        n, M = sizes.n_queries, sizes.n_keys
        C = min(8, n if sizes.causal else min(n, M))
    return float(C * estimator.samples_per_proposal)


def ra_cost(estimator: RA, sizes: CellSizes) -> float:
    """RA: every key a query may see, since it computes the exact softmax weights it samples from."""
    return mean_visible(sizes.n_queries, sizes.n_keys, sizes.causal)
