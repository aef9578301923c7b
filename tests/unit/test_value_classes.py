"""Value classes are declared one way: ``@dataclass(frozen=True, slots=True)``.

Goal: one declaration a reader recognises everywhere (read-only fields, equality and hashing over
the fields, no per-instance dict), instead of frozen dataclasses, hand-written ``__init__``s and
custom decorators side by side. Method: ast over src/; a dataclass that is frozen must also have
slots, and ``init=False`` (a hand-written ``__init__`` standing in for the generated one) is kept
only where this file's ALLOWED says why. The rule is also run on a planted violation.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# (path, class) -> why its ``__init__`` is written by hand.
ALLOWED_INIT: dict[tuple[str, str], str] = {
    ("src/txmq/broker/consume/positions.py", "Ask"): "derives fields from its arguments",
    ("src/txmq/model.py", "Entry"): "derives fields from its arguments",
    ("src/txmq/store/write/group_commit.py", "Pending"): "mutable: the flusher fills it in",
}


def _keywords(dec: ast.expr) -> dict[str, object] | None:
    if isinstance(dec, ast.Call) and getattr(dec.func, "id", None) == "dataclass":
        return {k.arg: getattr(k.value, "value", None) for k in dec.keywords if k.arg}
    if isinstance(dec, ast.Name) and dec.id == "dataclass":
        return {}
    return None


def violations(files: list[Path]) -> list[str]:
    out = []
    for f in files:
        rel = f.resolve().relative_to(ROOT).as_posix() if f.is_relative_to(ROOT) else str(f)
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            for dec in node.decorator_list:
                kw = _keywords(dec)
                if kw is None:
                    continue
                if kw.get("frozen") and not kw.get("slots"):
                    out.append(f"{rel}: {node.name}: frozen without slots=True")
                if kw.get("init") is False and (rel, node.name) not in ALLOWED_INIT:
                    out.append(f"{rel}: {node.name}: init=False (a hand-written __init__)")
    return out


def test_value_classes_are_declared_one_way() -> None:
    assert violations(sorted((ROOT / "src").rglob("*.py"))) == []


def test_the_rule_catches_a_planted_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from dataclasses import dataclass\n"
        "@dataclass(frozen=True)\nclass A:\n    x: int\n"
        "@dataclass(init=False)\nclass B:\n    def __init__(self) -> None: ...\n"
    )
    found = violations([bad])
    assert any("A: frozen without slots" in v for v in found)
    assert any("B: init=False" in v for v in found)
