"""Build feature-map specifications from the plain parameters of a study file."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import features
from ..exceptions import InvalidParameterError

__all__ = ["build_feature_map"]


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
