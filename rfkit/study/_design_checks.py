"""Validation of a study design: every key, axis, data source, metric, figure and estimator, when it is built.

Errors name the design's source (file or ``"python"``), the key and the rule, so a study file
is refused before a run starts rather than mid-run. Names are checked against the registries
(a misspelt one is answered with the closest: ``did you mean ...?``) and values against their
ranges; each estimator is built for every cell (every parameter checked now). Nothing is run
here: the protocol probes of maps and estimators of your own, which call them on data, are
:mod:`rfkit.study._probes` (run at the start of every run, and by
``rk.study.check_design(design, probe=True)``).
"""

from __future__ import annotations

import difflib
import math
import unicodedata
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .._backend import BACKENDS
from .._backend_random import BACKEND_DRAW_LIBRARIES, DRAWS
from .._params import int_rule
from ..exceptions import InvalidParameterError
from ._design_limits import check_size
from ._dropin_design import check_dropin_design
from ._estimators import build_attention_estimator, build_feature_map
from ._figure_kinds import FIGURE_ALIASES, figure_kinds, resolve_figure_kind
from ._plain import is_path
from ._record_types import ATTENTION_KINDS, KINDS
from ._records import attention_estimator_record, data_source_record
from ._views import (
    ATTENTION_ESTIMATORS,
    DATA_SOURCES,
    DEFAULT_METRICS,
    FEATURE_MAPS,
    METRICS_BY_KIND,
    SEQUENCE_SOURCES,
)

if TYPE_CHECKING:
    from ._design import Design

__all__ = [
    "validate_design",
    "design_error",
    "did_you_mean",
    "check_file_name",
    "check_scalars",
    "ESTIMATOR_AXES",
    "BOUND_AXES",
    "INTEGER_AXES",
    "VALUE_RULES",
    "MAX_NAME_LENGTH",
    "MAX_NAME_BYTES",
]

#: grid axes that are estimator parameters (or budgets), not data parameters
ESTIMATOR_AXES = frozenset({"n_features", "feature_dim", "degree", "n", "projection", "samples", "weights"})
#: axes of concentration designs that are neither data nor estimator parameters
BOUND_AXES = frozenset({"p"})
#: axes whose values are integers >= 1 (``degree`` and ``dataset``: >= 0)
INTEGER_AXES = (
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
)

#: the longest study name or estimator label, in characters
MAX_NAME_LENGTH = 100
#: ... and in bytes of UTF-8: a file name holds at most 255 bytes on most file systems, and rfkit
#: makes file names of two of them (the run folder ``<study>-<profile>``: 120 + 1 + 120 bytes)
MAX_NAME_BYTES = 120
#: device names Windows reserves, in any case and with any extension (``nul.txt``); its digits
#: include the superscripts ¹ ² ³ (``COM¹`` is a serial port)
_WINDOWS_RESERVED = frozenset(
    {"con", "prn", "aux", "nul", "conin$", "conout$"}
    | {f"{port}{digit}" for port in ("com", "lpt") for digit in "0123456789\u00b9\u00b2\u00b3"}
)
_NOT_IN_NAMES = '/\\:*?"<>|'

#: ranges of the data parameters of rfkit's sources, checked in ``[data]`` and on grid axes:
#: ``(integer?, low, high, low open?, high open?)``; every other number must be finite
VALUE_RULES: dict[str, tuple[bool, float, float, bool, bool]] = {
    **{k: (True, 1, math.inf, False, True) for k in ("n_pairs", "dim", "n_tokens", "d_v", "n_clusters")},
    **{k: (True, 1, math.inf, False, True) for k in ("max_len", "n_texts", "samples")},
    **{k: (True, 0, math.inf, False, True) for k in ("layer", "head", "dataset")},
    **{k: (False, 0, math.inf, False, True) for k in ("norm", "norm_x", "norm_y", "norm_q", "norm_k")},
    "spread": (False, 0, math.inf, False, True),
    **{k: (False, 0, math.inf, True, True) for k in ("var_shape_q", "var_shape_k")},
    "cosine": (False, -1, 1, False, False),
    "p": (False, 0, 1, True, True),
}

#: device kinds a backend computes on (the format only: whether one is present is the backend's check)
_DEVICES = {"torch": ("cpu", "cuda", "mps", "xpu"), "cupy": ("cuda",)}


