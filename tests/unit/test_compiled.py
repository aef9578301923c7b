"""The compiled build (txmq/compiled.py, mypyc_build.py, docs/adr/0007): a stale, partial or
stray compiled module is refused by name (also by the broker at start), a missing C compiler
leaves an interpreted tree and one line, and the compiled sources avoid what mypyc gets wrong.

The refusal tests run on a copy of the sources with stand-in extension files (never imported:
only ``txmq.compiled`` runs there, in a subprocess), so they hold for either build."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from txmq import compiled

ROOT = Path(__file__).resolve().parents[2]
SO = EXTENSION_SUFFIXES[0]


def _run(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ if env is None else env, PYTHONPATH=str(cwd / "src"))
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def _problems(tree: Path) -> tuple[str, list[str]]:
    got = _run(tree, "-c", "from txmq import compiled as c; print(c.mode()); print(c.problems())")
    assert got.returncode == 0, got.stderr
    mode, found = got.stdout.splitlines()
    return mode, ast.literal_eval(found)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The listed sources with a stand-in extension beside each, and the build record."""
    for rel in ("txmq/__init__.py", "txmq/compiled.py", *compiled.COMPILED, *compiled.IMPORTED):
        (tmp_path / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "src" / rel, tmp_path / "src" / rel)
    # compiled.py needs only TxmqError; the real errors.py imports txmq.checks, whose stand-in
    # extension cannot be imported.
    (tmp_path / "src/txmq/errors.py").write_text("class TxmqError(Exception):\n    pass\n")
    for rel in compiled.COMPILED:
        (tmp_path / "src" / rel).with_suffix(SO).touch()
    record = (
        "import json; from txmq import compiled as c; "
        "c.RECORD.write_text(json.dumps({**c.source_hashes(), c.PATCHED: '46 reordered'}))"
    )
    assert _run(tmp_path, "-c", record).returncode == 0
    return tmp_path


def test_a_build_that_matches_its_sources_passes(tree: Path) -> None:
    assert _problems(tree) == (f"compiled (mypyc, {len(compiled.COMPILED)} modules)", [])


def test_an_edited_source_a_partial_build_and_a_stray_module_are_named(tree: Path) -> None:
    src = tree / "src"
    with (src / "txmq/store/store.py").open("a") as f:
        f.write("# an edit after the build\n")
    (src / "txmq/txn/book.py").with_suffix(SO).unlink()
    (src / "txmq/broker/server").with_suffix(SO).touch()  # gRPC inspects it: never compiled
    assert _problems(tree)[1] == [
        f"txmq/broker/server{SO} is not in txmq/compiled.py's list",
        "a partial build: txmq/txn/book.py not compiled",
        "txmq/store/store.py changed since it was compiled",
    ]
    with (src / "txmq/limits.py").open("a") as f:  # its constants are inlined in the C
        f.write("# an edit after the build\n")
    assert _problems(tree)[1][-1] == "txmq/limits.py changed since the build inlined its constants"
    record = json.loads((src / "txmq/compiled.json").read_text())
    del record[compiled.PATCHED]
    (src / "txmq/compiled.json").write_text(json.dumps(record))
    assert "built without mypyc_patch.py (mypyc's free-instance race)" in _problems(tree)[1]
    (src / "txmq/compiled.json").unlink()
    assert _problems(tree)[1][-1] == "no build record (compiled.json)"


def test_no_extension_modules_is_the_interpreted_build(tree: Path) -> None:
    for rel in compiled.COMPILED:
        (tree / "src" / rel).with_suffix(SO).unlink()
    assert _problems(tree) == ("interpreted", [])


def test_without_a_compiler_the_build_says_so_once_and_leaves_nothing_compiled(tree: Path) -> None:
    for script in ("mypyc_build.py", "mypyc_patch.py"):
        shutil.copy(ROOT / script, tree / script)
    got = _run(tree, "mypyc_build.py", env=dict(os.environ, CC="/nonexistent/cc"))
    assert (got.returncode, got.stdout, got.stderr) == (
        0,
        "txmq: no C compiler (/nonexistent/cc): the broker runs interpreted, slower "
        "(docs/adr/0007)\n",
        "",
    )
    assert list((tree / "src").rglob("*.so")) == []
    assert _problems(tree) == ("interpreted", [])


