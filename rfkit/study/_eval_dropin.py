r"""Drop-in designs: an attention estimator in the layers of pretrained models, against the exact models.

Per cell and trial, for every estimator and each model of ``data.models``:

* **all layers**: the model runs with the estimator in every replaced layer (``data.layers``,
  default all) through :func:`rfkit.data.estimator_attention`; the damage is measured against
  the exact model on the same texts. SmolLM2-135M (decoder): the mean over positions of
  :math:`\mathrm{KL}(p_{\rm exact}\,\|\,p_{\rm approx})` of the next-token distribution
  (``kl``), the share of positions whose most likely next token is unchanged (``top1_agree``)
  and the perplexity ratio (``ppl_ratio``); all-MiniLM-L6-v2 (encoder): the mean cosine
  similarity of the sentence embeddings (``emb_cos``) and of the last hidden states
  (``hidden_cos``);
* **the proxy**: in the exact run, each replaced layer's estimator on the exact q, k, v of
  that layer, with the same random stream: the attention-output MSE per head (what the
  real-attention study measures), averaged over layers and heads (``dec_head_mse``,
  ``enc_head_mse``) and kept per layer; and from the same calls the cost per query
  (``dec_cost``, ``enc_cost``: exact logits plus random features, the result's own counts where
  it reports them, else the estimator record's ``cost`` hook, averaged over the layers);
* **one layer at a time** (the cells ``data.one_layer`` names by context length and budget):
  each replaced layer alone, from the exact model's input of that layer, on the first
  ``one_layer.texts`` texts: the same damage measures per layer.

A source whose record has a ``dropin`` hook (``source = "transformers"``: any Hugging Face
model) brings its own model and texts instead of ``data.models``: a causal model gets the
decoder's measures and SmolLM2's random streams, any other model the encoder's and MiniLM's.

Randomness: trial ``t`` has the stream of :func:`rfkit.study._units.trial_streams`; model ``m``
(its index in :data:`~rfkit.study._dropin_design.MODEL_CLASSES`) uses the root
``SeedSequence(entropy, spawn_key=trial_key + (m,))`` and layer ``l`` its
:func:`rfkit.data.layer_stream`, in all three measurements and for every estimator (common
random numbers). ``feature_dim`` is the cost per query: feature columns for RFA, samples for
SNIS and LARA, and for :class:`~rfkit.attention.Hybrid` the exact keys of its support (a window
of ``w``: ``w + 1`` keys causally, ``2w + 1`` bidirectionally, plus ``n_global`` sinks) plus its
feature columns, so every estimator of a cell has the same budget.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .. import data as rkdata
from ..exceptions import IllConditionedWarning, NonPositiveNormalizerWarning
from ._cell_data import cell_data
from ._cost import attention_cost
from ._dropin_data import dropin_model
from ._dropin_design import (
    COST_COLUMNS,
    MODEL_CLASSES,
    MODEL_METRICS,
    DropInData,
    dropin_data,
    model_estimator_params,
)
from ._estimators import build_attention_estimator
from ._messages import CellTables, PartTables
from ._records import attention_estimator_record, draws_nothing
from ._units import WorkUnit, trial_failure

if TYPE_CHECKING:
    from ._design import Design

__all__ = [
    "dropin_partial",
    "dropin_finalize",
    "dropin_replay",
    "model_estimator_params",
    "TRIAL_COLUMNS",
    "LAYER_COLUMNS",
    "MODEL_METRICS",
]

#: per-trial columns of a drop-in trials table (besides cell, estimator, trial, status)
TRIAL_COLUMNS = (
    *MODEL_METRICS["smollm2"],
    *MODEL_METRICS["minilm"],
    "ppl_exact",
    "nonpositive_rows",
    "ill_conditioned_calls",
    *COST_COLUMNS.values(),
)
#: per-layer values (pairs table): the proxy, and the damage of that layer replaced alone
LAYER_COLUMNS = ("head_mse", "kl", "top1_agree", "ppl_ratio", "emb_cos", "hidden_cos")
_MODEL_INDEX = {name: i for i, name in enumerate(MODEL_CLASSES)}
_CHUNK = 128  # positions whose logits (x 49152) are computed at once


@contextlib.contextmanager
def _counting(counts: np.ndarray, at: tuple[int, int]) -> Iterator[None]:
    """The warnings of one (estimator, trial)'s calls: rows with a non-positive normaliser are left to the
    measures (NaN), calls with ill-conditioned rows (a Hybrid remainder lost to round-off) are counted
    in ``counts[at]``, and every other warning goes on as usual."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("ignore", NonPositiveNormalizerWarning)
        warnings.simplefilter("always", IllConditionedWarning)
        yield
    for w in caught:
        if issubclass(w.category, IllConditionedWarning):
            counts[at] += 1
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


