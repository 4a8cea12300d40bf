"""Building a study's feature maps and attention estimators from their records, and checking them.

The records (:mod:`rfkit.study._records`) say how each entry is built; this module turns a
study entry (a table of ``map`` / ``estimator`` and parameters, or an object) into its plain
study-file form, builds it, and checks that an attention estimator follows the protocol.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import features
from .._backend import to_numpy
from ..attention import AttentionResult, check_attention_estimator
from ..exceptions import InvalidParameterError
from ._plain import (
    PATH_HINT,
    check_round_trip,
    class_ref,
    describe,
    init_fields,
    plain,
    workers_can_import,
)
from ._record_types import ATTENTION_KINDS
from ._records import attention_estimator_record, feature_map_record
from ._views import ATTENTION_ESTIMATORS, FEATURE_MAPS

__all__ = [
    "ATTENTION_ESTIMATORS",
    "FEATURE_MAPS",
    "build_feature_map",
    "build_attention_estimator",
    "check_attention_estimator",
    "check_attention_output",
    "feature_map_class",
    "normalise_estimator",
    "takes",
    "workers_can_import",
]


def takes(name: Any, kind: str) -> frozenset[str] | None:
    """Keys (grid axes included) the map / estimator a study entry names takes (None: any)."""
    if kind == "map":
        return feature_map_record(name).params
    return attention_estimator_record(name).study_keys({})


def _budget_fields(kind: str, key: str, est: Mapping[str, Any], grid_axes: set[str]) -> set[str]:
    """Fields of an object that the grid supplies cell by cell (so they are not stored with it)."""
    supplied = set(grid_axes)
    if kind in ATTENTION_KINDS and key == "map" and "samples" in grid_axes:
        e = est.get("estimator")
        try:
            spec = attention_estimator_record(e).map_spec({}) if isinstance(e, str) else None
        except InvalidParameterError:  # an unknown estimator: reported when the design is checked
            spec = None
        if spec is not None:  # the budget `samples` sizes the estimator's map
            supplied |= set(feature_map_record(spec[0]).from_budget(1))
    return supplied


def normalise_estimator(est: Any, kind: str, grid_axes: set[str]) -> dict[str, Any]:
    """The plain study-file form of one ``estimators`` entry.

    ``est`` is a table (dict) whose ``map`` / ``estimator`` may be a name, a class, a function
    or an instance, or the object itself. An instance becomes ``"module:Class"`` (a bare name
    for rfkit's feature maps) plus its non-default fields as parameters, except fields named by
    a grid axis (the grid supplies them cell by cell) and fields the table sets itself; it must
    rebuild to an equal object from that form.
    """
    key = "estimator" if kind in ATTENTION_KINDS else "map"
    if not isinstance(est, Mapping):
        if isinstance(est, str):
            raise InvalidParameterError(
                f"must be a table with `{key}` = ..., or a {'callable' if kind in ATTENTION_KINDS else 'feature map'}. "
                f"Got {est!r} instead."
            )
        est = {key: est}
    out = {k: v for k, v in est.items()}
    label = out.get("label")
    for k in ("map", "estimator"):
        if k not in out:
            continue
        v = out[k]
        if isinstance(v, str):
            continue
        top = k == "estimator"
        supplied = _budget_fields(kind, k, est, grid_axes)
        if isinstance(v, type) or (inspect.isfunction(v) and top):
            out[k] = class_ref(v, bare=not top)
        elif dataclasses.is_dataclass(v):
            ref = class_ref(type(v), bare=not top)
            fields = {n: val for n, val in init_fields(v).items() if n not in supplied and n not in est}
            out[k] = ref
            for n, val in fields.items():
                out[n] = plain(val, f"`{n}` of {type(v).__qualname__}")
            check_round_trip(v, ref, {**fields, **{n: getattr(v, n) for n in supplied if hasattr(v, n)}}, top)
        else:
            raise InvalidParameterError(
                f"`{k}` must be a name, {PATH_HINT}, a class, or a dataclass instance (stored as its class "
                f"and parameters; for other objects pass the class and its parameters). Got {describe(v)} instead."
            )
        if label is None:
            out["label"] = (
                type(v).__name__ if not isinstance(v, type) and not inspect.isfunction(v) else v.__name__
            )
            label = out["label"]
    for k, v in list(out.items()):
        if k not in ("map", "estimator", "label"):
            out[k] = plain(v, f"`{k}`")
    return out


# ----------------------------------------------------------------------------- feature maps
def feature_map_class(name: str) -> type[features.FeatureMap]:
    """The class a ``map`` entry names: a registered name, or ``"package.module:ClassName"`` (imported)."""
    return feature_map_record(name).factory


def build_feature_map(name: str, params: Mapping[str, Any]) -> features.FeatureMap:
    """``Class(**params)`` for the class a ``map`` entry names (lists for ``A`` become arrays).

    Raises
    ------
    InvalidParameterError
        For an unknown or unimportable map, a parameter the map does not take, an invalid value,
        or a constructor that fails.
    """
    return feature_map_record(name).build(params)


# ----------------------------------------------------------------------------- attention estimators
def build_attention_estimator(params: Mapping[str, Any]) -> Any:
    """An attention estimator from study parameters, through its record.

    ``estimator`` is a registered name (``"RFA"``, ``"RA"``, ``"SNIS"``, ``"LARA"``, ...) or
    ``"package.module:Name"``. ``samples`` is the number of random samples, mapped onto the
    estimator's parameters by its record's ``from_budget``: the feature map's ``n_features``
    for RFA (``map`` and its parameters, default Positive; ``map`` may be
    ``"package.module:ClassName"``), ``n_samples`` for RA and SNIS, and
    ``n_proposals * samples_per_proposal`` for LARA. Other keys are the estimator's own
    parameters (for RFA: the keys RFA takes; the rest go to its map). An imported class is
    called with the parameters (``samples`` included, under that name) and must return a
    callable ``(Q, K, V, *, rng) -> AttentionResult``; an imported function is the estimator
    itself, called with the parameters as keywords besides ``rng``.
    """
    return attention_estimator_record(params["estimator"]).build(params)


def _estimator_name(est: Any) -> str:
    if isinstance(est, functools.partial):
        return getattr(est.func, "__qualname__", repr(est.func))
    if inspect.isfunction(est):
        return est.__qualname__
    return type(est).__qualname__


def check_attention_output(res: Any, shape: tuple[int, ...], est: Any) -> np.ndarray:
    """The output of one call, after checking it is an AttentionResult of the exact output's shape."""
    name = _estimator_name(est)
    if not isinstance(res, AttentionResult):
        raise InvalidParameterError(
            f"{name} does not follow the rfkit attention-estimator protocol: a call (Q, K, V, *, rng) must "
            f"return rk.attention.AttentionResult(output=..., method=...). Got {describe(res)} instead."
        )
    out = to_numpy(res.output)
    if tuple(out.shape) != tuple(shape):
        raise InvalidParameterError(
            f"{name} does not follow the rfkit attention-estimator protocol: its output must have the shape "
            f"of exact attention {tuple(shape)} (..., n_queries, d_v). Got shape {tuple(out.shape)} instead."
        )
    return out
