"""Study designs: a declarative grid of estimators x parameters x data, from TOML or Python.

A design file looks like::

    name = "performer-mse"
    kind = "kernel"                # estimates of exp(x.y) for paired rows
    trials = 2000                  # independent feature draws per cell
    seed = 20261122
    metrics = ["mse", "rel_mse", "bias", "max_rel_err"]

    [data]                         # source and its fixed parameters
    source = "pairs"               # "pairs" | "gaussian" | "hard"
    n_pairs = 32

    [grid]                         # axes; the cells are their product
    dim = [16]
    n_features = [8, 16, 32, 64]

    [[estimators]]                 # evaluated in every cell on the same data and streams
    label = "positive"
    map = "Positive"               # any rfkit.features map; other keys are its parameters
    projection = "orthogonal"

    [[estimators]]
    label = "mine"
    map = "mypackage.maps:MyMap"   # a map of your own: imports (executes) mypackage.maps

    [quick]                        # overrides for CI (--quick)
    trials = 200
    grid = { n_features = [8, 64] }

Cell ``c`` is the ``c``-th point of the grid product (axes in file order). Trial ``t``
of cell ``c`` uses ``SeedSequence(root.entropy, spawn_key=root.spawn_key + (c, t))``;
every estimator of a cell uses the same trial streams (common random numbers) and the same
data, so comparisons inside a cell are sharper.

Maps and attention estimators are named by a bare rfkit name or, explicitly, by
``"package.module:Name"`` (imported: the module's code runs); in Python a design also takes
classes and dataclass instances, stored as the equivalent study-file entry
(:mod:`rfkit.study._estimators`). Every feature map is checked against the extension protocol
(:func:`rfkit.features.check_feature_map`) when the design is built.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..exceptions import InvalidParameterError
from ._estimators import ATTENTION_ESTIMATORS, FEATURE_MAPS, is_path, normalise_estimator

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Design", "load_design", "KINDS", "DATA_SOURCES", "METRICS", "FEATURE_MAPS"]

KINDS = ("kernel", "attention", "concentration")
#: seed entropy of the data on which attention estimators are checked when a design is built
_PROBE_ENTROPY = 0x5EED_DA7A
#: data parameters per source; ``dataset`` (any source) indexes independent data sets.
DATA_SOURCES = {
    "pairs": {"n_pairs", "dim", "norm_x", "norm_y", "norm", "cosine", "dataset"},
    "gaussian": {"n_pairs", "dim", "mean_q", "cov_q", "mean_k", "cov_k", "scale_q", "scale_k", "dataset"},
    "hard": {
        "n_pairs",
        "dim",
        "regime",
        "mean_scale",
        "var_shape_q",
        "var_shape_k",
        "norm_q",
        "norm_k",
        "dataset",
    },
    # attention inputs (Q, K, V)
    "sequence": {"n_tokens", "dim", "d_v", "structure", "scale", "n_clusters", "spread", "dataset"},
    # real queries/keys/values of all-MiniLM-L6-v2 on the built-in passages (rk.data.minilm_qk);
    # causal = true: those of the decoder SmolLM2-135M-Instruct (rk.data.smollm2_qk), with causal
    # exact attention and `causal = true` passed to every estimator
    "minilm": {"layer", "head", "layers", "heads", "n_texts", "max_len", "scale", "dim", "causal"},
    # the pair sets of the softmax-kernel-estimators benchmark (rk.data.kernel_benchmark_pairs)
    "benchmark": {"set", "n_pairs", "dim", "dataset"},
}
#: data sources that give (Q, K, V) sequences (kind = "attention") rather than pairs
SEQUENCE_SOURCES = ("sequence", "minilm")
#: metrics a design gets when it names none (kept as they were, so existing designs keep their hash)
DEFAULT_METRICS = {
    "kernel": ("mse", "rel_mse", "bias", "rel_bias", "variance", "mean_rel_err", "max_rel_err")
}
METRICS_BY_KIND = {
    "kernel": (
        "mse",
        "rel_mse",
        "bias",
        "rel_bias",
        "variance",
        "mean_rel_err",
        "max_rel_err",
        "median_rel_sq_err",
    ),
    "attention": ("mse", "bias", "variance", "mean_abs_err", "max_abs_err", "nonpositive_rows"),
    "concentration": ("coverage", "rms_over_bound", "realized_exceeds"),
}
METRICS = tuple(dict.fromkeys(m for ms in METRICS_BY_KIND.values() for m in ms))
_TOP_KEYS = {
    "on_error",
    "backend",
    "device",
    "name",
    "description",
    "kind",
    "trials",
    "chunk_trials",
    "seed",
    "metrics",
    "data",
    "grid",
    "estimators",
    "quick",
    "outputs",
}
#: keys of an RFA estimator entry that belong to RFA, not to its feature map
_RFA_KEYS = {"estimator", "map", "samples", "causal", "shared_across_heads", "chunk_size", "n_threads"}
_ESTIMATOR_AXES = {"n_features", "feature_dim", "degree", "n", "projection", "samples", "weights"}
#: axes of concentration designs that are neither data nor estimator parameters
_BOUND_AXES = {"p"}


def _err(source: str, key: str, rule: str, got: Any) -> InvalidParameterError:
    return InvalidParameterError(f"{source}: `{key}` {rule}. Got {got!r} instead.")


@dataclasses.dataclass(frozen=True)
class Design:
    """A validated study design.

    Parameters
    ----------
    name : str
        Study name (used for output folders).
    estimators : list of dict (or of objects)
        Each has ``label`` (unique), ``map`` (a class name in :mod:`rfkit.features`, or
        ``"package.module:ClassName"`` for a map of your own, imported when the design is
        built) and the map's parameters; grid axes named like a map parameter (``n_features``,
        ``degree``, ``n``, ``projection``) are passed to every estimator that takes it and does
        not fix it. Attention designs name ``estimator`` the same way. In Python, ``map`` (or
        ``estimator``, or the entry itself) may be a class or a dataclass instance: it is stored
        as ``"module:Class"`` (a bare name for rfkit's maps) plus the instance's non-default
        fields, except fields named by a grid axis, which the grid supplies cell by cell. So the
        design stays plain data, its hash is stable, and workers rebuild the object by importing
        its class: the class must live in an importable module (a notebook's classes work with
        ``executor="serial"`` only).
    grid : dict of str to list
        Axes and their values; cells are the product in the given order.
    data : dict
        ``source`` plus the source's fixed parameters.
    trials : int
        Independent trials per cell.
    kind : {"kernel"}
        What is estimated.
    seed : int, optional
        Root seed (overridden by ``run(rng=...)``).
    metrics : list of str
        Metrics reported by ``summary()``.
    chunk_trials : int
        Trials evaluated per vectorised call. Part of the design (not of the executor),
        so numbers are identical however the cells are distributed.
    description : str
    outputs : dict
        Figures and tables to produce (``figures = [...]``, ``tables = [...]``).
    quick : dict
        Overrides applied by :meth:`quick_profile`.
    backend : {"numpy", "torch", "cupy", "array_api_strict"}, default="numpy"
        Array library the estimates are computed with (:doc:`/backends`); data and random
        draws stay NumPy and are moved to ``device``, so the tables equal NumPy's to round-off.
    device : str, optional
        Device of the backend (``"cuda"``, ``"cuda:1"``, ``"cpu"``); default: the library's default.
    on_error : {"raise", "record"}, default="raise"
        What :func:`rfkit.study.run` does with a failing trial (or a data-dependent map that cannot
        be fitted to a cell's data) unless its own ``on_error`` says otherwise: stop, or record the
        trials as failed (``status="error:<Exception>"``, counted in ``n_failed``) and go on.
    source : str
        Where the design came from (file path or "python"), for messages.
    """

    name: str
    estimators: list[dict[str, Any]]
    grid: dict[str, list[Any]]
    data: dict[str, Any]
    trials: int
    kind: str = "kernel"
    seed: int | None = None
    metrics: list[str] = dataclasses.field(default_factory=list)
    chunk_trials: int = 250
    description: str = ""
    outputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    quick: dict[str, Any] = dataclasses.field(default_factory=dict)
    backend: str = "numpy"
    device: str | None = None
    on_error: str = "raise"
    source: str = "python"

    def __post_init__(self) -> None:
        src = self.source
        if isinstance(self.estimators, (list, tuple)) and self.kind in KINDS:
            axes = set(self.grid) if isinstance(self.grid, Mapping) else set()
            normal = []
            for i, est in enumerate(self.estimators):
                try:
                    normal.append(normalise_estimator(est, self.kind, axes))
                except InvalidParameterError as exc:
                    raise InvalidParameterError(f"{src}: `estimators[{i}]`: {exc}") from exc
            object.__setattr__(self, "estimators", normal)
        if (
            isinstance(self.data, Mapping)
            and self.data.get("source") == "minilm"
            and isinstance(self.grid, Mapping)
        ):
            # `data = {source = "minilm", layers = [...], heads = [...]}`: one cell per (layer, head)
            data, grid = dict(self.data), dict(self.grid)
            front = {}
            for plural, axis in (("layers", "layer"), ("heads", "head")):
                if plural in data:  # sets (or, in a [quick] profile, overrides) the axis
                    vals = data.pop(plural)
                    front[axis] = list(vals) if isinstance(vals, list) else [vals]
                    grid.pop(axis, None)
            grid = {**front, **grid}
            object.__setattr__(self, "data", data)
            object.__setattr__(self, "grid", grid)
        if not isinstance(self.name, str) or not self.name or any(c in self.name for c in "/\\ "):
            raise _err(src, "name", "must be a non-empty string without spaces or slashes", self.name)
        if self.kind not in KINDS:
            raise _err(src, "kind", f"must be one of {list(KINDS)}", self.kind)
        for key in ("trials", "chunk_trials"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise _err(src, key, "must be an integer >= 1", v)
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0
        ):
            raise _err(src, "seed", "must be a non-negative integer", self.seed)
        self._check_backend()
        if self.on_error not in ("raise", "record"):
            raise _err(src, "on_error", "must be 'raise' or 'record'", self.on_error)
        allowed = METRICS_BY_KIND[self.kind]
        if not self.metrics:  # default: every metric of the kind
            object.__setattr__(self, "metrics", list(DEFAULT_METRICS.get(self.kind, allowed)))
        bad = [m for m in self.metrics if m not in allowed]
        if bad or not self.metrics:
            raise _err(
                src,
                "metrics",
                f"must be a non-empty list from {list(allowed)} (kind {self.kind!r})",
                self.metrics,
            )
        self._check_data()
        self._check_grid()
        self._check_estimators()

    # ---------------------------------------------------------------- validation
    def _check_backend(self) -> None:
        from .._backend import BACKENDS

        src = self.source
        if self.backend not in BACKENDS:
            raise _err(src, "backend", f"must be one of {list(BACKENDS)}", self.backend)
        if self.device is not None and (not isinstance(self.device, str) or not self.device):
            raise _err(src, "device", "must be a device name such as 'cuda', 'cuda:1' or 'cpu'", self.device)
        if self.backend == "numpy" and self.device not in (None, "cpu"):
            raise _err(src, "device", "must be 'cpu' (or absent) for backend 'numpy'", self.device)

    def _check_data(self) -> None:
        src = self.source
        if not isinstance(self.data, Mapping) or "source" not in self.data:
            raise _err(src, "data.source", f"must be one of {sorted(DATA_SOURCES)}", None)
        s = self.data["source"]
        if s not in DATA_SOURCES:
            raise _err(src, "data.source", f"must be one of {sorted(DATA_SOURCES)}", s)
        if (s in SEQUENCE_SOURCES) != (self.kind == "attention"):
            need = (
                "a sequence source " + str(list(SEQUENCE_SOURCES))
                if self.kind == "attention"
                else "a pair source"
            )
            raise _err(src, "data.source", f"must be {need} for kind {self.kind!r}", s)
        allowed = DATA_SOURCES[s] | (_BOUND_AXES if self.kind == "concentration" else set())
        for key in self.data:
            if key != "source" and key not in allowed:
                raise _err(
                    src,
                    f"data.{key}",
                    f"is not a parameter of source {s!r} (allowed: {sorted(allowed)})",
                    key,
                )

    def _check_grid(self) -> None:
        src = self.source
        if not isinstance(self.grid, Mapping):
            raise _err(src, "grid", "must be a table of axis = [values]", self.grid)
        allowed = DATA_SOURCES[self.data["source"]] | _ESTIMATOR_AXES
        if self.kind == "concentration":
            allowed = allowed | _BOUND_AXES
            if self.data["source"] != "gaussian":
                raise _err(
                    src,
                    "data.source",
                    "must be 'gaussian' for kind 'concentration' (the theorem's model)",
                    self.data["source"],
                )
            if "p" not in self.grid and "p" not in self.data:
                raise _err(src, "grid.p", "must give the probability levels p of the bound", None)
        for axis, values in self.grid.items():
            if axis not in allowed:
                raise _err(src, f"grid.{axis}", f"is not a known axis (allowed: {sorted(allowed)})", axis)
            if not isinstance(values, list) or not values:
                raise _err(src, f"grid.{axis}", "must be a non-empty list of values", values)
            if axis in (
                "n_features",
                "feature_dim",
                "dim",
                "n_pairs",
                "degree",
                "n",
                "dataset",
                "samples",
                "n_tokens",
                "d_v",
            ):
                for v in values:
                    if (
                        isinstance(v, bool)
                        or not isinstance(v, int)
                        or v < (0 if axis in ("degree", "dataset") else 1)
                    ):
                        raise _err(
                            src, f"grid.{axis}", "must hold positive integers (dataset, degree: >= 0)", v
                        )
            if len(set(map(repr, values))) != len(values):
                raise _err(src, f"grid.{axis}", "must not repeat values", values)
        if "dim" not in self.grid and "dim" not in self.data and self.data["source"] != "minilm":
            raise _err(src, "data.dim", "must be given (in [data] or as a grid axis)", None)

    def _check_estimators(self) -> None:
        from ..features import FeatureMap, check_feature_map
        from ._estimators import build_attention_estimator, build_feature_map, check_attention_estimator

        src = self.source
        if not isinstance(self.estimators, list) or not self.estimators:
            raise _err(
                src, "estimators", "must be a non-empty list of [[estimators]] tables", self.estimators
            )
        names = f"{list(FEATURE_MAPS)} or be 'package.module:ClassName'"
        labels = set()
        for i, est in enumerate(self.estimators):
            where = f"estimators[{i}]"
            if self.kind == "attention":
                e = est.get("estimator") if isinstance(est, Mapping) else est
                if not (e in ATTENTION_ESTIMATORS or is_path(e)):
                    raise _err(
                        src,
                        f"{where}.estimator",
                        f"must be one of {list(ATTENTION_ESTIMATORS)} or 'package.module:Name'",
                        e,
                    )
                m = est.get("map", "Positive")
                if e == "RFA" and not (m in FEATURE_MAPS or is_path(m)):
                    raise _err(src, f"{where}.map", f"must name a feature map among {names}", m)
            else:
                m = est.get("map") if isinstance(est, Mapping) else est
                if not (m in FEATURE_MAPS or is_path(m)):
                    raise _err(src, f"{where}.map", f"must name a feature map among {names}", m)
            label = self._label(est)
            if label in labels:
                raise _err(src, f"{where}.label", "must be unique", label)
            labels.add(label)
            # build for every cell to validate every parameter now, not mid-run; check the
            # protocol once per distinct (parameters, dim)
            checked: set[str] = set()
            for cell in self.cells():
                try:
                    params = self.estimator_params(est, cell)
                    raw_dim = cell.get("dim", self.data.get("dim"))
                    dim = None if raw_dim is None else int(raw_dim)  # None: real data (from the model)
                    key = json.dumps([params, dim], sort_keys=True, default=str)
                    if self.kind == "attention":
                        obj = build_attention_estimator(params)
                        fm = getattr(obj, "feature_map", None)
                        if isinstance(fm, FeatureMap) and dim is not None and key not in checked:
                            check_feature_map(fm, dim)  # e.g. RFA with a map of your own
                        if not checked and self.data["source"] != "minilm":
                            # one call pair on the first cell's shapes (probe seed): the output's type,
                            # shape and reproducibility; every call of a run checks type and shape
                            from ._cell import cell_data

                            qkv = cell_data(self, cell, _PROBE_ENTROPY, ())
                            check_attention_estimator(obj, data=qkv)  # type: ignore[arg-type]
                    else:
                        fm = build_feature_map(est["map"], params)
                        if key not in checked:
                            check_feature_map(fm, dim)
                            if self.kind == "concentration" and dim is not None:
                                self._check_closed_form(fm, dim)
                    checked.add(key)
                except InvalidParameterError as exc:
                    raise InvalidParameterError(f"{src}: {where} ({label!r}): {exc}") from exc

    @staticmethod
    def _check_closed_form(fm: Any, dim: int) -> None:
        """Concentration designs compare with the closed-form MSE: the map must have one."""
        import numpy as np

        from .. import theory

        if fm.needs_data:
            raise InvalidParameterError(
                f"{fm!r}: the concentration theorem needs a fixed A (not a rule fitted to the data)."
            )
        x = np.full(dim, 0.1)
        try:
            theory.relative_mse(fm, x, x)
        except InvalidParameterError as exc:
            raise InvalidParameterError(
                f"concentration designs need a map with a closed-form MSE in rfkit.theory: {exc}"
            ) from exc

    @classmethod
    def trusted(cls, fields: Mapping[str, Any]) -> Design:
        """Rebuild a design from the ``to_dict()`` of one already validated (in workers), skipping checks."""
        obj = object.__new__(cls)
        for f in dataclasses.fields(cls):
            if f.name in fields:
                value = fields[f.name]
            elif f.default is not dataclasses.MISSING:
                value = f.default
            else:
                value = f.default_factory()  # type: ignore[misc,operator]
            object.__setattr__(obj, f.name, value)
        return obj

    # ---------------------------------------------------------------- structure
    @staticmethod
    def _label(est: Mapping[str, Any]) -> str:
        if "label" in est:
            return str(est["label"])
        name = str(est.get("map", est.get("estimator")))
        return name.rsplit(":", 1)[-1].rsplit(".", 1)[-1]  # "pkg.mod:Class" -> "Class"

    @property
    def labels(self) -> list[str]:
        """Estimator labels in design order."""
        return [self._label(e) for e in self.estimators]

    def cells(self) -> list[dict[str, Any]]:
        """Grid points in cell order (product of the axes in the given order)."""
        axes = list(self.grid)
        return [dict(zip(axes, vals)) for vals in itertools.product(*(self.grid[a] for a in axes))]

    def data_params(self, cell: Mapping[str, Any]) -> dict[str, Any]:
        """Data parameters of a cell: fixed ``[data]`` values updated by data axes of the grid."""
        out = {k: v for k, v in self.data.items() if k not in _BOUND_AXES}
        out.update({k: v for k, v in cell.items() if k not in _ESTIMATOR_AXES and k not in _BOUND_AXES})
        return out

    def data_key(self, cell: Mapping[str, Any]) -> int:
        """Index of the cell's data among the distinct data settings (cells sharing data share it)."""
        keys = []
        for c in self.cells():
            k = json.dumps(self.data_params(c), sort_keys=True, default=str)
            if k not in keys:
                keys.append(k)
        return keys.index(json.dumps(self.data_params(cell), sort_keys=True, default=str))

    def estimator_params(self, est: Mapping[str, Any], cell: Mapping[str, Any]) -> dict[str, Any]:
        """Parameters of an estimator in a cell.

        Its own values win over grid axes; a string ``"$axis"`` takes the cell's value of that
        axis (e.g. ``n = "$degree"`` for :class:`~rfkit.features.Limit`), and
        ``n_features = "match"`` picks the number of directions whose feature dimension equals
        :math:`\binom{d+n}{n}`, the symmetric dimension of the Taylor/limit maps at the cell's
        ``degree`` (divided by the map's columns per direction, ``feature_dim`` at ``n_features=1``:
        half of it for the 2m-column trig and hyperbolic maps).
        """
        from ._estimators import build_feature_map, takes

        if self.kind == "attention":
            params = {k: v for k, v in est.items() if k != "label"}
            accepts = takes(est.get("estimator"), "estimator")
            for axis in ("samples", "weights"):
                if axis in cell and axis not in params and (accepts is None or axis in accepts):
                    params[axis] = cell[axis]
            if "feature_dim" in cell and "samples" not in params:
                # equal budgets: RFA gets the directions that fill feature_dim columns of its map; the
                # sampling estimators (RA, SNIS, LARA) draw feature_dim samples
                if params.get("estimator") == "RFA" and "n_features" not in params:
                    m_params = {k: v for k, v in params.items() if k not in _RFA_KEYS}
                    m_est = {"map": params.get("map", "Positive"), "label": self._label(est)}
                    params["samples"] = self._features_for_columns(m_est, m_params, cell)
                elif params.get("estimator") != "RFA":
                    params["samples"] = int(cell["feature_dim"])
            return params
        accepts = takes(est.get("map"), "map")
        params = {k: v for k, v in est.items() if k not in ("map", "label")}
        for axis in _ESTIMATOR_AXES - {"feature_dim"}:  # grid axes go to maps that take them
            if axis in cell and axis not in params and (accepts is None or axis in accepts):
                params[axis] = cell[axis]
        if "feature_dim" in cell and "n_features" not in params:
            params["n_features"] = self._features_for_columns(est, params, cell)
        for k, v in list(params.items()):
            if isinstance(v, str) and v.startswith("$"):
                axis = v[1:]
                if axis not in cell:
                    raise _err(
                        self.source,
                        f"estimators.{k}",
                        f"refers to grid axis {axis!r}, which the grid lacks",
                        v,
                    )
                params[k] = cell[axis]
        if params.get("n_features") == "match":
            from math import comb

            dim = cell.get("dim", self.data.get("dim"))
            if "degree" not in cell:
                raise _err(
                    self.source, "estimators.n_features", "= 'match' needs a `degree` grid axis", "match"
                )
            D = comb(int(dim) + int(cell["degree"]), int(cell["degree"]))
            # columns per direction (2 for the sin/cos and cosh maps), asked of the map itself
            per = build_feature_map(str(est["map"]), {**params, "n_features": 1}).feature_dim(int(dim))
            params["n_features"] = max(1, D // max(1, int(per)))
        return params

    def _features_for_columns(
        self, est: Mapping[str, Any], params: dict[str, Any], cell: Mapping[str, Any]
    ) -> int:
        """``n_features`` of a map whose feature dimension fills the cell's ``feature_dim`` columns.

        Every map's ``feature_dim(d)`` is affine in ``n_features`` (``m``, ``2m``, ``1 + n m``, ...): it
        is asked of the map at ``n_features`` = 1 and 2, so maps compared at one ``feature_dim`` have
        the same number of feature columns (the cost of linear attention), whatever their family.
        """
        from ._estimators import build_feature_map

        D = int(cell["feature_dim"])
        dim = int(cell.get("dim", self.data.get("dim", 0)) or 0)
        if not dim and self.data.get("source") == "minilm":  # the real models' head dimensions
            dim = 64 if self.data_params(cell).get("causal", False) else 32
        if dim < 1:
            raise _err(
                self.source, "grid.feature_dim", "needs the data dimension `dim` (in [data] or the grid)", D
            )
        f1, f2 = (
            int(build_feature_map(est["map"], {**params, "n_features": k}).feature_dim(dim)) for k in (1, 2)
        )
        per, base = f2 - f1, 2 * f1 - f2
        if per < 1 or (D - base) // per < 1:
            raise _err(
                self.source,
                "grid.feature_dim",
                f"is too small for {self._label(est)!r}, whose feature dimension is {per} n_features + {base}",
                D,
            )
        return (D - base) // per

    # ---------------------------------------------------------------- variants
    def quick_profile(self) -> Design:
        """The design with its ``[quick]`` overrides applied (for CI and smoke runs)."""
        base = self.to_dict()
        q = copy.deepcopy(self.quick)
        for key, val in q.items():
            if key in ("grid", "data") and isinstance(val, Mapping):
                base[key] = {**base[key], **val}
            else:
                base[key] = val
        base["quick"] = {}
        base["name"] = self.name
        return Design(**base, source=f"{self.source} [quick]")

    def on_backend(self, backend: str | None = None, device: str | None = None) -> Design:
        """The design computed on another array backend (``"numpy"``, ``"torch"``, ``"cupy"``) and device.

        The numbers are the same up to round-off (directions and data are NumPy draws moved to
        the device), so :meth:`hash` ignores the backend; a run's folder records it, and resuming
        on another backend is refused.
        """
        d = self.to_dict()
        if backend is not None:
            d["backend"] = backend
            if device is None and backend != self.backend:
                d["device"] = None
        if device is not None:
            d["device"] = device
        return Design(**d, source=self.source)

    def with_trials(self, trials: int) -> Design:
        """The design with another number of trials."""
        d = self.to_dict()
        d["trials"] = trials
        return Design(**d, source=self.source)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (JSON/TOML-able), without ``source``."""
        d = dataclasses.asdict(self)
        d.pop("source")
        return d

    def hash(self) -> str:
        """SHA-256 of the canonical JSON form: identifies the design in results and on resume."""
        d = self.to_dict()
        for key in ("quick", "description", "outputs", "backend", "device", "on_error"):  # not the numbers
            d.pop(key, None)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], source: str = "python") -> Design:
        """Build from a parsed TOML/JSON mapping, refusing unknown top-level keys."""
        unknown = set(raw) - _TOP_KEYS
        if unknown:
            raise _err(
                source,
                sorted(unknown)[0],
                f"is not a design key (allowed: {sorted(_TOP_KEYS)})",
                sorted(unknown),
            )
        for key in ("name", "estimators", "grid", "data", "trials"):
            if key not in raw:
                raise _err(source, key, "is required", None)
        kwargs = {k: copy.deepcopy(v) for k, v in raw.items()}
        return cls(**kwargs, source=source)


def load_design(path: str | Path) -> Design:
    """Read and validate a TOML study file; errors name the file, the key and the rule."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise InvalidParameterError(f"cannot read study file {str(p)!r}: {exc.strerror}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidParameterError(f"{p}: malformed TOML: {exc}") from None
    return Design.from_dict(raw, source=str(p))