# ----------------------------------------------------------------------------- damage measures
def _logsumexp(z: np.ndarray) -> np.ndarray:
    """``log(sum(exp(z)))`` over the last axis of a 2-d float64 array, max-shifted (one temporary)."""
    m = np.max(z, axis=-1)
    t = np.subtract(z, m[:, None])
    np.exp(t, out=t)
    return m + np.log(np.sum(t, axis=-1))  # type: ignore[no-any-return]


class _DecoderRef:
    r"""The exact decoder's next-token distributions, per text and chunk of positions, to compare runs with.

    With :math:`p` the exact distribution and :math:`z` an approximate run's logits,
    :math:`\mathrm{KL}(p\,\|\,q) = \sum_v p_v\log p_v - \sum_v p_v z_v + \log\sum_v e^{z_v}`: the first
    term is kept per position, so each run costs one pass over its logits (equal to
    :func:`rfkit.data.next_token_kl`, :func:`~rfkit.data.top1_agreement` and
    :func:`~rfkit.data.token_nll` to round-off; tests check it). Everything in float64.
    """

    def __init__(self, model: Any, hidden: np.ndarray, ids: np.ndarray) -> None:
        self.model, self.ids = model, ids
        n, T = ids.shape
        self.chunks = [(b, s, min(T, s + _CHUNK)) for b in range(n) for s in range(0, T, _CHUNK)]
        self.p: list[np.ndarray] = []
        self.neg_entropy: list[np.ndarray] = []
        self.top: list[np.ndarray] = []
        self.nll: list[np.ndarray] = []
        for b, s, e in self.chunks:
            z = np.asarray(model.logits(hidden[b, s:e]), dtype=np.float64)
            lp = z - _logsumexp(z)[:, None]
            p = np.exp(lp)
            self.p.append(p)
            self.neg_entropy.append(np.einsum("ij,ij->i", p, lp))
            self.top.append(np.argmax(z, axis=-1))
            self.nll.append(-self._target(lp, b, s, e))

    def _target(self, z: np.ndarray, b: int, s: int, e: int) -> np.ndarray:
        """``z`` at each position's actual next token (the last position of a text has none)."""
        stop = max(s, min(e, self.ids.shape[1] - 1))
        return z[np.arange(stop - s), self.ids[b, s + 1 : stop + 1]]

    def damage(self, hidden: np.ndarray, texts: int) -> dict[str, float]:
        """kl, top1_agree, ppl_ratio of approximate last hidden states on the first ``texts`` texts."""
        kl, agree, nll_a, nll_e = [], [], [], []
        for k, (b, s, e) in enumerate(self.chunks):
            if b >= texts:
                continue
            z = np.asarray(self.model.logits(hidden[b, s:e]), dtype=np.float64)
            lse = _logsumexp(z)
            kl.append(self.neg_entropy[k] - np.einsum("ij,ij->i", self.p[k], z) + lse)
            agree.append(np.argmax(z, axis=-1) == self.top[k])
            t = self._target(z, b, s, e)
            nll_a.append(lse[: len(t)] - t)
            nll_e.append(self.nll[k])
        a, x = np.concatenate(nll_a), np.concatenate(nll_e)
        return {
            "kl": float(np.mean(np.concatenate(kl))),
            "top1_agree": float(np.mean(np.concatenate(agree))),
            "ppl_ratio": float(np.exp(np.mean(a) - np.mean(x))),
        }

    def perplexity(self) -> float:
        return float(np.exp(np.mean(np.concatenate(self.nll))))


