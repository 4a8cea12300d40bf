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

    [profiles.large]               # a named profile (--profile large): overrides, as [quick]
    grid = { n_features = [8, 64, 512] }
    exclude = [{ dim = 16, n_features = 512 }]   # grid points left out of the product
    [profiles.large.quick]         # its own quick profile (--profile large --quick)
    trials = 20

Profiles (:meth:`Design.profile`, docs page *Studies*, section "Profiles") override the
file's values: ``grid``, ``data`` and ``outputs`` key by key (an axis the profile's grid sets
leaves ``[data]``, a value its ``[data]`` sets leaves the grid), every other key as a whole.

Cell ``c`` is the ``c``-th point of the grid product (axes in file order). Trial ``t``
of cell ``c`` uses ``SeedSequence(root.entropy, spawn_key=root.spawn_key + (c, t))``
(:func:`rfkit._random.trial_seed_sequence`);
every estimator of a cell uses the same trial streams (common random numbers) and the same
data, so comparisons inside a cell are sharper.

Maps and attention estimators are named by a bare rfkit name or, explicitly, by
``"package.module:Name"`` (imported: the module's code runs); in Python a design also takes
classes and dataclass instances, stored as the equivalent study-file entry
(:mod:`rfkit.study._plain`). Building a design checks names and values and runs nothing; the
protocol probes of maps of your own run at a run's start (:func:`rfkit.study.check_design`).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import sys
from collections.abc import Mapping
from math import comb
from pathlib import Path
from typing import Any

from ..exceptions import InvalidParameterError
from ._design_checks import BOUND_AXES, ESTIMATOR_AXES, design_error, validate_design
from ._estimators import build_feature_map, normalise_estimator, takes
from ._plain import import_modules
from ._profiles import check_profiles, matches, merge_overrides, unknown_profile
from ._record_types import ATTENTION_KINDS, KINDS
from ._records import attention_estimator_record, data_source_record
from ._views import DATA_SOURCES, DEFAULT_METRICS, FEATURE_MAPS, METRICS, METRICS_BY_KIND

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "Design",
    "load_design",
    "KINDS",
    "DATA_SOURCES",
    "METRICS",
    "METRICS_BY_KIND",
    "DEFAULT_METRICS",
    "FEATURE_MAPS",
]

