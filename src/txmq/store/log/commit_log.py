"""The commit log: one append-only log for every topic, in fixed-size segment files.

Owns: the ordered list of segments, positioning of records (a record or a batch never spans
segments: the rest of a full segment is filled with a blank marker), reads by physical offset,
forward scans, truncation of a torn tail and whole-segment deletion. Must not: know about
consume queues, the index, topics or flush policy; serialise writers (the write path does,
under its writer lock) or decide what a bad record means (recovery does). Its parts: segment.py
(one segment file), staging.py (writes staged for the flusher), search.py (a verifiable record
where none should be).

Theory of operation: ``reserve(size)`` returns where the next ``size`` bytes go, rolling to a
new segment when they would not fit; before rolling, the full segment is fdatasync'ed, so the
group-commit flusher only ever has to sync the active segment. ``write`` puts the bytes there
with one pwrite, or with ``stage`` (SYNC, reserved space) stages them for the flusher, which
pwrites a group's at once before its fdatasync (``take_staged``): the event loop never gives up
the GIL to write. A roll writes what is staged before syncing the full segment.

Full disk (ADR 0003): every byte the log writes, and the 12-byte blank header that may follow
it, lies in space reserved beforehand (``FileHandle.allocate``, fallocate KEEP_SIZE, up to
SEGMENT_RESERVE_AHEAD_BYTES ahead). A reservation that fails raises DiskFullError before
anything changes. A roll reserves the new segment first, then writes the old segment's blank
header (inside its reservation), then syncs it: a full disk refuses the roll and leaves both
files as they were. Where a file system cannot reserve, a write that ENOSPC cuts short is
truncated away before DiskFullError is raised. A blank is only its header: the span it claims
is never written, and nothing is ever written after it (recovery seals a segment whose blank it
finds, and a valid record inside a blank's span is reported as corruption).

Readers look segments up under ``_segments_lock`` (retention may remove the oldest
concurrently); a removed segment's handle stays valid for a reader that already holds it.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from txmq import limits
from txmq.errors import (
    CorruptRecordError,
    DiskFullError,
    OffsetNotFoundError,
    invariant,
    is_disk_full,
)
from txmq.format import record as codec
from txmq.model import Record
from txmq.store.files.disk import Disk
from txmq.store.log.search import blank_span_reason, verifiable_in
from txmq.store.log.segment import Segment, decoded, is_segment_name, iter_raw, segment_name
from txmq.store.log.staging import Staging


@dataclass(frozen=True, slots=True)
class ScanEnd:
    """Where a scan stopped. ``bad_reason`` is empty when it reached the clean end."""

    offset: int
    bad_reason: str = ""


class CommitLog:
    def __init__(
        self,
        directory: Path,
        disk: Disk,
        segment_size: int,
        *,
        before_growth: Callable[[int], None] = lambda nbytes: None,
    ) -> None:
        self.directory = directory
        self.disk = disk
        self.segment_size = segment_size
        # Called with the bytes a reservation is about to add to the disk; raises DiskFullError
        # to refuse (the store's write watermark).
        self.before_growth = before_growth
        self.segments: list[Segment] = []
        self._starts: list[int] = []
        self._segments_lock = threading.Lock()
        self._staging = Staging()  # SYNC writes the flusher pwrites (take_staged)
        disk.makedirs(directory)
        for name in disk.list(directory):
            if not is_segment_name(name):
                continue  # Temporary or foreign files are not segments.
            handle = disk.open(directory / name)
            used = min(handle.size(), segment_size)
            # Written bytes hold their blocks; what lies past them is reserved again on demand.
            self.segments.append(Segment(int(name), handle, used, reserved=used))
        self.segments.sort(key=lambda s: s.start)
        for prev, seg in zip(self.segments, self.segments[1:], strict=False):
            if prev.start + segment_size != seg.start:
                raise CorruptRecordError(seg.start, "segment files are not contiguous")
        if self.segments and self.segments[0].start % segment_size:
            raise CorruptRecordError(self.segments[0].start, "segment size differs from config")
        if not self.segments:
            self._add_segment(0)
        self._starts = [s.start for s in self.segments]

    @property
    def start_offset(self) -> int:
        return self.segments[0].start

    @property
    def end_offset(self) -> int:
        """Next physical offset to write (written, not necessarily durable)."""
        last = self.segments[-1]
        return last.start + last.used

    def _add_segment(self, start: int) -> Segment:
        seg = Segment(start, self.disk.open(self.directory / segment_name(start)), 0)
        with self._segments_lock:
            self.segments.append(seg)
            self._starts.append(start)
        return seg

    def _new_segment(self, start: int, first_write: int) -> Segment:
        """Create the next segment with room for ``first_write`` bytes reserved; not yet part
        of the log. On any failure the file is removed again.

        Raises:
            DiskFullError: the reservation does not fit (nothing is left behind).
        """
        seg = Segment(start, self.disk.open(self.directory / segment_name(start)), 0)
        try:
            self._reserve_room(seg, first_write)
        except BaseException:
            seg.handle.close()
            self.disk.remove(self.directory / segment_name(start))
            raise
        return seg

    def _reserve_room(self, seg: Segment, end: int) -> None:
        """Make sure ``seg``'s bytes below ``end`` are reserved on disk before they are
        written (ADR 0003).

        Raises:
            DiskFullError: no room (or above the watermark); nothing changed.
            OSError: the reservation failed otherwise.
        """
        if end <= seg.reserved:
            return
        ahead = min(self.segment_size, max(end, seg.used + limits.SEGMENT_RESERVE_AHEAD_BYTES))
        try:
            supported = self._allocate(seg, ahead)
        except DiskFullError:
            if ahead == end:
                raise
            supported = self._allocate(seg, end)  # near full: only what this write needs
            ahead = end
        # Without fallocate nothing is reserved: ``_put`` then undoes a write cut short.
        seg.reserved = ahead if supported else seg.used

    def _allocate(self, seg: Segment, target: int) -> bool:
        self.before_growth(target - seg.reserved)
        try:
            return seg.handle.allocate(seg.reserved, target - seg.reserved)
        except OSError as exc:
            if is_disk_full(exc):
                raise DiskFullError(f"cannot reserve log space: {exc}") from exc
            raise

    def _put(self, seg: Segment, data: bytes) -> None:
        """pwrite ``data`` at ``seg.used``. A write the disk cut short is truncated away, so a
        failed write leaves the file exactly as it was.

        Raises:
            DiskFullError: ENOSPC; nothing was written.
            OSError: any other failure (the caller fences).
        """
        try:
            seg.handle.pwrite(data, seg.used)
        except OSError as exc:
            seg.handle.truncate(seg.used)  # if this fails too, the OSError fences the store
            seg.reserved = seg.used  # truncating drops blocks reserved past the size (Linux)
            if is_disk_full(exc):
                raise DiskFullError(f"log write did not fit: {exc}") from exc
            raise

    def reserve(self, size: int) -> int:
        """Return the physical offset for ``size`` contiguous bytes, rolling if needed, with
        those bytes and a blank header after them reserved on disk.

        Raises:
            DiskFullError: the disk has no room for them (or they would pass the watermark);
                nothing changed, the store stays writable.
            OSError: writing the blank header or syncing the full segment failed; the caller
                must fence the store (the full segment's durability is unknown).
        """
        invariant(size <= self.segment_size - codec.HEAD_SIZE, "write larger than a segment")
        seg = self.segments[-1]
        room = self.segment_size - seg.used
        # Keep room for a blank header after every record so a reader always finds the end.
        if size + codec.HEAD_SIZE > room:
            nxt = self._new_segment(seg.start + self.segment_size, size + codec.HEAD_SIZE)
            try:
                self._staging.drain(seg)
                if room >= codec.HEAD_SIZE:
                    self._put(seg, codec.blank(room))
                seg.handle.sync()
            except BaseException:
                nxt.handle.close()
                self.disk.remove(self.directory / segment_name(nxt.start))
                raise
            seg.used = self.segment_size
            with self._segments_lock:
                self.segments.append(nxt)
                self._starts.append(nxt.start)
            seg = nxt
        self._reserve_room(seg, seg.used + size + codec.HEAD_SIZE)
        return seg.start + seg.used

    def write(self, offset: int, data: bytes, *, stage: bool = False) -> None:
        """Write at ``offset`` (from ``reserve``). With ``stage``, bytes inside the reservation
        are only staged for the flusher (``take_staged``; SYNC mode: visible once synced).

        Raises:
            DiskFullError: the disk was full after all (no reservation); nothing was written.
            OSError: the write failed otherwise (the caller fences).
        """
        seg = self.segments[-1]
        invariant(offset == seg.start + seg.used, "writes must be contiguous")
        invariant(seg.used + len(data) + codec.HEAD_SIZE <= self.segment_size, "past segment end")
        if stage and seg.used + len(data) <= seg.reserved:
            # Reserved: the pwrite cannot meet a full disk (ADR 0003), no refusal is lost.
            self._staging.stage(seg, seg.used, data)
        else:
            self._put(seg, data)
        seg.used += len(data)

    def take_staged(self) -> Callable[[], None]:
        """Under the writer lock: take the staged writes; returns the function that pwrites
        them (once, outside the lock, before the sync; a failed write raises, the caller fences).
        Until it returns, a roll waits."""
        return self._staging.take(lambda: self.segments[-1])

    def seal(self, seg: Segment) -> None:
        """Recovery found ``seg``'s blank: it is full, the next write rolls."""
        seg.used = self.segment_size

    def record_in_blank(self, seg: Segment, blank_pos: int) -> int | None:
        """Offset of a valid record inside the span the blank at ``blank_pos`` (relative to
        ``seg``) claims, or None. Such a record was written after the blank (the shape a roll
        cut short by a full disk left before ADR 0003): a scan would skip it as padding."""
        return verifiable_in(seg, blank_pos + codec.HEAD_SIZE, self.segment_size)

    def sync(self) -> None:
        """fdatasync the active segment (full ones were synced when they were rolled)."""
        self.segments[-1].handle.sync()

    def _segment_for(self, offset: int) -> Segment:
        with self._segments_lock:
            i = bisect.bisect_right(self._starts, offset) - 1
            if i < 0 or offset >= self.end_offset:
                raise OffsetNotFoundError(f"commit-log offset {offset} is outside the log")
            return self.segments[i]

    def read(self, offset: int, size_hint: int = 0) -> Record:
        """Read and verify the record at ``offset``; one pread if ``size_hint`` is its size.

        Raises:
            OffsetNotFoundError: the offset is below the log start or at/after its end.
            CorruptRecordError: no valid record starts at ``offset``.
        """
        seg = self._segment_for(offset)
        pos = offset - seg.start
        head = seg.handle.pread(max(codec.HEAD_SIZE, min(size_hint, seg.used - pos)), pos)
        if len(head) < codec.HEAD_SIZE:
            raise CorruptRecordError(offset, "truncated header")
        size, magic = codec.peek(head)
        if magic != codec.RECORD_MAGIC or not codec.RECORD_SIZE_MIN <= size <= seg.used - pos:
            raise CorruptRecordError(offset, f"no record here (magic {magic:#x}, size {size})")
        return codec.decode(head if len(head) == size else seg.handle.pread(size, pos), offset)

    def read_raw(self, offset: int, size: int) -> bytes:
        """Up to ``size`` unverified bytes at ``offset`` (to tell a damaged record from a wrong
        pointer to it).

        Raises:
            OffsetNotFoundError: the offset is outside the log.
        """
        seg = self._segment_for(offset)
        return seg.handle.pread(min(size, seg.used - (offset - seg.start)), offset - seg.start)

    def read_bytes_many(self, spans: Sequence[tuple[int, int]]) -> list[memoryview | None]:
        """The verified bytes of each ``(offset, size)`` record (a consume-queue entry knows
        the size, so no field decoding is needed), in order; None for a record retention
        deleted. The bulk reader's path (Spark).

        Why runs: records of one queue usually sit close together in the log, so spans at most
        READ_RUN_GAP_MAX apart are read with one pread per run (up to READ_RUN_BYTES_MAX) and
        sliced; copying a few KiB of page cache costs less than a syscall per record. Each record is
        still verified on its own (size, magic, CRC, stored offset).

        Raises:
            OffsetNotFoundError: an offset at/after the log end.
            CorruptRecordError: no valid record of that size starts at an offset.
        """
        with self._segments_lock:
            starts, segments = list(self._starts), list(self.segments)
        out: list[memoryview | None] = []
        seg: Segment | None = None
        i, n = 0, len(spans)
        while i < n:
            offset, size = spans[i]
            if offset < starts[0]:
                out.append(None)
                i += 1
                continue
            if seg is None or not seg.start <= offset < seg.start + self.segment_size:
                seg = segments[bisect.bisect_right(starts, offset) - 1]
            pos = offset - seg.start
            if pos >= seg.used:
                raise OffsetNotFoundError(f"commit-log offset {offset} is outside the log")
            if not codec.RECORD_SIZE_MIN <= size <= seg.used - pos:
                raise CorruptRecordError(offset, f"no record of {size} bytes here")
            j, run_end, seg_end = i + 1, offset + size, seg.start + seg.used
            while j < n:
                nxt, nsize = spans[j]
                if not (
                    run_end <= nxt <= run_end + limits.READ_RUN_GAP_MAX
                    and nsize >= codec.RECORD_SIZE_MIN
                    and nxt + nsize <= min(seg_end, offset + limits.READ_RUN_BYTES_MAX)
                ):
                    break  # the next span starts its own run, with the checks above
                run_end = nxt + nsize
                j += 1
            try:
                view = memoryview(seg.handle.pread(run_end - offset, pos))
            except OSError:
                if offset < self.start_offset:
                    out += [None] * (j - i)  # Retention closed the segment while we read it.
                    i = j
                    continue
                raise
            out += codec.verify_spans(view, offset, spans[i:j])
            i = j
        return out

    def scan(self, offset: int, max_count: int, end: int | None = None) -> list[Record]:
        """Verified records in log order from ``offset`` (a record boundary) below ``end``.

        Raises:
            CorruptRecordError: a bad record before ``end``.
        """
        out: list[Record] = []
        stop = self.end_offset if end is None else end
        for rec, scan_end in self.scan_for_recovery(offset):
            if rec is None:
                if scan_end.bad_reason and scan_end.offset < stop:
                    raise CorruptRecordError(scan_end.offset, scan_end.bad_reason)
                break
            if rec.physical_offset >= stop or len(out) >= max_count:
                break
            out.append(rec)
        return out

    def scan_for_recovery(self, offset: int) -> Iterator[tuple[Record | None, ScanEnd]]:
        """Yield (record, end-after-it) per valid record, then once (None, ScanEnd) at the end
        or at the first bad record. Used by scans and the offline verifier."""
        with self._segments_lock:
            offset = max(offset, self.start_offset)
            i = max(0, bisect.bisect_right(self._starts, offset) - 1)
            segments = self.segments[i:]
        pos = offset - segments[0].start
        for n, seg in enumerate(segments):
            for item in iter_raw(seg, self.segment_size, pos):
                if item.kind == "record":
                    rec = decoded(item)
                    if isinstance(rec, str):
                        yield None, ScanEnd(item.offset, rec)
                        return
                    yield rec, ScanEnd(item.offset + item.size)
                elif item.kind == "bad":
                    yield None, ScanEnd(item.offset, item.reason)
                    return
                elif item.kind == "blank":
                    inside = self.record_in_blank(seg, item.offset - seg.start)
                    if inside is not None:
                        yield None, ScanEnd(item.offset, blank_span_reason(item.offset, inside))
                        return
                elif item.kind == "end" and n + 1 < len(segments):
                    yield None, ScanEnd(item.offset, "segment ends early without a blank")
                    return
            pos = 0
        yield None, ScanEnd(self.end_offset)

    def valid_record_after(self, offset: int) -> int | None:
        """Offset of a verifiable record past ``offset`` anywhere in the log, or None.

        Used after a bad record: a valid record behind it means mid-log corruption, not a torn
        tail.
        """
        for seg in list(self.segments):
            found = verifiable_in(seg, max(0, offset + 1 - seg.start), self.segment_size)
            if found is not None:
                return found
        return None

    def truncate(self, offset: int) -> None:
        """Drop everything from ``offset`` on (a torn or divergent tail), last segment first."""
        gone = 0
        while len(self.segments) > 1 and self.segments[-1].start > offset:
            with self._segments_lock:
                seg = self.segments.pop()
                self._starts.pop()
            seg.handle.close()
            self.disk.remove(self.directory / segment_name(seg.start))
            gone += 1
        if gone:  # a power loss must not keep the cut below but bring a later segment back
            self.disk.sync_dir(self.directory)
        seg = self.segments[-1]
        invariant(seg.start <= offset <= seg.start + self.segment_size, "truncate out of range")
        seg.handle.truncate(offset - seg.start)
        seg.used = offset - seg.start
        seg.reserved = seg.used  # truncating drops the reservation; the next reserve() redoes it
        seg.handle.sync()

    def delete_oldest(self) -> int:
        """Remove the oldest segment file; returns the new start offset. Never the active one."""
        invariant(len(self.segments) > 1, "the active segment is never deleted")
        with self._segments_lock:
            seg = self.segments.pop(0)
            self._starts.pop(0)
        # No close here: a concurrent reader may still hold the handle; it closes when dropped.
        self.disk.remove(self.directory / segment_name(seg.start))
        return self.start_offset

    def first_timestamp_of(self, index: int) -> int | None:
        """Store time of the first record in segment ``index``; None when it has none."""
        seg = self.segments[index]
        for item in iter_raw(seg, self.segment_size, 0):
            if item.kind == "record":
                return codec.decode_entry(item.buf, item.pos, item.offset).store_timestamp_ms
            return None
        return None

    def close(self) -> None:
        for seg in self.segments:
            seg.handle.close()