class _EncoderRef:
    """The exact encoder's last hidden states and sentence embeddings."""

    def __init__(self, model: Any, hidden: np.ndarray, mask: np.ndarray) -> None:
        self.model, self.hidden, self.mask = model, hidden, mask
        self.emb = model.embedding(hidden, mask)

    def damage(self, hidden: np.ndarray, texts: int) -> dict[str, float]:
        m = self.mask[:texts]
        cos_h = rkdata.cosine_similarity(self.hidden[:texts], hidden[:texts])[m]
        cos_e = rkdata.cosine_similarity(self.emb[:texts], self.model.embedding(hidden[:texts], m))
        return {"emb_cos": float(np.mean(cos_e)), "hidden_cos": float(np.mean(cos_h))}


class _Probe:
    """The exact run's hook: exact attention, and each (estimator, trial)'s per-head output MSE on it
    and cost per query (its result's, else its record's ``cost`` hook: :func:`rfkit.study._cost.attention_cost`)."""

    def __init__(
        self, ests: list[Any], roots: list[np.random.SeedSequence], layers: tuple[int, ...], once: list[bool]
    ) -> None:
        self.ests, self.roots, self.slot = ests, roots, {li: i for i, li in enumerate(layers)}
        self.once = once  # estimators that draw nothing: the first trial's call gives every trial's values
        self.mse = np.full((len(ests), len(roots), len(layers)), np.nan)
        self.cost = np.full_like(self.mse, np.nan)
        self.ill = np.zeros((len(ests), len(roots)))
        self.errors: dict[tuple[int, int], Exception] = {}

    def __call__(self, q: Any, k: Any, v: Any, *, causal: bool, layer: int, key_padding_mask: Any) -> Any:
        exact = rkdata.exact_attention(q, k, v, causal=causal, key_padding_mask=key_padding_mask)
        for i, est in enumerate(self.ests):
            for j, root in enumerate(self.roots):
                if j and self.once[i]:
                    self._repeat_first(i, j, layer)
                    continue
                if (i, j) in self.errors:
                    continue
                try:
                    with _counting(self.ill, (i, j)):
                        hook = rkdata.estimator_attention(est, rng=root)
                        out = hook(q, k, v, causal=causal, layer=layer, key_padding_mask=key_padding_mask)
                        # mean over texts, positions and value dims per head, then over heads
                        self.mse[i, j, self.slot[layer]] = float(
                            np.mean(np.mean((out - exact) ** 2, axis=(0, 2, 3)))
                        )
                        cost = hook.cost.get(layer)  # the result's, else the record's hook
                        if cost is None:
                            cost = attention_cost(
                                est, q, k, causal=causal, rng=rkdata.layer_stream(root, layer)
                            )
                        self.cost[i, j, self.slot[layer]] = cost
                except Exception as exc:  # noqa: BLE001 - recorded or raised by the caller
                    self.errors[(i, j)] = exc
        return exact

    def _repeat_first(self, i: int, j: int, layer: int) -> None:
        """Trial ``j`` of estimator ``i`` (which draws nothing) takes trial 0's values in ``layer``."""
        if (i, 0) in self.errors:
            self.errors[(i, j)] = self.errors[(i, 0)]
            return
        at = self.slot[layer]
        self.mse[i, j, at], self.cost[i, j, at] = self.mse[i, 0, at], self.cost[i, 0, at]
        self.ill[i, j] = self.ill[i, 0]  # the calls' counts so far, layer by layer alike


