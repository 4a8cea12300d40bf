"""Feature maps and attention estimators of a study: names, imports, plain form, protocol checks.

A study names a feature map (``map``) or an attention estimator (``estimator``) in one of two
explicit forms:

* a bare name (``"Positive"``, ``"RFA"``): a map of :mod:`rfkit.features` or one of rfkit's
  attention estimators (``RFA``, ``RA``, ``SNIS``, ``LARA``);
* ``"package.module:Name"``: imports ``package.module`` (**executing that module's code**, as
  any Python import does) and takes ``Name`` from it. A name with dots but no colon is refused,
  so a string never means "a built-in, or else whatever imports".

In Python a :class:`~rfkit.study.Design` also takes the class itself, or an instance (a
dataclass, as every rfkit feature map is): it is stored as the equivalent study-file entry,
``"module:Class"`` plus the instance's parameters, so the design stays plain data (JSON/TOML),
its hash is that of the equivalent file, and workers rebuild the object by importing the class.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import features
from ..exceptions import InvalidParameterError

__all__ = [
    "ATTENTION_ESTIMATORS",
    "FEATURE_MAPS",
    "build_feature_map",
    "build_attention_estimator",
    "check_attention_estimator",
    "check_attention_output",
    "feature_map_class",
    "normalise_estimator",
    "workers_can_import",
]

#: rfkit's attention estimators, by bare name
ATTENTION_ESTIMATORS = ("RFA", "RA", "SNIS", "LARA")


def _builtin_maps() -> tuple[str, ...]:
    out = []
    for name in features.__all__:
        obj = getattr(features, name)
        if (
            isinstance(obj, type)
            and issubclass(obj, features.FeatureMap)
            and not inspect.isabstract(obj)
            and obj is not features.FeatureMap
        ):
            out.append(name)
    return tuple(out)


#: every concrete feature map of :mod:`rfkit.features`, usable by bare name
FEATURE_MAPS = _builtin_maps()
_PATH_HINT = "'package.module:ClassName' (a colon before the class name)"


def is_path(name: Any) -> bool:
    """True for the explicit import form ``"package.module:Name"``."""
    return isinstance(name, str) and ":" in name


def _describe(obj: Any) -> str:
    if isinstance(obj, type):
        return f"the class {obj.__module__}.{obj.__qualname__}"
    return f"{type(obj).__name__} {obj!r:.80}"


def import_object(path: str, key: str) -> Any:
    """Import ``"package.module:Name"`` (``Name`` may be dotted: ``Outer.Inner``).

    Raises
    ------
    InvalidParameterError
        Naming the key, the value, and why the import failed (module not found, an error raised
        while executing the module, or no such attribute).
    """
    mod_name, _, attr = path.partition(":")
    if not mod_name or not attr or ":" in attr:
        raise InvalidParameterError(f"`{key}` must be {_PATH_HINT}. Got {path!r} instead.")
    try:
        module = importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (mod_name == exc.name or mod_name.startswith(exc.name + ".")):
            raise InvalidParameterError(
                f"`{key}` = {path!r}: cannot import module {mod_name!r} ({exc}). Make it importable: put "
                "the folder that holds it on PYTHONPATH (for example `PYTHONPATH=studies/examples rfkit "
                "run ...`), or install its package."
            ) from exc
        raise InvalidParameterError(
            f"`{key}` = {path!r}: importing module {mod_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - the module's own code raised
        raise InvalidParameterError(
            f"`{key}` = {path!r}: importing module {mod_name!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InvalidParameterError(
                f"`{key}` = {path!r}: module {mod_name!r} has no attribute {attr!r}. Got {path!r} instead."
            )
        obj = getattr(obj, part)
    return obj


def class_ref(cls: Any, *, bare: bool) -> str:
    """How a study file names ``cls``: a bare rfkit name (when ``bare``) or ``"module:QualName"``."""
    if bare:
        name = str(getattr(cls, "__name__", ""))
        for ns in _namespaces():
            if getattr(ns, name, None) is cls:
                return name
    qual = getattr(cls, "__qualname__", None)
    mod = getattr(cls, "__module__", None)
    if not qual or not mod:
        raise InvalidParameterError(f"cannot name {_describe(cls)} in a design: it has no module and name.")
    if "<locals>" in qual:
        raise InvalidParameterError(
            f"{qual} is defined inside a function; a design names classes by module and name, so define "
            "it at the top level of a module."
        )
    return f"{mod}:{qual}"


def _namespaces() -> list[Any]:
    from .. import attention

    return [features, attention]


def _resolve_nested(name: str) -> Any:
    if is_path(name):
        return import_object(name, "class")
    for ns in _namespaces():
        if name in getattr(ns, "__all__", ()):
            return getattr(ns, name)
    raise InvalidParameterError(
        f"`class` must name a class of rfkit.features or rfkit.attention, or be {_PATH_HINT}. Got {name!r} instead."
    )


# ----------------------------------------------------------------------------- plain form
def _init_fields(obj: Any) -> dict[str, Any]:
    """Init fields of a dataclass instance that differ from their defaults, in field order."""
    out = {}
    for f in dataclasses.fields(obj):
        if not f.init:
            continue
        value = getattr(obj, f.name)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            out[f.name] = value
            continue
        if not _plain_equal(value, default):
            out[f.name] = value
    return out


def _plain_equal(a: Any, b: Any) -> bool:
    try:
        return bool(plain(a, "") == plain(b, ""))
    except InvalidParameterError:
        return False


def plain(value: Any, where: str) -> Any:
    """The study-file (JSON/TOML) form of a parameter value.

    Numbers, strings, booleans and None stay; tuples and arrays become lists; a dataclass
    instance becomes ``{"class": "<name or module:Class>", **its non-default fields}``.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise InvalidParameterError(
                f"{where} holds an array of dtype {value.dtype}; only numbers can be stored."
            )
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v, where) for v in value]
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise InvalidParameterError(
                f"{where} holds a dict with non-string keys. Got {value!r:.80} instead."
            )
        return {k: plain(v, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        body = {k: plain(v, f"{where}.{k}") for k, v in _init_fields(value).items()}
        return {"class": class_ref(type(value), bare=True), **body}
    raise InvalidParameterError(
        f"{where} cannot be stored in a design (plain data: numbers, strings, booleans, lists, arrays, "
        f"dicts, dataclass instances). Got {_describe(value)} instead."
    )


def decode(value: Any) -> Any:
    """Inverse of :func:`plain` for nested objects: a dict with a ``class`` key is built."""
    if isinstance(value, Mapping):
        if "class" in value:
            cls = _resolve_nested(str(value["class"]))
            kwargs = {k: decode(v) for k, v in value.items() if k != "class"}
            return _construct(cls, kwargs)
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def _construct(cls: Any, kwargs: Mapping[str, Any]) -> Any:
    try:
        return cls(**kwargs)
    except InvalidParameterError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code may raise anything
        args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise InvalidParameterError(
            f"{getattr(cls, '__qualname__', cls)}({args}) raised {type(exc).__name__}: {exc}"
        ) from exc


def _parameters(obj: Any) -> set[str] | None:
    """Keyword parameters a class or function takes (None: it takes any, via ``**kwargs``)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return {
        n
        for n, p in sig.parameters.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }


def takes(name: Any, kind: str) -> set[str] | None:
    """Parameters of the map / estimator a study entry names (None: any)."""
    if kind == "map":
        return _parameters(feature_map_class(str(name)))
    if name in ATTENTION_ESTIMATORS:
        return None
    obj = import_object(str(name), "estimator")
    return _parameters(obj)


def normalise_estimator(est: Any, kind: str, grid_axes: set[str]) -> dict[str, Any]:
    """The plain study-file form of one ``estimators`` entry.

    ``est`` is a table (dict) whose ``map`` / ``estimator`` may be a name, a class, a function
    or an instance, or the object itself. An instance becomes ``"module:Class"`` (a bare name
    for rfkit's feature maps) plus its non-default fields as parameters, except fields named by
    a grid axis (the grid supplies them cell by cell) and fields the table sets itself; it must
    rebuild to an equal object from that form.
    """
    key = "estimator" if kind == "attention" else "map"
    if not isinstance(est, Mapping):
        if isinstance(est, str):
            raise InvalidParameterError(
                f"must be a table with `{key}` = ..., or a {'callable' if kind == 'attention' else 'feature map'}. "
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
        supplied = set(grid_axes)
        if kind == "attention" and k == "map" and "samples" in grid_axes:
            supplied.add("n_features")  # RFA: `samples` is the map's number of features
        if isinstance(v, type) or (inspect.isfunction(v) and top):
            out[k] = class_ref(v, bare=not top)
        elif dataclasses.is_dataclass(v):
            ref = class_ref(type(v), bare=not top)
            fields = {n: val for n, val in _init_fields(v).items() if n not in supplied and n not in est}
            out[k] = ref
            for n, val in fields.items():
                out[n] = plain(val, f"`{n}` of {type(v).__qualname__}")
            _check_round_trip(
                v, ref, {**fields, **{n: getattr(v, n) for n in supplied if hasattr(v, n)}}, top
            )
        else:
            raise InvalidParameterError(
                f"`{k}` must be a name, {_PATH_HINT}, a class, or a dataclass instance (stored as its class "
                f"and parameters; for other objects pass the class and its parameters). Got {_describe(v)} instead."
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


def _check_round_trip(obj: Any, ref: str, fields: Mapping[str, Any], top: bool) -> None:
    cls = import_object(ref, "estimator" if top else "map") if is_path(ref) else _resolve_nested(ref)
    rebuilt = _construct(cls, {n: decode(plain(v, n)) for n, v in fields.items()})
    a, b = plain(obj, "object"), plain(rebuilt, "object")
    if a != b:
        raise InvalidParameterError(
            f"{type(obj).__qualname__} does not survive the round trip through a design's plain form "
            f"(class {ref!r} and its parameters): {a!r:.200} became {b!r:.200}. Give the class and plain "
            "parameters instead."
        )


def workers_can_import(design_estimators: list[dict[str, Any]]) -> str | None:
    """A reason why worker processes cannot rebuild the design's objects, or None.

    Classes defined in ``__main__`` without a file (a notebook, an interactive session) exist only
    in that process; workers import classes by module and name.
    """
    import sys

    main = sys.modules.get("__main__")
    has_file = bool(getattr(main, "__file__", None))
    for est in design_estimators:
        for k in ("map", "estimator"):
            v = est.get(k)
            if is_path(v) and str(v).startswith("__main__:") and not has_file:
                return (
                    f"`{k}` = {v!r} is defined in this interactive session (a notebook or REPL): worker "
                    "processes cannot import it. Move the class into a module on the Python path and "
                    "import it from there, or run with executor='serial'."
                )
    return None


# ----------------------------------------------------------------------------- feature maps
def feature_map_class(name: str) -> type[features.FeatureMap]:
    """The class a ``map`` entry names: a bare rfkit name, or ``"package.module:ClassName"`` (imported)."""
    if is_path(name):
        obj = import_object(name, "map")
    else:
        obj = getattr(features, name, None) if name in FEATURE_MAPS else None
        if obj is None:
            raise InvalidParameterError(
                f"`map` must name a feature map of rfkit.features {list(FEATURE_MAPS)} or be {_PATH_HINT}. "
                f"Got {name!r} instead."
            )
    if not (isinstance(obj, type) and issubclass(obj, features.FeatureMap)):
        raise InvalidParameterError(
            f"`map` = {name!r} must be a subclass of rk.features.FeatureMap (with feature_dim and "
            f"_sample_one). Got {_describe(obj)} instead."
        )
    if inspect.isabstract(obj):
        missing = sorted(getattr(obj, "__abstractmethods__", ()))
        raise InvalidParameterError(
            f"`map` = {name!r}: {obj.__qualname__} does not implement {missing} (the feature-map protocol "
            "needs feature_dim(dim) and _sample_one(dim, rng)). Got an abstract class instead."
        )
    return obj


def build_feature_map(name: str, params: Mapping[str, Any]) -> features.FeatureMap:
    """``Class(**params)`` for the class a ``map`` entry names (lists for ``A`` become arrays).

    Raises
    ------
    InvalidParameterError
        For an unknown or unimportable map, a parameter the map does not take, an invalid value,
        or a constructor that fails.
    """
    cls = feature_map_class(name)
    accepted = _parameters(cls)
    kwargs: dict[str, Any] = {}
    for key, val in params.items():
        if accepted is not None and key not in accepted:
            raise InvalidParameterError(
                f"{cls.__qualname__} has no parameter `{key}` (it takes {sorted(accepted)}). Got {key}={val!r}."
            )
        val = decode(val)
        if key == "A" and isinstance(val, list):
            val = np.asarray(val, dtype=float)
        kwargs[key] = val
    fm = _construct(cls, kwargs)
    if not isinstance(
        fm, features.FeatureMap
    ):  # pragma: no cover - a class whose __new__ returns another type
        raise InvalidParameterError(
            f"{cls.__qualname__}(...) did not return a FeatureMap. Got {_describe(fm)} instead."
        )
    return fm


# ----------------------------------------------------------------------------- attention estimators
def build_attention_estimator(params: Mapping[str, Any]) -> Any:
    """An attention estimator from study parameters.

    ``estimator`` is ``"RFA"``, ``"RA"``, ``"SNIS"`` or ``"LARA"``, or ``"package.module:Name"``.
    For rfkit's estimators ``samples`` is the number of random samples: the feature map's
    ``n_features`` for RFA (``map`` and its parameters, default Positive; ``map`` may be
    ``"package.module:ClassName"``), ``n_samples`` for RA and SNIS, and
    ``n_proposals * samples_per_proposal`` for LARA. Other keys are the estimator's own
    parameters. An imported class is called with the parameters (``samples`` included, under
    that name) and must return a callable ``(Q, K, V, *, rng) -> AttentionResult``; an imported
    function is the estimator itself, called with the parameters as keywords besides ``rng``.
    """
    from .. import attention

    p = dict(params)
    kind = p.pop("estimator")
    if is_path(kind):
        return _build_user_estimator(str(kind), p)
    if kind not in ATTENTION_ESTIMATORS:
        raise InvalidParameterError(
            f"`estimator` must be one of {list(ATTENTION_ESTIMATORS)} or {_PATH_HINT}. Got {kind!r} instead."
        )
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
    return cls(**{k: decode(v) for k, v in p.items()})


def _build_user_estimator(path: str, params: dict[str, Any]) -> Any:
    obj = import_object(path, "estimator")
    name = getattr(obj, "__qualname__", path)
    if not callable(obj):
        raise InvalidParameterError(
            f"`estimator` = {path!r} must be a class or a function (Q, K, V, *, rng) -> AttentionResult. "
            f"Got {_describe(obj)} instead."
        )
    accepted = _parameters(obj)
    if accepted is not None:
        bad = [k for k in params if k not in accepted]
        if bad:
            hint = (
                " (a grid axis: give the estimator that parameter, or drop the axis)"
                if bad[0] == "samples"
                else ""
            )
            raise InvalidParameterError(
                f"{name} has no parameter `{bad[0]}` (it takes {sorted(accepted)}){hint}. "
                f"Got {bad[0]}={params[bad[0]]!r}."
            )
    kwargs = {k: decode(v) for k, v in params.items()}
    if isinstance(obj, type):
        est = _construct(obj, kwargs)
        if not callable(est):
            raise InvalidParameterError(
                f"{name}(...) must be callable as (Q, K, V, *, rng) -> AttentionResult. Got {_describe(est)} instead."
            )
        return est
    if accepted is not None and "rng" not in accepted:
        raise InvalidParameterError(
            f"{name} must take a keyword argument `rng` (signature (Q, K, V, *, rng, n_draws=None)). "
            f"Got the signature {inspect.signature(obj)} instead."
        )
    return functools.partial(obj, **kwargs) if kwargs else obj


def _estimator_name(est: Any) -> str:
    if isinstance(est, functools.partial):
        return getattr(est.func, "__qualname__", repr(est.func))
    if inspect.isfunction(est):
        return est.__qualname__
    return type(est).__qualname__


def check_attention_output(res: Any, shape: tuple[int, ...], est: Any) -> np.ndarray:
    """The output of one call, after checking it is an AttentionResult of the exact output's shape."""
    from ..attention import AttentionResult

    name = _estimator_name(est)
    if not isinstance(res, AttentionResult):
        raise InvalidParameterError(
            f"{name} does not follow the rfkit attention-estimator protocol: a call (Q, K, V, *, rng) must "
            f"return rk.attention.AttentionResult(output=..., method=...). Got {_describe(res)} instead."
        )
    from .._backend import to_numpy

    out = to_numpy(res.output)
    if tuple(out.shape) != tuple(shape):
        raise InvalidParameterError(
            f"{name} does not follow the rfkit attention-estimator protocol: its output must have the shape "
            f"of exact attention {tuple(shape)} (..., n_queries, d_v). Got shape {tuple(out.shape)} instead."
        )
    return out


def check_attention_estimator(
    est: Any, dim: int | None = None, *, data: tuple[Any, Any, Any] | None = None
) -> None:
    """Check that ``est`` follows rfkit's attention-estimator protocol on a small probe.

    A call ``est(Q, K, V, rng=seed)`` must return an :class:`~rfkit.attention.AttentionResult` whose
    ``output`` has the shape of exact attention, ``(..., n_queries, d_v)``, and the same seed must
    give the same output (every random number from ``rng``).

    Parameters
    ----------
    est : callable
        The estimator.
    dim : int, optional
        Query/key dimension of the probe (5 queries, 6 keys, d_v = 2; fixed seed).
    data : (Q, K, V), optional
        A probe of your own.

    Raises
    ------
    InvalidParameterError
        Naming the estimator, the rule, and what was received.
    """
    if data is None:
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 1:
            raise InvalidParameterError(
                f"The `dim` parameter of check_attention_estimator must be an int >= 1. Got {dim!r} instead."
            )
        g = np.random.default_rng(0x5EED_A77E)
        Q, K, V = (
            0.3 * g.standard_normal((5, dim)),
            0.3 * g.standard_normal((6, dim)),
            g.standard_normal((6, 2)),
        )
    else:
        Q, K, V = (np.asarray(a, dtype=np.float64) for a in data)
    if not callable(est):
        raise InvalidParameterError(
            f"An attention estimator must be callable as (Q, K, V, *, rng) -> AttentionResult. Got {_describe(est)} instead."
        )
    shape = tuple(np.broadcast_shapes(Q.shape[:-2], K.shape[:-2])) + (Q.shape[-2], V.shape[-1])
    outs = []
    for _ in range(2):
        try:
            res = est(Q, K, V, rng=np.random.SeedSequence(0x5EED_A771))
        except Exception as exc:  # noqa: BLE001 - user code may raise anything
            raise InvalidParameterError(
                f"{_estimator_name(est)}: a call (Q, K, V, rng=...) on a probe of shapes {Q.shape}, {K.shape}, "
                f"{V.shape} raised {type(exc).__name__}: {exc}"
            ) from exc
        outs.append(check_attention_output(res, shape, est))
    if not np.array_equal(outs[0], outs[1], equal_nan=True):
        raise InvalidParameterError(
            f"{_estimator_name(est)} does not follow the rfkit attention-estimator protocol: the same `rng` must "
            "give the same output (draw every random number from `rng`). Got different outputs for the same seed."
        )
