"""The Spark sink's driver commit rides out a replica group that cannot confirm its writes for a
while, without a Spark JVM: ``TxmqBatchWriter.write``/``commit`` run here as Spark
would run them in a task and on the driver.

Method: two replicas (SYNC, ``--min-insync-replicas 2``) and a real etcd. The task's bundles are
stored; then the follower is paused (SIGSTOP) for longer than the leader waits for a
confirmation (REPLICA_ACK_TIMEOUT_MS), while the driver commits: the ledger record and the
decisions are durable on the leader but answered ReplicationTimeoutError. The driver asks again
until the resumed follower caught up and the group acknowledges; a decision repeated is
idempotent on the broker. Checked: the commit returns, every row is read exactly once.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tests.integration.conftest import BrokerProcess
from tests.integration.etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)
from tests.integration.test_replication import leader_of, replicas, status
from tests.spark.test_failover import ready_writer
from txmq import limits
from txmq.spark.sink import SentHalves
from txmq.spark.source import Source, read_partition

TOPIC = "acks"
ROWS = 3000
# The follower stays paused this long after the driver's commit began: past the leader's wait
# for a confirmation (REPLICA_ACK_TIMEOUT_MS), and past the client's own failover turns, which
# ask again after an attempt ran out (ATTEMPT_S at the leader, then at the paused follower),
# until an attempt at the leader gets a longer deadline and the ReplicationTimeoutError answer.
PAUSE_S = 3 * limits.REPLICA_ACK_TIMEOUT_MS / 1000


def _rows() -> Iterator[pa.RecordBatch]:
    bodies = [f"row-{i:05d}".encode() for i in range(ROWS)]
    yield pa.RecordBatch.from_arrays([pa.array(bodies, pa.binary())], names=["body"])


@pytest.fixture
def group(tmp_path: Path, etcd_endpoint: str) -> Iterator[list[BrokerProcess]]:  # noqa: F811
    started = replicas(tmp_path, etcd_endpoint, "--min-insync-replicas", "2")
    yield started
    for b in started:
        if b.proc is not None and b.running:
            b.proc.send_signal(signal.SIGCONT)
            b.stop()


def test_a_commit_answered_replication_timeout_is_asked_again_until_acknowledged(
    group: list[BrokerProcess],
) -> None:
    leader, follower = leader_of(group)
    both, writer = ready_writer(leader, follower, TOPIC, "acks")
    sent = writer.write(_rows())
    assert isinstance(sent, SentHalves) and sent.halves

    assert follower.proc is not None
    follower.proc.send_signal(signal.SIGSTOP)
    resume = threading.Timer(PAUSE_S, follower.proc.send_signal, (signal.SIGCONT,))
    started = time.monotonic()
    resume.start()
    try:
        writer.commit([sent])
    finally:
        resume.join()
    took = time.monotonic() - started
    print(f"the driver's commit took {took:.1f} s with the follower paused {PAUSE_S:.0f} s")
    assert took >= PAUSE_S - 1, "the commit was acknowledged while the follower was paused"
    assert status(leader.endpoints).get("role") == "leader"

    source = Source.open({"endpoints": both, "topic": TOPIC}, None)
    source, ranges = source.ranges()
    [(number, (lo, hi))] = ranges.items()
    [part] = source.partitions({number: lo}, {number: hi})
    bodies = [bytes(b) for rb in read_partition(part) for b in rb.column("body").to_pylist()]
    assert sorted(bodies) == [f"row-{i:05d}".encode() for i in range(ROWS)]