class _LastGroup:
    """A hook that replaces the attention of the last ``n`` texts of the batch only (exact for the others)."""

    def __init__(self, hook: Any, n: int) -> None:
        self.hook, self.n = hook, n

    def __call__(self, q: Any, k: Any, v: Any, *, causal: bool, layer: int, key_padding_mask: Any) -> Any:
        out = rkdata.exact_attention(q, k, v, causal=causal, key_padding_mask=key_padding_mask)
        n = self.n
        pad = None if key_padding_mask is None else key_padding_mask[-n:]
        out[-n:] = self.hook(q[-n:], k[-n:], v[-n:], causal=causal, layer=layer, key_padding_mask=pad)
        return out


def _one_layer_runs(
    model: Any,
    hook: Any,
    ids: np.ndarray,
    mask: np.ndarray,
    inputs: tuple[np.ndarray, ...],
    layers: tuple[int, ...],
) -> dict[int, np.ndarray]:
    """The last hidden states of the runs that replace each layer of ``layers`` alone, from the exact input
    of that layer (``inputs[l]``: the exact run's, from layer 0).

    The runs go through the model together, one layer at a time: the run of layer ``l`` joins the
    batch at layer ``l`` (its attention there by ``hook``, everywhere else exact), so each layer's
    weights are read once for all the runs rather than once per run.
    """
    n = len(ids)
    X: np.ndarray | None = None
    groups: list[int] = []
    for j in range(min(layers), model.n_layers):
        if j in layers:
            X = inputs[j][:n] if X is None else np.concatenate([X, inputs[j][:n]])
            groups.append(j)
        g = len(groups)
        step = _LastGroup(hook, n) if j in layers else None
        res = model.run(
            np.tile(ids, (g, 1)),
            np.tile(mask, (g, 1)),
            attention=step,
            layers=None if step is None else [j],
            start=j,
            stop=j + 1,
            x=X,
        )
        X = res.hidden
    assert X is not None
    return {li: X[k * n : (k + 1) * n] for k, li in enumerate(groups)}


# ----------------------------------------------------------------------------- evaluation
_ADDED = ("nonpositive_rows", "ill_conditioned_calls")  # columns each model's calls add to


def _repeat_first(
    cols: dict[str, np.ndarray],
    layer_vals: np.ndarray,
    seconds: np.ndarray,
    errors: dict[tuple[int, int], Exception],
    i: int,
    before: dict[str, float],
    rows: slice,
) -> None:
    """Every trial of estimator ``i``, which draws nothing, takes trial 0's results of one model's runs.

    The damage measures and per-layer values (``rows``) are copied; the counts and the time its
    calls added to trial 0 (``before``: trial 0's values before them) are added to every trial;
    trial 0's error is every trial's.
    """
    if (i, 0) in errors:
        for j in range(1, seconds.shape[1]):
            errors[(i, j)] = errors[(i, 0)]
        return
    for c in LAYER_COLUMNS[1:]:  # the damage measures (head_mse: the probe's, per trial already)
        cols[c][i, 1:] = cols[c][i, 0]
    for c in _ADDED:
        cols[c][i, 1:] += cols[c][i, 0] - before[c]
    seconds[i, 1:] += seconds[i, 0] - before["seconds"]
    layer_vals[i, 1:, rows, 1:] = layer_vals[i, :1, rows, 1:]


