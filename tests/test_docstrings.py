"""Every public object of rfkit has a numpydoc docstring with the sections that apply.

The public API is what the public modules (no underscore anywhere in the dotted name) export
in ``__all__``. Each exported function and class is checked with numpydoc's validator
(:func:`numpydoc.validate.validate`) against the checks in :data:`CHECKS`: a one-line summary,
every parameter of the signature documented with a type (for a class, the constructor's),
no documented parameter that the signature lacks, a ``Returns`` section for a function that
returns a value and a ``Yields`` section for a generator (a context manager included).
Style-only checks (extended summary, "See Also", "Examples", punctuation of descriptions)
are not required. Constants (``EXECUTORS``, ``KINDS``, ...) and type aliases have no
docstring of their own and are described in their module's docstring and the docs.

A line that must be exempt from one check carries numpydoc's own comment on the ``def`` or
``class`` line, ``# numpydoc ignore=PR01``, so the exemption is visible where it applies.
"""

from __future__ import annotations

import importlib
import inspect
import warnings
from pathlib import Path
from types import ModuleType

import pytest

validate = pytest.importorskip("numpydoc.validate")

# The checks every public object must pass (numpydoc's codes; numpydoc.validate.ERROR_MSGS).
CHECKS: dict[str, str] = {
    "GL06": "an unknown section heading (its content would be lost)",
    "GL07": "sections out of numpydoc's order",
    "GL08": "no docstring",
    "SS01": "no one-line summary",
    "SS02": "summary does not start with a capital letter",
    "SS03": "summary does not end with a period",
    "SS04": "summary starts with whitespace",
    "SS05": "summary starts with a third-person verb ('Returns' for 'Return')",
    "SS06": "summary longer than one line",
    "PR01": "a parameter of the signature is not documented",
    "PR02": "a documented parameter is not in the signature",
    "PR04": "a documented parameter has no type",
    "RT01": "a function that returns a value has no Returns section",
    "YD01": "a generator (or context manager) has no Yields section",
}

# The public modules, in the order their objects are reported; a public module added to the
# package must be added here (test_public_modules_listed).
PUBLIC_MODULES = [
    "rfkit",
    "rfkit.exceptions",
    "rfkit.kernels",
    "rfkit.projections",
    "rfkit.features",
    "rfkit.attention",
    "rfkit.theory",
    "rfkit.theory.bounds",
    "rfkit.data",
    "rfkit.study",
    "rfkit.study.outputs",
    "rfkit.study.summaries",
    "rfkit.plots",
    "rfkit.tables",
    "rfkit.advice",
    "rfkit.report",
    "rfkit.cli",
    "rfkit.nn",
    "rfkit.sklearn",
    "rfkit.integrations",
    "rfkit.integrations.transformers",
]
#: public modules that need an optional library (skipped with the reason where it is missing)
NEEDS = {"rfkit.nn": "torch", "rfkit.sklearn": "sklearn"}

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "rfkit"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def test_public_modules_listed() -> None:
    """Every module of the package with no underscore in its dotted name is checked."""
    found = {
        _module_name(path)
        for path in PACKAGE_DIR.rglob("*.py")
        if not any(part.startswith("_") for part in _module_name(path).split("."))
        # rfkit/studies holds study files and the docs' example modules (imported by their own name
        # from that folder, as a user's module would be), not modules of the package
        and path.relative_to(PACKAGE_DIR).parts[0] != "studies"
    }
    assert found - set(PUBLIC_MODULES) == set(), "public modules missing from PUBLIC_MODULES"
    assert set(PUBLIC_MODULES) - found == set(), "PUBLIC_MODULES names modules that do not exist"


def _public_objects(module: ModuleType) -> list[tuple[str, object]]:
    """The functions and classes a module exports, with their public dotted names."""
    names = getattr(module, "__all__", None)
    assert names is not None, f"{module.__name__} has no __all__"
    objects = []
    for name in names:
        obj = getattr(module, name)
        if not (inspect.isclass(obj) or inspect.isroutine(inspect.unwrap(obj))):
            # modules are checked on their own; constants and type aliases (ProjectionKind)
            # have no docstring of their own
            continue
        objects.append((f"{module.__name__}.{name}", obj))
    return objects


def _problems(obj: object) -> list[str]:
    with warnings.catch_warnings():
        # numpydoc warns about an unknown section while parsing; GL06 reports it here
        warnings.simplefilter("ignore")
        result = validate.validate(validate.get_doc_object(obj))
    return [f"{code} {message}" for code, message in result["errors"] if code in CHECKS]


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_module_docstring(module_name: str) -> None:
    """Each public module has a docstring whose first paragraph is a sentence (its summary)."""
    if module_name in NEEDS:
        pytest.importorskip(NEEDS[module_name], reason=f"{module_name} needs {NEEDS[module_name]}")
    module = importlib.import_module(module_name)
    first = (inspect.getdoc(module) or "").split("\n\n")[0].strip()
    assert first, f"{module_name} has no docstring"
    assert first.endswith((".", ":")), f"{module_name}: the docstring's summary is not a sentence: {first!r}"


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_public_docstrings(module_name: str) -> None:
    """Each function and class a public module exports passes the numpydoc checks in CHECKS."""
    if module_name in NEEDS:
        pytest.importorskip(NEEDS[module_name], reason=f"{module_name} needs {NEEDS[module_name]}")
    module = importlib.import_module(module_name)
    failures = {}
    for name, obj in _public_objects(module):
        problems = _problems(obj)
        if problems:
            failures[name] = problems
    report = "\n".join(f"{name}:\n    " + "\n    ".join(found) for name, found in failures.items())
    assert not failures, (
        f"{len(failures)} public objects of {module_name} fail the docstring checks:\n{report}"
    )
