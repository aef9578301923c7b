"""The Spark connector's reader and writer across a replica group failover, without a
Spark JVM: the connector's own functions (``TxmqBatchWriter.write``/``commit``, ``Source`` and
``read_partition``) run here as Spark would run them in a task and on the driver.

Method: two replicas of one group (``--replica-group``, SYNC with ``--min-insync-replicas 2``)
and a real etcd; a one-queue topic, so one partition's read takes several pulls. The sink's task
is fed rows by a generator that kills -9 the leader (and deletes its data directory) after the
first bundle left, so the task's later bundles and the driver's ledger record and decisions
reach the new leader; the batch is then replayed (same sink id and batch id): the ledger keeps
it from being written twice. The reader is planned, reads its first Arrow batch, the (new)
leader is killed -9, and the rest of the partition comes from the replica that leads next.
Checked: every committed row exactly once, queue offsets contiguous over the planned range.
"""

from __future__ import annotations

import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from tests.integration.conftest import BrokerProcess, wait_until
from tests.integration.etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)
from tests.integration.test_replica_groups import Groups
from tests.integration.test_replication import (
    FAILOVER_S,
    follower_has_topic,
    leader_of,
    replicas,
    route,
    status,
)
from tests.spark.test_cluster_source import groups  # noqa: F401  (fixture: 2 groups x 2)
from txmq import limits
from txmq.client.admin import call
from txmq.errors import TopicNotFoundError, TxmqError
from txmq.spark.addresses import ATTEMPT_S, CALL_TIMEOUT_S, group_address, replicas_of
from txmq.spark.client import BrokerClient, build_message
from txmq.spark.sink import SentHalves, TxmqBatchWriter
from txmq.spark.source import Source, read_partition
from txmq.txn.bundle import encode_message
from txmq.txn.ledger import ledger_home, ledger_key

TOPIC = "failover"
# Three pulls of one queue (PULL_COUNT_MAX records each): the third is asked after the kill
# whatever the read-ahead did.
ROWS = 2 * limits.PULL_COUNT_MAX + 1000
CHUNK = 4000  # rows per Arrow batch fed to the sink's task


def _rows() -> Iterator[pa.RecordBatch]:
    for start in range(0, ROWS, CHUNK):
        bodies = [f"row-{i:06d}".encode() for i in range(start, min(start + CHUNK, ROWS))]
        yield pa.RecordBatch.from_arrays([pa.array(bodies, pa.binary())], names=["body"])


def _fail_over(old: BrokerProcess, new: BrokerProcess) -> threading.Thread:
    """kill -9 ``old`` and delete its data; in the background, once ``new`` leads, start
    ``old`` again (empty: it copies the new leader's log), so SYNC 2 of 2 acknowledges again."""
    old.kill9()
    shutil.rmtree(old.data_dir)

    def back() -> None:
        wait_until(lambda: status(new.endpoints).get("role") == "leader", FAILOVER_S, "lead")
        old.start()

    t = threading.Thread(target=back)
    t.start()
    return t


def _in_sync(leader: BrokerProcess) -> bool:
    got = status(leader.endpoints)
    return got.get("role") == "leader" and len(got.get("in_sync") or ()) == 2  # type: ignore[arg-type]


@pytest.fixture
def group(tmp_path: Path, etcd_endpoint: str) -> Iterator[list[BrokerProcess]]:  # noqa: F811
    started = replicas(tmp_path, etcd_endpoint, "--min-insync-replicas", "2")
    yield started
    for b in started:
        if b.running:
            b.stop()