def _evaluate(
    design: Design,
    cell_index: int,
    streams: list[np.random.SeedSequence],
    trials: list[int],
    entropy: int,
    spawn_key: tuple[int, ...],
    on_error: str,
) -> dict[str, Any]:
    cell = design.cells()[cell_index]
    dd: DropInData = dropin_data(design.data_params(cell), cell.get("feature_dim"))
    texts = () if dd.sourced else cell_data(design, cell, entropy, spawn_key)
    E, Tk = len(design.estimators), len(trials)
    cols = {c: np.full((E, Tk), np.nan) for c in TRIAL_COLUMNS}
    cols["nonpositive_rows"][:] = 0.0
    cols["ill_conditioned_calls"][:] = 0.0
    errors: dict[tuple[int, int], Exception] = {}
    rows = [(m, li) for m in dd.models for li in dd.replaced(m)]
    layer_vals = np.full((E, Tk, len(rows), len(LAYER_COLUMNS)), np.nan)
    seconds = np.full((E, Tk), 0.0)
    for mi, name in enumerate(dd.models):
        decoder = dd.family(name) == "smollm2"  # a causal decoder's measures, else an encoder's
        if dd.sourced:  # a model the data source brought (``source = "transformers"``)
            model, ids, mask = dd.sourced[name]
        else:
            model, (ids, mask) = dropin_model(name, dd.dtype, dd.scale), texts[mi]
        layers = dd.replaced(name)
        params = [model_estimator_params(design, est, cell, name, dd.spec(name)) for est in design.estimators]
        ests = [build_attention_estimator(p) for p in params]
        once = [
            draws_nothing(attention_estimator_record(p["estimator"]), est)
            for p, est in zip(params, ests, strict=True)
        ]
        roots = [  # a decoder of a source draws as SmolLM2 does, an encoder as MiniLM
            np.random.SeedSequence(s.entropy, spawn_key=tuple(s.spawn_key) + (_MODEL_INDEX[dd.family(name)],))
            for s in streams
        ]
        probe = _Probe(ests, roots, layers, once)
        exact = model.run(ids, mask, attention=probe, layers=layers, keep_inputs=dd.one_layer)
        errors.update(probe.errors)
        cols["ill_conditioned_calls"] += probe.ill
        ref: Any = (
            _DecoderRef(model, exact.hidden, ids) if decoder else _EncoderRef(model, exact.hidden, mask)
        )
        if decoder:
            cols["ppl_exact"][:] = ref.perplexity()
        first = rows.index((name, layers[0]))
        layer_vals[:, :, first : first + len(layers), 0] = probe.mse
        cols["dec_head_mse" if decoder else "enc_head_mse"][:] = np.mean(probe.mse, axis=-1)
        cols[COST_COLUMNS[dd.family(name)]][:] = np.mean(probe.cost, axis=-1)
        nt = dd.one_layer_texts
        for i, est in enumerate(ests):
            before = {c: cols[c][i, 0] for c in _ADDED} | {"seconds": seconds[i, 0]}
            for j, root in enumerate(roots[:1] if once[i] else roots):  # once: draws nothing
                if (i, j) in errors:
                    continue
                try:
                    with _counting(cols["ill_conditioned_calls"], (i, j)):
                        hook = rkdata.estimator_attention(est, rng=root)
                        t0 = time.perf_counter()
                        run = model.run(ids, mask, attention=hook, layers=layers)
                        seconds[i, j] += time.perf_counter() - t0
                        cols["nonpositive_rows"][i, j] += sum(hook.n_nonpositive.values())
                        for key, val in ref.damage(run.hidden, len(ids)).items():
                            cols[key][i, j] = val
                        if dd.one_layer and exact.inputs is not None:
                            finals = _one_layer_runs(model, hook, ids[:nt], mask[:nt], exact.inputs, layers)
                            for r, li in enumerate(layers):
                                for key, val in ref.damage(finals[li], nt).items():
                                    layer_vals[i, j, first + r, LAYER_COLUMNS.index(key)] = val
                except Exception as exc:  # noqa: BLE001 - recorded or raised below
                    errors[(i, j)] = exc
            if once[i]:
                _repeat_first(cols, layer_vals, seconds, errors, i, before, slice(first, first + len(layers)))
    status = np.full((E, Tk), "ok", dtype=object)
    for (i, j), err in sorted(errors.items(), key=lambda kv: kv[0]):
        if on_error == "raise":
            raise trial_failure(
                err, design.label(design.estimators[i]), cell, cell_index, trials[j], entropy, spawn_key
            ) from err
        status[i, j] = f"error:{type(err).__name__}"
        for c in cols.values():
            c[i, j] = np.nan
        layer_vals[i, j] = np.nan
    frames = [
        pd.DataFrame(
            {
                "cell": cell_index,
                "estimator": design.label(est),
                "trial": trials,
                "status": status[i].astype(str),
            }
            | {c: cols[c][i] for c in TRIAL_COLUMNS}
        )
        for i, est in enumerate(design.estimators)
    ]
    return {
        "trials": pd.concat(frames, ignore_index=True),
        "layers": layer_vals,
        "layer_rows": rows,
        "seconds": seconds,
    }


