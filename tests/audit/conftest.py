"""Fixtures for the ``txmq audit`` tests: one Spark Connect server per module that every
``txmq audit --remote`` run shares (a Spark session costs a JVM start; a Connect client starts in
about a second), with Debian's JDBC driver jars from the session's ``jdbc_jars`` fixture
(tests/tools.py) on its classpath; a broker whose transactions stay undecided for the whole
module; and a runner for the command.

The Connect server is the PySpark wheel's own (``spark-submit --class ...SparkConnectServer``),
with Debian's drivers on its classpath (``connect_server`` starts one with the jars asked for,
or none), UTC as its JVM's zone and this interpreter as its Python
workers' (they run the txmq source).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import ROOT, BrokerProcess
from tests.ports import accepts, free_port

if importlib.util.find_spec("pyspark") is None:
    collect_ignore_glob = ["test_audit_[!p]*.py"]

CONNECT_START_S = 300.0
AUDIT_TIMEOUT_S = 600


def _spark_env() -> dict[str, str]:
    return dict(
        os.environ,
        PYTHONPATH=str(ROOT / "src"),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )


@contextmanager
def connect_server(jars: Sequence[Path], work: Path) -> Iterator[str]:
    """A Spark Connect server with ``jars`` on its classpath (none: a client must upload its
    driver with ``--jars``); yields its sc:// URL, and stops it on exit."""
    import pyspark

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    port = free_port()
    cmd = [
        str(submit),
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--driver-java-options", "-Duser.timezone=UTC",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=4",
        "--conf", "spark.sql.session.timeZone=UTC",
        *(["--jars", ",".join(str(p) for p in jars)] if jars else []),
        "spark-internal",
    ]  # fmt: skip
    log = (work / "server.log").open("w")
    proc = subprocess.Popen(
        cmd, cwd=work, env=_spark_env(), stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + CONNECT_START_S
        while not accepts(port):
            tail = (work / "server.log").read_text(errors="replace")[-2000:]
            assert proc.poll() is None, f"Spark Connect server exited:\n{tail}"
            assert time.monotonic() < deadline, f"Spark Connect server not up:\n{tail}"
            time.sleep(0.5)  # sleep: poll interval of this bounded wait for the port
        yield f"sc://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def spark_connect(
    jdbc_jars: dict[str, Path], java_runtime: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A Spark Connect server's sc:// URL, for the module."""
    with connect_server(list(jdbc_jars.values()), tmp_path_factory.mktemp("spark-connect")) as url:
        yield url


@pytest.fixture(scope="module")
def audit_broker(
    java_runtime: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    """A broker with the default transaction timings: an undecided transaction stays
    undecided (not yet dead) for minutes, longer than the module runs. The audits run
    against it start Spark (``java_runtime``)."""
    b = BrokerProcess(tmp_path_factory.mktemp("audit-broker") / "data", [])
    b.start()
    yield b
    b.stop()


@dataclass(frozen=True)
class Audited:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)

    def explain(self) -> str:
        return f"exit {self.code}\nstdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}"


def run_audit(*args: str, timeout_s: float = AUDIT_TIMEOUT_S) -> Audited:
    """``txmq audit ARGS`` in a child process (its own Spark driver, or a Connect client)."""
    env = dict(_spark_env(), COLUMNS="200")
    r = subprocess.run(
        [sys.executable, "-m", "txmq.cli", "audit", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    return Audited(r.returncode, r.stdout, r.stderr)
