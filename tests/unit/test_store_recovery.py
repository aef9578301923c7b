"""Recovery tests on real files: torn tails are truncated, mid-log corruption is reported with
its offset (never skipped), a torn batch disappears whole, derived data is rebuilt when the
checkpoint cannot vouch for it. Method: write with a real store, then damage the files the way
a crash or a bad disk would, and reopen."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import SMALL, Clock
from txmq.errors import CorruptRecordError
from txmq.model import RecordDraft
from txmq.store.derived import index as index_module
from txmq.store.files.disk import tear_tail
from txmq.store.store import Store

SEG0 = f"{0:020d}"


def draft(i: int, *, q: int = 0, size: int = 100) -> RecordDraft:
    return RecordDraft(
        topic="t", queue_id=q, body=bytes([i % 256]) * size, message_id=f"m{i}", keys=(f"k{i}",)
    )


def crashed_copy(tmp_path: Path, clock: Clock, n: int) -> tuple[Path, list[int]]:
    """Write n records, close, then make the directory look like a crash right after them
    with the checkpoint at the log start (so recovery scans everything)."""
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    offsets = [s.append(draft(i)).physical_offset for i in range(n)]
    s.close()
    (tmp_path / "abort").write_text("crashed")
    (tmp_path / "checkpoint.json").unlink()
    return tmp_path / "commitlog" / SEG0, offsets


def test_torn_tail_is_truncated(tmp_path: Path, clock: Clock) -> None:
    seg, offsets = crashed_copy(tmp_path, clock, 10)
    tear_tail(seg, keep_bytes=offsets[9] + 30, seed=1)  # record 9 is torn
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s.recovery.crashed and s.recovery.truncated_bytes > 0
    assert s.queue_offsets("t", 0) == (0, 9)
    assert s.log_end_offset == offsets[9]
    assert seg.stat().st_size == offsets[9], "the torn bytes are gone from the file"
    assert s.append(draft(99)).queue_offset == 9
    assert s.find_by_message_id("m9") is None and s.find_by_message_id("m99") is not None
    s.close()


def test_zero_filled_tail_is_truncated(tmp_path: Path, clock: Clock) -> None:
    seg, _offsets = crashed_copy(tmp_path, clock, 5)
    with seg.open("ab") as f:
        f.write(bytes(4096))  # a preallocated or half-flushed page of zeros
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s.recovery.truncated_bytes == 4096
    assert s.queue_offsets("t", 0) == (0, 5)
    s.close()


def test_mid_log_corruption_is_reported_not_skipped(tmp_path: Path, clock: Clock) -> None:
    seg, offsets = crashed_copy(tmp_path, clock, 10)
    data = bytearray(seg.read_bytes())
    data[offsets[4] + 40] ^= 0xFF  # flip a byte inside record 4
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError) as info:
        Store.open(tmp_path, SMALL, now_ms=clock)
    assert info.value.offset == offsets[4]
    assert seg.read_bytes() == bytes(data), "nothing was truncated"


def test_corruption_below_the_checkpoint_is_found_on_read(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    offsets = [s.append(draft(i)).physical_offset for i in range(10)]
    s.close()
    seg = tmp_path / "commitlog" / SEG0
    data = bytearray(seg.read_bytes())
    data[offsets[4] + 40] ^= 0xFF
    seg.write_bytes(bytes(data))
    s = Store.open(tmp_path, SMALL, now_ms=clock)  # clean open: trusts the checkpoint
    with pytest.raises(CorruptRecordError) as info:
        s.read_at(offsets[4])
    assert info.value.offset == offsets[4]
    # Reads through the queue skip the damaged record, report it, and keep the queue flowing.
    got = s.read_queue("t", 0, 0, 10)
    assert [r.message_id for r in got.records] == [f"m{i}" for i in range(10) if i != 4]
    assert got.next_offset == 10
    assert list(s.health.damaged) == [offsets[4]]
    s.close()


def test_torn_tail_after_clean_shutdown_is_corruption(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(5):
        s.append(draft(i))
    s.close()
    seg = tmp_path / "commitlog" / SEG0
    with seg.open("ab") as f:
        f.write(b"garbage!" * 10)
    with pytest.raises(CorruptRecordError):
        Store.open(tmp_path, SMALL, now_ms=clock)


def test_torn_batch_disappears_whole(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    s.append(draft(0))
    batch = s.append_many([draft(i) for i in range(1, 6)])
    s.close()
    (tmp_path / "abort").write_text("crashed")
    seg = tmp_path / "commitlog" / SEG0
    # The batch's first records are intact; only the last one is cut.
    with seg.open("r+b") as f:
        f.truncate(batch[-1].physical_offset + 20)
    (tmp_path / "checkpoint.json").unlink()
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s.log_end_offset == batch[0].physical_offset
    assert s.queue_offsets("t", 0) == (0, 1)
    assert s.find_by_message_id("m1") is None
    s.close()


def test_batch_cut_at_a_record_boundary_disappears_whole(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    batch = s.append_many([draft(i) for i in range(4)])
    s.close()
    (tmp_path / "abort").write_text("crashed")
    (tmp_path / "checkpoint.json").unlink()
    with (tmp_path / "commitlog" / SEG0).open("r+b") as f:
        f.truncate(batch[2].physical_offset)  # two whole records of four survive
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s.log_end_offset == 0 and s.scan(0, 10) == []
    s.close()


def test_lost_checkpoint_rebuilds_queues_and_index(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(30):
        s.append(draft(i, q=i % 3))
    s.close()
    (tmp_path / "checkpoint.json").unlink()
    shutil.rmtree(tmp_path / "consumequeue")
    (tmp_path / "index" / "index.bin").unlink()
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s.recovery.rebuilt and s.recovery.records_redispatched == 30
    assert [s.queue_offsets("t", q) for q in range(3)] == [(0, 10)] * 3
    assert s.find_by_key("t", "k17", 1)[0].message_id == "m17"
    s.close()


def test_derived_file_shorter_than_checkpoint_is_rebuilt(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(20):
        s.append(draft(i))
    s.close()
    with (tmp_path / "index" / "index.bin").open("r+b") as f:
        f.truncate(16 * 3)
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s.recovery.rebuilt
    assert s.find_by_message_id("m19") is not None
    s.close()


def test_rebuild_after_retention_starts_queues_late(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(600):
        s.append(draft(i, size=1000))
    clock.advance(SMALL.retention_ms + 1)
    assert s.delete_expired_segments(keep_from_offset=s.log_end_offset) > 0
    lo, hi = s.queue_offsets("t", 0)
    s.close()
    (tmp_path / "checkpoint.json").unlink()
    shutil.rmtree(tmp_path / "consumequeue")
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s.queue_offsets("t", 0) == (lo, hi)
    assert s.read_queue("t", 0, 0, 1).records[0].queue_offset == lo
    assert s.offset_for_timestamp("t", 0, 0) == lo
    s.close()


def test_log_shorter_than_checkpoint_is_corruption(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    offsets = [s.append(draft(i)).physical_offset for i in range(5)]
    s.close()
    with (tmp_path / "commitlog" / SEG0).open("r+b") as f:
        f.truncate(offsets[2])
    with pytest.raises(CorruptRecordError):
        Store.open(tmp_path, SMALL, now_ms=clock)


def test_crash_reopen_keeps_queue_offsets_contiguous(tmp_path: Path, clock: Clock) -> None:
    for round_no in range(3):
        s = Store.open(tmp_path, SMALL, now_ms=clock)
        for i in range(20):
            s.append(draft(round_no * 100 + i, q=i % 2))
        s.abandon()  # no close: the abort marker stays, as after kill -9
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s.recovery.crashed
    for q in range(2):
        read = s.read_queue("t", q, 0, 100)
        assert [r.queue_offset for r in read.records] == list(range(30))
    s.close()


def test_reopen_after_retention_compacts_the_index(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_module, "_COMPACT_MIN_ENTRIES", 10)
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(600):
        s.append(draft(i, size=1000))
    clock.advance(SMALL.retention_ms + 1)
    assert s.delete_expired_segments(keep_from_offset=s.log_end_offset) > 0
    s.close()
    before = (tmp_path / "index" / "index.bin").stat().st_size
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert (tmp_path / "index" / "index.bin").stat().st_size < before
    assert s.find_by_message_id("m599") is not None and s.find_by_message_id("m0") is None
    s.abandon()
    s = Store.open(tmp_path, SMALL, now_ms=clock)  # the checkpoint matches the compacted index
    assert s.recovery.crashed and not s.recovery.rebuilt
    assert s.find_by_key("t", "k598", 1)[0].message_id == "m598"
    s.close()


def test_missing_queue_directory_is_rebuilt(tmp_path: Path, clock: Clock) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(20):
        s.append(draft(i, q=i % 2))
    s.close()
    shutil.rmtree(tmp_path / "consumequeue" / "t" / "1")
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s.recovery.rebuilt
    assert s.queue_offsets("t", 1) == (0, 10)
    s.close()


def test_a_fully_expired_queue_keeps_its_offsets(tmp_path: Path, clock: Clock) -> None:
    cfg = replace(SMALL, consume_queue_entries_per_file=16)
    s = Store.open(tmp_path, cfg, now_ms=clock)
    for i in range(32):  # exactly two queue files
        s.append(draft(i, q=0, size=1000))
    for i in range(600):
        s.append(draft(i, q=1, size=1000))
    clock.advance(cfg.retention_ms + 1)
    assert s.delete_expired_segments(keep_from_offset=s.log_end_offset) > 0
    assert s.queue_offsets("t", 0) == (32, 32)
    s.close()
    s = Store.open(tmp_path, cfg, now_ms=clock)
    assert s.queue_offsets("t", 0) == (32, 32)
    assert s.append(draft(1000, q=0)).queue_offset == 32, "queue offsets never go back"
    s.close()
