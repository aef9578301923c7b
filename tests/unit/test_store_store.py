"""Store façade tests: append/read, queues, tags, index, visibility, reopen, fsync fencing,
watermark, retention, batches, ASYNC mode. Real files in tmp dirs; faults through FaultyDisk.
Recovery cases (torn tails, mid-log corruption, rebuilds) are in test_store_recovery.py."""

from __future__ import annotations

import itertools
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import SMALL, Clock
from txmq import limits
from txmq.errors import (
    BadRequestError,
    CorruptRecordError,
    DiskFullError,
    MessageBodyTooLargeError,
    OffsetNotFoundError,
    StoreClosedError,
    StoreFencedError,
)
from txmq.format import record as codec
from txmq.model import HALF_TOPIC, OP_TOPIC, FlushMode, QueueRead, RecordDraft, TxnFlag
from txmq.store.files.disk import Faults, FaultyDisk
from txmq.store.log.segment import segment_name
from txmq.store.store import Store


def draft(i: int, *, topic: str = "t", q: int = 0, tag: str = "", size: int = 100) -> RecordDraft:
    return RecordDraft(
        topic=topic,
        queue_id=q,
        body=bytes([i % 256]) * size,
        tag=tag,
        message_id=f"m{i}",
        keys=(f"k{i}",),
    )