_TOP_KEYS = {
    "on_error",
    "backend",
    "device",
    "draws",
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
    "profiles",
    "exclude",
    "outputs",
    "imports",
    "allow_large",
}
_err = design_error


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
    kind : {"kernel", "attention", "concentration", "drop-in"}
        What is estimated (docs page *Built-in studies*; "drop-in": attention estimators put into
        every layer of pretrained models, docs page *Drop-in*).
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
        Overrides applied by :meth:`quick_profile` (``--quick``).
    profiles : dict of str to dict
        Named profiles (``[profiles.NAME]`` in a study file): overrides applied by
        :meth:`profile` (``--profile NAME``), like ``quick``; a profile may hold its own
        ``quick`` table. Not part of :meth:`hash` (like ``quick``).
    exclude : list of dict
        Grid points left out of the product: a cell is left out when it has every axis value of
        some entry (``[{causal = false, max_len = 1024}]``: the encoder, which has 512
        positions, at 1,024 tokens). Entries name grid axes; one that matches no cell (after a
        profile narrowed the grid) leaves out nothing.
    applied_profile : str, optional
        The profile this design is (set by :meth:`profile` and :meth:`quick_profile`:
        ``"long"``, ``"quick"``, ``"long.quick"``); None for the file's own design. Part of
        :meth:`hash` and of the run's recorded design.
    backend : {"numpy", "torch", "cupy", "array_api_strict"}, default="numpy"
        Array library the estimates are computed with (:doc:`/backends`); data and random
        draws stay NumPy and are moved to ``device``, so the tables equal NumPy's to round-off.
    device : str, optional
        Device of the backend (``"cuda"``, ``"cuda:1"``, ``"cpu"``); default: the library's default.
    draws : {"numpy", "backend"}, default="numpy"
        Where random directions are drawn. ``"numpy"``: one NumPy stream per trial (the same
        numbers on every backend). ``"backend"``: by the backend's own generator on its device,
        seeded per work unit from the same seed tree, for the maps that can (``device_draws``:
        PRF/FAVOR+, hyperbolic PRF, OPRF, CEXP/HCEXP, trigonometric features), in kernel cells and
        for RFA in attention cells; RA, SNIS and LARA draw their samples there too, per trial, from
        the backend's generator seeded with the trial's stream (other maps and estimators keep
        NumPy draws, as the provenance records). Reproducible per backend and device; statistically equivalent to,
        not the same numbers as, NumPy's draws (docs page *Backends and scaling*). Part of
        :meth:`hash` when not ``"numpy"``.
    on_error : {"raise", "record"}, default="raise"
        What :func:`rfkit.study.run` does with a failing trial (or a data-dependent map that cannot
        be fitted to a cell's data) unless its own ``on_error`` says otherwise: stop, or record the
        trials as failed (``status="error:<Exception>"``, counted in ``n_failed``) and go on.
    imports : list of str
        Modules to import before the design is checked, here and in every worker process: those
        that register records of your own (``imports = ["mymaps"]`` in a study file), so their
        bare names resolve.
    allow_large : bool, default=False
        Build a design whose estimated work or memory is far beyond this machine (otherwise
        refused with the estimate, :class:`~rfkit.study.StudyTooLargeError`; the limits are in
        the docs page *Study guide*). Not part of :meth:`hash`.
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
    profiles: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    exclude: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    applied_profile: str | None = None
    backend: str = "numpy"
    device: str | None = None
    draws: str = "numpy"
    on_error: str = "raise"
    imports: list[str] = dataclasses.field(default_factory=list)
    allow_large: bool = False
    source: str = "python"

    def __post_init__(self) -> None:
        src = self.source
        import_modules(self.imports, src)  # they register records the design may name
        if isinstance(self.estimators, (list, tuple)) and self.kind in KINDS:
            axes = set(self.grid) if isinstance(self.grid, Mapping) else set()
            normal = []
            for i, est in enumerate(self.estimators):
                try:
                    normal.append(normalise_estimator(est, self.kind, axes))
                except InvalidParameterError as exc:
                    raise InvalidParameterError(f"{src}: `estimators[{i}]`: {exc}") from exc
            object.__setattr__(self, "estimators", normal)
        source = self.data.get("source") if isinstance(self.data, Mapping) else None
        if source in DATA_SOURCES and isinstance(self.grid, Mapping) and self.kind != "drop-in":
            plural_axes = data_source_record(source).plural_axes
            # `data = {source = "minilm", layers = [...], ...}`: a cell per (layer, head); drop-in: layers replaced
            data, grid = dict(self.data), dict(self.grid)
            front = {}
            for plural, axis in plural_axes.items():
                if plural in data:  # sets (or, in a [quick] profile, overrides) the axis
                    vals = data.pop(plural)
                    front[axis] = list(vals) if isinstance(vals, list) else [vals]
                    grid.pop(axis, None)
            if plural_axes:
                object.__setattr__(self, "data", data)
                object.__setattr__(self, "grid", {**front, **grid})
        check_profiles(self, _TOP_KEYS)
        validate_design(self)

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
    def label(est: Mapping[str, Any]) -> str:
        """The label of an ``estimators`` entry: its ``label``, else the class name it names.

        >>> Design.label({"map": "mypackage.maps:MyMap"}), Design.label({"label": "a", "map": "Trig"})
        ('MyMap', 'a')
        """
        if "label" in est:
            return str(est["label"])
        name = str(est.get("map", est.get("estimator")))
        return name.rsplit(":", 1)[-1].rsplit(".", 1)[-1]  # "pkg.mod:Class" -> "Class"

    _label = label  # the same method under a private name

    @property
    def labels(self) -> list[str]:
        """Estimator labels in design order."""
        return [self.label(e) for e in self.estimators]

    def cells(self) -> list[dict[str, Any]]:
        """Grid points in cell order (product of the axes in the given order, without ``exclude``'s)."""
        axes = list(self.grid)
        cells = [dict(zip(axes, vals)) for vals in itertools.product(*(self.grid[a] for a in axes))]
        if not self.exclude:
            return cells
        return [c for c in cells if not any(matches(c, e) for e in self.exclude)]

    def data_params(self, cell: Mapping[str, Any]) -> dict[str, Any]:
        """Data parameters of a cell: fixed ``[data]`` values updated by data axes of the grid."""
        out = {k: v for k, v in self.data.items() if k not in BOUND_AXES}
        out.update({k: v for k, v in cell.items() if k not in ESTIMATOR_AXES and k not in BOUND_AXES})
        return out

    def data_key(self, cell: Mapping[str, Any]) -> int:
        """Index of the cell's data among the distinct data settings (cells sharing data share it)."""
        keys: dict[str, int] | None = self.__dict__.get("_data_keys")
        if keys is None:  # computed once per design (a run asks for every cell's key)
            keys = {}
            for c in self.cells():
                keys.setdefault(json.dumps(self.data_params(c), sort_keys=True, default=str), len(keys))
            object.__setattr__(self, "_data_keys", keys)
        return keys[json.dumps(self.data_params(cell), sort_keys=True, default=str)]

    def estimator_params(self, est: Mapping[str, Any], cell: Mapping[str, Any]) -> dict[str, Any]:
        """Parameters of an estimator in a cell.

        Its own values win over grid axes; a string ``"$axis"`` takes the cell's value of that
        axis (e.g. ``n = "$degree"`` for :class:`~rfkit.features.Limit`), and
        ``n_features = "match"`` picks the number of directions whose feature dimension equals
        :math:`\binom{d+n}{n}`, the symmetric dimension of the Taylor/limit maps at the cell's
        ``degree`` (divided by the map's columns per direction, ``feature_dim`` at ``n_features=1``:
        half of it for the 2m-column trig and hyperbolic maps).
        """
        if self.kind in ATTENTION_KINDS:
            params = {k: v for k, v in est.items() if k != "label"}
            record = attention_estimator_record(est.get("estimator"))
            accepts = record.study_keys(params)
            for axis in ("samples", "weights"):
                if axis in cell and axis not in params and (accepts is None or axis in accepts):
                    params[axis] = cell[axis]
            spec = record.map_spec(params)
            split = spec is not None and record.from_budget is not None and "n_features" not in spec[1]
            if split and "samples" in params and "samples" not in est:
                # an estimator with a map and a support (Hybrid): the support's exact keys first
                params["samples"] = self._map_budget(record, params, cell, int(params["samples"]))
            if "feature_dim" in cell and "samples" not in params:
                # equal budgets: an estimator built around a map (RFA) gets the directions that fill
                # feature_dim columns of its map; the sampling estimators draw feature_dim samples
                if spec is None:
                    params["samples"] = int(cell["feature_dim"])
                elif "n_features" not in spec[1]:
                    m_est = {"map": spec[0], "label": self.label(est)}
                    columns = int(cell["feature_dim"])
                    if split:
                        columns = self._map_budget(record, params, cell, columns)
                    params["samples"] = self._features_for_columns(
                        m_est, spec[1], {**cell, "feature_dim": columns}
                    )
            return params
        accepts = takes(est.get("map"), "map")
        params = {k: v for k, v in est.items() if k not in ("map", "label")}
        for axis in ESTIMATOR_AXES - {"feature_dim"}:  # grid axes go to maps that take them
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

    def _map_budget(
        self, record: Any, params: Mapping[str, Any], cell: Mapping[str, Any], budget: int
    ) -> int:
        """The part of a per-query budget an estimator with a map and a support (Hybrid) leaves to its map.

        The record's ``from_budget(budget, params)`` returns ``{"map_budget": k}``; ``params`` get
        ``causal`` from the cell's data where the entry does not set it (a decoder's window holds
        ``window + 1`` keys, an encoder's ``2 window + 1``).
        """
        ctx = dict(params)
        ctx.setdefault("causal", data_source_record(self.data["source"]).is_causal(self.data_params(cell)))
        return int(record.from_budget(budget, ctx)["map_budget"])

    def _features_for_columns(
        self, est: Mapping[str, Any], params: dict[str, Any], cell: Mapping[str, Any]
    ) -> int:
        """``n_features`` of a map whose feature dimension fills the cell's ``feature_dim`` columns.

        Every map's ``feature_dim(d)`` is affine in ``n_features`` (``m``, ``2m``, ``1 + n m``, ...): it
        is asked of the map at ``n_features`` = 1 and 2, so maps compared at one ``feature_dim`` have
        the same number of feature columns (the cost of linear attention), whatever their family.
        """
        D = int(cell["feature_dim"])
        dim = int(cell.get("dim", self.data.get("dim", 0)) or 0)
        model_dim = data_source_record(self.data.get("source")).model_dim
        if not dim and model_dim is not None:  # real data: the model's head dimension
            dim = int(model_dim(self.data_params(cell)))
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
                f"is too small for {self.label(est)!r}, whose feature dimension is {per} n_features + {base}",
                D,
            )
        return (D - base) // per

    # ---------------------------------------------------------------- variants
    def quick_profile(self) -> Design:
        """The design with its ``[quick]`` overrides applied (for CI and smoke runs)."""
        return self._with_overrides(self.quick, "quick", {})  # after profile("NAME"): "NAME.quick"

    @property
    def profile_names(self) -> list[str]:
        """The profiles :meth:`profile` accepts: ``"quick"`` (where the design has a ``[quick]``) and its named ones."""
        return (["quick"] if self.quick else []) + list(self.profiles)

    def profile(self, name: str) -> Design:
        """The design with the overrides of its profile ``name`` applied (``rfkit run --profile NAME``).

        ``"quick"`` is :meth:`quick_profile`; any other name is a ``[profiles.NAME]`` table of the
        study file, and ``"NAME.quick"`` is that profile's quick profile (``profile("NAME").quick_profile()``,
        built in one step). Its ``grid``, ``data`` and ``outputs`` are merged key by key into the file's (an
        axis its grid sets leaves ``[data]``, and a value its ``[data]`` sets leaves the grid); every
        other key replaces the file's. The result keeps the file's name, records the profile
        (:attr:`applied_profile`, part of :meth:`hash` and of a run's recorded design) and has the profile's
        own ``quick`` table as its ``[quick]`` (``--profile NAME --quick``).

        Raises
        ------
        InvalidParameterError
            For a name the design has no profile of (with the closest name, if any).
        """
        if name == "quick" and self.quick:
            return self.quick_profile()
        head, dot, tail = name.partition(".") if isinstance(name, str) else (name, "", "")
        if head not in self.profiles or (dot and tail != "quick"):
            raise unknown_profile(self.source, self.name, name, self.profile_names)
        over = dict(self.profiles[head])
        quick = over.pop("quick", {})
        if not dot:
            return self._with_overrides(over, head, quick)
        # "NAME.quick": both sets of overrides, one design built (the intermediate is never checked)
        return self._with_overrides(over, name, {}, then=quick)

    def _with_overrides(
        self,
        overrides: Mapping[str, Any],
        name: str,
        quick: Mapping[str, Any],
        then: Mapping[str, Any] | None = None,
    ) -> Design:
        base = merge_overrides(merge_overrides(self.to_dict(), overrides), then or {})
        base["quick"] = copy.deepcopy(dict(quick))
        base["profiles"] = {}
        base["applied_profile"] = name if self.applied_profile is None else f"{self.applied_profile}.{name}"
        base["name"] = self.name
        return Design(**base, source=self.source + "".join(f" [{p}]" for p in name.split(".")))

    def on_backend(
        self, backend: str | None = None, device: str | None = None, draws: str | None = None
    ) -> Design:
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
        if draws is not None:
            d["draws"] = draws
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
        # plain designs keep the form they had before these keys existed
        if d["allow_large"] is False:
            d.pop("allow_large")
        if d["draws"] == "numpy":  # likewise: NumPy draws are what every design had before
            d.pop("draws")
        for key in ("profiles", "exclude"):
            if not d[key]:
                d.pop(key)
        if d["applied_profile"] is None:
            d.pop("applied_profile")
        return d

    def hash(self) -> str:
        """SHA-256 of the canonical JSON form: identifies the design in results and on resume."""
        d = self.to_dict()
        for key in (
            "quick",
            "profiles",
            "description",
            "outputs",
            "backend",
            "device",
            "on_error",
            "allow_large",
        ):
            d.pop(key, None)
        if not d["imports"]:  # designs without imports keep the hash they had before the key existed
            d.pop("imports")
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


