"""`make test`'s pytest-xdist grouping (tests/conftest.py) names exactly the modules with a test
that takes the session-wide ``spark`` fixture: a module left out would start a second Spark
session (a JVM) on the other worker, and a module listed for nothing lengthens that worker."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import SPARK_SESSION_MODULES

ROOT = Path(__file__).parents[2]


def _takes_spark(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(
        isinstance(node, ast.FunctionDef)
        and node.name.startswith("test_")
        and any(a.arg == "spark" for a in node.args.args)
        for node in ast.walk(tree)
    )


def test_the_spark_session_group_is_every_module_that_uses_the_session() -> None:
    found = {
        str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py") if _takes_spark(p)
    }
    assert found == SPARK_SESSION_MODULES
