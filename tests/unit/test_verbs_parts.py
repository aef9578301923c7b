"""The operator verbs (docs/operations.md) on a broker's real parts, without a server.

Goal: the parts of each verb that a process test cannot steer into: a replica leader gives a
topic the queues its log holds records in (a follower promoted before it copied its leader's
growth of the topic); a reset the disk refuses moves no queue and breaks no lease, one that
succeeds is on disk when it returns; a dead letter picked before a rewind does not settle the
rewound offset.
Method: a real broker's parts, or a real store and consumer positions, on a temporary
directory; a full disk is an atomic write that raises ENOSPC on demand.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SMALL, Clock
from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.consume.positions import Ask, ConsumerPositions, Delivery
from txmq.broker.state.parts import Parts
from txmq.errors import InvalidReceiptHandleError
from txmq.model import MessageType, RecordDraft
from txmq.store.files.disk import OsDisk
from txmq.store.store import Store


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[Parts]:
    p = Parts(BrokerConfig(data_dir=tmp_path, port=0), now_ms=lambda: 1_700_000_000_000)
    yield p
    p.close()


def test_a_leader_gives_a_topic_the_queues_its_log_holds(parts: Parts) -> None:
    parts.topics.create("orders", 2, MessageType.NORMAL)
    parts.topics.create("quiet", 3, MessageType.NORMAL)
    # What a follower's copy of the log holds when its old leader had grown "orders" to 6.
    parts.store.append(RecordDraft(topic="orders", queue_id=5, body=b"x", message_id="m1"))
    parts.grow_topics_to_log()
    assert parts.topics.get("orders").queue_count == 6
    assert parts.topics.get("quiet").queue_count == 3, "a topic is never shrunk to its log"


class FullDisk(OsDisk):
    """Real files, with an atomic write that fails on demand (a full disk)."""

    full = False

    def write_atomic(self, path: Path, data: bytes) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        super().write_atomic(path, data)


def _two_queues(tmp_path: Path, clock: Clock, disk: OsDisk) -> tuple[Store, ConsumerPositions]:
    store = Store.open(tmp_path / "store", SMALL, now_ms=clock)
    for i in range(6):
        store.append(RecordDraft(topic="t", queue_id=i % 2, body=f"m{i}".encode()))
    positions = ConsumerPositions(
        store, tmp_path, disk, attempts_max=3, backoff_initial_ms=100, backoff_max_ms=100,
        now_ms=clock,
    )  # fmt: skip
    return store, positions


def _receive(p: ConsumerPositions, clock: Clock) -> list[Delivery]:
    ask = Ask(tags=None, batch=32, invisible_ms=60_000, now_ms=clock.now, fifo=False)
    return p.receive("g", "t", [0, 1], ask)[0]


def test_a_reset_the_disk_refuses_moves_no_queue(tmp_path: Path, clock: Clock) -> None:
    disk = FullDisk()
    store, p = _two_queues(tmp_path, clock, disk)
    got = _receive(p, clock)
    for d in got[:2]:
        p.ack("g", d.receipt_handle)
    before = p.positions()
    disk.full = True
    with pytest.raises(OSError, match="No space"):
        p.reset_group("g", "t", {0: 0, 1: 3})
    assert p.positions() == before, "neither queue moved"
    p.ack("g", got[2].receipt_handle)  # the leases are still good
    disk.full = False
    p.reset_group("g", "t", {0: 0, 1: 3})
    assert [(r[2], r[3], r[4]) for r in p.positions()] == [(0, 0, 0), (1, 3, 0)]
    with pytest.raises(InvalidReceiptHandleError, match="stale"):
        p.ack("g", got[3].receipt_handle)
    # Durable when it returned: a broker opened on this directory starts there.
    again = ConsumerPositions(store, tmp_path, attempts_max=3, now_ms=clock)
    assert [(r[2], r[3]) for r in again.positions()] == [(0, 0), (1, 3)]
    store.close()


def test_a_dead_letter_picked_before_a_rewind_is_delivered_again(
    tmp_path: Path, clock: Clock
) -> None:
    """The DLQ copy of a message being dead-lettered when a reset rewinds its queue does not
    settle the offset for the new position: the group receives it again from there."""
    store, p = _two_queues(tmp_path, clock, OsDisk())
    got = _receive(p, clock)
    first = next(d for d in got if d.record.body == b"m0")
    dead = p.take_for_dead_letter("g", first.receipt_handle)
    p.reset_group("g", "t", {0: 0})
    p.settle(dead)  # the DLQ copy became durable after the reset
    again = _receive(p, clock)
    assert b"m0" in [d.record.body for d in again]
    store.close()
