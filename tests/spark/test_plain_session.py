"""``format("txmq")`` in a plain SparkSession, with no register call: PySpark 4 registers the
``DefaultSource`` of every top-level ``pyspark_*`` module (src/pyspark_txmq.py).

Method: a fresh driver process (plain_session_child.py) with the venv's bin first on PATH, as an
activated venv has it, no PYSPARK_PYTHON and a working directory outside the source tree. One
session does a batch read, a batch write, and a streaming read into a streaming write; the test
checks the three outcomes on the broker itself. Topics are created explicitly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import BrokerProcess
from txmq.client.admin import call
from txmq.spark.client import BrokerClient, build_message

# Slow (~25-50 s: a driver JVM of its own): `make test-slow` runs it. The default suite checks
# that the wheel carries the pyspark_txmq hook (tests/cli/test_installed_demo.py), and
# tests/spark reads and writes format("txmq") through the registered source.
pytestmark = [pytest.mark.spark, pytest.mark.slow]

CHILD = Path(__file__).with_name("plain_session_child.py")
QUEUES = 2
CHILD_TIMEOUT_S = 280


def _bodies(endpoints: str, topic: str) -> list[str]:
    with BrokerClient(endpoints) as broker:
        return sorted(
            m.body.decode()
            for q in range(QUEUES)
            for m in broker.read_range(topic, q, 0, broker.query_offset(topic, q, "latest"))
        )


def test_format_txmq_works_in_a_plain_session(spark_broker: BrokerProcess, tmp_path: Path) -> None:
    ep = spark_broker.endpoints
    call(ep, "TopicCreate", {"name": "plain-in", "queues": QUEUES, "type": "normal"})
    for topic in ("plain-batch", "plain-stream"):  # the sink sends transactional messages
        call(ep, "TopicCreate", {"name": topic, "queues": QUEUES, "type": "transaction"})
    sent = [f"in-{i}" for i in range(4)]
    with BrokerClient(ep) as broker:
        broker.send([build_message("plain-in", b.encode()) for b in sent])
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    child = subprocess.run(
        [sys.executable, str(CHILD), ep, "plain-in", "plain-batch", "plain-stream", "ckpt"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    tail = "\n".join((child.stdout + child.stderr).splitlines()[-20:])
    assert child.returncode == 0, tail
    assert json.loads(child.stdout.splitlines()[-1]) == {"read": sent}
    assert _bodies(ep, "plain-batch") == ["batch-0", "batch-1", "batch-2"]
    assert _bodies(ep, "plain-stream") == sent
