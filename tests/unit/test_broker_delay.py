"""The delay schedule over a real store with a manual clock: messages are held in the delay
topic, released into their real topic and queue in delivery-time order (not send order) once
due, each exactly once across reopen (progress saved, schedule rebuilt from the delay queue),
and a bounded number per call.

Method: a Store in tmp_path, a DelaySchedule with ``now_ms`` passed in, reads of the real
topic's consume queue."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SMALL, Clock
from txmq import limits
from txmq.broker.produce.delay import DelaySchedule, due_later
from txmq.model import DELAY_TOPIC, PROP_DELIVERY_TIMESTAMP_MS, RecordDraft
from txmq.store.store import Store


def draft(body: bytes, at_ms: int, queue_id: int = 1) -> RecordDraft:
    return RecordDraft(
        topic="real",
        queue_id=queue_id,
        body=body,
        message_id=body.decode(),
        tag="t",
        keys=("k",),
        properties={PROP_DELIVERY_TIMESTAMP_MS: str(at_ms), "user": "u"},
    )


def bodies(store: Store, queue_id: int = 1) -> list[bytes]:
    return [r.body for r in store.read_queue("real", queue_id, 0, 10_000).records]


def open_all(path: Path, clock: Clock) -> tuple[Store, DelaySchedule]:
    store = Store.open(path / "store", SMALL, now_ms=clock)
    return store, DelaySchedule(store, path / "delay.json", store.disk)


def test_due_later_compares_with_now() -> None:
    assert due_later(draft(b"a", 1_001), 1_000)
    assert not due_later(draft(b"a", 1_000), 1_000)


def test_release_in_delivery_time_order_once_due(tmp_path: Path, clock: Clock) -> None:
    store, delay = open_all(tmp_path, clock)
    t = clock.now
    for body, at in ((b"c", t + 300), (b"a", t + 100), (b"b", t + 200)):
        res = delay.schedule(draft(body, at))
        assert res.queue_offset >= 0, "held messages enter the delay topic's queue"
    assert bodies(store) == [], "nothing enters the real topic early"
    assert delay.release_due(t + 99) == []
    assert delay.release_due(t + 200) == [("real", 1)]
    assert bodies(store) == [b"a", b"b"]
    assert delay.release_due(t + 1_000) == [("real", 1)]
    assert bodies(store) == [b"a", b"b", b"c"]
    released = store.read_queue("real", 1, 0, 10).records[0]
    assert (released.message_id, released.tag, released.keys) == ("a", "t", ("k",))
    assert released.properties["user"] == "u"
    assert "REAL_TOPIC" not in released.properties
    assert store.queue_offsets(DELAY_TOPIC, 0)[1] == 3
    store.close()


def test_each_message_is_released_once_across_reopen(tmp_path: Path, clock: Clock) -> None:
    store, delay = open_all(tmp_path, clock)
    t = clock.now
    delay.schedule(draft(b"late", t + 500))
    delay.schedule(draft(b"early", t + 100))
    delay.release_due(t + 100)  # releases the second-stored message first
    store.close()
    store, delay = open_all(tmp_path, clock)
    assert delay.release_due(t + 100) == [], "a released message is not released again"
    assert delay.release_due(t + 500) == [("real", 1)]
    assert bodies(store) == [b"early", b"late"]
    store.close()
    store, delay = open_all(tmp_path, clock)
    assert delay.release_due(t + 10_000) == []
    assert delay.low == 2 and delay.done == set(), "progress compacts to a low-water mark"
    store.close()


def test_release_is_bounded_per_call(tmp_path: Path, clock: Clock) -> None:
    store, delay = open_all(tmp_path, clock)
    n = limits.DELAY_RELEASE_PER_CALL_MAX + 10
    for i in range(n):
        delay.schedule(draft(f"m{i}".encode(), clock.now + 1, queue_id=i % 2))
    delay.release_due(clock.now + 1)
    assert len(bodies(store, 0)) + len(bodies(store, 1)) == limits.DELAY_RELEASE_PER_CALL_MAX
    delay.release_due(clock.now + 1)
    assert len(bodies(store, 0)) + len(bodies(store, 1)) == n
    store.close()
