"""Consumer positions over a real store in a temp directory: the positions file round-trips,
is replaced atomically, and after a reopen (a broker restart) acked messages stay acked while
unacked in-flight ones are delivered again with their attempt count carried on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import SMALL, Clock
from txmq import limits
from txmq.broker.consume.book import Position, QueueKey
from txmq.broker.consume.positions import FILE_NAME, Ask, ConsumerPositions, Delivery, OffsetFile
from txmq.errors import ConfigError, InvalidReceiptHandleError
from txmq.model import PROP_MESSAGE_GROUP, RecordDraft
from txmq.store.store import Store


def test_offset_file_round_trip_with_ranges(tmp_path: Path) -> None:
    f = OffsetFile(tmp_path / FILE_NAME)
    assert f.load() == {}
    k1, k2 = QueueKey("g", "t", 0), QueueKey("g\nx", "t/é", 3)
    p1 = Position(5, (7, 8, 9, 10, 12), ((6, 2), (11, 1)))
    f.save([(k1, p1), (k2, Position(0))])
    raw = json.loads((tmp_path / FILE_NAME).read_text())
    assert raw["positions"][0]["settled"] == [[7, 10], [12, 12]]
    assert OffsetFile(tmp_path / FILE_NAME).load() == {k1: p1, k2: Position(0)}
    assert not (tmp_path / (FILE_NAME + ".tmp")).exists()


def test_offset_file_refuses_a_damaged_file(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text('{"version": 1, "positions": [{"group": 1')
    with pytest.raises(ConfigError, match="unreadable"):
        OffsetFile(tmp_path / FILE_NAME).load()


def _store(tmp_path: Path, clock: Clock) -> Store:
    return Store.open(tmp_path / "store", SMALL, now_ms=clock)


def _fill(store: Store, n: int, group: str = "") -> None:
    props = {PROP_MESSAGE_GROUP: group} if group else {}
    for i in range(n):
        store.append(RecordDraft(topic="t", queue_id=0, body=f"m{i}".encode(), properties=props))


def _positions(store: Store, tmp_path: Path, clock: Clock) -> ConsumerPositions:
    return ConsumerPositions(
        store, tmp_path, attempts_max=3, backoff_initial_ms=100, backoff_max_ms=100, now_ms=clock
    )


def _receive(
    p: ConsumerPositions, clock: Clock, batch: int = 32, fifo: bool = False
) -> list[Delivery]:
    ask = Ask(tags=None, batch=batch, invisible_ms=1_000, now_ms=clock.now, fifo=fifo)
    got, _dead = p.receive("g", "t", [0], ask)
    return got


def test_positions_survive_reopen_and_unacked_are_redelivered(tmp_path: Path, clock: Clock) -> None:
    store = _store(tmp_path, clock)
    _fill(store, 5)
    p = _positions(store, tmp_path, clock)
    got = _receive(p, clock)
    assert [d.record.body for d in got] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    for d in (got[0], got[2], got[4]):
        p.ack("g", d.receipt_handle)
    p.save()
    store.close()

    store = _store(tmp_path, clock)
    p2 = _positions(store, tmp_path, clock)
    assert p2.offset("g", "t", 0) == 1
    with pytest.raises(InvalidReceiptHandleError):
        p2.ack("g", got[1].receipt_handle)  # a handle from before the restart
    again = _receive(p2, clock)
    assert [(d.record.body, d.attempt) for d in again] == [(b"m1", 2), (b"m3", 2)]
    for d in again:
        p2.ack("g", d.receipt_handle)
    assert p2.offset("g", "t", 0) == 5
    assert _receive(p2, clock) == []
    store.close()


def test_save_is_skipped_when_nothing_changed_and_forced_at_close(
    tmp_path: Path, clock: Clock
) -> None:
    store = _store(tmp_path, clock)
    p = _positions(store, tmp_path, clock)
    p.save()
    assert not (tmp_path / FILE_NAME).exists()
    p.save(force=True)
    assert (tmp_path / FILE_NAME).exists()
    store.close()


def test_dead_letter_flow_and_update_offset(tmp_path: Path, clock: Clock) -> None:
    store = _store(tmp_path, clock)
    _fill(store, 3)
    p = _positions(store, tmp_path, clock)
    for attempt in (1, 2, 3):
        (d,) = _receive(p, clock, batch=1)
        assert (d.record.body, d.attempt) == (b"m0", attempt)
        clock.advance(1_000)
    ask = Ask(tags=None, batch=1, invisible_ms=1_000, now_ms=clock.now, fifo=False)
    got, dead = p.receive("g", "t", [0], ask)
    assert [(x.record.body, x.attempts) for x in dead] == [(b"m0", 3)]
    assert [x.record.body for x in got] == [b"m1"]
    p.settle(dead[0])
    p.ack("g", got[0].receipt_handle)
    assert p.offset("g", "t", 0) == 2
    p.set_offset("g", "t", 0, 0)
    assert [d.record.body for d in _receive(p, clock)] == [b"m0", b"m1", b"m2"]
    assert p.positions() == [("g", "t", 0, 0, 3)]
    store.close()


def test_fifo_over_the_store_delivers_a_group_in_order(tmp_path: Path, clock: Clock) -> None:
    store = _store(tmp_path, clock)
    _fill(store, 4, group="order-1")
    p = _positions(store, tmp_path, clock)
    bodies = []
    for _ in range(10):
        got = _receive(p, clock, fifo=True)
        assert len(got) <= 1
        for d in got:
            bodies.append(d.record.body)
            p.ack("g", d.receipt_handle)
    assert bodies == [b"m0", b"m1", b"m2", b"m3"]
    store.close()


def test_receive_recent_only_near_the_end_of_a_known_queue(tmp_path: Path, clock: Clock) -> None:
    """What the broker serves on its event loop: a receive of a group that already has a
    position and is at most RECEIVE_ON_LOOP_LAG_MAX entries behind the queue's end; otherwise
    None, with nothing done (the broker then runs ``receive`` in its executor)."""
    store = _store(tmp_path, clock)
    p = _positions(store, tmp_path, clock)
    _fill(store, 3)

    def recent() -> list[Delivery] | None:
        ask = Ask(tags=None, batch=32, invisible_ms=1_000, now_ms=clock.now, fifo=False)
        done = p.receive_recent("g", "t", [0], ask)
        return None if done is None else done[0]

    assert recent() is None, "a group new to the queue opens in a thread"
    assert p.positions() == []
    assert len(_receive(p, clock)) == 3
    assert recent() == []
    _fill(store, limits.RECEIVE_ON_LOOP_LAG_MAX - 3)
    got = recent()
    assert got is not None and len(got) == 32, "exactly the bound behind its ack offset"
    _fill(store, 1)
    assert recent() is None, "one past the bound: cold records may follow"
    store.close()


def test_an_idle_queue_is_skipped_but_due_and_new_messages_are_not(
    tmp_path: Path, clock: Clock
) -> None:
    """A receive skips a queue with nothing new, held or due without looking further into it
    (not even its offsets); a lease that falls due, or a record appended after, is still
    delivered from it."""
    looked: list[tuple[str, int]] = []

    class Looking(Store):
        def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
            looked.append((topic, queue_id))
            return super().queue_offsets(topic, queue_id)

    store = Looking.open(tmp_path / "store", SMALL, now_ms=clock)
    _fill(store, 2)
    p = _positions(store, tmp_path, clock)
    first = _receive(p, clock)
    assert [d.record.body for d in first] == [b"m0", b"m1"] and looked, "a first look reads"
    p.ack("g", first[0].receipt_handle)
    looked.clear()
    assert _receive(p, clock) == [] and looked == [], "nothing due, nothing new: skipped"
    clock.advance(1_000)  # m1's lease expires: due again
    assert [(d.record.body, d.attempt) for d in _receive(p, clock)] == [(b"m1", 2)]
    store.append(RecordDraft(topic="t", queue_id=0, body=b"new"))
    assert [d.record.body for d in _receive(p, clock)] == [b"new"]
    store.close()


def test_receive_recent_serves_every_queue_with_a_book_however_it_came(
    tmp_path: Path, clock: Clock
) -> None:
    """On the loop only when each queue asked for has this group's book: after a reopen (books
    restored from the file) and after an UpdateOffset (a reset) as after a first receive; a
    queue of the list without one sends the whole receive to the executor."""
    store = _store(tmp_path, clock)
    for qid in (0, 1):
        store.append(RecordDraft(topic="t", queue_id=qid, body=f"q{qid}".encode()))
    p = _positions(store, tmp_path, clock)

    def recent(queues: list[int]) -> list[bytes] | None:
        ask = Ask(tags=None, batch=32, invisible_ms=1_000, now_ms=clock.now, fifo=False)
        done = p.receive_recent("g", "t", queues, ask)
        return None if done is None else [d.record.body for d in done[0]]

    assert [d.record.body for d in _receive(p, clock)] == [b"q0"]  # queue 0's book
    assert recent([0, 1]) is None and recent([1]) is None, "queue 1 has no book yet"
    assert recent([0]) == []
    p.set_offset("g", "t", 1, 0)
    assert recent([1, 0]) == [b"q1"]
    p.save(force=True)
    p = _positions(store, tmp_path, clock)  # a restart: the books come from the file
    assert recent([0, 1]) == [b"q0", b"q1"], "unacked: delivered again, on the loop"
    assert recent([0, 2]) is None
    store.close()


def test_a_deleted_group_is_gone_from_the_file_and_its_handles_are_stale(
    tmp_path: Path, clock: Clock
) -> None:
    store = _store(tmp_path, clock)
    _fill(store, 4)
    p = _positions(store, tmp_path, clock)
    got = _receive(p, clock)
    p.ack("g", got[0].receipt_handle)
    ask = Ask(tags=None, batch=32, invisible_ms=1_000, now_ms=clock.now, fifo=False)
    p.receive("other", "t", [0], ask)
    p.save()
    assert p.delete_group("g") == [("t", 0, 1, 3)]
    saved = json.loads((tmp_path / FILE_NAME).read_bytes())["positions"]
    assert [r["group"] for r in saved] == ["other"], "written when delete_group returned"
    with pytest.raises(InvalidReceiptHandleError):
        p.ack("g", got[1].receipt_handle)
    assert p.delete_group("g") == [] and [r[0] for r in p.positions()] == ["other"]
    # The name again starts as a new group does: at the earliest retained message.
    assert [d.record.body for d in _receive(p, clock)] == [b"m0", b"m1", b"m2", b"m3"]
    store.close()
    store = _store(tmp_path, clock)
    assert {r[0] for r in _positions(store, tmp_path, clock).positions()} == {"other"}
    store.close()
