"""Tidy, imports: no import cycle in src/txmq, and no reaching into another module's or object's
private names (the rules of tests/unit/test_tidy.py's kind that need the import graph).

Rules:
- no import cycle anywhere in ``src/txmq``. The graph is built with ast from every import
  statement wherever it stands: at module level, under ``if TYPE_CHECKING:`` and inside
  functions (an import moved into a function hides a cycle from the interpreter, not from a
  reader). ``import a.b.c`` and ``from a.b import c`` are edges to the module ``a.b.c`` (or to
  the package ``a.b`` when ``c`` is a name in it) and to the packages an import runs, ``a`` and
  ``a.b``. A cycle is reported as its path, each step with the line of its import.
- no module imports another module's private name: ``from m import _x`` (or from a private
  module, ``from m._p import x``); dunder names such as ``__future__`` are not private.
- no code touches another object's private attribute: ``e._x`` is allowed only where ``e`` is
  ``self``, ``cls`` or ``super()``, and, inside the methods of class ``C``, a parameter
  annotated ``C`` or ``C`` itself: privacy is per class (as Python's name mangling), so a
  method may read the private state of another instance of its own class. Dunder attributes
  (``__class__``, ``__name__``) are not private. Everything else, a module's ``m._x`` included,
  is a violation: give the owner a public method or property for what is needed.

The rules hold for ``src/txmq``; tests may look inside the objects they test (a group commit's
fsync count, say). An exception is allowed only through ALLOWED, with its reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from itertools import pairwise
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

# (rule, path relative to the repository, what) -> why it is allowed for now.
ALLOWED: dict[tuple[str, str, str], str] = {}

Edge = tuple[str, int]  # (imported module, line of the import)


def _rel(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()


def modules_under(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package`` (a directory in ``root``)."""
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _with_packages(name: str, modules: dict[str, Path]) -> Iterator[str]:
    """``name`` and the packages importing it runs, as far as they are in ``modules``."""
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        if prefix in modules:
            yield prefix


def _imports_of(name: str, path: Path, modules: dict[str, Path]) -> Iterator[Edge]:
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                for target in _with_packages(alias.name, modules):
                    yield target, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                if not is_package:
                    anchor.pop()
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for target in _with_packages(base, modules):
                yield target, node.lineno
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    yield f"{base}.{alias.name}", node.lineno


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """Module -> {module it imports: line of the first such import}, inside ``modules``."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, {})
        for target, line in _imports_of(name, path, modules):
            if target != name:
                edges.setdefault(target, line)
    return graph


def _strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's components with more than one module (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            nxt = next(targets, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def _shortest_cycle(graph: dict[str, dict[str, int]], members: list[str]) -> list[str]:
    """A shortest cycle through the first of ``members`` (breadth first, inside them)."""
    inside, start = set(members), members[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for nxt in graph[node]:
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if nxt in inside and nxt not in came_from:
                    came_from[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start} in its component")


def import_cycles(root: Path, package: str) -> list[str]:
    """Each import cycle of ``package``, as ``a:12 -> b:7 -> a`` (the line of each import)."""
    modules = modules_under(root, package)
    graph = import_graph(modules)
    out = []
    for members in _strongly_connected(graph):
        path = _shortest_cycle(graph, members)
        steps = [f"{a}:{graph[a][b]}" for a, b in pairwise(path)]
        out.append(" -> ".join([*steps, path[-1]]))
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _class_annotation(annotation: ast.expr | None, cls: str) -> bool:
    if isinstance(annotation, ast.Name):
        return annotation.id == cls
    return isinstance(annotation, ast.Constant) and annotation.value == cls


class _Privacy(ast.NodeVisitor):
    """Collects private imports and private attribute accesses (see the module docstring)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.found: list[tuple[str, str, str]] = []
        self._classes: list[str] = []
        self._own: list[set[str]] = [set()]  # names whose private attributes are this code's

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if any(_private(part) for part in module.split(".") if part):
            self.found.append(("private-import", self.where, f"{node.lineno}: from {module}"))
        for alias in node.names:
            if _private(alias.name):
                what = f"{node.lineno}: from {module} import {alias.name}"
                self.found.append(("private-import", self.where, what))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if any(_private(part) for part in alias.name.split(".")):
                what = f"{node.lineno}: import {alias.name}"
                self.found.append(("private-import", self.where, what))

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._classes.append(node.name)
        self._own.append({*self._own[-1], node.name})
        self.generic_visit(node)
        self._own.pop()
        self._classes.pop()

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        own = {*self._own[-1], "self", "cls"}
        if self._classes:
            cls = self._classes[-1]
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                if _class_annotation(arg.annotation, cls):
                    own.add(arg.arg)
        self._own.append(own)
        self.generic_visit(node)
        self._own.pop()

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if _private(node.attr) and not self._owned(node.value):
            what = f"{node.lineno}: {ast.unparse(node)}"
            self.found.append(("private-attribute", self.where, what))
        self.generic_visit(node)

    def _owned(self, value: ast.expr) -> bool:
        if isinstance(value, ast.Name):
            return value.id in self._own[-1]
        # super()._x: the object's own attribute, as its base class defines it.
        return (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "super"
        )


