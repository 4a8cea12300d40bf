"""One record per extensible thing of a study, and the registries that hold them.

Feature maps, attention estimators, metrics, data sources and closed forms each have a frozen
record that says everything the study harness needs: name and display name, the study
parameters and how a study's budget (``samples``, ``feature_dim``) maps onto them, validation,
capabilities, the closed-form hook, whether lower or higher is better (metrics), a description
and a reference. rfkit registers its own records through the same public ``register_*``
functions a user calls (:mod:`rfkit.study._builtin_records`, :mod:`rfkit.study._data_sources`);
a second record under a taken name is an error unless ``replace=True``.

A study file names a registered record by its bare name, or a class of your own as
``"package.module:Name"`` (imported; a record with the defaults is made for it on the fly).

Example
-------
>>> import rfkit as rk
>>> rec = rk.study.feature_map_record("Trig")
>>> rec.name, rec.capabilities.positive, rec.from_budget(8)
('Trig', False, {'n_features': 8})
>>> rk.study.attention_estimator_record("LARA").from_budget(8, {"samples_per_proposal": 2})
{'n_proposals': 4}
>>> rk.study.metric_record("mse").better
'lower'
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from ..exceptions import InvalidParameterError
from ._attention_hooks import BatchedCall, CellSizes, TrialCalls
from ._attention_hooks import call_trial as _call_trial
from ._plain import PATH_HINT, construct, decode, describe, import_object, is_path, parameters
from ._record_types import (
    Capabilities,
    ClosedFormRecord,
    DataSourceRecord,
    FeatureMapRecord,
    MetricRecord,
)


def _check_name(name: Any, what: str) -> None:
    if not isinstance(name, str) or not name or ":" in name or "." in name:
        raise InvalidParameterError(
            f"A {what} record's `name` must be a non-empty string without ':' or '.' (those mean an "
            f"import, {PATH_HINT}). Got {name!r} instead."
        )


@dataclasses.dataclass(frozen=True)
class AttentionEstimatorRecord:
    """An attention estimator a study can name.

    Parameters
    ----------
    name : str
        The bare name study files use (``estimator = "RA"``).
    factory : callable
        A class whose instances are called ``(Q, K, V, *, rng) -> AttentionResult``, or such a
        function (called with the study parameters as keywords besides ``rng``).
    display_name : str, optional
    from_budget : callable, optional
        ``from_budget(samples, params) -> dict``: the constructor's parameters for a budget of
        ``samples`` random samples (``n_samples``, ``n_proposals``, ...), given the entry's other
        parameters. None: the estimator takes ``samples`` itself (under that name). For an
        estimator with an ``inner_map`` it splits a study's budget instead, returning
        ``{"map_budget": k}``: the part left to the map (Hybrid: what its support's exact keys
        leave, docs page *Studies*, section "Cost per query"); ``params`` then hold ``causal``.
    inner_map : str, optional
        For estimators built around a feature map (RFA): the parameter that takes the map and the
        default map's name, as ``"feature_map=Positive"``. The entry's keys that are not the
        estimator's own go to the map, and the budget goes to the map's ``from_budget``.
    capabilities : Capabilities
    description, reference : str
    batched : callable, optional
        ``batched(estimator, calls) -> BatchedCall | None``: several trials of a work unit in one
        call (``calls`` a :class:`~rfkit.study.TrialCalls`); None (the default, or the hook's
        answer): one call per trial (``call_trial``).
    call_trial : callable, optional
        ``call_trial(estimator, calls, j) -> AttentionResult``: trial ``j`` of the unit alone.
        Default: ``estimator(Q, K, V, rng=calls.streams[j])``, the trial's NumPy stream.
    device_draws : callable, optional
        ``device_draws(estimator) -> bool``: the instance draws its random numbers on the device
        with ``draws = "backend"`` (its ``batched`` and ``call_trial`` hooks then use
        ``calls.device``, or the backend's generator seeded with the trial's stream). None (the
        default): not supported; the estimator keeps its NumPy draws, and the run's provenance
        lists it (``numpy_draws``).
    fit : callable, optional
        ``fit(estimator, Q, K, fits) -> estimator``: the estimator with its data-dependent
        parameters fitted once on a cell's queries and keys (on the backend), instead of once
        per call; ``fits`` (one dict per work unit) caches fits between the unit's estimators.
        It must leave every trial's output unchanged, and return the estimator as it is where
        the fit fails (each call then fails, and is recorded, on its own). None (the default):
        the estimator is called as built.
    cost : callable, optional
        ``cost(estimator, sizes) -> float``: the cost per query in a cell (``sizes`` a
        :class:`~rfkit.study.CellSizes`): keys computed exactly plus random features or samples
        (docs page *Studies*, section "Cost per query"). None (the default): the estimator's own
        ``cost_per_query(n_queries, n_keys, dim, causal)`` method where it has one, else NaN (the
        ``cost`` column says "not known").
    deterministic : callable, optional
        ``deterministic(estimator) -> bool``: the instance draws nothing (its output does not
        depend on ``rng``, as Hybrid with keys by content and no remainder): the harness calls it
        once per work unit and gives every trial of the unit that call's results (outputs,
        statuses, counts and time), which are the numbers the other calls would repeat. None
        (the default): every trial is called.
    deduplicate : bool, default=False
        Two equal (and hashable) instances in a cell make the same calls on the same trial
        streams: the second takes the first's outputs instead of computing them again (NumPy
        draws only). Leave it False unless equal instances give equal outputs.
    uses_map : callable, optional
        ``uses_map(params) -> bool``, for an estimator with an ``inner_map``: whether an entry
        builds the map (Hybrid: not with a sampled or dropped remainder). None (the default):
        always. Where it says no, the entry is built as an estimator without a map, and the
        budget goes to its ``from_budget``.
    """

    kind: ClassVar[str] = "attention estimator"
    name: str
    factory: Callable[..., Any]
    display_name: str = ""
    from_budget: Callable[[int, Mapping[str, Any]], dict[str, Any]] | None = None
    inner_map: str | None = None
    capabilities: Capabilities = Capabilities()
    description: str = ""
    reference: str = ""
    batched: Callable[[Any, TrialCalls], BatchedCall | None] | None = None
    call_trial: Callable[[Any, TrialCalls, int], Any] = _call_trial
    device_draws: Callable[[Any], bool] | None = None
    fit: Callable[[Any, Any, Any, dict[Any, Any]], Any] | None = None
    cost: Callable[[Any, CellSizes], float] | None = None
    deterministic: Callable[[Any], bool] | None = None
    deduplicate: bool = False
    uses_map: Callable[[Mapping[str, Any]], bool] | None = None

    def __post_init__(self) -> None:
        if not callable(self.factory):
            raise InvalidParameterError(
                f"`estimator` = {self.name!r} must be a class or a function (Q, K, V, *, rng) -> "
                f"AttentionResult. Got {describe(self.factory)} instead."
            )
        for hook in ("batched", "call_trial", "device_draws", "fit", "cost", "deterministic", "uses_map"):
            value = getattr(self, hook)
            if value is not None and not callable(value):
                raise InvalidParameterError(
                    f"The `{hook}` parameter of AttentionEstimatorRecord {self.name!r} must be a callable "
                    f"or None. Got {describe(value)} instead."
                )
        if self.call_trial is None:
            object.__setattr__(self, "call_trial", _call_trial)
        if not isinstance(self.deduplicate, (bool, np.bool_)):
            raise InvalidParameterError(
                f"The `deduplicate` parameter of AttentionEstimatorRecord {self.name!r} must be a bool. "
                f"Got {self.deduplicate!r} instead."
            )
        object.__setattr__(self, "deduplicate", bool(self.deduplicate))
        if not self.display_name:
            object.__setattr__(self, "display_name", self.name.rsplit(":", 1)[-1])

    @property
    def params(self) -> frozenset[str] | None:
        """The constructor's own parameters (None: it takes any)."""
        p = parameters(self.factory)
        if p is None:
            return None
        if self.inner_map is not None:
            p.discard(self.inner_map.partition("=")[0])
        return frozenset(p)

    @property
    def own_keys(self) -> frozenset[str]:
        """Keys of a study entry that belong to the estimator, never to its feature map."""
        own = {"estimator", "samples"} | set(self.params or ())
        return frozenset(own | ({"map"} if self.inner_map is not None else set()))

    def map_spec(self, params: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """``(map name, map parameters)`` of an entry, for an estimator built around a feature map."""
        if self.inner_map is None or (self.uses_map is not None and not self.uses_map(params)):
            return None
        default = self.inner_map.partition("=")[2]
        own = self.own_keys
        return str(params.get("map", default)), {k: v for k, v in params.items() if k not in own}

    def study_keys(self, params: Mapping[str, Any]) -> frozenset[str] | None:
        """Keys (grid axes included) the entry takes: the estimator's own, its map's (None: any)."""
        spec = self.map_spec(params)
        if spec is None:
            own = self.params
            if own is None:
                return None
            return frozenset(own | ({"samples"} if self.from_budget is not None else set()))
        inner = feature_map_record(spec[0]).params
        return None if inner is None else frozenset(self.own_keys | inner)

    def build(self, params: Mapping[str, Any]) -> Any:
        """The estimator from a study entry's parameters (``estimator`` included or not)."""
        p = {k: v for k, v in params.items() if k != "estimator"}
        samples = p.pop("samples", None)
        spec = self.map_spec(p)
        if spec is not None:
            map_name, map_params = spec
            if samples is not None:
                for k, v in feature_map_record(map_name).from_budget(samples).items():
                    map_params.setdefault(k, v)
            fm = feature_map_record(map_name).build(map_params)
            own = {k: v for k, v in p.items() if k in self.own_keys and k != "map"}
            return self.factory(fm, **own)
        if samples is not None:
            if self.from_budget is None:
                p["samples"] = samples
            else:
                for k, v in self.from_budget(samples, p).items():
                    p.setdefault(k, v)
        accepted = self.params
        name = getattr(self.factory, "__qualname__", self.name)
        if accepted is not None:
            bad = [k for k in p if k not in accepted]
            if bad:
                hint = (
                    " (a grid axis: give the estimator that parameter, or drop the axis)"
                    if bad[0] == "samples"
                    else ""
                )
                raise InvalidParameterError(
                    f"{name} has no parameter `{bad[0]}` (it takes {sorted(accepted)}){hint}. "
                    f"Got {bad[0]}={p[bad[0]]!r}."
                )
        kwargs = {k: decode(v) for k, v in p.items()}
        if isinstance(self.factory, type):
            est = construct(self.factory, kwargs)
            if not callable(est):
                raise InvalidParameterError(
                    f"{name}(...) must be callable as (Q, K, V, *, rng) -> AttentionResult. "
                    f"Got {describe(est)} instead."
                )
            return est
        if accepted is not None and "rng" not in accepted:
            raise InvalidParameterError(
                f"{name} must take a keyword argument `rng` (signature (Q, K, V, *, rng, n_draws=None)). "
                f"Got the signature {inspect.signature(self.factory)} instead."
            )
        return _bound(self.factory, kwargs)


def _bound(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    return functools.partial(fn, **kwargs) if kwargs else fn


_REGISTRIES: dict[str, dict[str, Any]] = {
    "feature map": {},
    "attention estimator": {},
    "metric": {},
    "data source": {},
    "closed form": {},
}

#: Records registered on first use by the module that defines them, by kind and name: the bridges
#: above rfkit's core (``rfkit.integrations``) register data sources that the study layer may not
#: import. A lookup of such a name (or a listing of the kind) imports the module, whose import
#: registers the record through the ordinary ``register_*`` function.
_DEFERRED: dict[str, dict[str, str]] = {
    "data source": {"transformers": "rfkit.integrations._hf_source"},
}


def _load_deferred(kind: str, name: Any = None) -> None:
    """Import the modules of the deferred records of ``kind`` (only ``name``'s, where given) not yet registered."""
    pending = _DEFERRED.get(kind, {})
    for key, module in list(pending.items()):
        if (name is None or key == name) and key not in _REGISTRIES[kind]:
            importlib.import_module(module)
            if key not in _REGISTRIES[kind]:
                raise InvalidParameterError(f"importing {module} did not register the {kind} {key!r}.")


def _register(obj: object, cls: type, replace: bool) -> Any:
    if not isinstance(obj, cls):
        raise InvalidParameterError(f"expected a {cls.__name__}. Got {describe(obj)} instead.")
    record: Any = obj
    key = record.map if isinstance(record, ClosedFormRecord) else record.name
    if not isinstance(record, ClosedFormRecord):
        _check_name(key, record.kind)
    reg = _REGISTRIES[record.kind]
    if key in reg and not replace:
        raise InvalidParameterError(
            f"a {record.kind} named {key!r} is already registered; pass replace=True to replace it on purpose."
        )
    reg[key] = record
    return record


def register_feature_map(record: FeatureMapRecord, *, replace: bool = False) -> FeatureMapRecord:
    """Register a feature map under ``record.name`` (an error if taken, unless ``replace=True``).

    Parameters
    ----------
    record : FeatureMapRecord
        The record.
    replace : bool, default=False
        Replace a record registered under the same name instead of raising.

    Returns
    -------
    FeatureMapRecord
        The record registered (so the call can be used as an expression).
    """
    return _register(record, FeatureMapRecord, replace)  # type: ignore[no-any-return]


def register_attention_estimator(
    record: AttentionEstimatorRecord, *, replace: bool = False
) -> AttentionEstimatorRecord:
    """Register an attention estimator under ``record.name`` (an error if taken, unless ``replace=True``).

    Parameters
    ----------
    record : AttentionEstimatorRecord
        The record.
    replace : bool, default=False
        Replace a record registered under the same name instead of raising.

    Returns
    -------
    AttentionEstimatorRecord
        The record registered (so the call can be used as an expression).
    """
    return _register(record, AttentionEstimatorRecord, replace)  # type: ignore[no-any-return]


def register_metric(record: MetricRecord, *, replace: bool = False) -> MetricRecord:
    """Register a summary metric under ``record.name`` (an error if taken, unless ``replace=True``).

    Parameters
    ----------
    record : MetricRecord
        The record.
    replace : bool, default=False
        Replace a record registered under the same name instead of raising.

    Returns
    -------
    MetricRecord
        The record registered (so the call can be used as an expression).
    """
    return _register(record, MetricRecord, replace)  # type: ignore[no-any-return]


def register_data_source(record: DataSourceRecord, *, replace: bool = False) -> DataSourceRecord:
    """Register a data source under ``record.name`` (an error if taken, unless ``replace=True``).

    Parameters
    ----------
    record : DataSourceRecord
        The record.
    replace : bool, default=False
        Replace a record registered under the same name instead of raising.

    Returns
    -------
    DataSourceRecord
        The record registered (so the call can be used as an expression).
    """
    return _register(record, DataSourceRecord, replace)  # type: ignore[no-any-return]


def register_closed_form(record: ClosedFormRecord, *, replace: bool = False) -> ClosedFormRecord:
    """Register the closed-form MSE of the map named ``record.map`` (an error if taken, unless ``replace=True``).

    Parameters
    ----------
    record : ClosedFormRecord
        The record.
    replace : bool, default=False
        Replace a record registered under the same name instead of raising.

    Returns
    -------
    ClosedFormRecord
        The record registered (so the call can be used as an expression).
    """
    return _register(record, ClosedFormRecord, replace)  # type: ignore[no-any-return]


def records(kind: str) -> tuple[Any, ...]:
    """Every registered record of a kind, in registration order.

    Parameters
    ----------
    kind : {"feature map", "attention estimator", "metric", "data source", "closed form"}
        The kind of record.

    Returns
    -------
    tuple
        The records.
    """
    if kind not in _REGISTRIES:
        raise InvalidParameterError(f"`kind` must be one of {list(_REGISTRIES)}. Got {kind!r} instead.")
    _load_deferred(kind)
    return tuple(_REGISTRIES[kind].values())


def registered_modules() -> tuple[str, ...]:
    """Modules (other than rfkit's and ``__main__``) whose code registered records live in.

    Worker processes import them before a run, so records registered by a module of yours are
    known there too.
    """
    mods = []
    for reg in _REGISTRIES.values():
        for rec in reg.values():
            fn = rec.mse if isinstance(rec, ClosedFormRecord) else getattr(rec, "factory", None)
            mod = getattr(fn, "__module__", None)
            if mod and mod != "__main__" and mod.split(".")[0] != "rfkit" and mod not in mods:
                mods.append(mod)
    return tuple(mods)


def feature_map_record(name: Any) -> FeatureMapRecord:
    """The record of a ``map`` entry: a registered name, or ``"package.module:ClassName"`` (imported).

    Parameters
    ----------
    name : str
        A registered feature map's name or ``"package.module:ClassName"``.

    Returns
    -------
    FeatureMapRecord
        The record.
    """
    if is_path(name):
        return FeatureMapRecord(name=str(name), factory=import_object(str(name), "map"))
    reg = _REGISTRIES["feature map"]
    if name not in reg:
        raise InvalidParameterError(
            f"`map` must name a feature map of rfkit.features {list(reg)} or be {PATH_HINT}. "
            f"Got {name!r} instead."
        )
    return reg[name]  # type: ignore[no-any-return]


def attention_estimator_record(name: Any) -> AttentionEstimatorRecord:
    """The record of an ``estimator`` entry: a registered name, or ``"package.module:Name"`` (imported).

    Parameters
    ----------
    name : str
        A registered estimator's name or ``"package.module:Name"``.

    Returns
    -------
    AttentionEstimatorRecord
        The record.
    """
    if is_path(name):
        obj = import_object(str(name), "estimator")
        for rec in _REGISTRIES["attention estimator"].values():
            if rec.factory is obj:  # a registered estimator named by its import path: its record
                return rec  # type: ignore[no-any-return]
        inherited = _nearest_record(obj) if isinstance(obj, type) else None
        hooks = {} if inherited is None else {f: getattr(inherited, f) for f in HOOKS}
        return AttentionEstimatorRecord(name=str(name), factory=obj, **hooks)
    reg = _REGISTRIES["attention estimator"]
    if name not in reg:
        raise InvalidParameterError(
            f"`estimator` must be one of {list(reg)} or {PATH_HINT}. Got {name!r} instead."
        )
    return reg[name]  # type: ignore[no-any-return]


#: the fields of an attention-estimator record that carry behaviour (a subclass inherits them)
HOOKS = ("batched", "call_trial", "device_draws", "fit", "cost", "deterministic", "deduplicate")


def _nearest_record(cls: type) -> AttentionEstimatorRecord | None:
    """The registered record whose factory is ``cls`` or its nearest base class, else None."""
    by_factory = {id(rec.factory): rec for rec in _REGISTRIES["attention estimator"].values()}
    for base in cls.__mro__:
        rec = by_factory.get(id(base))
        if rec is not None:
            return rec  # type: ignore[no-any-return]
    return None


def draws_nothing(record: AttentionEstimatorRecord, estimator: Any) -> bool:
    """Whether ``record``'s ``deterministic`` hook says the built ``estimator`` draws nothing (no hook: it may draw)."""
    return record.deterministic is not None and bool(record.deterministic(estimator))


def record_of(estimator: Any) -> AttentionEstimatorRecord | None:
    """The registered record of a built attention estimator, else None.

    The record whose factory is the estimator's class or its nearest registered base class (a
    subclass of a registered estimator behaves as it), or, for a function (bound to its
    parameters or not), the record of that function.
    """
    if isinstance(estimator, functools.partial):
        estimator = estimator.func
    if inspect.isfunction(estimator):
        for rec in _REGISTRIES["attention estimator"].values():
            if rec.factory is estimator:
                return rec  # type: ignore[no-any-return]
        return None
    return _nearest_record(type(estimator))


def metric_record(name: str) -> MetricRecord:
    """The record of a registered metric.

    Parameters
    ----------
    name : str
        The metric's name.

    Returns
    -------
    MetricRecord
        The record.
    """
    reg = _REGISTRIES["metric"]
    if name not in reg:
        raise InvalidParameterError(f"`metric` must be one of {list(reg)}. Got {name!r} instead.")
    return reg[name]  # type: ignore[no-any-return]


def data_source_record(name: Any) -> DataSourceRecord:
    """The record of a registered data source.

    Parameters
    ----------
    name : str
        The data source's name.

    Returns
    -------
    DataSourceRecord
        The record.
    """
    reg = _REGISTRIES["data source"]
    if isinstance(name, str) and name not in reg:
        _load_deferred("data source", name)
    if name not in reg:
        raise InvalidParameterError(f"`data.source` must be one of {sorted(reg)}. Got {name!r} instead.")
    return reg[name]  # type: ignore[no-any-return]


def closed_form_record(map_name: str) -> ClosedFormRecord | None:
    """The closed form registered for the map named ``map_name``, or None.

    Parameters
    ----------
    map_name : str
        The feature map's registered name.

    Returns
    -------
    ClosedFormRecord or None
        The record; None when the map has no closed form registered.
    """
    return _REGISTRIES["closed form"].get(map_name)  # type: ignore[no-any-return]
