"""TXMQ_REQUIRE_TOOLS=1 (tests/conftest.py): a skip in the run fails the test (an error when a
fixture skipped), with the skip's reason; a skip/skipif marker stays a skip; without the
variable a skip is a skip. And the tools come from their session fixtures only
(tests/tools.py): no test module installs one itself.

Method: a real pytest run in a child process on a small test file whose conftest takes the
project's hook, once with and once without the variable; the outcomes are read from its summary.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

SAMPLE = """
import sys

import pytest

from tests import tools


def test_tool_missing():
    tools.missing("frobnicator", "not on PATH")


@pytest.fixture(scope="session")
def absent():
    tools.missing("gadget", "no package")


def test_fixture_missing(absent):
    pass


@pytest.mark.skipif(sys.platform != "nonesuch", reason="only on nonesuch")
def test_platform():
    pass


def test_passes():
    pass
"""


def _run(tmp_path: Path, require: bool) -> str:
    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_runtest_makereport\n")
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = {k: v for k, v in os.environ.items() if k != "TXMQ_REQUIRE_TOOLS"}
    env["PYTHONPATH"] = str(ROOT)
    if require:
        env["TXMQ_REQUIRE_TOOLS"] = "1"
    args = [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", "-n", "0"]
    r = subprocess.run(
        [*args, "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return r.stdout + r.stderr


def test_a_skip_fails_only_when_tools_are_required(tmp_path: Path) -> None:
    out = _run(tmp_path, require=True)
    assert re.search(r"\b1 failed, 1 passed, 1 skipped, 1 error\b", out), out
    assert "TXMQ_REQUIRE_TOOLS=1, so this skip fails: missing tool frobnicator: not on PATH" in out
    assert "missing tool gadget: no package" in out
    assert "only on nonesuch" in out, "the marker's skip stays a skip, with its reason"
    out = _run(tmp_path, require=False)
    assert re.search(r"\b1 passed, 3 skipped\b", out), out


def test_no_test_module_installs_a_tool_itself() -> None:
    """apt-get and npm run in tests/tools.py only (behind the session fixtures)."""
    offenders = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("*.py")
        if p.name not in ("tools.py", "apt.py", Path(__file__).name)
        and re.search(r"""["'](apt-get|npm)["']""", p.read_text())
    ]
    assert offenders == []


def test_java_comes_from_its_fixture_and_is_17_or_newer(java_runtime: Path) -> None:
    from txmq.spark.session import java_major

    probe = subprocess.run(
        [str(java_runtime), "-version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert java_major(probe.stderr + probe.stdout) >= 17, probe.stderr


def test_a_wrong_java_home_is_named_not_papered_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An explicit JAVA_HOME is the user's choice: the fixture says what is wrong with it and
    installs nothing beside it."""
    from tests import tools

    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match=f"JAVA_HOME={tmp_path} has no bin/java"):
        tools.install_java()
