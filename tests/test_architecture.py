"""The structure of the package, checked on every run (docs page "Architecture").

import-linter (``lint-imports``, run by ``make lint``) checks that the layers' arrows point
down. These tests check what it does not see: circles between the files of one package, at
module *and* function level; function-level imports of rfkit's own modules (each must say
why it is lazy); module sizes; and citations of documents that rfkit does not ship.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "rfkit"
MAX_LINES = 600
MAX_LAZY = 10
UNSHIPPED = re.compile(r"THEORY\.md|DESIGN\.md|\bseed \d{3}\b|seeds?/")


def _modname(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


FILES = {_modname(p): p for p in sorted(PKG.rglob("*.py"))}


def _type_checking_ids(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = getattr(test, "id", None) or getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for sub in node.body:
                    skip.update(id(n) for n in ast.walk(sub))
    return skip


def _imports(mod: str) -> list[tuple[str, tuple[int, int], bool]]:
    """(imported rfkit module, (first, last line), inside a function) for every import in ``mod``."""
    path = FILES[mod]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_ids(tree)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    in_function: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            in_function.update(id(n) for n in ast.walk(node) if n is not node)
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in FILES else stem for a in node.names]
        for t in targets:
            while t and t not in FILES:
                t = t.rsplit(".", 1)[0] if "." in t else ""
            if t.startswith("rfkit") and t != mod:
                out.append((t, (node.lineno, node.end_lineno or node.lineno), id(node) in in_function))
    return out


GRAPH = {mod: _imports(mod) for mod in FILES}


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_between_files():
    # a package __init__ only re-exports; an edge into it stands for its submodules, so it
    # is left out here (the import system itself fails on a real circle through it)
    edges = {
        m: {t for t, _, _ in deps if FILES[t].name != "__init__.py"}
        for m, deps in GRAPH.items()
        if FILES[m].name != "__init__.py"
    }
    assert _strongly_connected(edges) == []


def test_function_level_imports_are_few_and_explained():
    lazy = [(m, t, line) for m, deps in GRAPH.items() for t, line, inside in deps if inside]
    assert len(lazy) <= MAX_LAZY, lazy
    for mod, target, (first, last) in lazy:
        text = "\n".join(FILES[mod].read_text(encoding="utf-8").splitlines()[first - 1 : last])
        assert "# lazy:" in text, f"{FILES[mod]}:{first} imports {target} inside a function without a reason"


@pytest.mark.parametrize("mod", sorted(FILES))
def test_module_size(mod):
    n = len(FILES[mod].read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{FILES[mod]} has {n} lines (at most {MAX_LINES}: one job per module)"


def test_no_citation_of_unshipped_documents():
    roots = [PKG, ROOT / "docs", ROOT / "studies", ROOT / "notebooks", ROOT / "README.md"]
    bad = []
    for root in roots:
        paths = (
            [root]
            if root.is_file()
            else [p for p in root.rglob("*") if p.suffix in {".py", ".md", ".rst", ".toml"}]
        )
        for p in paths:
            if "_build" in p.parts or "generated" in p.parts:
                continue
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
                if UNSHIPPED.search(line):
                    bad.append(f"{p.relative_to(ROOT)}:{i}")
    assert bad == []


#: rfkit's own attention estimators: only their registration may name them in the study harness
BUILTIN_ESTIMATORS = {"RFA", "RA", "SNIS", "LARA", "Hybrid"}
#: the study modules that register rfkit's estimators, metrics and hooks (as a user's file would),
#: and the one that declares rfkit's figure kinds (their records are in rfkit.report)
REGISTRATION = {
    "rfkit.study._builtin_records",
    "rfkit.study._builtin_attention_hooks",
    "rfkit.study._figure_kinds",
}


def _builtin_estimator_references(path: Path) -> list[str]:
    """``isinstance``/``is`` checks against, and imports of, rfkit's own attention estimators."""
    tree = ast.parse(path.read_text(encoding="utf-8"))

    def names(node: ast.AST) -> set[str]:
        found = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in BUILTIN_ESTIMATORS:
                found.add(sub.id)
            elif isinstance(sub, ast.Attribute) and sub.attr in BUILTIN_ESTIMATORS:
                found.add(sub.attr)
        return found

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in BUILTIN_ESTIMATORS:
                    out.append(f"{path.name}:{node.lineno} imports {alias.name}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"isinstance", "issubclass"}
            and len(node.args) == 2
        ):
            for name in sorted(names(node.args[1])):
                out.append(f"{path.name}:{node.lineno} {node.func.id}(..., {name})")
        elif isinstance(node, ast.Compare) and any(isinstance(op, ast.Is | ast.IsNot) for op in node.ops):
            for name in sorted(set().union(*(names(c) for c in node.comparators))):
                out.append(f"{path.name}:{node.lineno} `is {name}`")
    return out


def test_study_harness_asks_records_never_builtin_estimator_classes():
    """The harness (attention evaluation, cost, device draws, ...) asks an estimator's record for its
    behaviour; only the registration modules name RFA, RA, SNIS, LARA and Hybrid, as a user's file
    names its own estimator."""
    bad = []
    for mod, path in FILES.items():
        if mod.startswith("rfkit.study.") and mod not in REGISTRATION:
            bad += _builtin_estimator_references(path)
    assert bad == []


