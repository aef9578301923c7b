"""Consume-queue and index entries are buffered in memory and written to their files in batches
(store/derived/dispatch.py, "Derived writes"): readers see a buffered entry at once, a crash
between the log's fsync and the derived write loses nothing (recovery re-dispatches from the commit
log), and a checkpoint never records a length its files do not hold. Real files, a real store;
``abandon`` stops it as kill -9 would (the abort marker stays, buffers are lost)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import SMALL, Clock
from txmq import limits
from txmq.model import RecordDraft
from txmq.store.store import Store

INDEX = Path("index") / "index.bin"


def draft(i: int, *, q: int = 0) -> RecordDraft:
    return RecordDraft(topic="t", queue_id=q, body=b"x" * 50, message_id=f"m{i}", keys=(f"k{i}",))


def queue_file_bytes(root: Path, q: int = 0) -> int:
    return sum(f.stat().st_size for f in (root / "consumequeue" / "t" / str(q)).iterdir())


def test_buffered_entries_are_read_from_memory_and_survive_a_crash(
    tmp_path: Path, clock: Clock
) -> None:
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(30):
        s.append(draft(i, q=i % 2))
    # 15 entries per queue and 60 index entries: below DERIVED_WRITE_BYTES, so none written.
    assert queue_file_bytes(tmp_path) == 0 and (tmp_path / INDEX).stat().st_size == 0
    assert [r.message_id for r in s.read_queue("t", 0, 0, 100).records] == [
        f"m{i}" for i in range(0, 30, 2)
    ]
    assert s.find_by_message_id("m7") is not None and s.find_by_key("t", "k8", 1)
    assert s.offset_for_timestamp("t", 1, 0) == 0
    s.abandon()  # the log is durable, the derived entries only in memory: lost
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s.recovery.crashed and s.recovery.records_redispatched == 30
    for q in range(2):
        assert [r.queue_offset for r in s.read_queue("t", q, 0, 100).records] == list(range(15))
    assert s.find_by_key("t", "k29", 1)[0].message_id == "m29"
    assert s.append(draft(30)).queue_offset == 15, "queue offsets go on from the log"
    s.close()


def test_a_checkpoint_writes_the_buffers_before_it_records_their_lengths(
    tmp_path: Path, clock: Clock
) -> None:
    """The rule recovery depends on: fails if ``snapshot`` records a buffered entry (recovery
    then finds files shorter than the checkpoint and rebuilds everything from the log start)."""
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    for i in range(12):
        s.append(draft(i))
    s.checkpoint()
    saved = json.loads((tmp_path / "checkpoint.json").read_text())
    assert queue_file_bytes(tmp_path) == 12 * limits.CONSUME_QUEUE_ENTRY_SIZE
    assert (tmp_path / INDEX).stat().st_size == 24 * 16
    for i in range(12, 15):
        s.append(draft(i))  # buffered again, past the checkpoint
    s.abandon()
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert s.recovery.crashed and not s.recovery.rebuilt, "the checkpoint vouched for too much"
    assert s.recovery.scanned_from == saved["log_offset"] and s.recovery.records_redispatched == 3
    assert [r.message_id for r in s.read_queue("t", 0, 0, 100).records] == [
        f"m{i}" for i in range(15)
    ]
    s.close()


def test_reads_span_the_file_and_the_buffer(tmp_path: Path, clock: Clock) -> None:
    """With a small threshold every publish leaves some entries in the file and some in memory;
    reads and a reopen see one queue."""
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    s._dispatcher.write_bytes = 5 * limits.CONSUME_QUEUE_ENTRY_SIZE
    for i in range(23):
        s.append(draft(i))
    written = queue_file_bytes(tmp_path) // limits.CONSUME_QUEUE_ENTRY_SIZE
    assert 0 < written < 23, "part written, part buffered"
    got = s.read_queue("t", 0, written - 2, 4).records
    assert [r.queue_offset for r in got] == list(range(written - 2, written + 2))
    assert s.offset_for_timestamp("t", 0, clock.now) == 0
    s.close()  # a clean close checkpoints: everything written
    assert queue_file_bytes(tmp_path) == 23 * limits.CONSUME_QUEUE_ENTRY_SIZE
    s = Store.open(tmp_path, SMALL, now_ms=clock)
    assert not s.recovery.crashed and s.queue_offsets("t", 0) == (0, 23)
    s.close()
