"""Bit rot and damaged derived data while the store runs.

Goal: a damaged commit-log record below the checkpoint is reported (health, log line) and
skipped, and the rest of its queue keeps flowing; a zeroed or altered consume-queue entry never
makes a reader skip a message or get another record in its place: the queue is rebuilt from the
log; the background scrub finds both kinds of damage before any reader does.
Method: real files in tmp dirs, bytes flipped or entries rewritten behind the store's back
between a clean close and the next open (which trusts its checkpoint).
"""

from __future__ import annotations

import struct
from pathlib import Path

from tests.conftest import SMALL, Clock
from txmq import limits
from txmq.cli.verify import verify
from txmq.model import RecordDraft
from txmq.store.derived.consume_queue import ENTRY
from txmq.store.log.segment import segment_name
from txmq.store.store import Store


def draft(i: int, q: int = 0) -> RecordDraft:
    return RecordDraft(
        topic="t", queue_id=q, body=bytes([i % 251]) * 300, message_id=f"m{i}", keys=(f"k{i}",)
    )


def fill(path: Path, clock: Clock, n: int = 12) -> list[int]:
    """``n`` records alternating between queues 0 and 1; returns their physical offsets."""
    s = Store.open(path, SMALL, now_ms=clock)
    offsets = [s.append(draft(i, q=i % 2)).physical_offset for i in range(n)]
    s.close()
    return offsets


def flip(path: Path, offset: int) -> None:
    seg = path / "commitlog" / segment_name(0)
    with seg.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x10]))


def set_entry(path: Path, queue: int, queue_offset: int, entry: tuple[int, int, int]) -> None:
    cq = path / "consumequeue" / "t" / str(queue) / segment_name(0)
    with cq.open("r+b") as f:
        f.seek(queue_offset * ENTRY.size)
        f.write(ENTRY.pack(*entry))


def ids(store: Store, queue: int) -> list[str]:
    return [r.message_id for r in store.read_queue("t", queue, 0, 100).records]


def test_a_flipped_body_byte_is_reported_and_skipped_not_a_stall(
    tmp_path: Path, clock: Clock
) -> None:
    offsets = fill(tmp_path, clock)
    flip(tmp_path, offsets[4] + 200)  # inside m4's body, below the checkpoint
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert ids(s, 0) == ["m0", "m2", "m6", "m8", "m10"]
    assert ids(s, 1) == ["m1", "m3", "m5", "m7", "m9", "m11"]
    report = s.health.report()
    assert report["damaged_records"] == 1 and report["damaged"][0]["offset"] == offsets[4]
    raw = s.read_queue_bytes("t", 0, 0, 100, max_bytes=1 << 20)
    assert len(raw.records) == 5 and raw.next_offset == 6
    s.close()


def test_the_scrub_finds_damage_before_any_reader(tmp_path: Path, clock: Clock) -> None:
    offsets = fill(tmp_path, clock)
    flip(tmp_path, offsets[7] + 150)
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s.health.damaged_total == 0, "the open trusts the checkpoint below it"
    s.scrub_step()
    assert list(s.health.damaged) == [offsets[7]]
    assert ids(s, 1) == ["m1", "m3", "m5", "m9", "m11"]
    s.close()
    report = verify(tmp_path)
    assert str(offsets[7]) in report["problems"] and report["records"] == 11


def test_a_zeroed_queue_entry_is_rebuilt_not_misdelivered(tmp_path: Path, clock: Clock) -> None:
    fill(tmp_path, clock)
    set_entry(tmp_path, 0, 3, (0, 0, 0))
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert ids(s, 0) == ["m0", "m2", "m4", "m6", "m8", "m10"]
    assert s.health.queues_rebuilt == 1 and s.health.entries_repaired == 1
    assert s.health.damaged_total == 0, "the log is fine"
    s.close()
    assert "disagrees" not in verify(tmp_path)["problems"], "the rebuild reached the disk"


def test_an_entry_pointing_at_another_record_is_rebuilt(tmp_path: Path, clock: Clock) -> None:
    offsets = fill(tmp_path, clock)
    # Queue 0's offset 2 (m4) now points at m5 of queue 1: same size, a valid record.
    set_entry(tmp_path, 0, 2, (offsets[5], offsets[6] - offsets[5], 0))
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    raw = s.read_queue_bytes("t", 0, 0, 100, max_bytes=1 << 20)
    got = [bytes(b)[-300:] for b in raw.records]
    assert got == [bytes([i]) * 300 for i in (0, 2, 4, 6, 8, 10)]
    assert s.health.queues_rebuilt == 1
    s.close()


