"""Unit tests of the store's parts on their own: commit log (rolling with a blank marker,
reads, scans, truncation, deletion, the search for valid data after a bad record), consume
queue (buffered writes across files, truncation, retention, late start), index (hash chains,
truncation, reopen) and checkpoint encoding. Real files in tmp dirs."""

from __future__ import annotations

from pathlib import Path

import pytest

from txmq.errors import CorruptRecordError, OffsetNotFoundError
from txmq.format import record as codec
from txmq.model import RecordDraft
from txmq.store.derived import index as index_module
from txmq.store.derived.checkpoint import Checkpoint
from txmq.store.derived.consume_queue import ConsumeQueue, tag_hash
from txmq.store.derived.index import MessageIndex, id_hash, key_hash
from txmq.store.files.disk import OsDisk
from txmq.store.log.commit_log import CommitLog
from txmq.store.log.segment import segment_name

SEGMENT = 64 * 1024


def put(log: CommitLog, i: int, size: int = 1000) -> int:
    d = RecordDraft(topic="t", queue_id=0, body=bytes([i % 256]) * size, message_id=f"m{i}")
    buf = codec.encode(d, queue_offset=i, store_timestamp_ms=1000 + i)
    at = log.reserve(len(buf))
    log.write(at, codec.place(buf, at))
    return at


def test_log_rolls_with_a_blank_and_reads_back(tmp_path: Path) -> None:
    log = CommitLog(tmp_path, OsDisk(), SEGMENT)
    offsets = [put(log, i) for i in range(150)]
    assert len(log.segments) == 3
    assert (tmp_path / segment_name(SEGMENT)).exists()
    first = tmp_path / segment_name(0)
    last_in_first = max(o for o in offsets if o < SEGMENT)
    blank_at = last_in_first + log.read(last_in_first).size
    assert first.stat().st_size == blank_at + codec.HEAD_SIZE, "only the blank's header is written"
    assert codec.peek(first.read_bytes(), blank_at) == (SEGMENT - blank_at, codec.BLANK_MAGIC)
    assert [log.read(o).message_id for o in offsets[60:70]] == [f"m{i}" for i in range(60, 70)]
    assert [r.message_id for r in log.scan(offsets[63], 3)] == ["m63", "m64", "m65"]
    assert len(log.scan(0, 1000)) == 150
    with pytest.raises(OffsetNotFoundError):
        log.read(log.end_offset)
    with pytest.raises(CorruptRecordError):
        log.read(offsets[3] + 1)
    log.close()
    log = CommitLog(tmp_path, OsDisk(), SEGMENT)  # reopen finds the same segments
    assert log.end_offset == offsets[-1] + log.read(offsets[-1]).size
    assert log.first_timestamp_of(1) == log.scan(SEGMENT, 1)[0].store_timestamp_ms
    log.close()


def test_log_truncate_and_delete_oldest(tmp_path: Path) -> None:
    log = CommitLog(tmp_path, OsDisk(), SEGMENT)
    offsets = [put(log, i) for i in range(150)]
    log.truncate(offsets[70])
    assert log.end_offset == offsets[70] and len(log.segments) == 2
    assert not (tmp_path / segment_name(2 * SEGMENT)).exists()
    assert log.delete_oldest() == SEGMENT
    with pytest.raises(OffsetNotFoundError):
        log.read(offsets[0])
    assert log.scan(0, 1)[0].physical_offset == SEGMENT  # below the start means from the start
    log.close()


def test_non_contiguous_segments_are_refused(tmp_path: Path) -> None:
    log = CommitLog(tmp_path, OsDisk(), SEGMENT)
    for i in range(150):
        put(log, i)
    log.close()
    (tmp_path / segment_name(SEGMENT)).unlink()
    with pytest.raises(CorruptRecordError, match="contiguous"):
        CommitLog(tmp_path, OsDisk(), SEGMENT)


def test_valid_record_after_finds_data_behind_damage(tmp_path: Path) -> None:
    log = CommitLog(tmp_path, OsDisk(), SEGMENT)
    offsets = [put(log, i) for i in range(10)]
    assert log.valid_record_after(offsets[3]) == offsets[4]
    assert log.valid_record_after(offsets[9]) is None
    log.close()