def design_error(source: str, key: str, rule: str, got: Any) -> InvalidParameterError:
    """``"<source>: `key` <rule>. Got <got> instead."``"""
    return InvalidParameterError(f"{source}: `{key}` {rule}. Got {got!r} instead.")


_err = design_error


def did_you_mean(name: Any, known: Any) -> str:
    """``" (did you mean 'x'?)"`` with the registered name closest to ``name``, or ``""`` if none is close.

    >>> did_you_mean("mse_vs_featurez", ["mse_vs_features", "cost"])
    " (did you mean 'mse_vs_features'?)"
    """
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, [str(k) for k in known], n=1, cutoff=0.6)
    if not close:  # a name in the wrong case ("positive" for "Positive")
        close = [k for k in map(str, known) if k.casefold() == name.casefold()][:1]
    return f" (did you mean {close[0]!r}?)" if close else ""


def validate_design(d: Design) -> None:
    """Validate every field of a design (called by ``Design.__post_init__``): names and ranges, nothing run."""
    src = d.source
    check_file_name(d.name, src, "name", spaces=False)
    for key, typ, what in (
        ("description", str, "a string"),
        ("outputs", Mapping, "a table"),
        ("quick", Mapping, "a table"),
        ("imports", list, "a list of module names"),
    ):
        if not isinstance(getattr(d, key), typ):
            raise _err(src, key, f"must be {what}", getattr(d, key))
    if not isinstance(d.allow_large, bool):
        raise _err(src, "allow_large", "must be true or false", d.allow_large)
    if d.kind not in KINDS:
        raise _err(src, "kind", f"must be one of {list(KINDS)}", d.kind)
    for key in ("trials", "chunk_trials"):
        v = getattr(d, key)
        broken = int_rule(v, low=1, plain=True)
        if broken is not None:
            raise _err(src, key, broken, v)
    if d.seed is not None and (isinstance(d.seed, bool) or not isinstance(d.seed, int) or d.seed < 0):
        raise _err(src, "seed", "must be a non-negative integer", d.seed)
    _check_backend(d)
    if d.on_error not in ("raise", "record"):
        raise _err(src, "on_error", "must be 'raise' or 'record'", d.on_error)
    allowed = METRICS_BY_KIND[d.kind]
    if not d.metrics:  # default: the kind's default metrics
        object.__setattr__(d, "metrics", list(DEFAULT_METRICS[d.kind]))
    bad = [m for m in d.metrics if m not in allowed]
    if bad or not d.metrics:
        hint = did_you_mean(bad[0], allowed) if bad else ""
        raise _err(
            src,
            "metrics",
            f"must be a non-empty list from {list(allowed)} (kind {d.kind!r}){hint}",
            d.metrics,
        )
    if not isinstance(d.metrics, list):
        raise _err(src, "metrics", "must be a list of metric names", d.metrics)
    _check_figures(src, "outputs.figures", d.outputs.get("figures", []))
    _check_data(d)
    _check_grid(d)
    _check_values(d)
    _check_quick(d)
    _check_profile_grids(d)
    check_size(d, d.allow_large)  # before any map is built: a huge n_features must not allocate
    _check_estimators(d)
    if d.kind == "drop-in":
        check_dropin_design(d)  # models, texts, layers and every estimator at each model's settings


def _check_figures(src: str, key: str, figures: Any) -> None:
    """``[outputs] figures``: a list of registered figure kinds (:func:`figure_kinds`; an old name is warned)."""
    kinds = figure_kinds()
    rule = f"must be a list of figure kinds from {list(kinds)}"
    if not isinstance(figures, list):
        raise _err(src, key, rule, figures)
    for kind in figures:
        if isinstance(kind, str) and kind in FIGURE_ALIASES and kind not in kinds:
            resolve_figure_kind(kind)  # accepted for one release, with a warning naming the new name
        elif kind not in kinds:
            raise _err(src, key, f"{rule}{did_you_mean(kind, kinds)}", kind)


