"""Readers see only what the in-sync replicas have, also right after a promotion or a restart
(ADR 0005, "readers see only what the in-sync replicas have").

A replica that opens as a SYNC leader (promoted, or restarted) holds back the tail of its log
past the end it knows was acknowledged, until its in-sync followers have it: had it shown that
tail and then died, a replica without it could lead and give those offsets to other messages
(a Spark checkpoint would then point at different records). Real broker processes, a real
etcd; the reads go through the Spark connector's client (QueueOffsets, PullRecords), as a
Spark source reads. A broker alone still shows everything it holds after a restart.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from tests.integration.conftest import FAST, BrokerProcess, wait_until
from tests.integration.test_replication import (
    _send_raw,
    follower_has_topic,
    replica_group,
    status,
)
from txmq.spark.client import BrokerClient
from txmq.store.replica.acked import FILE_NAME as ACKED_FILE

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

TOPIC = "seen"


def _bodies(endpoint: str) -> list[bytes]:
    """What a reader of ``endpoint`` can see of the one-queue topic, in offset order."""
    with BrokerClient(endpoint) as b:
        [(lo, hi)] = b.queue_ranges(TOPIC)
        return [r.body for r in b.read_range(TOPIC, 0, lo, hi)]


def _leader(group: list[BrokerProcess]) -> BrokerProcess:
    live = [b for b in group if b.running]
    wait_until(
        lambda: sum(status(b.endpoints).get("role") == "leader" for b in live) == 1, 20, "a leader"
    )
    return next(b for b in live if status(b.endpoints).get("role") == "leader")


def _stop_all(group: list[BrokerProcess]) -> None:
    for b in group:
        if b.proc is not None and b.running:
            b.proc.send_signal(signal.SIGCONT)
            b.stop()


def _setup(group: list[BrokerProcess]) -> BrokerProcess:
    """Lead, create the one-queue topic, copy it everywhere, get one write acknowledged."""
    leader = _leader(group)
    with BrokerClient(leader.endpoints) as b:
        b.create_topic(TOPIC, 1, "normal")
    for f in group:
        if f is not leader:
            wait_until(lambda f=f: follower_has_topic(f, TOPIC), 15, "the topic copied")
    wait_until(lambda: _send_raw(leader.endpoints, TOPIC, b"acked", "0A")[0] == pb.OK, 20, "ack")
    wait_until(lambda: _bodies(leader.endpoints) == [b"acked"], 10, "the ack readable")
    return leader


def _kill_with_a_tail(leader: BrokerProcess, paused: BrokerProcess, holder: BrokerProcess) -> None:
    """Pause ``paused`` (an in-sync follower, so nothing more is acknowledged), send a message
    to ``leader``, and once ``holder`` (the leader or another follower) holds it durable, kill
    the leader -9; the send was never acknowledged (asserted)."""
    assert paused.proc is not None
    paused.proc.send_signal(signal.SIGSTOP)
    before = int(status(holder.endpoints).get("end", 0))  # type: ignore[call-overload]
    answers: list[int] = []
    sending = threading.Thread(
        target=lambda: answers.append(_send_raw(leader.endpoints, TOPIC, b"unacked", "0B")[0])
    )
    sending.start()
    wait_until(lambda: int(status(holder.endpoints).get("end", 0)) > before, 5, "the tail held")  # type: ignore[call-overload]
    leader.kill9()
    sending.join(10)
    assert answers != [pb.OK]


@pytest.fixture
def three(tmp_path: Path, etcd_endpoint: str) -> Iterator[list[BrokerProcess]]:  # noqa: F811
    group = replica_group(tmp_path, etcd_endpoint, "vis3", ("r0", "r1", "r2"), 3)
    yield group
    _stop_all(group)


@pytest.fixture
def two(tmp_path: Path, etcd_endpoint: str) -> Iterator[list[BrokerProcess]]:  # noqa: F811
    group = replica_group(tmp_path, etcd_endpoint, "vis2", ("r0", "r1"), 2)
    yield group
    _stop_all(group)


def test_a_promoted_follower_holds_back_a_tail_never_acknowledged(
    three: list[BrokerProcess],
) -> None:
    """Three replicas, SYNC 3 of 3. One follower is paused, so a send is stored on the leader
    and copied by the other follower but never acknowledged; the leader is killed -9. The
    follower that holds the tail leads, and readers see only the acknowledged message until
    the in-sync set holds the tail: the paused follower resumed and the old leader restarted
    (with its data, it holds the same tail) both caught up."""
    leader = _setup(three)
    promoted, paused = (b for b in three if b is not leader)
    _kill_with_a_tail(leader, paused, promoted)
    assert _leader(three) is promoted
    # The old code made the whole log readable on promotion: [b"acked", b"unacked"].
    assert _bodies(promoted.endpoints) == [b"acked"]
    assert paused.proc is not None
    paused.proc.send_signal(signal.SIGCONT)
    leader.start()  # same data: it holds the tail too, and may count again
    wait_until(lambda: _bodies(promoted.endpoints) == [b"acked", b"unacked"], 20, "the tail shown")


def test_a_restarted_leader_holds_back_a_tail_never_acknowledged(two: list[BrokerProcess]) -> None:
    """Two replicas, SYNC 2 of 2. The follower is paused, a send is stored on the leader but
    never acknowledged, the leader is killed -9 and restarted on its data: it leads again, and
    readers see only what was acknowledged (the end it kept beside its log) until the resumed
    follower holds the tail."""
    leader = _setup(two)
    (follower,) = (b for b in two if b is not leader)
    kept = leader.data_dir / "store" / ACKED_FILE
    acked_end = int(status(leader.endpoints).get("end", 0))  # type: ignore[call-overload]
    wait_until(
        lambda: kept.exists() and json.loads(kept.read_text())["end"] >= acked_end, 10, "kept"
    )
    _kill_with_a_tail(leader, follower, leader)
    leader.start()
    assert _leader(two) is leader
    # The old code made the whole log readable on open: [b"acked", b"unacked"].
    assert _bodies(leader.endpoints) == [b"acked"]
    assert follower.proc is not None
    follower.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: _bodies(leader.endpoints) == [b"acked", b"unacked"], 20, "the tail shown")


def test_a_broker_alone_shows_everything_it_holds_after_a_restart(tmp_path: Path) -> None:
    """No replication: the durable end is the acknowledged end, nothing is held on open."""
    b = BrokerProcess(tmp_path / "alone", list(FAST))
    b.start()
    try:
        with BrokerClient(b.endpoints) as c:
            c.create_topic(TOPIC, 1, "normal")
        for i in range(3):
            assert _send_raw(b.endpoints, TOPIC, f"m{i}".encode(), f"0{i}")[0] == pb.OK
        b.kill9()
        b.start()
        assert _bodies(b.endpoints) == [b"m0", b"m1", b"m2"]
    finally:
        b.stop()