def test_consume_queue_writes_across_files_and_truncates(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, OsDisk(), 16)
    for i in range(40):
        cq.append(i, 1000 + i, 50, "a" if i % 2 else "")
    expected = [(1000 + i, 50, tag_hash("a" if i % 2 else "")) for i in range(14, 18)]
    assert cq.entries(14, 4) == expected, "buffered entries are read from memory"
    cq.write_out(at_least=40 * 20 + 1)
    assert cq.written_end == 0 and cq.files == {}, "below the threshold nothing is written"
    cq.write_out(at_least=40 * 20)
    assert cq.written_end == 40 and sorted(cq.files) == [0, 16, 32]
    assert cq.entries(14, 4) == expected
    for i in range(40, 43):
        cq.append(i, 1000 + i, 50, "")
    assert cq.entries(38, 9) == [*cq.entries(38, 2), (1040, 50, 0), (1041, 50, 0), (1042, 50, 0)]
    assert cq.entries(31, 2)[1] == (1032, 50, 0), "from the file, across a file boundary"
    cq.write_out()
    assert cq.written_end == cq.max_offset == 43
    with pytest.raises(CorruptRecordError):
        cq.append(44, 5000, 50, "")
    assert [base for base, _ in cq.take_dirty()] == [0, 16, 32]
    assert cq.take_dirty() == [], "taking the dirty files forgets them"
    cq.truncate_to(20)
    assert cq.max_offset == 20 and sorted(cq.files) == [0, 16]
    cq.drop_before(17)
    assert cq.min_offset == 17 and sorted(cq.files) == [16]
    cq.close()
    cq = ConsumeQueue(tmp_path, OsDisk(), 16)
    assert (cq.min_offset, cq.max_offset) == (16, 20)
    with pytest.raises(CorruptRecordError):
        cq.truncate_to(25)
    cq.close()


def test_consume_queue_late_start(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, OsDisk(), 16)
    cq.start_at(21)
    cq.append(21, 7, 9, "")
    cq.write_out()
    assert cq.entries(0, 5) == [(7, 9, 0)]
    assert tag_hash("") == 0 and tag_hash("x") != 0
    cq.close()


def test_index_chains_newest_first_and_truncate(tmp_path: Path) -> None:
    idx = MessageIndex(tmp_path, OsDisk())
    k = key_hash("t", "k")
    for phys in range(0, 500, 100):
        idx.add([k, id_hash(f"m{phys}")], phys)
    idx.write_out()
    assert idx.candidates(k) == [400, 300, 200, 100, 0]
    assert idx.candidates(k, floor=250) == [400, 300]
    assert idx.candidates(id_hash("m200")) == [200]
    assert idx.entries == 10
    idx.truncate_to(6)  # keeps the first three records' entries
    assert idx.candidates(k) == [200, 100, 0] and idx.candidates(id_hash("m300")) == []
    assert idx.take_dirty() is idx.handle and idx.take_dirty() is None
    idx.close()
    idx = MessageIndex(tmp_path, OsDisk())
    assert idx.candidates(k) == [200, 100, 0]
    with pytest.raises(CorruptRecordError):
        idx.truncate_to(7)
    idx.close()


def test_checkpoint_round_trip_and_garbage() -> None:
    cp = Checkpoint(123, 45, {("t", 0): 6, ("%DLQ%g", 3): 2})
    assert Checkpoint.decode(cp.encode()) == cp
    for raw in (b"", b"{}", b'{"version": 1}', b"\xff"):
        with pytest.raises(CorruptRecordError):
            Checkpoint.decode(raw)


def test_index_compaction_drops_dead_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_module, "_COMPACT_MIN_ENTRIES", 10)
    disk = OsDisk()
    idx = MessageIndex(tmp_path, disk)
    for phys in range(100):
        idx.add([id_hash(f"m{phys}"), key_hash("t", "k")], phys)
    idx.write_out()
    assert not idx.compact(40, disk), "fewer than half the entries are dead"
    assert idx.compact(60, disk)
    assert idx.entries == 80 and (tmp_path / "index.bin").stat().st_size == 80 * 16
    assert idx.candidates(id_hash("m70")) == [70] and idx.candidates(id_hash("m10")) == []
    assert idx.candidates(key_hash("t", "k"))[-1] == 60
    idx.close()
    idx = MessageIndex(tmp_path, disk)
    assert idx.entries == 80 and idx.candidates(id_hash("m99")) == [99]
    idx.close()