def check_file_name(name: Any, source: str, key: str, *, spaces: bool = True) -> str:
    """A study name or label that is safe as a file name on every system, else a named error.

    Refused: a non-string, empty or blank text, ``.`` and ``..``, path separators and the
    characters Windows forbids (``/ \\ : * ? " < > |``), control characters, leading or trailing
    spaces, a trailing dot (Windows drops it), the device names Windows reserves in any case and
    with any extension (``CON``, ``PRN``, ``AUX``, ``NUL``, ``COM0``-``COM9``, ``COM¹``-``COM³``,
    ``LPT0``-``LPT9``, ``LPT¹``-``LPT³``, ``CONIN$``, ``CONOUT$``; ``nul.txt`` too), more than
    :data:`MAX_NAME_LENGTH` characters and more than :data:`MAX_NAME_BYTES` bytes of UTF-8; a
    study name (``spaces=False``) has no spaces either.
    """
    rule = (
        f"must be a safe file name: 1 to {MAX_NAME_LENGTH} characters and at most {MAX_NAME_BYTES} bytes "
        f"of UTF-8, not '.' or '..', without path separators, {_NOT_IN_NAMES[2:]!s} or control characters"
        + ("" if spaces else " or spaces")
        + ", not ending in a dot or space, not a device name Windows reserves (CON, PRN, AUX, NUL, "
        "COM0-COM9, COM¹-COM³, LPT0-LPT9, LPT¹-LPT³, CONIN$, CONOUT$, in any case, with or without "
        "an extension)"
    )
    if not isinstance(name, str):
        raise _err(source, key, rule, name)
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise _err(source, key, f"{rule}; this one is {size} bytes", name)
    stem = name.split(".")[0].rstrip(" ").lower()  # Windows ignores an extension and trailing spaces
    if stem in _WINDOWS_RESERVED:
        raise _err(source, key, f"{rule}; {stem.upper()!r} is reserved", name)
    bad = (
        not name.strip()
        or name in (".", "..")
        or len(name) > MAX_NAME_LENGTH
        or name != name.strip()
        or name.endswith(".")
        or any(c in _NOT_IN_NAMES for c in name)
        or any(unicodedata.category(c).startswith("C") for c in name)
        or (not spaces and any(c.isspace() for c in name))
    )
    if bad:
        raise _err(source, key, rule, name)
    return name


def _check_value(src: str, key: str, value: Any, rule: tuple[bool, float, float, bool, bool] | None) -> None:
    """One data value: finite numbers (nested lists too), in the key's range where it has one."""
    if isinstance(value, list):
        for v in value:
            _check_value(src, key, v, None)  # arrays (means, covariances): finite numbers
        if rule is None:
            return
    if isinstance(value, float) and not math.isfinite(value):
        raise _err(src, key, "must be a finite number", value)
    if rule is None:
        return
    integer, lo, hi, lo_open, hi_open = rule
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if integer and not (number and isinstance(value, int)):
        ok = False
    else:
        ok = number and (value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)
    if not ok:
        kind = "an integer" if integer else "a number"
        span = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise _err(src, key, f"must be {kind} in {span}", value)


_QUICK_KEYS = ("trials", "chunk_trials", "data", "grid", "metrics", "estimators", "description", "outputs")


def _check_quick(d: Design) -> None:
    """The ``[quick]`` overrides: known keys and values in range (its design is built by --quick)."""
    src, q = d.source, d.quick
    for key, value in q.items():
        where = f"quick.{key}"
        if key not in _QUICK_KEYS and key not in (
            "seed",
            "backend",
            "device",
            "draws",
            "on_error",
            "imports",
        ):
            raise _err(
                src, where, f"is not a key a [quick] profile overrides (allowed: {list(_QUICK_KEYS)})", key
            )
        broken = int_rule(value, low=1, plain=True) if key in ("trials", "chunk_trials") else None
        if broken is not None:
            raise _err(src, where, broken, value)
        if key in ("data", "grid") and not isinstance(value, Mapping):
            raise _err(src, where, "must be a table", value)
        if key == "outputs" and isinstance(value, Mapping) and "figures" in value:
            _check_figures(src, f"{where}.figures", value["figures"])
        if key == "data":
            for k, v in value.items():
                if k != "source":
                    _check_value(src, f"{where}.{k}", v, VALUE_RULES.get(k))
        if key == "grid":
            for axis, values in value.items():
                if not isinstance(values, list) or not values:
                    raise _err(src, f"{where}.{axis}", "must be a non-empty list of values", values)
                check_scalars(src, f"{where}.{axis}", values)
                low = 0 if axis in ("degree", "dataset") else 1
                rule = (True, low, math.inf, False, True) if axis in INTEGER_AXES else VALUE_RULES.get(axis)
                for v in values:
                    _check_value(src, f"{where}.{axis}", v, rule)