def private_access(files: Iterable[Path]) -> list[tuple[str, str, str]]:
    """(rule, file, "line: what") for each private import and private attribute access."""
    out: list[tuple[str, str, str]] = []
    for f in files:
        visitor = _Privacy(_rel(f))
        visitor.visit(ast.parse(f.read_text(), str(f)))
        out += visitor.found
    return out


# --- The project obeys the rules. ------------------------------------------------------------


def test_no_import_cycle() -> None:
    cycles = import_cycles(SRC, "txmq")
    assert cycles == [], "import cycles (module:line of the import -> ...):\n" + "\n".join(cycles)


def test_no_access_to_another_modules_or_objects_private_names() -> None:
    found = private_access(sorted((SRC / "txmq").rglob("*.py")))
    assert [v for v in found if v not in ALLOWED] == []
    assert [k for k in ALLOWED if k not in found] == [], "stale ALLOWED entries: remove them"


# --- Each rule can fail: planted violations. ---------------------------------------------------


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""A package with planted violations."""\n')
    (pkg / "sub" / "__init__.py").write_text('"""Its sub-package."""\n')
    # A cycle hidden in a function-level import: a -> sub.b (module level) -> a (in a function).
    (pkg / "a.py").write_text("from pkg.sub import b\n\n\ndef _helper() -> int:\n    return 1\n")
    (pkg / "sub" / "b.py").write_text(
        "def late() -> int:\n    from pkg.a import _helper\n\n    return _helper()\n"
    )
    # No cycle: c imports a, nothing imports c; a relative import resolved like an absolute one.
    (pkg / "c.py").write_text("from . import a\n\nVALUE = a\n")
    # A cycle through TYPE_CHECKING and a relative import: d <-> e.
    (pkg / "d.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .e import E\n"
    )
    (pkg / "e.py").write_text("from pkg.d import TYPE_CHECKING as E\n")
    (pkg / "objects.py").write_text(
        "class C:\n"
        "    def __init__(self) -> None:\n"
        "        self._x = 1\n"
        "\n"
        "    def same(self, other: C) -> int:\n"
        "        return other._x + super()._y + C._z + self.__class__.__name__.count('C')\n"
        "\n"
        "    def other(self, thing: D) -> int:\n"
        "        return thing._y\n"
        "\n"
        "\n"
        "class D:\n"
        "    _y = 2\n"
        "\n"
        "\n"
        "def outside(c: C) -> int:\n"
        "    return c._x\n"
    )
    return tmp_path


def test_a_planted_cycle_is_found_with_its_path(planted: Path) -> None:
    cycles = import_cycles(planted, "pkg")
    assert sorted(cycles) == ["pkg.a:1 -> pkg.sub.b:2 -> pkg.a", "pkg.d:4 -> pkg.e:1 -> pkg.d"]


def test_planted_private_accesses_are_found(planted: Path) -> None:
    found = private_access(sorted((planted / "pkg").rglob("*.py")))
    got = sorted((rule, where.rsplit("/", 1)[-1], what) for rule, where, what in found)
    assert got == [
        ("private-attribute", "objects.py", "17: c._x"),
        ("private-attribute", "objects.py", "9: thing._y"),
        ("private-import", "b.py", "2: from pkg.a import _helper"),
    ]