def _builtin_names() -> frozenset[str]:
    """The names of rfkit's own metrics and figure kinds (old names of figure kinds included)."""
    from rfkit.study import FIGURE_ALIASES, FIGURE_KINDS, records

    metrics = {r.name for r in records("metric")}  # rfkit's own: the tests restore the registry
    return frozenset(metrics | set(FIGURE_KINDS) | set(FIGURE_ALIASES))


def _branches_on_names(source: str, names: frozenset[str], where: str = "") -> list[str]:
    """Comparisons that test a value against one of ``names`` written as a literal.

    Counted: a string constant operand of ``==``, ``!=``, ``is`` or ``is not``; an element of a
    literal tuple, list, set or dict on the right of ``in`` / ``not in``; a ``match`` case on one.
    Not counted: a literal on the left of ``in`` (``"cost" in trials`` looks a column up), and
    names in tables (``MODEL_METRICS``: which model gives which metric), which nothing branches on.
    """

    def literals(node: ast.AST) -> list[str]:
        return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in names]

    out = []
    for node in ast.walk(ast.parse(source)):
        found: list[str] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, operands, operands[1:]):
                if isinstance(op, ast.Eq | ast.NotEq | ast.Is | ast.IsNot):
                    found += [
                        c.value for c in (left, right) if isinstance(c, ast.Constant) and c.value in names
                    ]
                elif isinstance(op, ast.In | ast.NotIn) and isinstance(
                    right, ast.Tuple | ast.List | ast.Set | ast.Dict
                ):
                    found += literals(right)
        elif isinstance(node, ast.match_case):
            found += literals(node.pattern)
        line = node.pattern.lineno if isinstance(node, ast.match_case) else getattr(node, "lineno", 0)
        out += [f"{where}:{line} compares with {name!r}" for name in found]
    return out


def test_the_branch_check_sees_comparisons_with_builtin_names():
    names = frozenset({"variance", "mse", "coverage"})
    source = """
if metric == "variance": pass
if "mse" != metric: pass
if kind in ("coverage", "mine"): pass
if "mse" in table.columns: pass
COLUMNS = ("variance", "mse")
match kind:
    case "coverage": pass
"""
    found = _branches_on_names(source, names)
    assert [f.split(" ", 1)[1] for f in found] == [
        "compares with 'variance'",
        "compares with 'mse'",
        "compares with 'coverage'",
        "compares with 'coverage'",
    ]


def test_study_harness_never_branches_on_builtin_metric_or_figure_names():
    """The harness asks a metric's record (its column, ``compute``, ``proportion``, ``ddof``) and a
    figure's record (rfkit.plots' registry) for what to do; no harness module outside the
    registration modules compares a value with the name of one of rfkit's own metrics or figures."""
    names = _builtin_names()
    assert {"mse", "variance", "coverage", "kl", "mse_vs_features"} <= names
    bad = []
    for mod, path in FILES.items():
        if mod.startswith("rfkit.study.") and mod not in REGISTRATION:
            bad += _branches_on_names(path.read_text(encoding="utf-8"), names, path.name)
    assert bad == []


def _loops_over_names(source: str, names: frozenset[str], where: str = "") -> list[str]:
    """Loops (``for`` and comprehensions) over a literal tuple, list or set holding one of ``names``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.For | ast.comprehension) and isinstance(
            node.iter, ast.Tuple | ast.List | ast.Set
        ):
            found = sorted(
                {n.value for n in ast.walk(node.iter) if isinstance(n, ast.Constant) and n.value in names}
            )
            out += [f"{where}:{node.iter.lineno} loops over {name!r}" for name in found]
    return out


def test_the_loop_check_sees_loops_over_builtin_names():
    source = 'for metric, col in (("mse", "a"), ("rel_mse", "b")): pass\nx = [m for m in ["kl"]]\nfor h in ("fit",): pass\n'
    found = [f.split(" ", 1)[1] for f in _loops_over_names(source, frozenset({"mse", "rel_mse", "kl"}))]
    assert found == ["loops over 'mse'", "loops over 'rel_mse'", "loops over 'kl'"]


def test_study_harness_never_loops_over_builtin_metric_or_figure_names():
    """A harness module that walks a literal list of rfkit's metrics or figure kinds (``for metric
    in ("mse", "rel_mse")``) leaves a user's out; it asks the records (``records("metric")``) instead."""
    from rfkit.study import FIGURE_KINDS, records

    names = frozenset({r.name for r in records("metric")} | set(FIGURE_KINDS))
    bad = []
    for mod, path in FILES.items():
        if mod.startswith("rfkit.study.") and mod not in REGISTRATION:
            bad += _loops_over_names(path.read_text(encoding="utf-8"), names, path.name)
    assert bad == []


#: the presentation layer: it reads result tables, and rfkit.study through its public modules
PRESENTATION = ("rfkit.tables", "rfkit.plots", "rfkit.report")
#: rfkit.study's modules that the layers above it may import
STUDY_PUBLIC = {"rfkit.study", "rfkit.study.summaries", "rfkit.study.outputs"}


def test_presentation_imports_only_public_study_modules():
    """Tables, figures and reports import ``rfkit.study``, ``rfkit.study.summaries`` or
    ``rfkit.study.outputs``, never a private module of the study package."""
    bad = [
        f"{mod}:{lines[0]} imports {target}"
        for mod, deps in GRAPH.items()
        if mod.startswith(PRESENTATION)
        for target, lines, _ in deps
        if target.startswith("rfkit.study") and target not in STUDY_PUBLIC
    ]
    assert bad == []
