"""Full-disk fault tests of the store.

Goal: a full disk refuses writes with DiskFullError and never leaves a state that recovery reads
differently from what was acknowledged: no record lands inside the span an end-of-segment blank
claims, a rebuild from the log finds every acknowledged record, the store stays writable once
space is freed, and it closes and reopens cleanly while the disk is still full.
Method: SimDisk with a byte capacity (a write that does not fit writes what fits, then ENOSPC),
with and without fallocate support; and real files for the corruption shape the old roll left.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import Clock
from txmq import errors, limits
from txmq.cli.verify import verify
from txmq.errors import CorruptRecordError, DiskFullError, StoreFencedError
from txmq.format import record as codec
from txmq.model import RecordDraft
from txmq.store.config import StoreConfig
from txmq.store.files.disk import FileHandle, OsDisk
from txmq.store.files.sim_disk import SimDisk
from txmq.store.log.commit_log import CommitLog
from txmq.store.log.segment import segment_name
from txmq.store.store import Store

ROOT = Path("/sim/full")
SEGMENT = 64 * 1024
CONFIG = StoreConfig(segment_size_bytes=SEGMENT, body_size_max=16 * 1024, disk_watermark=1.0)
# The reserve, one segment, and a little for derived files and the checkpoint.
CAPACITY = limits.STORE_RESERVE_BYTES + SEGMENT + 24 * 1024


def draft(i: int, size: int = 9_000) -> RecordDraft:
    return RecordDraft(
        topic="t", queue_id=0, body=bytes([i % 251]) * size, message_id=f"m{i}", keys=(f"k{i}",)
    )


class NoFallocateDisk(SimDisk):
    """A file system without fallocate: nothing can be reserved, writes meet ENOSPC."""

    def open(self, path: Path) -> FileHandle:
        handle = super().open(path)
        handle.allocate = lambda offset, length: False  # type: ignore[method-assign]
        return handle


def fill_then_free(disk: SimDisk, clock: Clock, n: int) -> tuple[list[str], list[type]]:
    """Append ``n`` records; on the first refusal free the space (as an operator would) and
    carry on (reopening if the store fenced). Returns acknowledged ids and refusal types."""
    store = Store.open(ROOT, CONFIG, now_ms=clock, disk=disk)
    acked: list[str] = []
    refused: list[type] = []
    for i in range(n):
        try:
            store.append(draft(i))
            acked.append(f"m{i}")
        except (DiskFullError, StoreFencedError) as exc:
            refused.append(type(exc))
            disk.capacity = None
            if isinstance(exc, StoreFencedError):
                store.close()
                store = Store.open(ROOT, CONFIG, now_ms=clock, disk=disk)
    store.close()
    return acked, refused


@pytest.mark.parametrize(
    ("disk_kind", "capacity"),
    # Without fallocate nothing is reserved, so the disk fills inside the second segment.
    [(SimDisk, CAPACITY), (NoFallocateDisk, CAPACITY - limits.STORE_RESERVE_BYTES + 30_000)],
)
def test_full_disk_at_a_segment_roll_refuses_and_loses_nothing(
    clock: Clock, disk_kind: type[SimDisk], capacity: int
) -> None:
    disk = disk_kind(capacity=capacity)
    acked, refused = fill_then_free(disk, clock, 30)
    assert refused == [DiskFullError], "refused with DiskFullError, not fenced"
    assert len(acked) == 29
    # A rebuild from the log alone (no checkpoint) must find every acknowledged record.
    disk.remove(ROOT / "checkpoint.json")
    store = Store.open(ROOT, CONFIG, now_ms=clock, disk=disk)
    assert store.recovery.rebuilt
    got = store.read_queue("t", 0, 0, 100).records
    assert [r.message_id for r in got] == acked
    assert [r.message_id for r in store.scan(0, 100)] == acked
    store.close()


def test_refusal_carries_its_own_wire_code(clock: Clock) -> None:
    disk = SimDisk(capacity=CAPACITY)
    store = Store.open(ROOT, CONFIG, now_ms=clock, disk=disk)
    with pytest.raises(DiskFullError) as info:
        for i in range(30):
            store.append(draft(i))
    assert info.value.code == errors.CODE_MASTER_PERSISTENCE_TIMEOUT
    assert info.value.code != errors.CODE_INTERNAL_SERVER_ERROR and info.value.retriable
    store.close()


def test_the_refusal_message_says_out_of_space_or_watermark(clock: Clock) -> None:
    """Both refusals share 50401; the message tells an operator which limit was hit."""
    disk = SimDisk(capacity=64 * limits.MiB)
    store = Store.open(ROOT, CONFIG, now_ms=clock, disk=disk)
    store.append(draft(0))
    disk.capacity = disk.usage()  # full: the 100% watermark cannot be what refuses
    with pytest.raises(DiskFullError) as full:
        for i in range(1, 2_000):  # the log and its derived data use what they reserved first
            store.append(draft(i))
    assert full.value.kind == DiskFullError.OUT_OF_SPACE
    assert "disk full (out of space)" in str(full.value) and "watermark" not in str(full.value)
    store.close()
    disk = SimDisk(capacity=64 * limits.MiB)
    store = Store.open(ROOT, replace(CONFIG, disk_watermark=0.05), now_ms=clock, disk=disk)
    with pytest.raises(DiskFullError) as above:
        store.append(draft(0))
    assert above.value.kind == DiskFullError.WATERMARK
    assert "disk full (past the write watermark)" in str(above.value)
    assert above.value.code == full.value.code == errors.CODE_MASTER_PERSISTENCE_TIMEOUT
    store.close()


def test_watermark_refusal_never_overshoots(clock: Clock) -> None:
    capacity = 64 * limits.MiB
    disk = SimDisk(capacity=capacity)
    cfg = replace(CONFIG, disk_watermark=0.25)
    store = Store.open(ROOT, cfg, now_ms=clock, disk=disk)
    with pytest.raises(DiskFullError, match="watermark"):
        for i in range(10_000):
            store.append(draft(i))
    # The log and its derived files grow only by reservations checked against the watermark.
    assert disk.usage() <= 0.25 * capacity
    store.close()


def test_close_and_reopen_on_a_still_full_disk(clock: Clock) -> None:
    disk = SimDisk(capacity=CAPACITY)
    store = Store.open(ROOT, CONFIG, now_ms=clock, disk=disk)
    acked = []
    with pytest.raises(DiskFullError):
        for i in range(30):
            store.append(draft(i))
            acked.append(f"m{i}")
    assert [r.message_id for r in store.read_queue("t", 0, 0, 100).records] == acked
    store.close()
    assert not disk.exists(ROOT / "abort"), "a clean close on a full disk"
    store = Store.open(ROOT, CONFIG, now_ms=clock, disk=disk)
    assert not store.recovery.crashed
    assert [r.message_id for r in store.read_queue("t", 0, 0, 100).records] == acked
    with pytest.raises(DiskFullError):  # space reserved ahead last run may take a record
        for i in range(99, 130):
            store.append(draft(i))
    disk.capacity = None
    store.append(draft(100))
    store.close()


def old_roll_corruption(directory: Path) -> tuple[int, int]:
    """Build, on real files, what the pre-ADR-0003 roll left after ENOSPC and a restart: a
    blank header claiming the rest of a segment, part of its filler, and a record written inside
    that span afterwards. Returns (blank offset, the record inside the span)."""
    store = Store.open(directory, CONFIG, now_ms=Clock())
    for i in range(4):
        store.append(draft(i))
    blank_at = store.log_end_offset
    store.close()
    with open(directory / "commitlog" / segment_name(0), "r+b") as f:
        f.seek(blank_at)
        f.write(codec.blank(SEGMENT - blank_at) + bytes(4000))  # the filler, cut short
        inside = blank_at + codec.HEAD_SIZE + 4000
        buf = codec.encode(draft(9), queue_offset=4, store_timestamp_ms=2000)
        f.write(codec.place(buf, inside))
    # ... and the log went on in the next segment.
    buf = codec.encode(draft(10), queue_offset=5, store_timestamp_ms=3000)
    (directory / "commitlog" / segment_name(SEGMENT)).write_bytes(codec.place(buf, SEGMENT))
    return blank_at, inside


def test_records_inside_a_blank_span_are_caught_by_verify_and_open(tmp_path: Path) -> None:
    blank_at, inside = old_roll_corruption(tmp_path)
    report = verify(tmp_path)
    assert report["records"] == 5, "four before the blank, one in the next segment"
    assert f"blank at {blank_at}" in report["problems"] and str(inside) in report["problems"]
    with pytest.raises(CorruptRecordError, match="blank"):
        Store.open(tmp_path, CONFIG, now_ms=Clock())


def test_a_blank_seals_the_last_segment_after_a_refused_roll(tmp_path: Path) -> None:
    """A roll that wrote the blank but never created the next segment: the next write rolls."""
    log_dir = tmp_path / "commitlog"
    log = CommitLog(log_dir, OsDisk(), SEGMENT)
    buf = codec.encode(draft(0), queue_offset=0, store_timestamp_ms=1000)
    at = log.reserve(len(buf))
    log.write(at, codec.place(buf, at))
    end = log.end_offset
    log.close()
    with open(log_dir / segment_name(0), "r+b") as f:
        f.seek(end)
        f.write(codec.blank(SEGMENT - end))
    (tmp_path / "abort").write_bytes(b"open\n")
    store = Store.open(tmp_path, CONFIG, now_ms=Clock())
    res = store.append(draft(1))
    assert res.physical_offset == SEGMENT, "written in a new segment, not inside the blank"
    store.close()
    store = Store.open(tmp_path, CONFIG, now_ms=Clock())
    assert [r.message_id for r in store.scan(0, 10)] == ["m0", "m1"]
    store.close()


def test_retention_frees_space_on_a_full_disk(clock: Clock) -> None:
    """Retention must work exactly when the disk is full: its checkpoint may not fit, and then
    the last one bounds what it deletes."""
    disk = SimDisk(capacity=limits.STORE_RESERVE_BYTES + 4 * SEGMENT + 32 * 1024)
    cfg = replace(CONFIG, retention_ms=60_000)
    store = Store.open(ROOT, cfg, now_ms=clock, disk=disk)
    for i in range(20):  # about three segments
        store.append(draft(i))
    store.close()
    store = Store.open(ROOT, cfg, now_ms=clock, disk=disk)  # checkpointed up to here
    with pytest.raises(DiskFullError):
        for i in range(20, 60):
            store.append(draft(i))
    clock.advance(120_000)
    disk.fail_writes_after = disk.writes  # not even a checkpoint fits now
    assert store.delete_expired_segments(keep_from_offset=1 << 62) >= 2
    disk.fail_writes_after = None
    store.append(draft(99))  # room again
    store.close()


def test_the_reserve_comes_back_once_space_is_freed(clock: Clock) -> None:
    disk = SimDisk(capacity=64 * limits.MiB)
    store = Store.open(ROOT, CONFIG, now_ms=clock, disk=disk)
    assert disk.exists(ROOT / "reserve")
    assert store.release_reserve()  # as a derived write on a full disk would
    assert not disk.exists(ROOT / "reserve")
    clock.advance(1_000)  # the next usage check
    store.append(draft(1))
    assert disk.exists(ROOT / "reserve"), "held again: the next full disk finds it"
    store.close()


def queue_ids(store: Store, bound: int) -> list[str]:
    """Every message id in queue t/0, read page by page (at most ``bound`` pages)."""
    out: list[str] = []
    for _ in range(bound):
        got = store.read_queue("t", 0, len(out), 256).records
        if not got:
            break
        out.extend(r.message_id for r in got)
    return out


def test_a_full_disk_with_the_reserve_spent_refuses_and_never_fences(clock: Clock) -> None:
    """derived data (consume queue, index) is reserved before the log write
    that causes it, so a disk that stays full after the reserve is spent refuses the append;
    no derived write meets ENOSPC and fences the store."""
    disk = SimDisk(capacity=64 * limits.MiB)
    store = Store.open(ROOT, CONFIG, now_ms=clock, disk=disk)
    store.append(draft(0, size=100))
    assert store.release_reserve()
    disk.capacity = disk.usage()  # full: only space reserved beforehand is left
    acked = ["m0"]
    with pytest.raises(DiskFullError):
        for i in range(1, 20_000):
            store.append(draft(i, size=100))
            acked.append(f"m{i}")
    assert len(acked) > 100, "the space reserved ahead was used first"
    assert queue_ids(store, 200) == acked, "not fenced: reads see every acknowledged record"
    last = store.find_by_message_id(acked[-1])
    assert last is not None and last.message_id == acked[-1], "indexed as well"
    disk.capacity = None
    store.append(draft(99_999, size=100))  # room again: writable without a restart
    store.close()
    store = Store.open(ROOT, CONFIG, now_ms=clock, disk=disk)
    assert not store.recovery.crashed
    assert queue_ids(store, 200) == [*acked, "m99999"]
    store.close()


def test_watermark_counts_the_derived_bytes_of_an_append(clock: Clock) -> None:
    """records whose index entries outweigh them (32 keys, a 1-byte body)
    never take usage past the watermark, not even by one record's derived bytes."""
    capacity = 40 * limits.MiB
    disk = SimDisk(capacity=capacity)
    cfg = replace(CONFIG, disk_watermark=0.25)
    store = Store.open(ROOT, cfg, now_ms=clock, disk=disk)
    keys = tuple(chr(ord("a") + k % 26) * (1 + k // 26) for k in range(32))
    n = 0
    with pytest.raises(DiskFullError, match="watermark"):
        for n in range(20_000):
            store.append(
                RecordDraft(topic="t", queue_id=0, body=b"x", message_id=f"m{n}", keys=keys)
            )
    assert n > 100
    assert disk.usage() <= 0.25 * capacity
    store.close()