def test_sink_and_reader_follow_a_failover_mid_batch(group: list[BrokerProcess]) -> None:
    first, second = leader_of(group)
    wait_until(lambda: _in_sync(first), 20, "both replicas in sync")
    with BrokerClient(first.endpoints) as b:
        b.create_topic(TOPIC, 1, "transaction")
    wait_until(lambda: follower_has_topic(second, TOPIC), 10, "the topic on the follower")
    ports = sorted([first.port, second.port])
    wait_until(lambda: route(first.endpoints, TOPIC) == ports, 10, "the leader lists both")
    both = f"{first.endpoints};{second.endpoints}"
    schema = StructType([StructField("body", BinaryType())])
    opts = {"endpoints": both, "topic": TOPIC, "sinkId": "failover", "batchId": "0"}

    # The sink: the leader dies while the task sends; the driver commits on the new leader.
    writer = TxmqBatchWriter(opts, schema)
    restarted: list[threading.Thread] = []

    def rows_then_kill() -> Iterator[pa.RecordBatch]:
        for i, rb in enumerate(_rows()):
            if i == 3:  # 12000 rows fed: the first bundle (<= 1 MiB, 8192 rows) has left
                restarted.append(_fail_over(first, second))
            yield rb

    started = time.monotonic()
    sent = writer.write(rows_then_kill())
    print(f"sink: the task's write took {time.monotonic() - started:.1f} s across the kill")
    assert isinstance(sent, SentHalves) and len(sent.halves) >= 2
    assert all(len(replicas_of(h.endpoint)) == 2 for h in sent.halves), sent.halves
    writer.commit([sent])
    # A replay of the batch (Spark re-running it after a driver crash): rolled back by the ledger.
    again = TxmqBatchWriter(opts, schema)
    again.commit([again.write(_rows())])
    restarted[0].join(FAILOVER_S + 60)
    wait_until(lambda: _in_sync(second), 30, "the restarted replica back in sync")

    # The reader: planned now, the leader dies after the partition's first Arrow batch.
    source = Source.open({"endpoints": both, "topic": TOPIC}, None)
    source, ranges = source.ranges()
    [(number, (lo, hi))] = ranges.items()
    [part] = source.partitions({number: lo}, {number: hi})
    assert replicas_of(part.endpoints)[0] == second.endpoints  # planned at the leader
    batches = read_partition(part)
    got = [next(batches)]
    assert got[0].num_rows < ROWS
    killed = time.monotonic()
    restarted = [_fail_over(second, first)]
    got += list(batches)
    print(f"read: the rest of the partition {time.monotonic() - killed:.1f} s after the kill")
    restarted[0].join(FAILOVER_S + 60)

    offsets = [o for rb in got for o in rb.column("queue_offset").to_pylist()]
    bodies = [bytes(b) for rb in got for b in rb.column("body").to_pylist()]
    assert offsets == list(range(lo, hi))
    assert sorted(bodies) == sorted(f"row-{i:06d}".encode() for i in range(ROWS))


def ready_writer(
    first: BrokerProcess, second: BrokerProcess, topic: str, sink_id: str
) -> tuple[str, TxmqBatchWriter]:
    """Both replicas in sync, ``topic`` created on the leader ``first`` and copied by
    ``second``: (both endpoints, a batch writer to ``topic`` through both)."""
    wait_until(lambda: _in_sync(first), 20, "both replicas in sync")
    with BrokerClient(first.endpoints) as b:
        b.create_topic(topic, 1, "transaction")
    wait_until(lambda: follower_has_topic(second, topic), 10, "the topic on the follower")
    both = f"{first.endpoints};{second.endpoints}"
    schema = StructType([StructField("body", BinaryType())])
    opts = {"endpoints": both, "topic": topic, "sinkId": sink_id, "batchId": "0"}
    return both, TxmqBatchWriter(opts, schema)


def _pause(old: BrokerProcess, new: BrokerProcess) -> threading.Thread:
    """SIGSTOP ``old``; in the background, once ``new`` leads, SIGCONT it: it finds its lease
    lapsed, follows ``new`` (cutting what it wrote unacknowledged), and SYNC 2 of 2 acknowledges
    again."""
    assert old.proc is not None
    old.proc.send_signal(signal.SIGSTOP)

    def back() -> None:
        assert old.proc is not None
        try:
            wait_until(lambda: status(new.endpoints).get("role") == "leader", FAILOVER_S, "lead")
        finally:
            old.proc.send_signal(signal.SIGCONT)

    t = threading.Thread(target=back)
    t.start()
    return t


def _stale_bundle(client: BrokerClient, answers: list[object]) -> threading.Thread:
    """A PrepareBundle sent to the paused leader alone (one attempt, the whole call deadline):
    its request waits in the socket until the process resumes; what it answers goes to
    ``answers``."""
    body = encode_message(TOPIC, b"stale", message_id="stale-0", born_timestamp_ms=1)

    def send() -> None:
        try:
            answers.append(client.prepare_bundle(TOPIC, [body], {}))
        except TxmqError as exc:
            answers.append(exc)

    t = threading.Thread(target=send)
    t.start()
    return t