def load_design(path: str | Path, *, allow_large: bool = False, profile: str | None = None) -> Design:
    """Read and validate a TOML study file; errors name the file, the key and the rule.

    The file is read as UTF-8 (a file in another encoding is refused, naming the byte). Every
    key and value is checked here, with its range, so a run never fails on a value of the file;
    ``allow_large=True`` builds a study whose estimated size is beyond this machine (see
    :class:`Design`). ``profile="NAME"`` returns the design of that profile
    (:meth:`Design.profile`: ``"quick"`` or a ``[profiles.NAME]`` table).

    Parameters
    ----------
    path : str or path
        The TOML study file.
    allow_large : bool, default=False
        Build a study whose estimated size is beyond this machine.
    profile : str, optional
        The profile to return (``"quick"`` or a ``[profiles.NAME]`` table); None: the full study.

    Returns
    -------
    Design
        The validated design.
    """
    if isinstance(allow_large, bool) is False:
        raise InvalidParameterError(f"`allow_large` must be True or False. Got {allow_large!r} instead.")
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InvalidParameterError(
            f"cannot read study file {str(p)!r}: {exc.strerror or type(exc).__name__}"
        ) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidParameterError(
            f"{p}: study files must be UTF-8 text; byte {data[exc.start]:#04x} at offset {exc.start} is not "
            "UTF-8 (save the file as UTF-8)"
        ) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidParameterError(f"{p}: malformed TOML: {exc}") from None
    if allow_large:
        raw = {**raw, "allow_large": True}
    design = Design.from_dict(raw, source=str(p))
    return design if profile is None else design.profile(profile)
