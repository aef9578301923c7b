"""Log shipping at the store (txmq.store.replica.shipping): a follower's log is its leader's,
verbatim.

Method: two real stores in tmp dirs with small segments (so shipments cross segment rolls and
their end-of-segment blanks); random batches of plain, half, commit and rollback records on the
leader; the follower fetches from its own end until it has the leader's end; then every record,
queue and offset is compared, and the follower is reopened (recovery) and compared again.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SMALL, Clock
from txmq.errors import CorruptRecordError, StoreFencedError
from txmq.model import RecordDraft, TxnFlag
from txmq.store.config import StoreConfig
from txmq.store.files.sim_disk import SimDisk
from txmq.store.replica import shipping
from txmq.store.replica.hold import Hold
from txmq.store.replica.shipping import (
    DivergedError,
    append_shipped,
    durable_end,
    ship,
    written_out_end,
)
from txmq.store.store import Store

FLAGS = (TxnFlag.NORMAL, TxnFlag.NORMAL, TxnFlag.PREPARED, TxnFlag.COMMIT, TxnFlag.ROLLBACK)


def _fill(store: Store, rng: random.Random, batches: int) -> None:
    n = 0
    for _ in range(batches):
        drafts = []
        for _ in range(rng.randint(1, 6)):
            n += 1
            drafts.append(
                RecordDraft(
                    topic=rng.choice(("a", "b")), queue_id=rng.randint(0, 2),
                    body=rng.randbytes(rng.randint(0, 9_000)), flag=rng.choice(FLAGS),
                    message_id=f"m{n}", keys=(f"k{n}",), tag=rng.choice(("", "x")),
                )
            )  # fmt: skip
        store.append_many(drafts)


def _catch_up(leader: Store, follower: Store, max_bytes: int) -> int:
    for fetches in range(1, 10_000):
        s = ship(leader, follower.log_end_offset, max_bytes)
        if not s.data:
            assert s.next_offset == follower.log_end_offset
            return fetches
        assert append_shipped(follower, s.data) == s.next_offset
    raise AssertionError("the follower did not catch up in 10000 fetches")


def _same(leader: Store, follower: Store) -> None:
    a = leader.scan(0, 100_000)
    b = follower.scan(0, 100_000)
    assert [r.physical_offset for r in a] == [r.physical_offset for r in b]
    assert a == b
    assert leader.queues() == follower.queues()
    for topic, queue_id in [(t, q) for t in ("a", "b") for q in range(3)]:
        assert leader.queue_offsets(topic, queue_id) == follower.queue_offsets(topic, queue_id)
        got = follower.read_queue(topic, queue_id, 0, 10_000)
        want = leader.read_queue(topic, queue_id, 0, 10_000)
        assert got == want


@pytest.mark.parametrize(("seed", "inline"), [(1, True), (2, True), (3, False)])
def test_a_follower_holds_the_leaders_records_at_the_same_offsets(
    tmp_path: Path, seed: int, inline: bool
) -> None:
    rng = random.Random(seed)
    clock = Clock()
    leader = Store.open(tmp_path / "leader", SMALL, now_ms=clock)
    follower = Store.open(tmp_path / "follower", SMALL, now_ms=clock, inline_sync=inline)
    _fill(leader, rng, 60)
    assert len(leader.log.segments) >= 2  # the shipments cross a segment roll
    fetches = _catch_up(leader, follower, max_bytes=32 * 1024)
    assert fetches > 3
    assert follower.log_end_offset == leader.log_end_offset
    _same(leader, follower)
    # More on the leader, shipped in one go this time.
    _fill(leader, rng, 10)
    _catch_up(leader, follower, max_bytes=10 * 1024 * 1024)
    _same(leader, follower)
    # The follower's log survives a restart as any log does; it carries on from its end.
    follower.close()
    follower = Store.open(tmp_path / "follower", SMALL, now_ms=clock, inline_sync=inline)
    _same(leader, follower)
    _fill(leader, rng, 5)
    _catch_up(leader, follower, max_bytes=64 * 1024)
    _same(leader, follower)
    # A follower that becomes leader (opened as a broker's store) continues the queue offsets
    # where the old leader was.
    follower.close()
    follower = Store.open(tmp_path / "follower", SMALL, now_ms=clock)
    nxt = follower.append(RecordDraft("a", 0, b"after", message_id="new"))
    assert nxt.queue_offset == leader.queue_offsets("a", 0)[1]
    leader.close()
    follower.close()


class _SyncThreads(SimDisk):
    """SimDisk that records which thread made each fsync."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sync_threads: list[int] = []

    def on_sync(self) -> None:
        self.sync_threads.append(threading.get_ident())
        super().on_sync()


