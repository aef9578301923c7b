"""The Spark connector against a real broker process and real local Spark (Java 17).

- Streaming read into Parquet of N committed messages, with rolled-back and pending ones
  interleaved; the driver is killed with SIGKILL mid-run and restarted from its checkpoint:
  exactly N rows, no duplicates, nothing rolled back or pending.
- The transactional sink: a driver killed between the ledger record and its decisions; the
  broker's check-back commits the listed transactions; a replay of the same batch adds nothing.
- Batch reads over offset ranges, and clear errors for bad options and a missing topic.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import FAST, ROOT, BrokerProcess, wait_until
from txmq.spark.client import Broker

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(
        shutil.which("java") is None and not os.environ.get("JAVA_HOME"),
        reason="Spark needs Java 17+",
    ),
]
CHILD = Path(__file__).with_name("spark_child.py")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("spark-broker"), FAST)
    b.start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def spark() -> Any:
    from txmq.spark.session import local_session

    return local_session("txmq-tests")


def _child(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'src'}")
    # Its own session: the sink failpoint kills the child's whole process group.
    return subprocess.Popen(
        [sys.executable, str(CHILD), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,
    )


def _produce(endpoints: str, topic: str, n: int, seed: int) -> set[str]:
    """N committed messages with rolled-back and never-decided ones interleaved."""
    rng = random.Random(seed)
    b = Broker(endpoints)
    committed: set[str] = set()
    try:
        for i in range(n):
            mid, tid = b.send_half(topic, f"c{i}".encode(), keys=[], tag="", properties={})
            b.end(topic, mid, tid, commit=True)
            committed.add(f"c{i}")
            if rng.random() < 0.3:
                mid, tid = b.send_half(topic, f"r{i}".encode(), keys=[], tag="", properties={})
                b.end(topic, mid, tid, commit=False)
            if rng.random() < 0.1:
                b.send_half(topic, f"p{i}".encode(), keys=[], tag="", properties={})
    finally:
        b.close()
    return committed


def test_stream_exactly_once_across_a_killed_driver(
    broker: BrokerProcess, spark: Any, tmp_path: Path, seed: int
) -> None:
    topic = "spark-in"
    committed = _produce(broker.endpoints, topic, 200, seed)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    first = _child("stream", broker.endpoints, topic, out, ckpt)
    assert first.stdout is not None and first.stdout.readline().strip() == "started"
    wait_until(
        lambda: (
            len(os.listdir(tmp_path / "ckpt" / "commits")) >= 2
            if (tmp_path / "ckpt" / "commits").exists()
            else False
        ),
        120,
        "two batches",
    )
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    second = _child("stream", broker.endpoints, topic, out, ckpt)
    _, _ = second.communicate(timeout=300)
    assert second.returncode == 0
    rows = spark.read.parquet(out).selectExpr("cast(body as string) as b", "message_id").collect()
    bodies = [r.b for r in rows]
    assert len(bodies) == len(set(bodies)), "no duplicates"
    assert set(bodies) == committed, "exactly the committed messages"


def test_sink_driver_killed_after_ledger_is_committed_by_check_back(
    broker: BrokerProcess, spark: Any
) -> None:
    topic = "spark-out"
    dead = _child("sink", broker.endpoints, topic, "60", "batch-1", "true")
    dead.communicate(timeout=300)
    assert dead.returncode != 0, "the failpoint must kill the driver"

    def count() -> int:
        df = (
            spark.read.format("txmq")
            .option("endpoints", broker.endpoints)
            .option("topic", topic)
            .load()
        )
        return int(df.count())

    wait_until(lambda: count() == 60, 120, "check-back to commit the ledgered batch")
    replay = _child("sink", broker.endpoints, topic, "60", "batch-1", "false")
    replay.communicate(timeout=300)
    assert replay.returncode == 0
    time.sleep(1)
    assert count() == 60, "a replayed batch id must not add rows"
    fresh = _child("sink", broker.endpoints, topic, "10", "batch-2", "false")
    fresh.communicate(timeout=300)
    assert count() == 70


def test_batch_read_offset_range_and_errors(broker: BrokerProcess, spark: Any) -> None:
    from pyspark.errors import PySparkException

    _produce(broker.endpoints, "spark-batch", 30, 1)
    df = (
        spark.read.format("txmq")
        .option("endpoints", broker.endpoints)
        .option("topic", "spark-batch")
        .option("startingOffsets", '{"0": 2}')
        .option("endingOffsets", '{"0": 5, "1": 0, "2": 0, "3": 0}')
        .load()
    )
    rows = df.select("queue_id", "queue_offset").collect()
    assert sorted((r.queue_id, r.queue_offset) for r in rows) == [(0, 2), (0, 3), (0, 4)]
    with pytest.raises(PySparkException, match="option 'topic' is required"):
        spark.read.format("txmq").option("endpoints", broker.endpoints).load().count()
    with pytest.raises(PySparkException, match="does not exist"):
        spark.read.format("txmq").option("endpoints", broker.endpoints).option(
            "topic", "no-such-topic"
        ).load().count()
    with pytest.raises(PySparkException, match="must be 'earliest', 'latest' or JSON"):
        spark.read.format("txmq").option("endpoints", broker.endpoints).option(
            "topic", "spark-batch"
        ).option("startingOffsets", "{bad").load().count()