def check_scalars(src: str, key: str, values: list[Any]) -> None:
    """The values of a grid axis: one value per cell, never a list, table or array.

    No axis takes vectors: a cell's values label the rows of the result tables, and a vector
    there cannot be a table key (a mean or covariance is a ``[data]`` value, fixed for the study).
    """
    for v in values:
        if isinstance(v, (list, tuple, set, frozenset, Mapping, np.ndarray)):
            raise _err(
                src,
                key,
                "must hold one scalar value per cell (a number, string or boolean), not a list or table "
                "(no grid axis takes vectors; give a vector in [data])",
                v,
            )


def _check_profile_grids(d: Design) -> None:
    """The grid of every ``[profiles.NAME]`` table (and of its ``quick``) holds scalars, checked
    when the file is read; its other values are checked when the profile is applied."""
    if not isinstance(d.profiles, Mapping):
        return  # refused by the profile checks, naming the key
    for name, over in d.profiles.items():
        if not isinstance(over, Mapping):
            continue
        quick = over.get("quick")
        for where, grid in (
            ("grid", over.get("grid")),
            ("quick.grid", quick.get("grid") if isinstance(quick, Mapping) else None),
        ):
            for axis, values in grid.items() if isinstance(grid, Mapping) else ():
                if isinstance(values, list):
                    check_scalars(d.source, f"profiles.{name}.{where}.{axis}", values)


def _check_values(d: Design) -> None:
    """Every ``[data]`` value and every grid value: type and range (the door, not mid-run)."""
    for key, value in d.data.items():
        if key != "source":
            _check_value(d.source, f"data.{key}", value, VALUE_RULES.get(key))
    for axis, values in d.grid.items():
        for value in values:
            _check_value(d.source, f"grid.{axis}", value, VALUE_RULES.get(axis))


def _check_backend(d: Design) -> None:
    src = d.source
    if d.backend not in BACKENDS:
        raise _err(src, "backend", f"must be one of {list(BACKENDS)}", d.backend)
    if d.device is not None and (not isinstance(d.device, str) or not d.device):
        raise _err(src, "device", "must be a device name such as 'cuda', 'cuda:1' or 'cpu'", d.device)
    if d.draws not in DRAWS:
        raise _err(src, "draws", f"must be one of {list(DRAWS)}", d.draws)
    if d.draws == "backend" and d.backend not in BACKEND_DRAW_LIBRARIES:
        raise _err(
            src,
            "draws",
            f"'backend' needs a library with its own generator ({', '.join(BACKEND_DRAW_LIBRARIES)}); "
            f"backend {d.backend!r} has none, use draws = 'numpy'",
            d.draws,
        )
    if d.backend == "numpy" and d.device not in (None, "cpu"):
        raise _err(src, "device", "must be 'cpu' (or absent) for backend 'numpy'", d.device)
    dev = d.device
    if dev is not None and d.backend in _DEVICES:
        kind, _, index = dev.partition(":")
        if kind not in _DEVICES[d.backend] or (index and not index.isdigit()):
            raise _err(
                src,
                "device",
                f"must be a device of {d.backend} that holds data: one of {list(_DEVICES[d.backend])}, "
                "optionally with ':<index>' (e.g. 'cuda:1'; 'meta' holds no values)",
                dev,
            )


def _check_data(d: Design) -> None:
    src = d.source
    if not isinstance(d.data, Mapping) or "source" not in d.data:
        raise _err(src, "data.source", f"must be one of {sorted(DATA_SOURCES)}", None)
    s = d.data["source"]
    if s not in DATA_SOURCES:
        raise _err(
            src, "data.source", f"must be one of {sorted(DATA_SOURCES)}{did_you_mean(s, DATA_SOURCES)}", s
        )
    serves = data_source_record(s).kinds
    if serves or d.kind == "drop-in":  # a source for some kinds only (the drop-in's models and texts)
        if d.kind not in serves:
            fit = sorted(n for n in DATA_SOURCES if d.kind in data_source_record(n).kinds)
            raise _err(src, "data.source", f"must be a source for kind {d.kind!r} ({fit})", s)
    elif (s in SEQUENCE_SOURCES) != (d.kind == "attention"):
        need = (
            "a sequence source " + str(list(SEQUENCE_SOURCES)) if d.kind == "attention" else "a pair source"
        )
        raise _err(src, "data.source", f"must be {need} for kind {d.kind!r}", s)
    allowed = DATA_SOURCES[s] | (BOUND_AXES if d.kind == "concentration" else set())
    for key in d.data:
        if key != "source" and key not in allowed:
            raise _err(
                src, f"data.{key}", f"is not a parameter of source {s!r} (allowed: {sorted(allowed)})", key
            )


