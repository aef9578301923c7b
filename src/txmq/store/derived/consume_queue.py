"""Consume queues: per (topic, queue id) fixed-width entries pointing into the commit log.

Owns: the 20-byte entry files (commit-log offset u64, size u32, tag hash u64, as RocketMQ's
CQ_STORE_UNIT_SIZE), in files of ``entries_per_file`` entries named by the queue offset of their
first slot, under ``consumequeue/<topic>/<queue id>/``. Derived data: everything here can be
rebuilt from the commit log, so entries are written without fsync and synced at checkpoints.
Appends are buffered in memory and written with one pwrite per file once the buffer holds
DERIVED_WRITE_BYTES, or when the dispatcher asks for everything (before a checkpoint records
``max_offset``, a patch, a truncation or retention): ``write_out``. Readers get buffered entries
from memory (``entries``), so a buffered entry is as readable as a written one; only the file
lags, and a crash loses nothing the log cannot give back (recovery re-dispatches from the
checkpoint, which never counts a buffered entry). Must not: read the commit log, decide which
records enter a queue, or lock (the dispatcher serialises access).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from pathlib import Path

from txmq import limits
from txmq.errors import CorruptRecordError, invariant
from txmq.store.files import space
from txmq.store.files.disk import Disk, FileHandle
from txmq.store.log.segment import is_segment_name, segment_name

ENTRY = struct.Struct(">QIQ")
assert ENTRY.size == limits.CONSUME_QUEUE_ENTRY_SIZE


def tag_hash(tag: str) -> int:
    """Stable tag hash stored in each entry so tag filters skip records without reading them.
    Collisions are fine: readers confirm the tag string on the record. 0 means no tag."""
    return zlib.crc32(tag.encode()) + 1 if tag else 0


class ConsumeQueue:
    def __init__(self, directory: Path, disk: Disk, entries_per_file: int) -> None:
        self.directory = directory
        self.disk = disk
        self.per_file = entries_per_file
        self.files: dict[int, FileHandle] = {}
        self.min_offset = 0
        self.max_offset = 0  # next queue offset to assign
        self._dirty: set[int] = set()
        # Entries appended but not yet written to the file: the first one's queue offset
        # (every entry below it is in the file) and their packed bytes, up to ``max_offset``.
        self._buf_at = 0
        self._buf = bytearray()
        for name in disk.list(directory):
            if is_segment_name(name):
                self.files[int(name)] = disk.open(directory / name)
        if self.files:
            first, last = min(self.files), max(self.files)
            self.min_offset = first
            # A torn trailing entry (size not a multiple of 20) is dropped here.
            self.max_offset = last + min(self.files[last].size() // ENTRY.size, self.per_file)
        self._buf_at = self.max_offset
        # Queue offset below which entry space is reserved on disk (``reserve_to``).
        self._reserved_to = self.max_offset

    def _file(self, offset: int) -> tuple[FileHandle, int]:
        base = offset - offset % self.per_file
        handle = self.files.get(base)
        if handle is None:
            handle = self.disk.open(self.directory / segment_name(base))
            self.files[base] = handle
        return handle, (offset - base) * ENTRY.size

    def start_at(self, queue_offset: int) -> None:
        """Let an empty queue begin at ``queue_offset`` (its older records were deleted by
        retention before a rebuild). Slots below it in the first file stay zero."""
        invariant(self.min_offset == self.max_offset == self._buf_at, "queue is not empty")
        self.min_offset = self.max_offset = self._buf_at = self._reserved_to = queue_offset

    def reserve_to(self, end: int, before_growth: Callable[[int], None]) -> None:
        """Reserve disk space for entries below queue offset ``end`` (and up to
        CONSUME_QUEUE_RESERVE_AHEAD_ENTRIES beyond, within the file), before the log write whose
        records they are: their write then cannot meet a full disk (ADR 0003).

        Raises:
            DiskFullError: no room for them (or it would pass the watermark); nothing changed.
        """
        while self._reserved_to < end:  # one step per entry file: bounded by the batch
            at = self._reserved_to
            file_end = at - at % self.per_file + self.per_file
            need = min(end, file_end)
            ahead = min(file_end, max(need, at + limits.CONSUME_QUEUE_RESERVE_AHEAD_ENTRIES))
            handle, pos = self._file(at)
            got = space.reserve(
                handle,
                pos,
                pos + (need - at) * ENTRY.size,
                pos + (ahead - at) * ENTRY.size,
                before_growth,
            )
            self._reserved_to = at + (got - pos) // ENTRY.size

    def append(self, queue_offset: int, physical_offset: int, size: int, tag: str) -> None:
        """Buffer one entry; ``write_out`` writes the buffer. Entries must be contiguous.

        Raises:
            CorruptRecordError: the record's queue offset is not the next one (a log record
                disagrees with its queue; reported with the record's offset).
        """
        if queue_offset != self.max_offset:
            raise CorruptRecordError(
                physical_offset, f"queue offset {queue_offset}, expected {self.max_offset}"
            )
        self._buf += ENTRY.pack(physical_offset, size, tag_hash(tag))
        self.max_offset += 1

    @property
    def written_end(self) -> int:
        """Queue offset below which every entry is in the file (the rest is buffered)."""
        return self._buf_at

    def write_out(self, at_least: int = 0) -> None:
        """Write buffered entries once they are ``at_least`` bytes (0: whatever there is), one
        pwrite per entry file they touch. What a failed write leaves unwritten stays buffered,
        so calling again retries it (the same bytes at the same place)."""
        if len(self._buf) < at_least:
            return
        while self._buf:
            handle, pos = self._file(self._buf_at)
            n = min(len(self._buf) // ENTRY.size, self.per_file - self._buf_at % self.per_file)
            handle.pwrite(bytes(self._buf[: n * ENTRY.size]), pos)
            self._dirty.add(self._buf_at - self._buf_at % self.per_file)
            del self._buf[: n * ENTRY.size]
            self._buf_at += n
        invariant(self._buf_at == self.max_offset, "every buffered entry is written")

    def entry(self, queue_offset: int) -> tuple[int, int, int]:
        """(physical offset, size, tag hash) of one written entry."""
        got = self.entries(queue_offset, 1)
        invariant(len(got) == 1, "consume-queue entry out of range")
        return got[0]

    def entries(self, start: int, count: int) -> list[tuple[int, int, int]]:
        """Up to ``count`` entries from ``start``: written ones with one pread per entry file,
        buffered ones from memory."""
        out: list[tuple[int, int, int]] = []
        offset = max(start, self.min_offset)
        end = min(self.max_offset, offset + max(0, count))
        in_file = min(self._buf_at, end)
        while offset < in_file:
            handle, pos = self._file(offset)
            n = min(in_file - offset, self.per_file - offset % self.per_file)
            data = handle.pread(n * ENTRY.size, pos)
            invariant(len(data) == n * ENTRY.size, "short consume-queue file")
            out.extend(ENTRY.iter_unpack(data))
            offset += n
        if offset < end:
            at = (offset - self._buf_at) * ENTRY.size
            out.extend(ENTRY.iter_unpack(self._buf[at : at + (end - offset) * ENTRY.size]))
        return out

    def patch(self, found: dict[int, tuple[int, int, int]]) -> int:
        """Overwrite written entries that differ from ``found`` (queue offset -> entry, read
        from the log); offsets ``found`` lacks keep their entry. Returns how many changed."""
        invariant(not self._buf, "patch with buffered entries")
        lo, hi = self.min_offset, self.max_offset
        changed = 0
        at = lo
        while at < hi:
            n = min(hi - at, limits.READ_BATCH_MAX)
            for i, old in enumerate(self.entries(at, n)):
                new = found.get(at + i)
                if new is not None and new != old:
                    handle, pos = self._file(at + i)
                    handle.pwrite(ENTRY.pack(*new), pos)
                    self._dirty.add((at + i) - (at + i) % self.per_file)
                    changed += 1
            at += n
        return changed

    def truncate_to(self, queue_offset: int) -> None:
        """Keep entries below ``queue_offset`` (recovery: entries past the checkpoint go).

        Raises:
            CorruptRecordError: the files hold fewer entries than the checkpoint promised.
        """
        invariant(not self._buf, "truncate with buffered entries")
        if queue_offset > self.max_offset:
            raise CorruptRecordError(-1, f"{self.directory} is shorter than the checkpoint")
        keep_base = queue_offset - queue_offset % self.per_file
        for base in sorted(self.files):
            if base > keep_base:
                self.files.pop(base).close()
                self.disk.remove(self.directory / segment_name(base))
                self._dirty.discard(base)
        handle = self.files.get(keep_base)
        if handle is not None:
            handle.truncate((queue_offset - keep_base) * ENTRY.size)
            self._dirty.add(keep_base)
        # Truncating drops the blocks reserved past the new size (Linux).
        self.max_offset = self._buf_at = self._reserved_to = queue_offset
        self.min_offset = min(self.min_offset, queue_offset)

    def drop_before(self, queue_offset: int) -> None:
        """Retention: forget entries below ``queue_offset`` and delete whole files below it."""
        # Never past the file's end: buffered entries stay (readers skip their deleted records)
        # until written out, so no file a pending write needs is removed. Retention's
        # checkpoint writes the buffers out first, unless the disk is full.
        self.min_offset = max(self.min_offset, min(queue_offset, self._buf_at))
        # The newest file always stays, even when every entry in it expired: the queue's next
        # offset is read back from it at open, and queue offsets must never go back.
        for base in sorted(self.files)[:-1]:
            if base + self.per_file <= self.min_offset:
                self.files.pop(base).close()
                self.disk.remove(self.directory / segment_name(base))
                self._dirty.discard(base)

    def take_dirty(self) -> list[tuple[int, FileHandle]]:
        """(base, handle) of each file written since the last call, and forget them: the caller
        fsyncs them (after letting go of the dispatcher's lock)."""
        out = [(base, self.files[base]) for base in sorted(self._dirty) if base in self.files]
        self._dirty.clear()
        return out

    def mark_dirty(self, base: int) -> None:
        """A file ``take_dirty`` handed out was not synced after all."""
        self._dirty.add(base)

    def locate(self, queue_offset: int) -> tuple[FileHandle, int] | None:
        """(file, position) of an entry in the file, for a read outside the dispatcher's lock;
        None when ``queue_offset`` is outside what the file holds (buffered, or not held)."""
        if not self.min_offset <= queue_offset < self._buf_at:
            return None
        return self._file(queue_offset)

    def close(self) -> None:
        for handle in self.files.values():
            handle.close()
