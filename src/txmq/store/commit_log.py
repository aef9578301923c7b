"""The commit log: one append-only log for every topic, in fixed-size segment files.

Owns: segment files named by their 20-digit zero-padded start offset, positioning of records
(a record never spans segments: the rest of a full segment is filled with a blank marker),
reads by physical offset, the forward scan used by recovery, torn-tail truncation and whole-
segment deletion. Must not: know about consume queues, index, topics or threads; the façade
(store.py) serialises writers.

Theory of operation: ``reserve(size)`` returns where the next record goes, rolling to a new
segment (after flushing the old one, so durability never has to look back) when it would not
fit. ``write(offset, data)`` puts the bytes there. ``sync()`` makes everything written so far in
the active segment durable. Recovery (``scan_from``) walks records from a known-good offset,
checking each CRC, and reports the first bad position so the caller can truncate.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from txmq import limits
from txmq.errors import CorruptRecordError, OffsetNotFoundError, invariant
from txmq.model import Record
from txmq.store import record as codec
from txmq.store.disk import Disk, FileHandle

# Recovery reads segments in chunks this big, so a 1 GiB log costs ~256 reads, not millions.
_SCAN_CHUNK = 4 * limits.MiB


def segment_name(start: int) -> str:
    return f"{start:020d}"


@dataclass
class Segment:
    start: int
    handle: FileHandle
    # Bytes of this segment in use (records + blank filler).
    used: int


@dataclass(frozen=True)
class ScanEnd:
    """Where a recovery scan stopped. ``bad_reason`` is empty when it reached a clean end."""

    offset: int
    bad_reason: str = ""
    valid_after: bool = False


class CommitLog:
    def __init__(self, directory: Path, disk: Disk, segment_size: int) -> None:
        self.directory = directory
        self.disk = disk
        self.segment_size = segment_size
        self.segments: list[Segment] = []
        self._starts: list[int] = []
        for name in disk.list(directory):
            if len(name) != 20 or not name.isdigit():
                continue  # Temporary or foreign files are not segments.
            handle = disk.open(directory / name)
            self.segments.append(Segment(int(name), handle, handle.size()))
        self.segments.sort(key=lambda s: s.start)
        for prev, seg in zip(self.segments, self.segments[1:], strict=False):
            if prev.start + segment_size != seg.start:
                raise CorruptRecordError(seg.start, "segment files are not contiguous")
        if not self.segments:
            self._add_segment(0)
        self._starts = [s.start for s in self.segments]

    @property
    def start_offset(self) -> int:
        return self.segments[0].start

    @property
    def end_offset(self) -> int:
        last = self.segments[-1]
        return last.start + last.used

    def _add_segment(self, start: int) -> Segment:
        seg = Segment(start, self.disk.open(self.directory / segment_name(start)), 0)
        self.segments.append(seg)
        self._starts.append(start)
        return seg

    def reserve(self, size: int) -> int:
        """Return the physical offset for a record of ``size`` bytes, rolling if needed."""
        invariant(size <= self.segment_size - codec.HEAD_SIZE, "record larger than a segment")
        seg = self.segments[-1]
        room = self.segment_size - seg.used
        if size + codec.HEAD_SIZE > room:
            if room >= codec.HEAD_SIZE:
                seg.handle.pwrite(codec.blank(room), seg.used)
            seg.used = self.segment_size
            # Flush the full segment now: later syncs only touch the active one.
            seg.handle.sync()
            seg = self._add_segment(seg.start + self.segment_size)
        return seg.start + seg.used

    def write(self, offset: int, data: bytes) -> None:
        seg = self.segments[-1]
        invariant(offset == seg.start + seg.used, "writes must be contiguous")
        invariant(seg.used + len(data) <= self.segment_size, "write past segment end")
        seg.handle.pwrite(data, seg.used)
        seg.used += len(data)

    def sync(self) -> None:
        self.segments[-1].handle.sync()

    def active_handle(self) -> FileHandle:
        return self.segments[-1].handle

    def _segment_for(self, offset: int) -> Segment:
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0 or offset >= self.end_offset:
            raise OffsetNotFoundError(f"commit-log offset {offset} is outside the log")
        return self.segments[i]

    def read(self, offset: int) -> Record:
        """Read and verify the record at ``offset`` (paired check on the read side)."""
        seg = self._segment_for(offset)
        pos = offset - seg.start
        head = seg.handle.pread(codec.HEAD_SIZE, pos)
        if len(head) < codec.HEAD_SIZE:
            raise CorruptRecordError(offset, "truncated header")
        size, magic = codec.peek(head)
        if magic != codec.RECORD_MAGIC or size > seg.used - pos:
            raise CorruptRecordError(offset, f"no record here (magic {magic:#x}, size {size})")
        return codec.decode(seg.handle.pread(size, pos), offset)

    def scan(self, offset: int, max_count: int) -> list[Record]:
        """Records in log order from ``offset`` (which must be a record boundary)."""
        out: list[Record] = []
        for rec in self.iter_from(offset):
            out.append(rec)
            if len(out) >= max_count:
                break
        return out

    def iter_from(self, offset: int) -> Iterator[Record]:
        """Yield verified records from ``offset`` to the end; raises on a bad record."""
        for rec, end in self._walk(offset):
            if end.bad_reason:
                raise CorruptRecordError(end.offset, end.bad_reason)
            if rec is not None:
                yield rec

    def scan_for_recovery(self, offset: int) -> Iterator[tuple[Record | None, ScanEnd]]:
        """Like iter_from, but yields the stop position instead of raising."""
        return self._walk(offset)

    def _walk(self, offset: int) -> Iterator[tuple[Record | None, ScanEnd]]:
        """Yield (record, None) per good record, then (None, ScanEnd) once, at the end or at the
        first bad record."""
        offset = max(offset, self.start_offset)
        i = max(0, bisect.bisect_right(self._starts, offset) - 1)
        pos = offset - self.segments[i].start
        while True:
            seg = self.segments[i]
            last = i == len(self.segments) - 1
            limit = min(seg.handle.size(), self.segment_size)
            buf, buf_at = b"", pos
            while pos < limit:
                rel = pos - buf_at
                if rel + codec.HEAD_SIZE > len(buf):
                    buf, buf_at, rel = seg.handle.pread(min(_SCAN_CHUNK, limit - pos), pos), pos, 0
                if len(buf) - rel < codec.HEAD_SIZE:
                    yield None, self._bad(seg, pos, "truncated header")
                    return
                size, magic = codec.peek(buf, rel)
                if magic == codec.BLANK_MAGIC and pos + size == self.segment_size:
                    pos = self.segment_size
                    break
                if magic != codec.RECORD_MAGIC or not codec.RECORD_SIZE_MIN <= size <= limit - pos:
                    yield None, self._bad(seg, pos, f"bad header (magic {magic:#x}, size {size})")
                    return
                if rel + size > len(buf):
                    buf, buf_at, rel = seg.handle.pread(max(_SCAN_CHUNK, size), pos), pos, 0
                try:
                    rec = codec.decode(memoryview(buf)[rel : rel + size], seg.start + pos)
                except CorruptRecordError as exc:
                    yield None, self._bad(seg, pos, exc.reason)
                    return
                yield rec, ScanEnd(seg.start + pos + size)
                pos += size
            if last or self.segment_size - pos >= codec.HEAD_SIZE:
                yield None, ScanEnd(seg.start + pos)
                return
            i, pos = i + 1, 0

    def _bad(self, seg: Segment, pos: int, reason: str) -> ScanEnd:
        return ScanEnd(seg.start + pos, reason, self._valid_record_after(seg, pos + 1))

    def _valid_record_after(self, seg: Segment, pos: int) -> bool:
        """Is there a verifiable record after a bad one? Then the damage is not just a torn
        tail, and the caller must not drop it silently."""
        limit = min(seg.handle.size(), self.segment_size)
        data = seg.handle.pread(min(limit - pos, 64 * limits.MiB), pos) if pos < limit else b""
        magic = codec.RECORD_MAGIC.to_bytes(4, "big")
        at = data.find(magic)
        while at != -1:
            start = at - 4
            if start >= 0:
                try:
                    codec.decode(data[start:], seg.start + pos + start)
                    return True
                except CorruptRecordError:
                    pass  # magic bytes inside a body: keep looking
            at = data.find(magic, at + 1)
        return False

    def truncate(self, offset: int) -> None:
        """Drop everything from ``offset`` on (a torn tail), including later segments."""
        while len(self.segments) > 1 and self.segments[-1].start > offset:
            seg = self.segments.pop()
            self._starts.pop()
            seg.handle.close()
            self.disk.remove(self.directory / segment_name(seg.start))
        seg = self.segments[-1]
        invariant(seg.start <= offset <= seg.start + self.segment_size, "truncate out of range")
        seg.handle.truncate(offset - seg.start)
        seg.used = offset - seg.start
        seg.handle.sync()

    def delete_segment(self, start: int) -> None:
        invariant(self.segments[0].start == start, "only the oldest segment is deleted")
        invariant(len(self.segments) > 1, "the active segment is never deleted")
        seg = self.segments.pop(0)
        self._starts.pop(0)
        seg.handle.close()
        self.disk.remove(self.directory / segment_name(seg.start))

    def first_timestamp_of(self, index: int) -> int | None:
        """Store time of the first record in segment ``index``; None when it has none."""
        seg = self.segments[index]
        for rec, _ in self._walk(seg.start):
            return rec.store_timestamp_ms if rec is not None else None
        return None

    def close(self) -> None:
        for seg in self.segments:
            seg.handle.close()