def _check_grid(d: Design) -> None:
    src = d.source
    if not isinstance(d.grid, Mapping):
        raise _err(src, "grid", "must be a table of axis = [values]", d.grid)
    allowed = DATA_SOURCES[d.data["source"]] | ESTIMATOR_AXES
    if d.kind == "concentration":
        allowed = allowed | BOUND_AXES
        if d.data["source"] != "gaussian":
            raise _err(
                src,
                "data.source",
                "must be 'gaussian' for kind 'concentration' (the theorem's model)",
                d.data["source"],
            )
        if "p" not in d.grid and "p" not in d.data:
            raise _err(src, "grid.p", "must give the probability levels p of the bound", None)
    for axis, values in d.grid.items():
        if axis not in allowed:
            raise _err(src, f"grid.{axis}", f"is not a known axis (allowed: {sorted(allowed)})", axis)
        if not isinstance(values, list) or not values:
            raise _err(src, f"grid.{axis}", "must be a non-empty list of values", values)
        check_scalars(src, f"grid.{axis}", values)
        if axis in INTEGER_AXES:
            for v in values:
                if (
                    isinstance(v, bool)
                    or not isinstance(v, int)
                    or v < (0 if axis in ("degree", "dataset") else 1)
                ):
                    raise _err(src, f"grid.{axis}", "must hold positive integers (dataset, degree: >= 0)", v)
        if len(set(map(repr, values))) != len(values):
            raise _err(src, f"grid.{axis}", "must not repeat values", values)
    needs_dim = data_source_record(d.data["source"]).needs_dim
    if "dim" not in d.grid and "dim" not in d.data and needs_dim:
        raise _err(src, "data.dim", "must be given (in [data] or as a grid axis)", None)


def _check_names(d: Design, est: Any, where: str) -> None:
    src = d.source
    names = f"{list(FEATURE_MAPS)} or be 'package.module:ClassName'"
    if d.kind in ATTENTION_KINDS:
        e = est.get("estimator") if isinstance(est, Mapping) else est
        if not (e in ATTENTION_ESTIMATORS or is_path(e)):
            raise _err(
                src,
                f"{where}.estimator",
                f"must be one of {list(ATTENTION_ESTIMATORS)} or 'package.module:Name'"
                + did_you_mean(e, ATTENTION_ESTIMATORS),
                e,
            )
        spec = attention_estimator_record(e).map_spec(est)
        if spec is not None and not (spec[0] in FEATURE_MAPS or is_path(spec[0])):
            hint = did_you_mean(spec[0], FEATURE_MAPS)
            raise _err(src, f"{where}.map", f"must name a feature map among {names}{hint}", spec[0])
    else:
        m = est.get("map") if isinstance(est, Mapping) else est
        if not (m in FEATURE_MAPS or is_path(m)):
            raise _err(
                src,
                f"{where}.map",
                f"must name a feature map among {names}{did_you_mean(m, FEATURE_MAPS)}",
                m,
            )


def _check_estimators(d: Design) -> None:
    """Each entry names a registered map or estimator (or ``package.module:Name``), has a unique
    label, and builds for every cell: every parameter is checked now, not mid-run. Nothing is
    called on data (the protocol probes: :func:`rfkit.study._probes.probe_design`)."""
    src = d.source
    if not isinstance(d.estimators, list) or not d.estimators:
        raise _err(src, "estimators", "must be a non-empty list of [[estimators]] tables", d.estimators)
    labels = set()
    for i, est in enumerate(d.estimators):
        where = f"estimators[{i}]"
        _check_names(d, est, where)
        label = d.label(est)
        check_file_name(label, src, f"{where}.label")
        if label.casefold() in labels:
            raise _err(src, f"{where}.label", "must be unique (also ignoring case)", label)
        labels.add(label.casefold())
        for cell in d.cells():
            try:
                params = d.estimator_params(est, cell)
                if d.kind in ATTENTION_KINDS:
                    build_attention_estimator(params)
                else:
                    fm = build_feature_map(est["map"], params)
                    if d.kind == "concentration" and fm.needs_data:
                        raise InvalidParameterError(
                            f"{fm!r}: the concentration theorem needs a fixed A (not a rule fitted to the data)."
                        )
            except InvalidParameterError as exc:
                raise InvalidParameterError(f"{src}: {where} ({label!r}): {exc}") from exc