def test_an_inline_sync_follower_syncs_a_shipment_in_its_own_thread(tmp_path: Path) -> None:
    """A follower's store (``inline_sync``) makes a shipment durable in the appending thread:
    no hop to the flusher and back on the path of every SYNC acknowledgement; a
    broker's store hands it to the flusher."""
    clock = Clock()
    leader = Store.open(tmp_path / "leader", SMALL, now_ms=clock)
    leader.append_many([RecordDraft("a", 0, b"x" * 100, message_id=f"m{i}") for i in range(3)])
    data = ship(leader, 0).data
    for inline in (True, False):
        disk = _SyncThreads()
        follower = Store.open(Path("/sim/f"), SMALL, now_ms=clock, disk=disk, inline_sync=inline)
        disk.sync_threads.clear()
        assert append_shipped(follower, data) == leader.log_end_offset
        assert follower.read_queue("a", 0, 0, 10) == leader.read_queue("a", 0, 0, 10)
        assert disk.sync_threads, "the shipment was synced"
        here = {threading.get_ident()} == set(disk.sync_threads)
        assert here is inline, f"inline {inline}: synced here {here}"
        follower.close()
    leader.close()


def test_an_inline_sync_follower_whose_fsync_failed_is_fenced(tmp_path: Path) -> None:
    clock = Clock()
    leader = Store.open(tmp_path / "leader", SMALL, now_ms=clock)
    _fill(leader, random.Random(11), 2)
    disk = SimDisk()
    follower = Store.open(Path("/sim/f"), SMALL, now_ms=clock, disk=disk, inline_sync=True)
    disk.fsync_error_after = disk.syncs  # the next fsync fails
    with pytest.raises(StoreFencedError):
        append_shipped(follower, ship(leader, 0).data)
    assert follower.queue_offsets("a", 0) == (0, 0), "nothing readable that is not durable"
    with pytest.raises(StoreFencedError):  # and nothing more is written or synced
        append_shipped(follower, ship(leader, 0).data)
    follower.abandon()
    leader.close()


def test_an_inline_sync_follower_closed_before_it_synced_keeps_the_shipment(
    tmp_path: Path,
) -> None:
    """What a follower wrote but did not sync yet (it was stopping) is synced by the close, as
    a broker's store syncs what its writers left."""
    clock = Clock()
    leader = Store.open(tmp_path / "leader", SMALL, now_ms=clock)
    leader.append_many([RecordDraft("a", 0, b"y" * 50, message_id=f"m{i}") for i in range(4)])
    follower = Store.open(tmp_path / "f", SMALL, now_ms=clock, inline_sync=True)
    group, end = shipping.append_shipped_nowait(follower, ship(leader, 0).data)
    assert group is not None and end == leader.log_end_offset
    follower.close()
    follower = Store.open(tmp_path / "f", SMALL, now_ms=clock, inline_sync=True)
    assert follower.log_end_offset == end
    assert follower.read_queue("a", 0, 0, 10) == leader.read_queue("a", 0, 0, 10)
    follower.close()
    leader.close()


def test_shipments_end_on_batch_boundaries(tmp_path: Path) -> None:
    clock = Clock()
    leader = Store.open(tmp_path / "leader", SMALL, now_ms=clock)
    batch = [RecordDraft("a", 0, b"x" * 1000, message_id=f"m{i}") for i in range(5)]
    leader.append_many(batch)
    leader.append_many(batch)
    s = ship(leader, 0, max_bytes=1)  # smaller than one record: still one whole batch
    records = Store.open(tmp_path / "f", SMALL, now_ms=clock)
    append_shipped(records, s.data)
    assert len(records.scan(0, 100)) == 5
    assert s.leader_end == leader.log_end_offset
    leader.close()
    records.close()


def test_a_follower_past_the_leaders_end_has_diverged(tmp_path: Path) -> None:
    clock = Clock()
    leader = Store.open(tmp_path / "leader", SMALL, now_ms=clock)
    follower = Store.open(tmp_path / "follower", SMALL, now_ms=clock)
    follower.append(RecordDraft("a", 0, b"own tail", message_id="x"))
    with pytest.raises(DivergedError, match="past the leader's end"):
        ship(leader, follower.log_end_offset)
    leader.close()
    follower.close()


def test_a_follower_with_another_segment_size_is_refused(tmp_path: Path) -> None:
    clock = Clock()
    leader = Store.open(tmp_path / "leader", SMALL, now_ms=clock)
    other = StoreConfig(segment_size_bytes=128 * 1024, body_size_max=64 * 1024)
    follower = Store.open(tmp_path / "follower", other, now_ms=clock)
    _fill(leader, random.Random(3), 40)
    with pytest.raises(CorruptRecordError, match="segment size differs"):
        _catch_up(leader, follower, max_bytes=10 * 1024 * 1024)
    leader.close()
    follower.close()


def test_a_damaged_shipment_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    clock = Clock()
    leader = Store.open(tmp_path / "leader", SMALL, now_ms=clock)
    follower = Store.open(tmp_path / "follower", SMALL, now_ms=clock)
    leader.append(RecordDraft("a", 0, b"payload", message_id="m"))
    data = bytearray(ship(leader, 0).data)
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        append_shipped(follower, bytes(data))
    assert follower.log_end_offset == 0
    leader.close()
    follower.close()