def test_append_read_roundtrip(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    results = [s.append(draft(i)) for i in range(10)]
    assert [r.queue_offset for r in results] == list(range(10))
    read = s.read_queue("t", 0, 0, 100)
    assert [r.message_id for r in read.records] == [f"m{i}" for i in range(10)]
    assert read.next_offset == 10
    assert s.read_at(results[3].physical_offset).body == bytes([3]) * 100
    assert s.find_by_message_id("m7") is not None
    assert s.find_by_key("t", "k5", 5)[0].message_id == "m5"
    assert s.find_by_key("other", "k5", 5) == []
    s.close()


def test_prepared_and_rollback_records_never_enter_a_queue(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    half = s.append(RecordDraft(topic="t", queue_id=0, body=b"h", flag=TxnFlag.PREPARED))
    s.append(
        RecordDraft(
            topic="t",
            queue_id=0,
            body=b"r",
            flag=TxnFlag.ROLLBACK,
            prepared_offset=half.physical_offset,
        )
    )
    s.append(
        RecordDraft(
            topic="t",
            queue_id=0,
            body=b"c",
            flag=TxnFlag.COMMIT,
            prepared_offset=half.physical_offset,
        )
    )
    assert half.queue_offset == -1
    assert [r.body for r in s.read_queue("t", 0, 0, 10).records] == [b"c"]
    assert len(s.scan(0, 10)) == 3
    s.close()


def test_tag_filter_makes_progress(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(20):
        s.append(draft(i, tag="A" if i % 5 == 0 else "B"))
    read = s.read_queue("t", 0, 0, 100, tags=frozenset({"A"}))
    assert [r.message_id for r in read.records] == ["m0", "m5", "m10", "m15"]
    assert read.next_offset == 20
    s.close()


def test_body_too_large_is_refused_and_nothing_is_written(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    with pytest.raises(MessageBodyTooLargeError):
        s.append(draft(1, size=SMALL.body_size_max + 1))
    assert s.log_end_offset == 0
    s.close()


def test_segments_roll_and_reopen_cleanly(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(600):
        s.append(draft(i, q=i % 3, size=1000))
    assert len(s.log.segments) > 2
    end = s.log_end_offset
    s.close()
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert not s.recovery.crashed
    assert s.log_end_offset == end
    assert sum(s.queue_offsets("t", q)[1] for q in range(3)) == 600
    assert len(s.scan(0, 1000)) == 600
    s.close()


def test_crash_recovery_redispatches_past_checkpoint(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(50):
        s.append(draft(i))
    # No close: the abort marker stays, as after kill -9.
    s2 = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s2.recovery.crashed
    assert s2.queue_offsets("t", 0) == (0, 50)
    assert s2.find_by_message_id("m49") is not None
    s2.close()


def test_failed_fsync_fences_the_store(tmp_path: Path, clock: Clock) -> None:
    faults = Faults(fsync_error_after=3)
    s = Store.open(tmp_path, SMALL, now_ms=clock, disk=FaultyDisk(faults))
    with pytest.raises(StoreFencedError):
        for i in range(10):
            s.append(draft(i))
    with pytest.raises(StoreFencedError):
        s.append(draft(100))
    s.close()


def test_disk_watermark_refuses_writes(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock, disk=FaultyDisk(Faults(used_ratio=0.95)))
    with pytest.raises(DiskFullError):
        s.append(draft(1))
    s.close()


def test_group_commit_with_concurrent_writers(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(50):
                s.append(draft(n * 1000 + i, q=n % 2))
        except BaseException as exc:  # recorded and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert s.queue_offsets("t", 0)[1] + s.queue_offsets("t", 1)[1] == 400
    offsets = [r.queue_offset for r in s.read_queue("t", 0, 0, 1000).records]
    assert offsets == list(range(len(offsets)))
    s.close()


def test_offset_for_timestamp(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(10):
        clock.advance(10)
        s.append(draft(i))
    first = s.read_queue("t", 0, 0, 1).records[0].store_timestamp_ms
    assert s.offset_for_timestamp("t", 0, first + 25) == 3
    assert s.offset_for_timestamp("t", 0, 0) == 0
    assert s.offset_for_timestamp("t", 0, first + 10_000) == 10
    s.close()


def test_retention_deletes_old_segments_but_not_needed_ones(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(600):
        s.append(draft(i, size=1000))
    segments = len(s.log.segments)
    clock.advance(SMALL.retention_ms + 1)
    assert s.delete_expired_segments(keep_from_offset=0) == 0  # a pending txn needs them
    deleted = s.delete_expired_segments(keep_from_offset=s.log_end_offset)
    assert deleted == segments - 1
    lo, hi = s.queue_offsets("t", 0)
    assert lo > 0 and hi == 600
    assert s.read_queue("t", 0, 0, 5).records[0].queue_offset == lo
    s.close()


def test_batch_is_one_write_with_contiguous_offsets(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    results = s.append_many([draft(i, q=i % 2) for i in range(6)])
    assert [r.queue_offset for r in results] == [0, 0, 1, 1, 2, 2]
    offsets = [r.physical_offset for r in results]
    assert offsets == sorted(offsets)
    assert all(
        a.physical_offset + a.size == b.physical_offset for a, b in itertools.pairwise(results)
    )
    assert s.append_many([]) == []
    s.close()


def test_batch_larger_than_a_segment_is_refused(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    with pytest.raises(BadRequestError):
        s.append_many([draft(i, size=60_000) for i in range(5)])
    assert s.log_end_offset == 0
    assert s.append(draft(1)).queue_offset == 0, "a refused batch consumes no queue offsets"
    s.close()


def test_system_topics_enter_queues(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    s.append(RecordDraft(topic=OP_TOPIC, queue_id=0, body=b"op"))
    s.append(RecordDraft(topic=HALF_TOPIC, queue_id=0, body=b"h", flag=TxnFlag.PREPARED))
    assert s.queue_offsets(OP_TOPIC, 0) == (0, 1)
    assert s.queue_offsets(HALF_TOPIC, 0) == (0, 0)
    assert s.queues() == {OP_TOPIC: 1}
    s.close()


def test_read_at_and_scan_see_only_visible_records(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    r = s.append(draft(1))
    with pytest.raises(OffsetNotFoundError):
        s.read_at(s.log_end_offset)
    with pytest.raises(OffsetNotFoundError):
        s.read_at(r.physical_offset + 1_000_000)
    assert [x.message_id for x in s.scan(0, 10)] == ["m1"]
    assert s.scan(0, 0) == []
    s.close()
    with pytest.raises(StoreClosedError):
        s.append(draft(2))
    with pytest.raises(StoreClosedError):
        s.read_at(0)


def test_store_timestamps_never_decrease(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    first = s.append(draft(1)).store_timestamp_ms
    clock.now -= 5_000  # the injected clock steps back
    assert s.append(draft(2)).store_timestamp_ms == first
    s.close()


def test_find_by_key_is_bounded_and_newest_first(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(10):
        s.append(RecordDraft(topic="t", queue_id=0, body=b"x", message_id=f"m{i}", keys=("k",)))
    found = s.find_by_key("t", "k", 3)
    assert [r.message_id for r in found] == ["m9", "m8", "m7"]
    assert s.find_by_message_id("nope") is None
    s.close()


def test_read_queue_from_past_the_end_and_unknown_queue(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    s.append(draft(1))
    read = s.read_queue("t", 0, 5, 10)
    assert read.records == () and read.next_offset == 1 and read.max_offset == 1
    assert s.read_queue("nope", 0, 3, 10) == QueueRead((), 3, 0, 0)
    s.close()


def test_tag_filter_scan_is_bounded(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    n = limits.READ_SCAN_ENTRIES_MAX // 16
    s.append_many([draft(i, tag="B", size=1) for i in range(n)])
    read = s.read_queue("t", 0, 0, 10, tags=frozenset({"A"}))
    assert read.records == () and read.next_offset == n
    s.close()


def test_async_mode_is_readable_at_once_and_durable_after_flush(
    tmp_path: Path, clock: Clock
) -> None:
    cfg = replace(SMALL, flush_mode=FlushMode.ASYNC, flush_interval_ms=50)
    s = Store.open(tmp_path, cfg, now_ms=clock)
    s.append(draft(1))
    assert s.read_queue("t", 0, 0, 10).records[0].message_id == "m1"
    s.flush()
    s.close()
    s = Store.open(tmp_path, cfg, now_ms=clock)
    assert s.queue_offsets("t", 0) == (0, 1)
    s.close()


def test_fsync_failure_while_rolling_fences(tmp_path: Path, clock: Clock) -> None:
    faults = Faults()
    s = Store.open(tmp_path, SMALL, now_ms=clock, disk=FaultyDisk(faults))
    s.append(draft(0, size=1000))
    faults.fsync_error_after = faults.syncs  # every sync from now on fails
    with pytest.raises(StoreFencedError):
        for i in range(400):
            s.append(draft(i, size=1000))
    assert s.fenced
    s.close()
    assert (tmp_path / "abort").exists(), "a fenced store keeps its abort marker"
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s.recovery.crashed and s.queue_offsets("t", 0)[1] >= 1
    s.close()


def test_read_queue_bytes_are_verified_records_within_the_byte_budget(
    tmp_path: Path, clock: Clock
) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(20):
        s.append(draft(i, tag="a" if i % 2 else ""))
    got = s.read_queue_bytes("t", 0, 3, 100, max_bytes=10**6)
    records = [rec for buf in got.records for rec in codec.split(buf)]
    assert [r.message_id for r in records] == [f"m{i}" for i in range(3, 20)]
    assert records == list(s.read_queue("t", 0, 3, 100).records)
    assert (got.next_offset, got.min_offset, got.max_offset) == (20, 0, 20)
    three = sum(len(b) for b in s.read_queue_bytes("t", 0, 0, 3, max_bytes=10**6).records)
    # The budget stops before the record that would pass it; one record is always served.
    assert len(s.read_queue_bytes("t", 0, 0, 100, max_bytes=three).records) == 3
    assert len(s.read_queue_bytes("t", 0, 0, 100, max_bytes=three - 1).records) == 2
    tiny = s.read_queue_bytes("t", 0, 5, 100, max_bytes=1)
    assert len(tiny.records) == 1 and tiny.next_offset == 6
    assert s.read_queue_bytes("t", 0, 0, 4, max_bytes=10**6).next_offset == 4
    assert s.read_queue_bytes("nope", 0, 0, 4, max_bytes=10**6).records == []
    s.close()


def test_bulk_reads_share_preads_across_gaps_and_stop_at_segments(
    tmp_path: Path, clock: Clock
) -> None:
    # Four queues interleaved over several small segments: one queue's records have gaps
    # (read through in one pread) and runs that must break at each segment's end.
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(0, 800, 8):
        s.append_many([draft(i + k, q=k % 4, size=900) for k in range(8)])
    assert len(s.log.segments) >= 3
    for q in range(4):
        got = s.read_queue_bytes("t", q, 0, 1000, max_bytes=10**8)
        records = [rec for buf in got.records for rec in codec.split(buf)]
        assert records == list(s.read_queue("t", q, 0, 1000).records)
        assert [r.message_id for r in records] == [f"m{i}" for i in range(q, 800, 4)]
    # A record altered inside a run (behind the store's back) is still caught on its own: it
    # is left out and reported, and the rest of the queue still comes.
    victim = s.read_queue("t", 2, 10, 1).records[0]
    seg = next(g for g in s.log.segments if g.start <= victim.physical_offset < g.start + g.used)
    with (tmp_path / "commitlog" / segment_name(seg.start)).open("r+b") as f:
        f.seek(victim.physical_offset - seg.start + 100)
        f.write(b"\xff")
    got = s.read_queue_bytes("t", 2, 0, 1000, max_bytes=10**8)
    ids = [rec.message_id for buf in got.records for rec in codec.split(buf)]
    assert ids == [f"m{i}" for i in range(2, 800, 4) if i != int(victim.message_id[1:])]
    assert "CRC" in s.health.damaged[victim.physical_offset]
    s.abandon()


def test_split_refuses_cut_or_altered_records(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(3):
        s.append(draft(i))
    blob = b"".join(s.read_queue_bytes("t", 0, 0, 10, max_bytes=10**6).records)
    assert [r.message_id for r in codec.split(blob)] == ["m0", "m1", "m2"]
    for bad in (blob[:-1], blob + b"\0" * 10, blob[:40] + b"X" + blob[41:]):
        with pytest.raises(CorruptRecordError):
            list(codec.split(bad))
    s.close()
