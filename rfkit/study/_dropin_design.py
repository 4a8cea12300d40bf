"""The parameters and checks of drop-in designs, when a design is built: models, texts, layers, budgets.

Everything here reads the design only (no model is loaded, no text tokenised, nothing is run):
:func:`check_dropin_design` is part of the design's validation, and the evaluation
(:mod:`rfkit.study._eval_dropin`) and the ``passages`` data source use the same parsed
parameters (:func:`dropin_data`) and per-model estimator settings (:func:`model_estimator_params`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import data as rkdata
from ..exceptions import InvalidParameterError
from ._estimators import build_attention_estimator
from ._records import attention_estimator_record, data_source_record, metric_record

if TYPE_CHECKING:
    from ._design import Design

__all__ = [
    "DROPIN_PARAMS",
    "MODEL_CLASSES",
    "MODEL_METRICS",
    "COST_COLUMNS",
    "dropin_cost_columns",
    "DropInData",
    "dropin_data",
    "dropin_model_dim",
    "model_estimator_params",
    "check_dropin_design",
]

#: the models a drop-in design can run, by the names study files use
MODEL_CLASSES: dict[str, type[rkdata.PretrainedModel]] = {
    "smollm2": rkdata.SmolLM2Model,
    "minilm": rkdata.MiniLMModel,
}
#: the data parameters of the ``passages`` source
DROPIN_PARAMS = frozenset({"models", "n_tokens", "n_texts", "layers", "one_layer", "dtype", "scale"})


@dataclasses.dataclass(frozen=True)
class DropInData:
    """The checked data parameters of one drop-in cell.

    ``layers``: the layers replaced (None: every layer of each model); ``one_layer``: whether
    this cell also replaces each of them alone (its ``n_tokens`` and ``feature_dim`` are among
    those of ``data.one_layer``), on the first ``one_layer_texts`` texts. ``sourced``: for a
    source that brings its own model (its record's ``dropin`` hook), ``{source: (model, ids,
    mask)}``, the source's name standing for the model in ``models``; empty for the built-in models.
    """

    models: tuple[str, ...]
    n_tokens: int
    n_texts: int
    layers: tuple[int, ...] | None
    one_layer: bool
    one_layer_texts: int
    dtype: str
    scale: str
    sourced: Mapping[str, tuple[Any, Any, Any]] = dataclasses.field(
        default_factory=dict, compare=False, hash=False, repr=False
    )

    def spec(self, model: str) -> Any:
        """The model ``model`` names: a built-in model's class, or the model a source brought."""
        return self.sourced[model][0] if model in self.sourced else MODEL_CLASSES[model]

    def family(self, model: str) -> str:
        """Whose metrics ``model`` gives: ``"smollm2"`` (a causal decoder's) or ``"minilm"`` (an encoder's)."""
        return "smollm2" if self.spec(model).causal else "minilm"

    def replaced(self, model: str) -> tuple[int, ...]:
        """The replaced layers of ``model``."""
        return tuple(range(self.spec(model).n_layers)) if self.layers is None else self.layers


def _int(p: Mapping[str, Any], key: str, default: Any, low: int) -> int:
    v = p.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise InvalidParameterError(
            f"`data.{key}` (or its [data] table's `{key}`) must be an integer >= {low}. Got {v!r} instead."
        )
    return int(v)


def dropin_data(p: Mapping[str, Any], feature_dim: Any = None) -> DropInData:
    """The data parameters of a drop-in cell (``design.data_params(cell)``), checked, with defaults.

    ``one_layer`` is a table ``{n_tokens = [...], feature_dim = [...], texts = k}``: the cells with
    one of those context lengths and budgets (``feature_dim``: the cell's; left out: every budget)
    also replace each layer alone, on their first ``texts`` texts (default: all). A source with
    a ``dropin`` hook (``source = "transformers"``) brings its model and texts: the hook loads them.
    """
    source = p.get("source", "passages")
    hook = data_source_record(source).dropin
    if hook is not None:
        return _sourced_data(p, feature_dim, source, hook)
    models = p.get("models", list(MODEL_CLASSES))
    if (
        not isinstance(models, list)
        or not models
        or any(m not in MODEL_CLASSES for m in models)
        or len(set(models)) != len(models)
    ):
        raise InvalidParameterError(
            f"`data.models` must be a non-empty list of distinct names from {list(MODEL_CLASSES)}. Got {models!r} instead."
        )
    if "n_tokens" not in p:
        raise InvalidParameterError(
            "`data.n_tokens` (the context length, in [data] or the grid) must be given."
        )
    n_tokens = _int(p, "n_tokens", None, 3 if "minilm" in models else 2)
    for m in models:
        top = MODEL_CLASSES[m].max_positions
        if n_tokens > top:
            raise InvalidParameterError(
                f"`data.n_tokens` = {n_tokens} exceeds the {top} positions of {MODEL_CLASSES[m].name} ({m!r})."
            )
    n_texts = _int(p, "n_texts", 1, 1)
    layers = _layers(p, min(MODEL_CLASSES[m].n_layers for m in models))
    here, one_texts = _one_layer(p, n_tokens, n_texts, feature_dim)
    dtype, scale = _dtype_scale(p)
    return DropInData(tuple(models), n_tokens, n_texts, layers, here, one_texts, dtype, scale)


