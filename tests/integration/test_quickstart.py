"""The README's quick start from a fresh clone: two setup commands, and the demo (small order
count) reports CONSISTENT with every check passing.

Method: ``git clone`` the repository this test runs from into a temporary directory (so only
committed files count, as for a newcomer), then run ``txmq demo`` from the clone. To stay fast
it reuses this checkout's interpreter and installed dependencies with PYTHONPATH pointing at the
clone's sources instead of building a new venv; ``.ci/run`` exercises the venv creation itself
through ``make test``. The default suite runs the demo without its Spark step; the slow variant
(``make test-slow``) runs it whole, as ``make demo`` does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT


def quick_start_commands(readme: str) -> list[str]:
    section = readme.split("## Quick start", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "the quick start has no shell block"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


@pytest.mark.timeout(480)
@pytest.mark.parametrize(
    "with_spark",
    [
        pytest.param(False, id="no-spark"),
        # ~60-110 s (a Spark driver JVM): the connector itself is tested by tests/spark.
        pytest.param(True, id="spark", marks=pytest.mark.slow),
    ],
)
def test_demo_from_a_fresh_clone(
    tmp_path: Path, with_spark: bool, request: pytest.FixtureRequest
) -> None:
    clone = tmp_path / "txmq"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    readme = (clone / "README.md").read_text()
    assert quick_start_commands(readme) == ["make demo", "make test"]
    makefile = (clone / "Makefile").read_text()
    assert re.search(r"^demo:.*\n\t.*txmq demo", makefile, re.M), "make demo must run txmq demo"

    env = dict(os.environ, PYTHONPATH=str(clone / "src"), COLUMNS="200")
    args = [sys.executable, "-m", "txmq.cli", "demo", "--orders", "40", "--seed", "3"]
    if not with_spark:
        args.append("--no-spark")
    else:
        request.getfixturevalue("java_runtime")  # the demo's Spark step starts a JVM
    # The demo's own Spark step may take 240 s on a loaded machine (demo/steps.SPARK_TIMEOUT_S).
    r = subprocess.run(args, cwd=clone, env=env, capture_output=True, text=True, timeout=420)
    out = r.stdout
    assert r.returncode == 0, out[-4000:] + r.stderr[-3000:]
    assert "CONSISTENT" in out and "INCONSISTENT" not in out
    assert "FAIL" not in out
    # The report covers the story: each injected fate and the core equalities.
    for text in ("crash-before-db", "hang", "committed messages = deducted + dead-lettered"):
        assert text in out, text
    if "--no-spark" not in args:
        assert "Spark: orders in the aggregate = committed orders" in out