def test_sink_leaves_a_paused_leader_which_acknowledges_nothing_after(
    group: list[BrokerProcess],
) -> None:
    """SIGSTOP of the leader while the sink's task sends: the bundle waiting at the paused
    leader is left after its attempt's deadline (addresses.ATTEMPT_S) for the new leader, so the
    task ends well before one call deadline (CALL_TIMEOUT_S: the old client waited it out);
    the old leader, resumed once the new one leads, answers a Spark write that reached it
    while paused with a refusal; every row once."""
    first, second = leader_of(group)
    _, writer = ready_writer(first, second, TOPIC, "paused")
    stale = BrokerClient(first.endpoints)
    stale.queue_ranges(TOPIC)  # connected before the pause
    answers: list[object] = []
    threads: list[threading.Thread] = []

    def rows_then_pause() -> Iterator[pa.RecordBatch]:
        for i, rb in enumerate(_rows()):
            if i == 3:  # the first bundle has left: the next one meets the paused leader
                threads.append(_pause(first, second))
                threads.append(_stale_bundle(stale, answers))
            yield rb

    try:
        started = time.monotonic()
        sent = writer.write(rows_then_pause())
        took = time.monotonic() - started
        print(f"sink: the task's write took {took:.1f} s across the pause")
        writer.commit([sent])
        for t in threads:
            t.join(CALL_TIMEOUT_S + FAILOVER_S)
    finally:
        stale.close()
        if first.proc is not None and first.running:
            first.proc.send_signal(signal.SIGCONT)
    assert took < CALL_TIMEOUT_S, "the paused leader held a call for its whole deadline"
    [answer] = answers  # refused, or cancelled as it stopped serving: never acknowledged
    print(f"the resumed old leader answered the write sent while it was paused: {answer!r}")
    assert isinstance(answer, TxmqError), f"the resumed old leader acknowledged {answer!r}"
    wait_until(lambda: _in_sync(second), 30, "the resumed replica back in sync")
    bodies = _bodies(second.endpoints, TOPIC)
    assert sorted(bodies) == sorted(f"row-{i:06d}" for i in range(ROWS))


def test_a_call_leaves_a_paused_replica_after_its_attempt_deadline(tmp_path: Path) -> None:
    """The deadline alone, with the paused process never resumed: a group address whose first
    replica is a SIGSTOPped broker (it accepts the connection, answers nothing) and whose
    second is a live one. The call is answered by the second after ATTEMPT_S, where the
    old client waited out its whole call deadline (CALL_TIMEOUT_S) at the first."""
    paused, live = (BrokerProcess(tmp_path / n) for n in ("paused", "live"))
    for b in (paused, live):
        b.start()
    try:
        with BrokerClient(live.endpoints) as b:
            b.create_topic(TOPIC, 1, "normal")
        with BrokerClient(group_address([paused.endpoints, live.endpoints])) as client:
            assert paused.proc is not None
            paused.proc.send_signal(signal.SIGSTOP)
            started = time.monotonic()
            assert client.queue_ranges(TOPIC) == [(0, 0)]
            took = time.monotonic() - started
        print(f"a call left the paused replica after {took:.1f} s")
        assert ATTEMPT_S <= took < CALL_TIMEOUT_S
    finally:
        if paused.proc is not None and paused.running:
            paused.proc.send_signal(signal.SIGCONT)
        for b in (paused, live):
            b.stop()


def _produce(address: str, topic: str, bodies: list[str]) -> None:
    with BrokerClient(address) as b:
        for i in range(0, len(bodies), limits.SEND_BATCH_MAX):
            b.send(
                [build_message(topic, x.encode()) for x in bodies[i : i + limits.SEND_BATCH_MAX]]
            )


def _bodies(address: str, topic: str) -> list[str]:
    with BrokerClient(address) as b:
        ranges = b.queue_ranges(topic)
        return [
            r.body.decode()
            for q, (lo, hi) in enumerate(ranges)
            for r in b.read_range(topic, q, lo, hi)
        ]


def _count(address: str, topic: str) -> int:
    with BrokerClient(address) as b:
        try:
            return sum(hi - lo for lo, hi in b.queue_ranges(topic))
        except TopicNotFoundError:
            return 0