def _sourced_data(p: Mapping[str, Any], feature_dim: Any, source: str, hook: Any) -> DropInData:
    """The data of a cell whose source brings its own model (its record's ``dropin`` hook)."""
    if "models" in p:
        raise InvalidParameterError(
            f"`data.models` names rfkit's built-in models (source 'passages'); source {source!r} brings its "
            f"own model (`data.model`): leave `models` out. Got {p['models']!r}."
        )
    if "n_tokens" not in p:
        raise InvalidParameterError(
            "`data.n_tokens` (the context length, in [data] or the grid) must be given."
        )
    n_tokens, n_texts = _int(p, "n_tokens", None, 2), _int(p, "n_texts", 1, 1)
    here, one_texts = _one_layer(p, n_tokens, n_texts, feature_dim)
    if p.get("one_layer"):
        raise InvalidParameterError(
            f"`data.one_layer` needs rfkit's own forward pass, which starts a run at any layer; source "
            f"{source!r} runs its model whole: leave `one_layer` out. Got {p['one_layer']!r}."
        )
    dtype, scale = _dtype_scale(p)
    model, ids, mask = hook(p)
    if n_tokens > model.max_positions:
        raise InvalidParameterError(
            f"`data.n_tokens` = {n_tokens} exceeds the {model.max_positions} positions of {model.name}."
        )
    layers = _layers(p, model.n_layers)
    return DropInData(
        (source,), n_tokens, n_texts, layers, here, one_texts, dtype, scale, {source: (model, ids, mask)}
    )


def _layers(p: Mapping[str, Any], top: int) -> tuple[int, ...] | None:
    layers = p.get("layers")
    if layers is not None:
        if (
            not isinstance(layers, list)
            or not layers
            or any(isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < top for v in layers)
            or len(set(layers)) != len(layers)
        ):
            raise InvalidParameterError(
                f"`data.layers` must be a non-empty list of distinct layer indices in [0, {top - 1}] (every model "
                f"of `data.models` has them); leave it out to replace every layer. Got {layers!r} instead."
            )
        layers = tuple(int(v) for v in layers)
    return layers


def _one_layer(p: Mapping[str, Any], n_tokens: int, n_texts: int, feature_dim: Any) -> tuple[bool, int]:
    one = p.get("one_layer", {})
    rule = (
        "must be a table {n_tokens = [context lengths], feature_dim = [budgets] (optional), texts = k "
        "(optional)}"
    )
    if not isinstance(one, Mapping) or set(one) - {"n_tokens", "feature_dim", "texts"}:
        raise InvalidParameterError(f"`data.one_layer` {rule}. Got {one!r} instead.")
    lists = {k: one.get(k) for k in ("n_tokens", "feature_dim")}
    for k, v in lists.items():
        if v is not None and (
            not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v)
        ):
            raise InvalidParameterError(f"`data.one_layer.{k}` must be a list of ints. Got {v!r} instead.")
    if one and lists["n_tokens"] is None:
        raise InvalidParameterError(f"`data.one_layer` {rule}: `n_tokens` is missing. Got {one!r} instead.")
    one_texts = _int(one, "texts", n_texts, 1)
    if one_texts > n_texts:
        raise InvalidParameterError(
            f"`data.one_layer.texts` = {one_texts} must be at most `n_texts` = {n_texts}."
        )
    here = (
        bool(one)
        and n_tokens in (lists["n_tokens"] or [])
        and (lists["feature_dim"] is None or feature_dim in lists["feature_dim"])
    )
    return here, one_texts


def _dtype_scale(p: Mapping[str, Any]) -> tuple[str, str]:
    dtype = p.get("dtype", "float64")
    if dtype not in ("float64", "float32"):
        raise InvalidParameterError(f"`data.dtype` must be 'float64' or 'float32'. Got {dtype!r} instead.")
    scale = p.get("scale", "symmetric")
    if scale not in ("symmetric", "query"):
        raise InvalidParameterError(f"`data.scale` must be 'symmetric' or 'query'. Got {scale!r} instead.")
    return dtype, scale


