"""The protocol probes of a design's maps and estimators of your own: each is called on probe data.

Building a design checks names and values only (:mod:`rfkit.study._design_checks`); whether a
map or an estimator of your own *behaves* (types, shapes, finiteness, uses ``rng``, a closed
form where the design needs one) is found by calling it, which is done here: at the start of
every run (:func:`rfkit.study.run`, before any work unit and before the output folder is made)
and by :func:`check_design` on request. rfkit's own maps and estimators pass the same checks in
its test suite, so a study of built-ins costs no probe.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .. import theory
from ..exceptions import InvalidParameterError
from ..features import FeatureMap, check_feature_map
from ._builtin import find_study
from ._cell_data import cell_data
from ._design import Design, load_design
from ._estimators import build_attention_estimator, build_feature_map, check_attention_estimator
from ._record_types import ATTENTION_KINDS
from ._records import data_source_record

__all__ = ["check_design", "probe_design", "PROBE_ENTROPY"]

#: seed entropy of the data on which attention estimators of your own are probed
PROBE_ENTROPY = 0x5EED_DA7A


def check_design(design: Design | str | Path, *, probe: bool = True) -> Design:
    """Check a study design; with ``probe``, also call its maps and estimators of your own on probe data.

    Building a :class:`Design` (or :func:`load_design`) checks every name against the registries
    and every value against its range, and runs nothing. The probes call each feature map and
    attention estimator of your own once per distinct setting: the feature-map protocol
    (:func:`rfkit.features.check_feature_map`: types, shapes, ``|values| <= 1``, finiteness at
    realistic sizes, different features for different seeds), the attention-estimator protocol on
    the first cell's data (:func:`check_attention_estimator`), and, in concentration designs, a
    closed-form MSE in :mod:`rfkit.theory`. :func:`run` runs the same probes before its first work
    unit; this function finds the same errors without starting a run.

    Parameters
    ----------
    design : Design, path or str
        A design, a TOML study file, or the name of a built-in study.
    probe : bool, default=True
        Also run the protocol probes (False: the checks of building the design only).

    Returns
    -------
    Design
        The design (loaded, if a path or name was given).

    Raises
    ------
    InvalidParameterError
        Naming the design's source, the estimator's position and label, and the rule broken.
    """
    if isinstance(design, str):
        design = find_study(design)
    if isinstance(design, Path):
        design = load_design(design)
    if not isinstance(design, Design):
        raise InvalidParameterError(
            "The `design` parameter of rk.study.check_design must be a Design, a path to a TOML file or "
            f"the name of a built-in study. Got {type(design).__name__} instead."
        )
    if not isinstance(probe, bool):
        raise InvalidParameterError(
            f"The `probe` parameter of rk.study.check_design must be True or False. Got {probe!r} instead."
        )
    if probe:
        probe_design(design)
    return design


def _probe_size(checked: set[str]) -> dict[str, Any]:
    """The protocol check at realistic size (256 rows, float32, array_api_strict) for an
    estimator's first parameter set; a small probe for its other grid values, which change
    sizes (``n_features``, ``dim``) but not how the map computes."""
    return {} if not checked else {"n_rows": 8, "array_api": False}


def _is_own(obj: Any) -> bool:
    """A map or estimator of rfkit itself: its protocol is checked by rfkit's test suite
    (``tests/unit/test_feature_protocol.py``, ``test_conformance_scale.py``), not on every run."""
    return type(obj).__module__.split(".", 1)[0] == "rfkit"


def probe_design(d: Design) -> None:
    """Call every map and estimator of your own in ``d`` on probe data, once per distinct setting.

    Raises the :class:`~rfkit.exceptions.InvalidParameterError` of the first protocol violation,
    prefixed with the design's source, the estimator's position and its label.
    """
    if d.kind == "drop-in":
        return  # drop-in estimators run inside pretrained models; every call checks its output
    probe = data_source_record(d.data["source"]).probe
    for i, est in enumerate(d.estimators):
        label = d.label(est)
        checked: set[str] = set()
        for cell in d.cells():
            try:
                params = d.estimator_params(est, cell)
                raw_dim = cell.get("dim", d.data.get("dim"))
                dim = None if raw_dim is None else int(raw_dim)  # None: real data (from the model)
                key = json.dumps([params, dim], sort_keys=True, default=str)
                if d.kind in ATTENTION_KINDS:
                    obj = build_attention_estimator(params)
                    fm = getattr(obj, "feature_map", None)
                    if (
                        isinstance(fm, FeatureMap)
                        and dim is not None
                        and key not in checked
                        and not _is_own(fm)
                    ):
                        check_feature_map(fm, dim, **_probe_size(checked))  # e.g. RFA with a map of your own
                    if not checked and probe and not (_is_own(obj) and (fm is None or _is_own(fm))):
                        # one call pair on the first cell's shapes (probe seed): the output's type,
                        # shape and reproducibility; every call of a run checks type and shape
                        qkv = cell_data(d, cell, PROBE_ENTROPY, ())
                        check_attention_estimator(obj, data=qkv)  # type: ignore[arg-type]
                else:
                    fm = build_feature_map(est["map"], params)
                    if key not in checked and not _is_own(fm):
                        check_feature_map(fm, dim, **_probe_size(checked))
                        if d.kind == "concentration" and dim is not None:
                            _check_closed_form(fm, dim)
                checked.add(key)
            except InvalidParameterError as exc:
                raise InvalidParameterError(f"{d.source}: estimators[{i}] ({label!r}): {exc}") from exc


def _check_closed_form(fm: Any, dim: int) -> None:
    """Concentration designs compare with the closed-form MSE: the map must have one."""
    x = np.full(dim, 0.1)
    try:
        theory.relative_mse(fm, x, x)
    except InvalidParameterError as exc:
        raise InvalidParameterError(
            f"concentration designs need a map with a closed-form MSE in rfkit.theory: {exc}"
        ) from exc