def dropin_partial(unit: WorkUnit, setup: None = None) -> PartTables:
    """The chunk's trial rows, per-layer values (estimator, trial, layer row, column) and run times."""
    return _evaluate(
        unit.design,
        unit.cell_index,
        unit.streams(),
        list(unit.trials),
        unit.entropy,
        unit.spawn_key,
        unit.on_error,
    )


def dropin_finalize(unit: WorkUnit, setup: None, parts: list[PartTables]) -> CellTables:
    """Trial rows of all chunks by (estimator, trial); per (estimator, model, layer): mean and MCSE over trials."""
    design, cell_index = unit.design, unit.cell_index
    trials = pd.concat([p["trials"] for p in parts], ignore_index=True)
    order = {label: i for i, label in enumerate(design.labels)}
    key = trials["estimator"].map(order).to_numpy() * design.trials + trials["trial"].to_numpy()
    trials = trials.iloc[np.argsort(key, kind="stable")].reset_index(drop=True)
    vals = np.concatenate([p["layers"] for p in parts], axis=1)  # (E, T, rows, columns)
    secs = np.concatenate([p["seconds"] for p in parts], axis=1)
    rows = parts[0]["layer_rows"]
    pair_frames, timing_rows = [], []
    for i, label in enumerate(design.labels):
        ok = (trials[trials["estimator"] == label]["status"] == "ok").to_numpy()
        v = vals[i, ok]  # (n_ok, rows, columns)
        n = int(ok.sum())
        frame: dict[str, Any] = {
            "cell": cell_index,
            "estimator": label,
            "pair": np.arange(len(rows)),
            "model": [m for m, _ in rows],
            "layer": [li for _, li in rows],
            "n_trials": n,
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns (not measured): NaN
            for c, name in enumerate(LAYER_COLUMNS):
                frame[name] = np.mean(v[..., c], axis=0) if n else np.nan
                frame[f"{name}_mcse"] = np.std(v[..., c], axis=0, ddof=1) / np.sqrt(n) if n > 1 else np.nan
        pair_frames.append(pd.DataFrame(frame))
        s = secs[i][ok]
        timing_rows.append(
            {
                "cell": cell_index,
                "estimator": label,
                "seconds_median": float(np.median(s)) if n else np.nan,
                "calls": n,
            }
        )
    return CellTables(
        trials=trials,
        pairs=pd.concat(pair_frames, ignore_index=True),
        timings=pd.DataFrame(timing_rows),
    )


def dropin_replay(
    design: Design, cell_index: int, stream: Any, entropy: int, spawn_key: tuple[int, ...]
) -> pd.DataFrame:
    """One trial of every estimator of a cell alone: its measures (one row per estimator)."""
    part = _evaluate(design, cell_index, [stream], [int(stream.spawn_key[-1])], entropy, spawn_key, "raise")
    return part["trials"].drop(columns=["cell"])  # type: ignore[no-any-return]