def test_the_scrub_repairs_a_queue_before_any_reader(tmp_path: Path, clock: Clock) -> None:
    offsets = fill(tmp_path, clock)
    set_entry(tmp_path, 1, 1, (offsets[0], offsets[1] - offsets[0], 0))
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s.scrub_step() == [("t", 1)]
    cq = tmp_path / "consumequeue" / "t" / "1" / segment_name(0)
    phys, _size, _h = struct.unpack_from(">QIQ", cq.read_bytes(), ENTRY.size)
    assert phys == offsets[3]
    assert ids(s, 1) == ["m1", "m3", "m5", "m7", "m9", "m11"]
    s.close()


def test_verify_reports_every_damaged_record_not_only_the_first(
    tmp_path: Path, clock: Clock
) -> None:
    offsets = fill(tmp_path, clock)
    flip(tmp_path, offsets[2] + 100)
    flip(tmp_path, offsets[9] + 100)
    report = verify(tmp_path)
    assert str(offsets[2]) in report["problems"] and str(offsets[9]) in report["problems"]
    assert report["records"] == 10


def test_a_damaged_message_index_is_rebuilt_by_the_scrub(tmp_path: Path, clock: Clock) -> None:
    offsets = fill(tmp_path, clock)
    index = tmp_path / "index" / "index.bin"
    data = bytearray(index.read_bytes())
    data[16 * 5 + 9] ^= 0x40  # the offset of one entry: m2's id or key now points elsewhere
    index.write_bytes(bytes(data))
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    lost = [i for i in range(12) if s.find_by_message_id(f"m{i}") is None] + [
        i for i in range(12) if not s.find_by_key("t", f"k{i}", 5)
    ]
    assert lost, "the damage hides a record from lookups"
    s.scrub_step()
    assert s.health.index_rebuilds == 1
    for i in range(12):
        found = s.find_by_message_id(f"m{i}")
        assert found is not None and found.physical_offset == offsets[i]
        assert [r.message_id for r in s.find_by_key("t", f"k{i}", 5)] == [f"m{i}"]
    s.close()
    s = Store.open(tmp_path, SMALL, now_ms=clock)  # the checkpoint counts the new file
    assert s.find_by_message_id("m2") is not None and not s.recovery.rebuilt
    s.close()
    assert "missing from the index" not in verify(tmp_path)["problems"]


def test_the_scrub_rests_between_whole_passes(tmp_path: Path, clock: Clock) -> None:
    fill(tmp_path, clock)
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    s.scrub_step()  # the whole (small) log
    s.scrub_step()  # the pass is complete: the rest begins
    done = s.health.report()
    assert done["scrub_passes"] == 1
    s.scrub_step()
    assert s.health.report()["scrubbed_bytes"] == done["scrubbed_bytes"], "resting"
    clock.advance(limits.SCRUB_PASS_PAUSE_MS)
    s.scrub_step()
    assert s.health.report()["scrubbed_bytes"] > done["scrubbed_bytes"], "the next pass"
    s.close()


def test_a_pass_ends_at_the_end_it_started_from_while_writes_go_on(
    tmp_path: Path, clock: Clock
) -> None:
    """A broker that keeps writing must not re-verify each new record a step after its write
    (that was a per-message cost, and the rest never came): appends made during a
    pass wait for the next one."""
    fill(tmp_path, clock)
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    s.scrub_step()  # the whole log as it was
    first = s.health.report()
    assert first["scrub_passes"] == 1
    for i in range(12, 24):
        s.append(draft(i))
        clock.advance(1000)
        s.scrub_step()  # one step a second, as the broker runs it
    assert s.health.report()["scrubbed_bytes"] == first["scrubbed_bytes"], "resting"
    clock.advance(limits.SCRUB_PASS_PAUSE_MS)
    s.scrub_step()  # the next pass starts at the log's start and covers the new records
    again = s.health.report()
    assert again["scrub_passes"] == 2
    assert again["scrubbed_bytes"] > 2 * first["scrubbed_bytes"]
    s.close()
