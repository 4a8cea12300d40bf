"""The plain (study-file) form of a study's objects: names, ``"module:Name"`` imports, parameters.

A study names a feature map (``map``) or an attention estimator (``estimator``) in one of two
explicit forms:

* a bare name (``"Positive"``, ``"RFA"``): a registered record (:mod:`rfkit.study._records`);
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
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import attention, features
from ..exceptions import InvalidParameterError

__all__ = [
    "PATH_HINT",
    "is_path",
    "describe",
    "import_object",
    "import_modules",
    "class_ref",
    "plain",
    "decode",
    "construct",
    "parameters",
    "init_fields",
    "check_round_trip",
    "workers_can_import",
]

PATH_HINT = "'package.module:ClassName' (a colon before the class name)"


def is_path(name: Any) -> bool:
    """True for the explicit import form ``"package.module:Name"``."""
    return isinstance(name, str) and ":" in name


def describe(obj: Any) -> str:
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
        raise InvalidParameterError(f"`{key}` must be {PATH_HINT}. Got {path!r} instead.")
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


def import_modules(names: Any, source: str) -> None:
    """Import each module of a design's ``imports`` (executing its code, as any import does).

    Raises
    ------
    InvalidParameterError
        For a value that is not a list of module names, or a module that cannot be imported.
    """
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n for n in names):
        raise InvalidParameterError(
            f"{source}: `imports` must be a list of module names. Got {names!r} instead."
        )
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - the module's own code may raise anything
            raise InvalidParameterError(
                f"{source}: `imports`: importing module {name!r} failed: {type(exc).__name__}: {exc}. Put the "
                "folder that holds it on PYTHONPATH, or install its package."
            ) from exc


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
        raise InvalidParameterError(f"cannot name {describe(cls)} in a design: it has no module and name.")
    if "<locals>" in qual:
        raise InvalidParameterError(
            f"{qual} is defined inside a function; a design names classes by module and name, so define "
            "it at the top level of a module."
        )
    return f"{mod}:{qual}"


def _namespaces() -> list[Any]:
    return [features, attention]


def _resolve_nested(name: str) -> Any:
    if is_path(name):
        return import_object(name, "class")
    for ns in _namespaces():
        if name in getattr(ns, "__all__", ()):
            return getattr(ns, name)
    raise InvalidParameterError(
        f"`class` must name a class of rfkit.features or rfkit.attention, or be {PATH_HINT}. Got {name!r} instead."
    )


# ----------------------------------------------------------------------------- plain form
def init_fields(obj: Any) -> dict[str, Any]:
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
        body = {k: plain(v, f"{where}.{k}") for k, v in init_fields(value).items()}
        return {"class": class_ref(type(value), bare=True), **body}
    raise InvalidParameterError(
        f"{where} cannot be stored in a design (plain data: numbers, strings, booleans, lists, arrays, "
        f"dicts, dataclass instances). Got {describe(value)} instead."
    )


def decode(value: Any) -> Any:
    """Inverse of :func:`plain` for nested objects: a dict with a ``class`` key is built."""
    if isinstance(value, Mapping):
        if "class" in value:
            cls = _resolve_nested(str(value["class"]))
            kwargs = {k: decode(v) for k, v in value.items() if k != "class"}
            return construct(cls, kwargs)
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def construct(cls: Any, kwargs: Mapping[str, Any]) -> Any:
    try:
        return cls(**kwargs)
    except InvalidParameterError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code may raise anything
        args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise InvalidParameterError(
            f"{getattr(cls, '__qualname__', cls)}({args}) raised {type(exc).__name__}: {exc}"
        ) from exc


def parameters(obj: Any) -> set[str] | None:
    """Keyword parameters a class or function takes (None: it takes any, via ``**kwargs``).

    A new set each call; the signature is read once per object (``inspect.signature`` costs tens of
    microseconds, and a study asks for every estimator of every cell and trial).
    """
    try:
        found = _parameters(obj)
    except TypeError:  # an unhashable callable: read its signature each time
        found = _parameters.__wrapped__(obj)
    return None if found is None else set(found)


@functools.lru_cache(maxsize=1024)
def _parameters(obj: Any) -> frozenset[str] | None:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return frozenset(
        n
        for n, p in sig.parameters.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    )


def check_round_trip(obj: Any, ref: str, fields: Mapping[str, Any], top: bool) -> None:
    cls = import_object(ref, "estimator" if top else "map") if is_path(ref) else _resolve_nested(ref)
    rebuilt = construct(cls, {n: decode(plain(v, n)) for n, v in fields.items()})
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
