"""Consume queues: per (topic, queue id) fixed-width entries pointing into the commit log.

Owns: the 20-byte entry files (commit-log offset u64, size u32, tag hash u64, as RocketMQ's
CQ_STORE_UNIT_SIZE), in segment files of ``entries_per_file`` entries named by their first queue
offset, under ``consumequeue/<topic>/<queue id>/``. Derived data: everything here can be rebuilt
from the commit log, so entries are written without fsync and flushed at checkpoints.
Must not: read the commit log or decide which records enter a queue (the store does).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from txmq import limits
from txmq.errors import invariant
from txmq.store.disk import Disk, FileHandle

ENTRY = struct.Struct(">QIQ")
assert ENTRY.size == limits.CONSUME_QUEUE_ENTRY_SIZE


def tag_hash(tag: str) -> int:
    """Stable 64-bit tag hash stored in each entry so tag filters skip records without reading
    them. Collisions are fine: readers confirm the tag string on the record."""
    return zlib.crc32(tag.encode()) if tag else 0


class ConsumeQueue:
    def __init__(self, directory: Path, disk: Disk, entries_per_file: int) -> None:
        self.directory = directory
        self.disk = disk
        self.per_file = entries_per_file
        self.files: dict[int, FileHandle] = {}
        self.min_offset = 0
        self.max_offset = 0  # next queue offset to assign
        self._dirty: set[int] = set()
        names = [n for n in disk.list(directory) if len(n) == 20 and n.isdigit()]
        for name in names:
            self.files[int(name)] = disk.open(directory / name)
        if self.files:
            first, last = min(self.files), max(self.files)
            self.min_offset = first
            size = self.files[last].size()
            # A torn trailing entry (size not a multiple of 20) is dropped here.
            self.max_offset = last + size // ENTRY.size

    def _file(self, offset: int) -> tuple[FileHandle, int]:
        base = offset - offset % self.per_file
        handle = self.files.get(base)
        if handle is None:
            handle = self.disk.open(self.directory / f"{base:020d}")
            self.files[base] = handle
        return handle, (offset - base) * ENTRY.size

    def append(self, queue_offset: int, physical_offset: int, size: int, tag: str) -> None:
        invariant(queue_offset == self.max_offset, "consume queue offsets must be contiguous")
        handle, pos = self._file(queue_offset)
        handle.pwrite(ENTRY.pack(physical_offset, size, tag_hash(tag)), pos)
        self._dirty.add(queue_offset - queue_offset % self.per_file)
        self.max_offset += 1

    def entry(self, queue_offset: int) -> tuple[int, int, int]:
        """(physical offset, size, tag hash) of one entry."""
        invariant(self.min_offset <= queue_offset < self.max_offset, "entry out of range")
        handle, pos = self._file(queue_offset)
        data = handle.pread(ENTRY.size, pos)
        invariant(len(data) == ENTRY.size, "short consume-queue entry")
        phys, size, thash = ENTRY.unpack(data)
        return phys, size, thash

    def entries(self, start: int, count: int) -> list[tuple[int, int, int]]:
        """Up to ``count`` entries from ``start``, read in at most a few preads."""
        out: list[tuple[int, int, int]] = []
        offset = max(start, self.min_offset)
        end = min(self.max_offset, offset + count)
        while offset < end:
            handle, pos = self._file(offset)
            n = min(end - offset, self.per_file - offset % self.per_file)
            data = handle.pread(n * ENTRY.size, pos)
            out.extend(ENTRY.iter_unpack(data[: (len(data) // ENTRY.size) * ENTRY.size]))
            offset += n
        return out

    def truncate_from_physical(self, physical_offset: int) -> None:
        """Drop entries pointing at or past ``physical_offset`` (recovery after a crash), and
        any entry breaking the increasing order (a torn entry)."""
        lo, hi = self.min_offset, self.max_offset
        # Find the first entry that is >= physical_offset or not increasing; entries are sorted.
        keep = lo
        prev = -1
        for base in range(lo - lo % self.per_file, hi, self.per_file):
            for i, (phys, _size, _h) in enumerate(self.entries(max(base, lo), self.per_file)):
                if phys >= physical_offset or phys <= prev:
                    self._truncate_at(max(base, lo) + i)
                    return
                prev = phys
                keep = max(base, lo) + i + 1
        self._truncate_at(keep)

    def _truncate_at(self, queue_offset: int) -> None:
        invariant(queue_offset >= self.min_offset, "truncate below the queue's start")
        keep_base = queue_offset - queue_offset % self.per_file
        for base in sorted(self.files):
            if base > keep_base:
                self.files.pop(base).close()
                self.disk.remove(self.directory / f"{base:020d}")
        handle = self.files.get(keep_base)
        if handle is not None:
            handle.truncate((queue_offset - keep_base) * ENTRY.size)
        self.max_offset = queue_offset

    def drop_before(self, queue_offset: int) -> None:
        """Retention: forget entries below ``queue_offset`` and delete whole files below it."""
        self.min_offset = max(self.min_offset, min(queue_offset, self.max_offset))
        for base in sorted(self.files):
            if base + self.per_file <= self.min_offset:
                self.files.pop(base).close()
                self.disk.remove(self.directory / f"{base:020d}")

    def sync(self) -> None:
        for base in self._dirty:
            handle = self.files.get(base)
            if handle is not None:
                handle.sync()
        self._dirty.clear()

    def close(self) -> None:
        for handle in self.files.values():
            handle.close()