def dropin_model_dim(p: Mapping[str, Any]) -> int:
    """The smallest head dimension of the design's models (each model's own is used when it runs)."""
    models = p.get("models", list(MODEL_CLASSES))
    dims = (
        [MODEL_CLASSES[m].head_dim for m in models if m in MODEL_CLASSES] if isinstance(models, list) else []
    )
    return min(dims) if dims else min(c.head_dim for c in MODEL_CLASSES.values())


#: the metrics each model's runs give
MODEL_METRICS = {
    "smollm2": ("kl", "top1_agree", "ppl_ratio", "dec_head_mse"),
    "minilm": ("emb_cos", "hidden_cos", "enc_head_mse"),
}
#: the trials column of each model family's cost per query: exact logits plus random features (the
#: estimator's result's ``cost`` where it reports one, else its record's ``cost`` hook), the mean over
#: the replaced layers of one call each on the exact run's q, k, v (over texts, heads and queries)
COST_COLUMNS = {"smollm2": "dec_cost", "minilm": "enc_cost"}


def dropin_cost_columns() -> dict[str, str]:
    """Per drop-in metric, the trials column of the cost per query on the model it measures."""
    return {m: COST_COLUMNS[model] for model, names in MODEL_METRICS.items() for m in names}


# ----------------------------------------------------------------------------- estimators per model
def model_estimator_params(
    design: Design, est: dict[str, Any], cell: dict[str, Any], model: str, spec: Any = None
) -> dict[str, Any]:
    """An estimator's parameters for one model in a cell: the model's head dimension and causality.

    ``feature_dim`` is the cost per query. An estimator whose record splits a budget between keys
    computed exactly and its feature map (``inner_map`` and ``from_budget``) is asked for the split
    with the model's causality, so that every estimator of the cell costs the same per query; the
    record refuses an entry whose cost it cannot fix ahead, or whose exact keys leave the map nothing.
    ``spec``: the model itself where a source brought it (``DropInData.spec``); None: a built-in's.
    """
    cls = MODEL_CLASSES[model] if spec is None else spec
    label = design.label(est)
    if "causal" in est:
        raise InvalidParameterError(
            f"{label!r}: drop-in designs set `causal` from the model (a decoder causal, an encoder bidirectional); "
            "leave it out of the estimator."
        )
    c = {**cell, "dim": cls.head_dim}
    record = attention_estimator_record(est.get("estimator"))
    if record.inner_map is not None and record.from_budget is not None:
        est = {**est, "causal": cls.causal}
        try:  # also where the entry fixes the map's size: drop-in designs compare at equal cost
            record.from_budget(int(cell["feature_dim"]), est)
        except InvalidParameterError as exc:
            raise InvalidParameterError(
                f"{label!r} on {cls.name}: drop-in designs compare estimators at equal cost per query "
                f"(`feature_dim` = {cell['feature_dim']}): {exc}"
            ) from None
    params = design.estimator_params(est, c)
    params["causal"] = cls.causal
    return params


def check_dropin_design(d: Design) -> None:
    """The checks of a drop-in design beyond every design's: budget axis, metrics, data, each estimator per model."""
    src = d.source
    if "feature_dim" not in d.grid:
        raise InvalidParameterError(
            f"{src}: `grid.feature_dim` (the cost per query) must be a grid axis of a drop-in design."
        )
    for m in d.metrics:
        if metric_record(m).compute is not None:
            raise InvalidParameterError(
                f"{src}: `metrics`: drop-in designs compute no metric of your own ({m!r})."
            )
    for cell in d.cells():
        try:
            dd = dropin_data(d.data_params(cell), cell.get("feature_dim"))
        except InvalidParameterError as exc:
            raise InvalidParameterError(f"{src}: {exc}") from None
        for model, names in MODEL_METRICS.items():
            wanted = [m for m in d.metrics if m in names]
            if wanted and dd.sourced and model not in {dd.family(m) for m in dd.models}:
                kind = "a causal decoder" if model == "smollm2" else "an encoder"
                raise InvalidParameterError(
                    f"{src}: `metrics` {wanted} measure {kind}, which {dd.spec(dd.models[0]).name} is not."
                )
            if wanted and not dd.sourced and model not in dd.models:
                raise InvalidParameterError(
                    f"{src}: `metrics` {wanted} measure {MODEL_CLASSES[model].name}, which `data.models` = "
                    f"{list(dd.models)} does not run."
                )
        for i, est in enumerate(d.estimators):
            for model in dd.models:
                try:
                    build_attention_estimator(model_estimator_params(d, est, cell, model, dd.spec(model)))
                except InvalidParameterError as exc:
                    raise InvalidParameterError(
                        f"{src}: estimators[{i}] ({d.label(est)!r}), {model}: {exc}"
                    ) from None
