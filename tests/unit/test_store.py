"""Store unit tests: append/read, queues, tags, index, recovery, torn tails, corruption, fsync
failure, watermark, retention. Real files in tmp dirs; faults through FaultyDisk."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.conftest import SMALL, Clock
from txmq.errors import (
    CorruptRecordError,
    DiskFullError,
    MessageBodyTooLargeError,
    StoreFencedError,
)
from txmq.model import RecordDraft, TxnFlag
from txmq.store.disk import Faults, FaultyDisk, tear_tail
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


def test_torn_tail_is_truncated(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    ends = [s.append(draft(i)).physical_offset for i in range(10)]
    seg = tmp_path / "commitlog" / f"{0:020d}"
    s.close()
    (tmp_path / "abort").write_text("crashed")  # pretend the last run crashed
    (tmp_path / "checkpoint.json").write_text('{"log_offset": 0}')
    tear_tail(seg, keep_bytes=ends[9] + 30, seed=1)  # record 9 is torn
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s.recovery.truncated_bytes > 0
    assert s.queue_offsets("t", 0) == (0, 9)
    assert s.log_end_offset == ends[9]
    assert s.append(draft(99)).queue_offset == 9
    s.close()


def test_mid_log_corruption_is_reported_not_skipped(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    offsets = [s.append(draft(i)).physical_offset for i in range(10)]
    s.close()
    seg = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    data[offsets[4] + 40] ^= 0xFF  # flip a byte inside record 4
    seg.write_bytes(bytes(data))
    s = Store.open(tmp_path, SMALL, now_ms=clock)  # clean open from checkpoint: no scan
    with pytest.raises(CorruptRecordError) as info:
        s.read_at(offsets[4])
    assert info.value.offset == offsets[4]
    s.close()
    # A crash recovery that scans across it must not silently drop the valid records after it.
    (tmp_path / "abort").write_text("crashed")
    (tmp_path / "checkpoint.json").write_text('{"log_offset": 0}')
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s.recovery.salvage_file, "bytes after a mid-log corruption must be saved"
    assert (tmp_path / s.recovery.salvage_file.split(" ")[0]).exists()
    s.close()


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
