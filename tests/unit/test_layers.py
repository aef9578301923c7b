"""The contracts (``[tool.importlinter]`` in pyproject.toml, run by ``make test``) can fail.

Method: copy the package and the contracts into a temporary directory, run ``lint-imports`` on
the copy as it is (kept), then with one import planted that runs back up (broken): between the
packages (the dashboard importing the CLI, what ``txmq.cli : txmq.dashboard`` used to allow; the
admin client importing the dashboard) and between the rooms inside the broker and the store (a
lower room importing a higher one, or one sibling another).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH comes before the editable install's path entry, so the copy is what is analysed.
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    if not LINT_IMPORTS.exists():
        pytest.skip(f"{LINT_IMPORTS} is missing (pip install -e '.[dev]')")
    shutil.copytree(
        ROOT / "src" / "txmq",
        tmp_path / "src" / "txmq",
        ignore=shutil.ignore_patterns("__pycache__", "static", "templates"),
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_package_as_it_is_keeps_the_contract(tree: Path) -> None:
    kept = _lint(tree)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    for contract in ("txmq layers", "broker rooms", "store rooms"):
        assert f"{contract} KEPT" in kept.stdout


@pytest.mark.parametrize(
    ("module", "planted"),
    [
        ("dashboard/link.py", "from txmq.cli import commands"),
        ("client/admin.py", "from txmq.dashboard import link"),
        ("dashboard/app.py", "from txmq.demo import report"),
        ("broker/node/serve.py", "from txmq.client import admin"),
    ],
)
def test_an_import_that_runs_back_up_breaks_the_contract(
    tree: Path, module: str, planted: str
) -> None:
    path = tree / "src" / "txmq" / module
    path.write_text(path.read_text() + f"\n{planted}  # planted by test_layers\n")
    broken = _lint(tree)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "txmq layers BROKEN" in broken.stdout
    dotted = "txmq." + module.removesuffix(".py").replace("/", ".")
    assert dotted in broken.stdout


@pytest.mark.parametrize(
    ("module", "planted", "contract"),
    [
        ("store/log/commit_log.py", "from txmq.store.derived import dispatch", "store rooms"),
        ("store/write/write_path.py", "from txmq.store.recovery import repair", "store rooms"),
        ("store/files/disk.py", "from txmq.store import store", "store rooms"),
        ("broker/topics/registry.py", "from txmq.broker.node import serve", "broker rooms"),
    ],
)
def test_an_import_across_rooms_breaks_their_contract(
    tree: Path, module: str, planted: str, contract: str
) -> None:
    path = tree / "src" / "txmq" / module
    path.write_text(path.read_text() + f"\n{planted}  # planted by test_layers\n")
    broken = _lint(tree)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert f"{contract} BROKEN" in broken.stdout
    assert "txmq layers KEPT" in broken.stdout  # the rooms' contract, not the packages', caught it
    dotted = "txmq." + module.removesuffix(".py").replace("/", ".")
    assert dotted in broken.stdout
