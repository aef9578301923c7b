"""What a newcomer's first Spark mistakes print: one line naming the cause and the fix.

- The sink's topic does not exist: the write fails on the driver, before any task runs, with a
  line naming the topic and the `txmq topic create` command; nothing reaches the broker (no
  half message, no ledger record). Batch and streaming sinks alike, in the suite's session.
- Spark's Python workers run an interpreter without txmq (PYSPARK_PYTHON unset or wrong, venv
  not activated): Spark's own answer is a bare `DATA_SOURCE_NOT_FOUND`; `local_session()` refuses
  to start, `check_data_source()` explains, and `txmq demo` prints the same line when its Spark
  step stops for it; each names the interpreter and PYSPARK_PYTHON.
  The interpreter without txmq is this one run isolated (`-I -S`: no site-packages), the shape
  of a system python3 next to a venv. The check in a fresh Spark session runs in a child driver
  process (a JVM of its own, so `slow`); the rest reuses the suite's session.

Method: real Spark, a real broker started as a user's is (topics are not created on first use,
the default); its transaction list and the ledger topic are read back to show that nothing was
sent. On a broker that creates topics on first use the check creates the topic, as a first send
would: the last test shows it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import BrokerProcess
from txmq.client.admin import call
from txmq.demo.steps import spark_failure
from txmq.spark.client import BrokerClient, build_message
from txmq.spark.session import (
    DataSourceMissingError,
    check_data_source,
    explain,
    require_worker_python,
    txmq_cause,
)
from txmq.txn.ledger import LEDGER_TOPIC

pytestmark = pytest.mark.spark

CHILD_TIMEOUT_S = 240
CREATE_HINT = "create it with: txmq topic create {topic} --type transaction --endpoints {ep}"


@pytest.fixture(scope="module")
def strict_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with the default: an unknown topic is TOPIC_NOT_FOUND, never created."""
    b = BrokerProcess(tmp_path_factory.mktemp("strict") / "data", ["--no-auto-create-topics"])
    b.start()
    yield b
    b.stop()


def _nothing_sent(ep: str) -> None:
    assert call(ep, "TxnList", {})["transactions"] == [], "the failed write sent half messages"
    with BrokerClient(ep) as broker:
        assert not broker.topics_named(LEDGER_TOPIC), "the failed write reached the ledger"


def _isolated_python(tmp_path: Path) -> str:
    """An interpreter that cannot import txmq or pyspark: this one, without site-packages."""
    script = tmp_path / "python-without-txmq"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    script.chmod(0o755)
    return str(script)


def test_a_batch_write_to_a_missing_topic_fails_before_any_task_in_one_line(
    spark: Any, strict_broker: BrokerProcess
) -> None:
    ep = strict_broker.endpoints
    rows = spark.createDataFrame([("a",), ("b",)], "body string")
    write = rows.write.format("txmq").option("endpoints", ep).option("topic", "nowhere")
    jobs_before = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    with pytest.raises(Exception) as caught:
        write.option("sinkId", "s").option("batchId", "b1").mode("append").save()
    line = txmq_cause(caught.value)
    assert line == (
        f"the txmq sink's topic 'nowhere' does not exist at {ep}; "
        + CREATE_HINT.format(topic="nowhere", ep=ep)
    ), str(caught.value)[-2000:]
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup()) == jobs_before, "a job ran"
    _nothing_sent(ep)


def test_a_stream_into_a_missing_topic_stops_with_that_line(
    spark: Any, strict_broker: BrokerProcess, tmp_path: Path
) -> None:
    ep = strict_broker.endpoints
    call(ep, "TopicCreate", {"name": "newcomer-in", "queues": 1, "type": "normal"})
    with BrokerClient(ep) as broker:
        broker.send([build_message("newcomer-in", b"m")])
    query = (
        spark.readStream.format("txmq")
        .option("endpoints", ep)
        .option("topic", "newcomer-in")
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("txmq")
        .option("endpoints", ep)
        .option("topic", "nowhere-stream")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception) as caught:
        query.awaitTermination(CHILD_TIMEOUT_S)
    assert txmq_cause(caught.value) == (
        f"the txmq sink's topic 'nowhere-stream' does not exist at {ep}; "
        + CREATE_HINT.format(topic="nowhere-stream", ep=ep)
    ), str(caught.value)[-2000:]
    _nothing_sent(ep)


def test_a_broker_that_creates_topics_on_first_use_gets_the_write(
    spark: Any, spark_broker: BrokerProcess
) -> None:
    ep = spark_broker.endpoints  # started with --auto-create-topics
    rows = spark.createDataFrame([("a",)], "body string")
    write = rows.write.format("txmq").option("endpoints", ep).option("topic", "made-on-first-use")
    write.option("sinkId", "s").option("batchId", "b1").mode("append").save()
    with BrokerClient(ep) as broker:
        ranges = broker.queue_ranges("made-on-first-use")
    assert sum(hi - lo for lo, hi in ranges) == 1, ranges


def test_spark_errors_about_other_sources_are_left_alone(spark: Any) -> None:
    check_data_source(spark)  # the suite's session has txmq
    with pytest.raises(Exception) as caught:
        spark.read.format("txmq-nope").load().schema  # noqa: B018
    assert "DATA_SOURCE_NOT_FOUND" in str(caught.value)
    assert explain(caught.value) is None, "only a missing 'txmq' is explained"


def test_an_interpreter_without_txmq_is_named_with_the_fix(tmp_path: Path) -> None:
    python = _isolated_python(tmp_path)
    with pytest.raises(DataSourceMissingError) as caught:
        require_worker_python(python)
    message = str(caught.value)
    assert message.startswith(f"Spark's Python workers run {python}, which cannot import txmq")
    assert f"set PYSPARK_PYTHON={sys.executable}" in message
    assert "\n" not in message


CHILD = """
from pyspark.sql import SparkSession
from txmq.spark.session import DataSourceMissingError, check_data_source, local_session
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
try:
    check_data_source(spark)
except DataSourceMissingError as exc:
    print("check_data_source:", exc, flush=True)
spark.stop()
try:
    local_session("refused")
except DataSourceMissingError as exc:
    print("local_session:", exc, flush=True)
"""


@pytest.mark.slow
def test_a_session_whose_workers_lack_txmq_is_explained(tmp_path: Path) -> None:
    python = _isolated_python(tmp_path)
    env = dict(os.environ, PYSPARK_PYTHON=python)
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    r = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    said = dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)
    assert said["local_session"].startswith(f"Spark's Python workers run {python}"), r.stdout
    assert said["check_data_source"].startswith(
        "this Spark session does not know format('txmq') (DATA_SOURCE_NOT_FOUND): "
        f"Spark's Python workers run {python}, which cannot import txmq"
    ), r.stdout + r.stderr[-2000:]


def test_the_demo_says_why_its_spark_step_cannot_run(tmp_path: Path) -> None:
    python = _isolated_python(tmp_path)
    env = dict(os.environ, PYSPARK_PYTHON=python)
    log = tmp_path / "spark.log"
    with open(log, "w") as err:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "txmq.demo.spark_job",
                "127.0.0.1:1",
                str(tmp_path),
                "t",
                "",
                "",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            timeout=CHILD_TIMEOUT_S,
        )
    assert r.returncode == 2, log.read_text()[-2000:]
    said = spark_failure(log, r.returncode)
    assert said.startswith(f"the Spark step failed: Spark's Python workers run {python}"), said
