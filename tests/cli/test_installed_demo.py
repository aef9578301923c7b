"""``txmq demo`` from an installed wheel, away from any source checkout (the demo
used to load its services from examples/ next to the package).

Method: build a wheel of this checkout, install it with pip into a fresh venv (the pip cache is
warm; this checkout's pip installs it there with ``--python``, and no package of this checkout's
venv is shared), then run that venv's ``txmq demo --no-spark`` with a temporary working
directory and no PYTHONPATH: the broker, the order and inventory services and the crashing
second order-service process all come from site-packages. Also checks that the wheel carries
the demo and the ``pyspark_txmq`` hook.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.integration.conftest import ROOT

BUILD_TIMEOUT_S = 300
DEMO_TIMEOUT_S = 240


def _run(args: list[str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["COLUMNS"] = "200"
    r = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    assert r.returncode == 0, f"{args[:3]}: {r.stdout[-3000:]}{r.stderr[-3000:]}"
    return r


def test_demo_runs_from_an_installed_wheel(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip"]
    _run(
        [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT)],
        tmp_path,
        BUILD_TIMEOUT_S,
    )
    [wheel] = wheels.glob("txmq-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ("order_service", "inventory_service", "pipeline", "spark_job", "command"):
        assert f"txmq/demo/{module}.py" in names, module
    assert "pyspark_txmq.py" in names
    venv = tmp_path / "venv"
    # No pip of its own (ensurepip took ~6 s at load 2): this pip installs into it (--python).
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, BUILD_TIMEOUT_S)
    target = ["--python", str(venv / "bin" / "python")]
    _run([*pip, *target, "install", "-q", str(wheel)], tmp_path, BUILD_TIMEOUT_S)
    work = tmp_path / "elsewhere"
    work.mkdir()
    args = ["demo", "--no-spark", "--orders", "20", "--seed", "5", "--work-dir", "run"]
    r = _run([str(venv / "bin" / "txmq"), *args], work, DEMO_TIMEOUT_S)
    assert "CONSISTENT" in r.stdout and "INCONSISTENT" not in r.stdout, r.stdout[-3000:]
    assert "crash-before-db" in r.stdout, "the SIGKILLed second order service ran"
    assert (work / "run" / "orders.db").exists()
    crash_log = (work / "run" / "crash-child.log").read_text()
    assert "crashing now" in crash_log, crash_log[-2000:]
