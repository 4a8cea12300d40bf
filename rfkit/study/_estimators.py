"""Build feature-map specifications from the plain parameters of a study file."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import features
from ..exceptions import InvalidParameterError

__all__ = ["build_feature_map", "build_attention_estimator"]


def build_feature_map(name: str, params: Mapping[str, Any]) -> features.FeatureMap:
    """``rfkit.features.<name>(**params)``, with lists for ``A`` turned into arrays.

    Raises
    ------
    InvalidParameterError
        For an unknown map, a parameter the map does not take, or an invalid value.
    """
    cls = getattr(features, name, None)
    if not (isinstance(cls, type) and issubclass(cls, features.FeatureMap)):
        raise InvalidParameterError(f"`map` must name a feature map in rfkit.features. Got {name!r} instead.")
    accepted = set(inspect.signature(cls).parameters)
    kwargs: dict[str, Any] = {}
    for key, val in params.items():
        if key not in accepted:
            raise InvalidParameterError(
                f"{name} has no parameter `{key}` (it takes {sorted(accepted)}). Got {key}={val!r}."
            )
        if key == "A" and isinstance(val, list):
            val = np.asarray(val, dtype=float)
        kwargs[key] = val
    return cls(**kwargs)


def build_attention_estimator(params: Mapping[str, Any]) -> Any:
    """An :mod:`rfkit.attention` estimator from study parameters.

    ``estimator`` is ``"RFA"``, ``"RA"``, ``"SNIS"`` or ``"LARA"``; ``samples`` is the number of
    random samples: the feature map's ``n_features`` for RFA (``map`` and its parameters, default
    Positive), ``n_samples`` for RA and SNIS, and ``n_proposals * samples_per_proposal`` for LARA.
    Other keys are the estimator's own parameters.
    """
    from .. import attention

    p = dict(params)
    kind = p.pop("estimator")
    samples = p.pop("samples", None)
    if kind == "RFA":
        map_name = p.pop("map", "Positive")
        attn_keys = {"causal", "shared_across_heads", "chunk_size"}
        map_params = {k: v for k, v in p.items() if k not in attn_keys}
        if samples is not None:
            map_params.setdefault("n_features", samples)
        fm = build_feature_map(map_name, map_params)
        return attention.RFA(fm, **{k: v for k, v in p.items() if k in attn_keys})
    cls = {"RA": attention.RA, "SNIS": attention.SNIS, "LARA": attention.LARA}[kind]
    if samples is not None:
        if kind == "LARA":
            k = int(p.get("samples_per_proposal", 1))
            if samples % k:
                raise InvalidParameterError(
                    f"LARA: `samples`={samples} is not a multiple of samples_per_proposal={k}."
                )
            p.setdefault("n_proposals", samples // k)
        else:
            p.setdefault("n_samples", samples)
    accepted = set(inspect.signature(cls).parameters)
    for key in p:
        if key not in accepted:
            raise InvalidParameterError(f"{kind} has no parameter `{key}` (it takes {sorted(accepted)}).")
    return cls(**p)