@pytest.mark.spark
def test_a_streaming_query_carries_on_through_a_failover(
    group: list[BrokerProcess], spark: Any, tmp_path: Path
) -> None:
    """txmq -> txmq in a real Spark session (micro-batches of at most 60 rows every 0.3 s):
    the leader is killed -9 (data deleted) once the first batches are in the output topic;
    the query carries on with the new leader and the output holds every input message once."""
    first, second = leader_of(group)
    wait_until(lambda: _in_sync(first), 20, "both replicas in sync")
    address = group_address([first.endpoints, second.endpoints])
    with BrokerClient(first.endpoints) as b:
        b.create_topic("stream-in", 2, "normal")
        b.create_topic("stream-out", 2, "transaction")
    ports = sorted([first.port, second.port])
    wait_until(lambda: route(first.endpoints, "stream-in") == ports, 10, "the leader lists both")
    wait_until(lambda: follower_has_topic(second, "stream-out"), 10, "the topics copied")
    before = [f"before-{i}" for i in range(300)]
    _produce(address, "stream-in", before)
    both = f"{first.endpoints};{second.endpoints}"
    query = (
        spark.readStream.format("txmq")
        .option("endpoints", both)
        .option("topic", "stream-in")
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", "60")
        .load()
        .select("body")
        .writeStream.format("txmq")
        .option("endpoints", both)
        .option("topic", "stream-out")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: _count(address, "stream-out") >= 60, 60, "the first batches")
        assert _count(address, "stream-out") < len(before), "the kill comes mid-stream"
        _fail_over(first, second).join(FAILOVER_S + 60)
        wait_until(lambda: _in_sync(second), 30, "the restarted replica back in sync")
        after = [f"after-{i}" for i in range(100)]
        _produce(address, "stream-in", after)
        want = len(before) + len(after)
        wait_until(
            lambda: _count(address, "stream-out") >= want or query.exception() is not None,
            90,
            "every message in the output",
        )
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    assert sorted(_bodies(address, "stream-out")) == sorted(before + after)


def test_two_groups_sink_and_reader_reach_each_groups_next_leader(groups: Groups) -> None:  # noqa: F811
    """Two groups of two replicas in a cluster file: the sink's task spreads bundles over both
    groups while the leader of the batch's ledger home is killed -9, and the driver commits
    through that group's new leader; then a read is planned (each partition at its group's
    leader) and the other group's leader is killed before the tasks run: they read from its
    new leader. Every row once."""
    leaders = groups.leaders(preferred=True)  # not one about to hand the lead back
    call(groups.endpoints, "TopicCreate", {"name": TOPIC, "queues": 1, "type": "transaction"})
    # Not a route query before both leaders have the topic: a leader creates a topic it does
    # not know on a route query, with the default queue count.
    wait_until(lambda: [_count_queues(b) for b in leaders.values()] == [1, 1], 15, "created")
    every = groups.replicas.values()
    wait_until(lambda: all(follower_has_topic(b, TOPIC) for b in every), 10, "topic copied")
    for leader in leaders.values():
        wait_until(lambda leader=leader: _in_sync(leader), 20, "both replicas in sync")
    home = ledger_home(ledger_key("groups", "0"), sorted(leaders))
    away = next(name for name in leaders if name != home)
    schema = StructType([StructField("body", BinaryType())])
    opts = {"endpoints": groups.endpoints, "topic": TOPIC, "sinkId": "groups", "batchId": "0"}
    writer = TxmqBatchWriter(opts, schema)
    restarted: list[threading.Thread] = []

    def rows_then_kill() -> Iterator[pa.RecordBatch]:
        for i, rb in enumerate(_rows()):
            if i == 3:  # bundles have left for both groups
                restarted.append(_fail_over(leaders[home], _other(groups, leaders[home])))
            yield rb

    sent = writer.write(rows_then_kill())
    assert {len(replicas_of(h.endpoint)) for h in sent.halves} == {2}
    writer.commit([sent])
    restarted[0].join(FAILOVER_S + 60)

    source = Source.open({"endpoints": groups.endpoints, "topic": TOPIC}, None)
    source, ranges = source.ranges()
    parts = source.partitions(
        {q: lo for q, (lo, _) in ranges.items()}, {q: hi for q, (_, hi) in ranges.items()}
    )
    # The away group's leader when the read was planned: on a loaded machine a lease may lapse
    # and move the leadership before (seen at load 13), so not necessarily leaders[away].
    planned = {replicas_of(p.endpoints)[0] for p in parts}
    [target] = [b for b in (leaders[away], _other(groups, leaders[away])) if b.endpoints in planned]
    _fail_over(target, _other(groups, target)).join(FAILOVER_S + 60)
    bodies = [
        bytes(b) for p in parts for rb in read_partition(p) for b in rb.column("body").to_pylist()
    ]
    assert sorted(bodies) == sorted(f"row-{i:06d}".encode() for i in range(ROWS))


def _count_queues(replica: BrokerProcess) -> int:
    with BrokerClient(replica.endpoints) as b:
        try:
            return len(b.queue_ranges(TOPIC))
        except TopicNotFoundError:
            return 0


def _other(cluster: Groups, replica: BrokerProcess) -> BrokerProcess:
    """The other replica of ``replica``'s group."""
    [group] = [g for g in cluster.layout.groups if replica.port in {m.port for m in g.replicas}]
    [other] = [cluster.replicas[m.name] for m in group.replicas if m.port != replica.port]
    return other
