"""The README's quick start from a fresh clone: the demo (small order count) reports CONSISTENT.

To stay fast it reuses this checkout's installed dependencies (the current interpreter) with
PYTHONPATH pointing at the clone's sources instead of building a new venv; `.ci/run` exercises
the venv creation itself via `make test`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import ROOT


def test_demo_from_a_fresh_clone(tmp_path: Path) -> None:
    clone = tmp_path / "txmq"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    readme = (clone / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    env = dict(os.environ, PYTHONPATH=str(clone / "src"), COLUMNS="160")
    args = [sys.executable, "-m", "txmq.cli", "demo", "--orders", "30", "--seed", "3"]
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        args.append("--no-spark")
    r = subprocess.run(args, cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "CONSISTENT" in r.stdout
    assert "INCONSISTENT" not in r.stdout