@pytest.mark.skipif(not compiled.compiled_modules(), reason="interpreted: nothing to go stale")
def test_the_broker_refuses_to_start_on_a_stale_build(tmp_path: Path) -> None:
    """The real compiled tree, copied, one source edited: ``txmq broker`` exits with one line."""
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    with (tmp_path / "src/txmq/broker/produce.py").open("a") as f:
        f.write("# an edit after the build\n")
    got = _run(tmp_path, "-m", "txmq.broker", "--data-dir", str(tmp_path / "d"), "--port", "0")
    assert got.returncode == 1 and got.stdout == "", got.stderr
    assert got.stderr.startswith("txmq: the compiled modules in ") and got.stderr.count("\n") == 1
    assert "txmq/broker/produce.py changed since it was compiled" in got.stderr
    assert "make compiled" in got.stderr and not (tmp_path / "d").exists()


# --- What mypyc 2.4.1 compiles wrong, kept out of the compiled modules. ------------------------

# A slice of a value that is not a list, tuple, str or bytes (a memoryview, say) evaluates an
# int bound twice: ``view[os.write(fd, view):]`` wrote every chunk twice. Calls of these are pure.
_PURE_CALLS = {"len", "min", "max", "abs", "int"}


def calls_in_slice_bounds(files: Iterable[Path]) -> list[str]:
    out = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if not isinstance(node, ast.Slice):
                continue
            for bound in (b for b in (node.lower, node.upper, node.step) if b is not None):
                impure = [
                    n
                    for n in ast.walk(bound)
                    if isinstance(n, ast.Await | ast.Yield | ast.NamedExpr)
                    or (
                        isinstance(n, ast.Call)
                        and not (isinstance(n.func, ast.Name) and n.func.id in _PURE_CALLS)
                    )
                ]
                if impure:
                    out.append(f"{f.name}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_compiled_modules_call_nothing_in_a_slice_bound(tmp_path: Path) -> None:
    assert calls_in_slice_bounds(ROOT / "src" / p for p in compiled.COMPILED) == []
    (tmp_path / "bad.py").write_text(
        "import os\n"
        "def f(fd: int, view: memoryview, n: int) -> memoryview:\n"
        "    view = view[len(view) - n : n + 1]\n"
        "    return view[os.write(fd, view) :]\n"
    )
    assert calls_in_slice_bounds([tmp_path / "bad.py"]) == ["bad.py:4: os.write(fd, view):"]


def test_the_record_holds_every_compiled_source_and_the_patch() -> None:
    if compiled.compiled_modules():
        record = json.loads(compiled.RECORD.read_text())
        assert sorted(record) == sorted([*compiled.COMPILED, *compiled.IMPORTED, compiled.PATCHED])
        assert record[compiled.PATCHED].endswith(" free-instance deallocators reordered")
    assert compiled.problems() == []


# A compiled generator that yields inside an ``except`` block and is abandoned there (its caller
# breaks out of the loop) leaves the caught exception in the caller's ``sys.exc_info()``: the
# thread's next exception is chained to it (docs/upstream/mypyc-free-instance-race.md, end).
def yields_in_handlers(files: Iterable[Path]) -> list[str]:
    out = []
    for f in files:
        for handler in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(handler, ast.ExceptHandler):
                out += [
                    f"{f.name}:{n.lineno}"
                    for n in ast.walk(handler)
                    if isinstance(n, ast.Yield | ast.YieldFrom)
                ]
    return out


def test_compiled_generators_yield_nothing_inside_an_except_block(tmp_path: Path) -> None:
    assert yields_in_handlers(ROOT / "src" / p for p in compiled.COMPILED) == []
    (tmp_path / "bad.py").write_text(
        "def scan() -> object:\n    try:\n        pass\n    except ValueError:\n        yield -1\n"
    )
    assert yields_in_handlers([tmp_path / "bad.py"]) == ["bad.py:5"]


def _txmq_imports(rel: str) -> set[str]:
    """The txmq modules (paths below src/) that the module at ``rel`` imports."""
    src, found = ROOT / "src", set()
    for node in ast.walk(ast.parse((src / rel).read_text(), rel)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("txmq"):
            for alias in node.names:
                for name in (f"{node.module}.{alias.name}", node.module):
                    path = name.replace(".", "/") + ".py"
                    if (src / path).exists():
                        found.add(path)
                        break
        elif isinstance(node, ast.Import):
            found |= {
                a.name.replace(".", "/") + ".py"
                for a in node.names
                if (src / (a.name.replace(".", "/") + ".py")).exists()
            }
    return found


def test_the_imported_list_names_every_interpreted_module_a_compiled_one_imports() -> None:
    """mypyc inlines an imported module's Final constants, so the build hashes those modules
    too (compiled.IMPORTED): a module missing there could change without the build going
    stale."""
    imported = set().union(*(_txmq_imports(rel) for rel in compiled.COMPILED))
    assert sorted(imported - set(compiled.COMPILED)) == sorted(compiled.IMPORTED)
