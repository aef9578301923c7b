"""The sink's driver-side protocol against a real broker, without Spark: the ledger decides.

Goal: what a dead driver leaves behind is settled by the broker's check-back exactly as the
ledger says (listed halves committed, unlisted halves of a recorded batch rolled back, halves
of an unrecorded batch left pending), and the driver's commit is idempotent per batch (a replay
with new halves is rolled back). Method: send half messages tagged as the sink tags them over
raw gRPC, append the ledger record the driver would, stop there (the "crash"), and watch the
broker (FAST check-back timings); then drive ``commit_batch``/``abort_batch`` directly.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from tests.integration.conftest import BrokerProcess, wait_until
from txmq.client.admin import call, call_pages
from txmq.errors import BadRequestError, MessageTypeConflictError, TxmqError
from txmq.spark.client import BrokerClient, SentHalf, build_message
from txmq.spark.sink import SentHalves, TxmqBatchWriter, _prepare
from txmq.txn import bundle
from txmq.txn.ledger import (
    LEDGER_TOPIC,
    PROP_SINK_ATTEMPT,
    PROP_SINK_BATCH,
    PROP_SINK_PARTITION,
    PROP_SINK_QUERY,
    LedgerEntry,
)


def _halves(broker: BrokerClient, topic: str, query: str, batch: str, n: int, tag: str) -> Any:
    props = {
        PROP_SINK_QUERY: query,
        PROP_SINK_BATCH: batch,
        PROP_SINK_PARTITION: "0",
        PROP_SINK_ATTEMPT: tag,
    }
    return [
        broker.send(
            [build_message(topic, f"{tag}-{i}".encode(), properties=props, transactional=True)]
        )[0]
        for i in range(n)
    ]


def _bodies(broker: BrokerClient, topic: str) -> list[str]:
    out: list[str] = []
    for q in range(broker.queue_count(topic)):
        end = broker.query_offset(topic, q, "latest")
        out += [m.body.decode() for m in broker.read_range(topic, q, 0, end)]
    return sorted(out)


def _pending(ep: str, topic: str) -> int:
    return sum(1 for t in call_pages(ep, "TxnList", {}, "transactions") if t.get("topic") == topic)


def test_check_back_settles_a_dead_drivers_halves_from_the_ledger(
    spark_broker: BrokerProcess,
) -> None:
    ep, topic = spark_broker.endpoints, "ledger-out"
    with BrokerClient(ep) as broker:
        listed = _halves(broker, topic, "q1", "3", 4, "ok")
        _halves(broker, topic, "q1", "3", 2, "zombie")  # a failed task attempt, never listed
        unrecorded = _halves(broker, topic, "q1", "4", 2, "later")
        entry = LedgerEntry("q1", "3", frozenset(h.transaction_id for h in listed), ((0, 1),))
        broker.send([build_message(LEDGER_TOPIC, entry.encode(), keys=[entry.key])])
        # The driver "dies" here: no EndTransaction at all.
        wait_until(lambda: _pending(ep, topic) == len(unrecorded), 30, "check-back")
        assert _bodies(broker, topic) == [f"ok-{i}" for i in range(4)]
        assert _pending(ep, topic) == 2, "batch 4 waits for its ledger record"


def test_driver_commit_is_idempotent_per_batch(spark_broker: BrokerProcess) -> None:
    ep, topic = spark_broker.endpoints, "ledger-replay"
    schema = StructType([StructField("body", StringType())])
    writer = TxmqBatchWriter({"endpoints": ep, "topic": topic}, schema)
    with BrokerClient(ep) as broker:
        first = _halves(broker, topic, "q2", "0", 3, "first")
        writer.commit_batch([SentHalves("q2", "0", 0, 0, first)], "q2", "0")
        replay = _halves(broker, topic, "q2", "0", 3, "replay")
        writer.commit_batch([SentHalves("q2", "0", 0, 1, replay)], "q2", "0")
        again: list[SentHalf] = first[:1]
        writer.commit_batch([SentHalves("q2", "0", 0, 0, again)], "q2", "0")  # retried commit
        aborted = _halves(broker, topic, "q2", "1", 2, "aborted")
        writer.abort_batch([SentHalves("q2", "1", 0, 0, aborted)], "q2", "1")
        assert _bodies(broker, topic) == [f"first-{i}" for i in range(3)]
        assert _pending(ep, topic) == 0


def _bundle(broker: BrokerClient, topic: str, query: str, batch: str, n: int, tag: str) -> Any:
    props = {PROP_SINK_QUERY: query, PROP_SINK_BATCH: batch, PROP_SINK_PARTITION: "0"}
    rows = [
        bundle.encode_message(
            topic, f"{tag}-{i}".encode(), message_id=f"{tag}{i}", born_timestamp_ms=1
        )
        for i in range(n)
    ]
    return broker.prepare_bundle(topic, rows, {**props, PROP_SINK_ATTEMPT: tag})


def test_check_back_settles_a_dead_drivers_bundles_from_the_ledger(
    spark_broker: BrokerProcess,
) -> None:
    """The same with bundles (many rows in one transaction, as the sink sends them): a listed
    bundle is committed whole, an unlisted one rolled back whole, by check-back alone."""
    ep, topic = spark_broker.endpoints, "ledger-bundles"
    call(ep, "TopicCreate", {"name": topic, "queues": 2, "type": "transaction"})
    with BrokerClient(ep) as broker:
        listed = [_bundle(broker, topic, "q3", "1", 50, f"ok{k}") for k in range(3)]
        _bundle(broker, topic, "q3", "1", 20, "zombie")
        entry = LedgerEntry("q3", "1", frozenset(h.transaction_id for h in listed), ((0, 0),))
        broker.send([build_message(LEDGER_TOPIC, entry.encode(), keys=[entry.key])])
        wait_until(lambda: _pending(ep, topic) == 0, 30, "check-back")
        assert _bodies(broker, topic) == sorted(f"ok{k}-{i}" for k in range(3) for i in range(50))


def test_bundles_are_refused_whole_and_back_pressure_is_retriable(
    spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    ep = spark_broker.endpoints
    call(ep, "TopicCreate", {"name": "bundle-plain", "queues": 1, "type": "normal"})
    call(ep, "TopicCreate", {"name": "bundle-txn", "queues": 1, "type": "transaction"})
    with BrokerClient(ep) as broker:
        with pytest.raises(MessageTypeConflictError, match="accepts normal messages"):
            _bundle(broker, "bundle-plain", "q4", "1", 2, "x")
        row = bundle.encode_message("elsewhere", b"x", message_id="m", born_timestamp_ms=1)
        with pytest.raises(BadRequestError, match="holds a message for"):
            broker.prepare_bundle("bundle-txn", [row], {})
        row = bundle.encode_message("bundle-txn", b"x", message_id="m", born_timestamp_ms=1)
        with pytest.raises(BadRequestError, match="reserved"):
            broker.prepare_bundle("bundle-txn", [row], {"TXMQ_BUNDLE": "9"})
        assert _bodies(broker, "bundle-plain") == []
    # A broker whose disk is "full" (watermark below what is used) pushes back, retriably.
    config = tmp_path / "full.toml"
    config.write_text("[store]\ndisk_watermark = 0.000001\n")
    full = BrokerProcess(tmp_path / "full", ["--config", str(config)])
    full.start()
    try:
        call(full.endpoints, "TopicCreate", {"name": "t", "queues": 1, "type": "transaction"})
        with BrokerClient(full.endpoints) as broker:
            row = bundle.encode_message("t", b"x", message_id="m", born_timestamp_ms=1)
            with pytest.raises(TxmqError, match="watermark") as refused:
                broker.prepare_bundle("t", [row], {})
            assert refused.value.retriable
    finally:
        full.stop()


def test_the_sink_creates_its_ledger_topic_where_topics_are_not_auto_created(
    tmp_path: Path,
) -> None:
    config = tmp_path / "strict.toml"
    config.write_text("[broker]\nauto_create_topics = false\n")
    strict = BrokerProcess(tmp_path / "strict", ["--config", str(config)])
    strict.start()
    try:
        ep, topic = strict.endpoints, "strict-out"
        call(ep, "TopicCreate", {"name": topic, "queues": 2, "type": "transaction"})
        schema = StructType([StructField("body", StringType())])
        writer = TxmqBatchWriter({"endpoints": ep, "topic": topic}, schema)
        with BrokerClient(ep) as broker:
            sent = [_bundle(broker, topic, "q5", "0", 10, "strict")]
            writer.commit_batch([SentHalves("q5", "0", 0, 0, sent)], "q5", "0")
            assert _bodies(broker, topic) == sorted(f"strict-{i}" for i in range(10))
            assert broker.topics_named(LEDGER_TOPIC) == {LEDGER_TOPIC}
    finally:
        strict.stop()


def test_a_task_waits_out_a_broker_that_is_not_there_yet(tmp_path: Path) -> None:
    """Back-pressure is retried, not failed: a bundle sent while the broker is still starting
    is stored once it listens (the client's own retries alone give up after ~2 s)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "late.toml"  # the topic cannot be created before the broker is up
    config.write_text("[broker]\nauto_create_topics = true\n")
    late = BrokerProcess(tmp_path / "late", ["--config", str(config)])
    late.port = port
    starter = threading.Timer(4.0, late.start)
    starter.start()
    try:
        ep = f"127.0.0.1:{port}"
        row = bundle.encode_message("late-out", b"x", message_id="m", born_timestamp_ms=1)
        with BrokerClient(ep) as client:
            sent = _prepare(client, "late-out", [row], {PROP_SINK_QUERY: "q6"})
            assert sent.transaction_id
            assert _pending(ep, "late-out") == 1
    finally:
        starter.join()
        late.stop()