def test_a_hold_keeps_durable_records_unread_until_released(tmp_path: Path) -> None:
    clock = Clock()
    leader = Store.open(tmp_path / "leader", SMALL, now_ms=clock)
    leader.append(RecordDraft("a", 0, b"before", message_id="m0"))
    hold = Hold(leader)
    firsts = [leader.append(RecordDraft("a", 0, b"x" * 100, message_id=f"m{i}")) for i in (1, 2)]
    # Durable (a follower can fetch them) but no reader sees them yet.
    assert durable_end(leader) == firsts[-1].physical_offset + firsts[-1].size
    assert [r.body for r in leader.read_queue("a", 0, 0, 10).records] == [b"before"]
    assert ship(leader, firsts[0].physical_offset).next_offset == durable_end(leader)
    assert hold.held == 2
    # The replicas have the first of them: it alone becomes readable, in order.
    hold.release(firsts[0].physical_offset + firsts[0].size)
    assert len(leader.read_queue("a", 0, 0, 10).records) == 2 and hold.held == 1
    hold.release(durable_end(leader))
    assert len(leader.read_queue("a", 0, 0, 10).records) == 3 and hold.held == 0
    leader.close()
    # What was held and never released is dispatched by the next open (recovery), as any
    # durable record past the checkpoint is.
    again = Store.open(tmp_path / "leader", SMALL, now_ms=clock)
    assert len(again.read_queue("a", 0, 0, 10).records) == 3
    again.close()


def test_a_hold_publishes_a_batch_the_followers_had_before_it_was_durable_here(
    tmp_path: Path,
) -> None:
    """A leader ships what is written out, before its own fsync: a follower's fsync can finish
    first and say so. The batch stays held only until it is durable here, then is readable."""
    clock = Clock()
    leader = Store.open(tmp_path / "leader", SMALL, now_ms=clock)
    hold = Hold(leader)
    first = leader.append(RecordDraft("a", 0, b"x" * 100, message_id="m1"))
    assert written_out_end(leader) == durable_end(leader) == first.physical_offset + first.size
    assert hold.releasable(durable_end(leader), most=5) == 1
    # The followers report durable bytes past ours (the next batch, not yet synced here).
    hold.release(durable_end(leader) + 10_000)
    assert hold.held == 0 and len(leader.read_queue("a", 0, 0, 10).records) == 1
    second = leader.append(RecordDraft("a", 0, b"y" * 100, message_id="m2"))
    assert second.physical_offset + second.size <= first.physical_offset + first.size + 10_000
    # Kept when durable, and published at once: the followers had it already.
    assert hold.held == 0 and len(leader.read_queue("a", 0, 0, 10).records) == 2
    third = leader.append(RecordDraft("a", 0, b"z" * 20_000, message_id="m3"))
    assert hold.held == 1 and hold.releasable(durable_end(leader), most=5) == 1
    assert hold.releasable(third.physical_offset, most=5) == 0
    leader.close()


def test_a_one_read_shipment_is_what_the_scan_ships(tmp_path: Path) -> None:
    """``ship``'s one-read path (a round's few records) against its scan path, for every range
    of up to five batches: the same shipment where it applies; it declines ranges that leave a
    segment (the scan ships those). The two paths are called directly: store/replica/shipping.py is
    compiled (txmq/compiled.py), so a patched module attribute would not reach ``ship``."""
    clock = Clock()
    leader = Store.open(tmp_path / "leader", SMALL, now_ms=clock)
    rng = random.Random(5)
    ends = [0]
    for _ in range(40):
        _fill(leader, rng, 1)
        ends.append(leader.log_end_offset)
    assert len(leader.log.segments) >= 2
    quick = {}
    for i, start in enumerate(ends[:-1]):
        for end in ends[i + 1 : i + 6]:
            quick[start, end] = shipping._ship_in_one_read(leader, start, end, 1 << 20)
    taken = 0
    for (start, end), got in quick.items():
        if got is not None:
            taken += 1
            assert got == shipping._ship_scanning(leader, start, end, 1 << 20)
    assert 0 < taken < len(quick), "both paths are exercised"
    leader.close()


def test_a_damaged_record_on_the_leader_is_not_shipped(tmp_path: Path) -> None:
    clock = Clock()
    leader = Store.open(tmp_path / "leader", SMALL, now_ms=clock)
    leader.append_many([RecordDraft("a", 0, b"x" * 500, message_id=f"m{i}") for i in range(3)])
    (segment,) = sorted((tmp_path / "leader").rglob("commitlog/*"))
    with segment.open("r+b") as f:  # one byte of the second record's body, in place
        f.seek(leader.scan(0, 10)[1].physical_offset + leader.scan(0, 10)[1].size - 300)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptRecordError):
        ship(leader, 0)
    leader.close()
