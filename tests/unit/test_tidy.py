"""Tidy: the shape of the code, checked on every ``make test`` (TigerBeetle's tidy.zig idea).

Goal: the house rules that no compiler checks fail the build when a change breaks them, instead
of eroding one review at a time. Each rule is a function from files to violations, so the same
function is run on the project and, to show it can fail, on synthetic bad files.

Rules (see docs/ARCHITECTURE.md):
- a module has at most MODULE_LINES_MAX code lines, a function at most FUNCTION_LINES_MAX: code
  lines, so blank lines, comments and docstrings never count (explaining is never the price of
  passing; a module near the cap is split by concern);
- a bound named ``*_MAX`` is defined only in ``txmq/limits.py``, where its reason is written;
- a test does not sleep to synchronise: each ``time.sleep``/``asyncio.sleep`` in tests carries a
  ``# sleep:`` comment on its line saying why no event exists (a poll interval of a bounded
  wait is such a reason);
- an ``__init__.py`` holds a docstring and nothing else that runs;
- no class is named ``*Manager``/``*Util(s)`` (name what it is), and no broad ``except``
  (``Exception``, ``BaseException``, bare) swallows an error with only ``pass``.

An exception is allowed only through ALLOWED below, each with the reason it cannot be fixed yet.
The rules that need the import graph (no import cycle, no private names reached into) are in
tests/unit/test_tidy_imports.py; the one-way imports between packages and rooms are
import-linter's (pyproject.toml), shown to fail in tests/unit/test_layers.py.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
TESTS = ROOT / "tests"
MODULE_LINES_MAX = 500
FUNCTION_LINES_MAX = 70
_BOUND_NAME = re.compile(r"^_?[A-Z][A-Z0-9_]*_MAX$")
_SLEEP_CALLS = {("time", "sleep"), ("asyncio", "sleep")}

# (rule, path relative to the repository, name or "") -> why it is allowed for now.
ALLOWED: dict[tuple[str, str, str], str] = {}


def _rel(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()


def _py_files(*roots: Path) -> list[Path]:
    return sorted(p for r in roots for p in r.rglob("*.py") if ".venv" not in p.parts)


def code_lines(source: str) -> set[int]:
    """The numbers of the lines that hold code: not blank, not only a comment, not a docstring."""
    docs: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = body[0] if body else None
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docs.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (
            tokenize.COMMENT,
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            continue
        lines.update(range(tok.start[0], tok.end[0] + 1))
    return lines - docs


def long_modules(files: Iterable[Path]) -> list[str]:
    out = []
    for f in files:
        n = len(code_lines(f.read_text()))
        if n > MODULE_LINES_MAX:
            out.append(f"{_rel(f)}: {n} code lines (max {MODULE_LINES_MAX})")
    return out


def long_functions(files: Iterable[Path]) -> list[str]:
    out = []
    for f in files:
        source = f.read_text()
        code = code_lines(source)
        for node in ast.walk(ast.parse(source, str(f))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                span = range(node.lineno, (node.end_lineno or node.lineno) + 1)
                n = sum(1 for line in span if line in code)
                if n > FUNCTION_LINES_MAX:
                    out.append(f"{_rel(f)}:{node.lineno} {node.name}: {n} code lines")
    return out


def bounds_outside_limits(files: Iterable[Path]) -> list[tuple[str, str, str]]:
    """Module- or class-level ``*_MAX`` assignments outside limits.py."""
    out = []
    for f in files:
        if f.name == "limits.py":
            continue
        tree = ast.parse(f.read_text(), str(f))
        scopes: list[ast.AST] = [tree]
        scopes += [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        for scope in scopes:
            for stmt in getattr(scope, "body", []):
                targets: list[ast.expr] = []
                if isinstance(stmt, ast.Assign):
                    targets = stmt.targets
                elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                    targets = [stmt.target]
                for t in targets:
                    if isinstance(t, ast.Name) and _BOUND_NAME.match(t.id):
                        out.append(("bound", _rel(f), t.id))
    return out


def _is_sleep(call: ast.Call) -> bool:
    fn = call.func
    return (
        isinstance(fn, ast.Attribute)
        and isinstance(fn.value, ast.Name)
        and (fn.value.id, fn.attr) in _SLEEP_CALLS
    )


def unexplained_sleeps(files: Iterable[Path]) -> list[str]:
    out = []
    for f in files:
        text = f.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text, str(f))):
            if isinstance(node, ast.Call) and _is_sleep(node):
                span = lines[node.lineno - 1 : (node.end_lineno or node.lineno)]
                if not any("# sleep:" in line for line in span):
                    out.append(f"{_rel(f)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return out


def logic_in_init(files: Iterable[Path]) -> list[str]:
    """``__init__.py`` files with anything but a docstring, imports and ``__all__``."""
    out = []
    for f in files:
        if f.name != "__init__.py":
            continue
        for stmt in ast.parse(f.read_text(), str(f)).body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # the docstring
            if isinstance(stmt, ast.Import | ast.ImportFrom):
                continue
            if isinstance(stmt, ast.Assign) and [getattr(t, "id", "") for t in stmt.targets] == [
                "__all__"
            ]:
                continue
            out.append(f"{_rel(f)}:{stmt.lineno}: {type(stmt).__name__}")
    return out


_VAGUE_CLASS = re.compile(r"\w*(Manager|Util|Utils)$")
_BROAD = ("Exception", "BaseException")


def vague_class_names(files: Iterable[Path]) -> list[str]:
    out = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.ClassDef) and _VAGUE_CLASS.fullmatch(node.name):
                out.append(f"{_rel(f)}:{node.lineno} {node.name}")
    return out


def swallowed_exceptions(files: Iterable[Path]) -> list[str]:
    out = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if not isinstance(node, ast.ExceptHandler):
                continue
            broad = node.type is None or ast.unparse(node.type) in _BROAD
            empty = all(
                isinstance(s, ast.Pass)
                or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
                for s in node.body
            )
            if broad and empty:
                out.append(f"{_rel(f)}:{node.lineno}")
    return out


# --- The project obeys the rules. ------------------------------------------------------------


def test_modules_are_short() -> None:
    assert long_modules(_py_files(SRC, TESTS)) == []


def test_functions_are_short() -> None:
    assert long_functions(_py_files(SRC)) == []


def test_bounds_live_in_limits() -> None:
    found = bounds_outside_limits(_py_files(SRC))
    assert [v for v in found if v not in ALLOWED] == []
    stale = [k for k in ALLOWED if k[0] == "bound" and k not in found]
    assert stale == [], "allowed exceptions that no longer exist: remove them from ALLOWED"


def test_tests_do_not_sleep_to_synchronise() -> None:
    assert unexplained_sleeps(_py_files(TESTS)) == []


def test_init_files_hold_no_logic() -> None:
    assert logic_in_init(_py_files(SRC, TESTS)) == []


def test_names_say_what_and_errors_are_not_swallowed() -> None:
    assert vague_class_names(_py_files(SRC)) == []
    assert swallowed_exceptions(_py_files(SRC)) == []


# --- Each rule can fail: synthetic bad files. ------------------------------------------------


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES_MAX))
    (tmp_path / "long_fn.py").write_text(f"def f() -> None:\n{body}\n")
    (tmp_path / "long_mod.py").write_text("x = 1\n" * (MODULE_LINES_MAX + 1))
    (tmp_path / "bound.py").write_text(
        "from typing import Final\nRETRIES_MAX: Final = 3\nclass C:\n    _ROWS_MAX = 9\n"
    )
    (tmp_path / "sleepy.py").write_text(
        "import asyncio, time\n"
        "time.sleep(2)\n"
        "async def f() -> None:\n    await asyncio.sleep(1)\n"
        "time.sleep(0.1)  # sleep: poll interval of a bounded wait\n"
    )
    (tmp_path / "vague.py").write_text(
        "class TopicManager:\n    pass\n"
        "try:\n    x = 1\nexcept Exception:\n    pass\n"
        "try:\n    x = 2\nexcept ValueError:\n    pass\n"
    )
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""Doc."""\nimport os\nVALUE = os.getpid()\n')
    return tmp_path


def test_rules_catch_synthetic_violations(bad: Path) -> None:
    files = _py_files(bad)
    assert [v.split(" ")[1] for v in long_functions(files)] == ["f:"]
    assert [v.split(":")[0].rsplit("/", 1)[-1] for v in long_modules(files)] == ["long_mod.py"]
    assert sorted(name for _, _, name in bounds_outside_limits(files)) == [
        "RETRIES_MAX",
        "_ROWS_MAX",
    ]
    sleeps = unexplained_sleeps(files)
    assert [s.split(":")[1] for s in sleeps] == ["2", "4"], sleeps
    assert [v.split(":")[1] for v in logic_in_init(files)] == ["3"]
    assert [v.rsplit(" ", 1)[1] for v in vague_class_names(files)] == ["TopicManager"]
    assert [v.split(":")[1] for v in swallowed_exceptions(files)] == ["5"]


def test_limits_itself_is_not_flagged(tmp_path: Path) -> None:
    (tmp_path / "limits.py").write_text("from typing import Final\nX_MAX: Final = 1\n")
    assert bounds_outside_limits(_py_files(tmp_path)) == []
