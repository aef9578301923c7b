"""The Spark sink writes through a 3-broker cluster, exactly once.

Goal: a batch's bundles are spread over every live member and each is decided on the member
that holds it; a repeated batch id adds nothing; a member down at write time is skipped; and
after a driver dies between the ledger record and its decisions, every member's check-back
settles its own bundles from the ONE ledger record on the batch's home member, waiting (not
spending checks) while that home is down. Method: three real broker processes in one cluster
file (FAST check-back, at most 2 checks); real Spark for the writes; raw bundles and a ledger
record appended by hand for the dead driver, as test_sink_ledger.py does on one broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.conftest import BrokerProcess, wait_until
from tests.integration.test_cluster import Cluster, create_topic
from txmq.client.admin import call_pages
from txmq.spark.client import BrokerClient, SentHalf, build_message
from txmq.txn import bundle
from txmq.txn.ledger import (
    LEDGER_TOPIC,
    PROP_SINK_ATTEMPT,
    PROP_SINK_BATCH,
    PROP_SINK_LEDGER,
    PROP_SINK_PARTITION,
    PROP_SINK_QUERY,
    LedgerEntry,
    ledger_home,
    ledger_key,
)

pytestmark = pytest.mark.spark
NAMES = ["b0", "b1", "b2"]


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("sink-cluster"), 3)
    for b in c.brokers:  # few checks: a check spent while the home is down would show
        b.args += ["--transaction-check-max", "2"]
    c.start()
    yield c
    c.stop()


def _batch_homed(query: str, allowed: set[str]) -> str:
    """A batch id whose ledger home is one of ``allowed``."""
    for i in range(100):
        if ledger_home(ledger_key(query, f"b{i}"), NAMES) in allowed:
            return f"b{i}"
    raise AssertionError("no batch id with such a home in 100")


def _bodies(b: BrokerProcess, topic: str) -> list[str]:
    """Every visible message of ``topic`` on broker ``b`` (its own queues only)."""
    out: list[str] = []
    with BrokerClient(b.endpoints) as broker:
        for q in range(broker.queue_count(topic)):
            end = broker.query_offset(topic, q, "latest")
            out += [m.body.decode() for m in broker.read_range(topic, q, 0, end)]
    return out


def _pending(b: BrokerProcess, topic: str) -> int:
    rows = call_pages(b.endpoints, "TxnList", {}, "transactions")
    return sum(1 for t in rows if t.get("topic") == topic)


def _write(spark: Any, c: Cluster, topic: str, batch: str, rows: int) -> None:
    df = spark.range(rows).selectExpr("string(id) AS body").repartition(3)
    (
        df.write.format("txmq")
        .option("endpoints", c.endpoints)
        .option("topic", topic)
        .option("sinkId", "cluster-job")
        .option("batchId", batch)
        .mode("append")
        .save()
    )


def test_bundles_spread_over_every_member_once_per_batch_id(cluster3: Cluster, spark: Any) -> None:
    create_topic(cluster3, "sink-spread", queues=2, type="transaction")
    for _ in range(2):  # the second run of the same batch id is rolled back, not duplicated
        _write(spark, cluster3, "sink-spread", "b1", 90)
    per_broker = [_bodies(b, "sink-spread") for b in cluster3.brokers]
    assert all(per_broker), f"every member holds bundles: {[len(p) for p in per_broker]}"
    assert sorted(r for p in per_broker for r in p) == sorted(str(i) for i in range(90))
    assert all(_pending(b, "sink-spread") == 0 for b in cluster3.brokers)
    df = spark.read.format("txmq").option("endpoints", cluster3.brokers[1].endpoints)
    read = df.option("topic", "sink-spread").load().selectExpr("string(body) AS b")
    got = [r.b for r in read.collect()]
    assert sorted(got) == sorted(str(i) for i in range(90))


def test_a_member_down_at_write_time_is_skipped(cluster3: Cluster, spark: Any) -> None:
    create_topic(cluster3, "sink-down", queues=2, type="transaction")
    b0, b1, b2 = cluster3.brokers
    batch = _batch_homed("cluster-job", {"b0", "b1"})
    b2.stop()
    try:
        _write(spark, cluster3, "sink-down", batch, 60)
    finally:
        b2.start()
    on_live = _bodies(b0, "sink-down") + _bodies(b1, "sink-down")
    assert sorted(on_live) == sorted(str(i) for i in range(60))
    assert _bodies(b2, "sink-down") == []
    assert all(_pending(b, "sink-down") == 0 for b in cluster3.brokers)


@dataclass(frozen=True)
class _Held:
    transaction_id: str
    endpoint_name: str  # the member holding it (its data dir's name: b1, b2)


def _bundle(b: BrokerProcess, topic: str, batch: str, home: str, tag: str) -> SentHalf:
    props = {
        PROP_SINK_QUERY: "dead-driver",
        PROP_SINK_BATCH: batch,
        PROP_SINK_PARTITION: "0",
        PROP_SINK_ATTEMPT: tag,
        PROP_SINK_LEDGER: home,
    }
    rows = [
        bundle.encode_message(
            topic, f"{tag}-{i}".encode(), message_id=f"{tag}{i}", born_timestamp_ms=1
        )
        for i in range(10)
    ]
    with BrokerClient(b.endpoints) as broker:
        return broker.prepare_bundle(topic, rows, props)


def test_every_member_settles_its_bundles_from_the_home_ledger(cluster3: Cluster) -> None:
    """The driver "died" after its tasks: bundles on the two members that are not the batch's
    home, one of them from a failed attempt (never listed). While the home is down their
    check-back waits (more tries than the 2 checks allowed, and nothing rolled back); once
    the home is back with the ledger record, the listed bundles commit and the stray one rolls
    back, each on its own member."""
    topic = "sink-dead-driver"
    create_topic(cluster3, topic, queues=2, type="transaction")
    batch = _batch_homed("dead-driver", {"b0"})
    home, others = cluster3.brokers[0], cluster3.brokers[1:]
    listed = [_bundle(b, topic, batch, "b0", f"ok{b.data_dir.name}") for b in others]
    zombie = _bundle(others[0], topic, batch, "b0", "zombie")
    waiting = [
        _Held(h.transaction_id, b.data_dir.name)
        for h, b in [(listed[0], others[0]), (listed[1], others[1]), (zombie, others[0])]
    ]
    home.stop()
    try:

        def asked_thrice() -> bool:  # more often than the 2 checks each is allowed
            logs = {b.data_dir.name: b.log_path.read_text() for b in others}
            return all(
                logs[h.endpoint_name].count(f"check-back of {h.transaction_id} failed") >= 3
                for h in waiting
            )

        wait_until(asked_thrice, 60, "check-back on b1 and b2 asking the home that is down")
        assert [_pending(b, topic) for b in others] == [2, 1], "waiting, nothing decided"
    finally:
        home.start()
    entry = LedgerEntry("dead-driver", batch, frozenset(h.transaction_id for h in listed))
    with BrokerClient(home.endpoints) as broker:
        broker.send([build_message(LEDGER_TOPIC, entry.encode(), keys=[entry.key])])
    wait_until(lambda: all(_pending(b, topic) == 0 for b in others), 60, "check-back")
    for b in others:
        assert sorted(_bodies(b, topic)) == sorted(f"ok{b.data_dir.name}-{i}" for i in range(10))
