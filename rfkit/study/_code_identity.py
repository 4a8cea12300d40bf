"""The code identity of a run: the source of your modules a design names and of those they import.

A run records the SHA-256 of the source file of every module of yours the design names
(``module:Class`` maps and estimators, registered records, ``imports``) and of every module of
yours that those import, directly or through one another, so that a resume after any of that
code changed refuses instead of mixing results of two versions (:mod:`rfkit.study._runfolder`).

"Yours" means a module whose file lies outside the standard library, outside installed packages
(``site-packages``, ``dist-packages`` and the interpreter's library folders) and outside rfkit
itself, whose own source is part of the identity separately. The imports are found by reading
each source with :mod:`ast` (``import a.b``, ``from a import b``, relative imports, imports inside
functions and ``try`` blocks, and ``importlib.import_module("name")`` / ``__import__("name")``
with a literal name); nothing is imported to find them. A module already imported is located by
its ``__file__``, any other through the import system's finders, so the result depends only on
the files and the import path, not on what happened to be imported before. An import that names
no module on the path (an optional dependency that is absent) is not recorded. Imports computed
at run time (``import_module(name)`` of a variable) cannot be followed: name such modules in the
design's ``imports`` to include them.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import os
import site
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

__all__ = ["NO_SOURCE", "user_code_hashes"]

#: recorded for a module without a readable source file (a notebook's ``__main__``)
NO_SOURCE = "no source file"
_INSTALLED_DIRS = ("site-packages", "dist-packages")


def _excluded_roots() -> tuple[str, ...]:
    """The folders whose modules are not yours: the interpreter's libraries, installed packages, rfkit."""
    roots = [sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    roots += list(getattr(site, "getsitepackages", list)())
    roots.append(site.getusersitepackages())
    roots.append(str(Path(__file__).resolve().parents[1]))  # the rfkit package
    return tuple(sorted({os.path.join(os.path.realpath(r), "") for r in roots if r}))


def _is_yours(path: str, roots: tuple[str, ...]) -> bool:
    real = os.path.realpath(path)
    if any(part in _INSTALLED_DIRS for part in Path(real).parts):
        return False
    return not any(real.startswith(r) for r in roots)


class _Finder:
    """Where modules live, found without importing anything (memoised per call of :func:`user_code_hashes`)."""

    def __init__(self) -> None:
        self.roots = _excluded_roots()
        self._seen: dict[str, tuple[str | None, list[str] | None] | None] = {}

    def locate(self, name: str) -> tuple[str | None, list[str] | None] | None:
        """``(source file or None, package folders or None)`` of module ``name``; None where there is none."""
        if name not in self._seen:
            self._seen[name] = self._locate(name)
        return self._seen[name]

    def _locate(self, name: str) -> tuple[str | None, list[str] | None] | None:
        mod = sys.modules.get(name)
        if mod is not None:
            path = getattr(mod, "__path__", None)
            return getattr(mod, "__file__", None), list(path) if path is not None else None
        parent, _, _ = name.rpartition(".")
        try:
            if parent:
                where = self.locate(parent)
                if where is None or where[1] is None:
                    return None  # the parent is no package: `from a import b` named an attribute
                spec = importlib.machinery.PathFinder.find_spec(name, where[1])
            else:
                spec = importlib.util.find_spec(name)  # a top-level name: searched, not imported
        except (ImportError, ValueError, AttributeError):
            return None
        if spec is None:
            return None
        locations = spec.submodule_search_locations
        origin = spec.origin if spec.has_location else None
        return origin, list(locations) if locations is not None else None

    def is_yours(self, name: str) -> bool:
        """Whether module ``name`` (found on the path) is yours; False where it cannot be found."""
        top = name.partition(".")[0]
        if top in sys.stdlib_module_names or top in sys.builtin_module_names or top == "rfkit":
            return False
        for level in (top, name):
            where = self.locate(level)
            if where is None:
                return False
            origin, locations = where
            files = [origin] if origin else list(locations or [])
            if not files or not all(_is_yours(f, self.roots) for f in files):
                return False
        return True


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _with_parents(name: str) -> list[str]:
    """``a.b.c`` -> ``a``, ``a.b``, ``a.b.c``: importing a submodule runs every package above it."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts)) if all(parts[: i + 1])]


def _absolute(name: str, package: str) -> str | None:
    if not name.startswith("."):
        return name
    try:
        return importlib.util.resolve_name(name, package)
    except (ImportError, ValueError):
        return None  # a relative import outside a package: fails when run, imports nothing


def imported_names(source: str | bytes, name: str, *, is_package: bool) -> list[str]:
    """The absolute names of the modules a source may import (sorted, with their parent packages).

    ``from a import b`` lists both ``a`` and ``a.b``: ``b`` may be a submodule or an attribute,
    which only the finders can tell.
    """
    tree = ast.parse(source)
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()

    def add(target: str | None) -> None:
        if target:
            found.update(_with_parents(target))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute("." * node.level + (node.module or ""), package)
            if base is None:
                continue
            add(base)
            for alias in node.names:
                if alias.name != "*":
                    add(f"{base}.{alias.name}")
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            target = _literal(node.args[0])
            if called in ("import_module", "__import__") and target is not None:
                anchor = next((_literal(k.value) for k in node.keywords if k.arg == "package"), None)
                add(_absolute(target, anchor or package) if called == "import_module" else target)
    return sorted(found)


def _hash(origin: str | None) -> str:
    if not origin:
        return NO_SOURCE
    try:
        return hashlib.sha256(Path(origin).read_bytes()).hexdigest()
    except OSError:
        return NO_SOURCE


def user_code_hashes(names: Iterable[str]) -> dict[str, str]:
    """SHA-256 of the source of each named module and of every module of yours it imports, transitively.

    Parameters
    ----------
    names : iterable of str
        Module names the design names (each recorded, yours or not).

    Returns
    -------
    dict
        Module name -> hex SHA-256 of its file (:data:`NO_SOURCE` where it has none): the named
        modules in the order given, then the modules of yours they import, by name. The same
        files on the same import path give the same dict.
    """
    finder = _Finder()
    named = list(dict.fromkeys(names))
    out: dict[str, str] = {}
    found: dict[str, str] = {}
    todo = list(named)
    visited: set[str] = set()
    while todo:
        name = todo.pop()
        if name in visited:
            continue
        visited.add(name)
        origin, locations = finder.locate(name) or (None, None)
        (out if name in named else found)[name] = _hash(origin)
        if not origin or not origin.endswith(".py"):
            continue  # no source to read (a notebook, a compiled module): its imports are unknown
        try:
            source = Path(origin).read_bytes()
            imports = imported_names(source, name, is_package=locations is not None)
        except (OSError, SyntaxError, ValueError):
            continue
        todo += [m for m in reversed(imports) if m not in visited and finder.is_yours(m)]
    return {**{n: out[n] for n in named}, **dict(sorted(found.items()))}
