"""The message index: look up records by message id and by (topic, key).

Owns: an append-only index file (``index/index.bin``) of 16-byte entries (64-bit key hash,
commit-log offset) and the in-memory hash chains built from it at open.

Why this design and not RocketMQ's hash-slot IndexFile: an on-disk hash table needs a random
write per key, which Python can only do one syscall at a time; an append-only file is written
with one pwrite per DERIVED_WRITE_BYTES of entries (lookups use the chains in memory; the file
is read only at open) and is trivially crash-safe (the checkpoint records its written length,
after the dispatcher wrote the buffer out; recovery truncates to it and re-dispatches from the
log). Lookups stay O(1) + chain
length through RocketMQ's own trick, kept in memory: ``_heads`` maps a hash to its newest entry
and ``_prev`` links each entry to the previous entry with the same hash, so a key costs one
dict slot plus 16 bytes per entry (two ``array('q')`` cells) instead of a Python list per key.
Derived data: rebuildable from the commit log. Hash collisions are resolved by the caller, which
reads each candidate record and compares. Must not: read the commit log or lock (the dispatcher
serialises writers; readers run under the dispatcher's lock).
"""

from __future__ import annotations

import bisect
import struct
import zlib
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import crc32c

from txmq import limits
from txmq.errors import CorruptRecordError, invariant
from txmq.store.files import space
from txmq.store.files.disk import Disk, FileHandle

ENTRY = struct.Struct(">QQ")
# Bound once: compiled code calls a Final bound function without looking it up.
_PACK_ENTRY: Final = ENTRY.pack
_CRC32C: Final = crc32c.crc32c
_CRC32: Final = zlib.crc32
# Compaction at open rewrites the file only when at least this many entries are dead.
_COMPACT_MIN_ENTRIES = 65536


def _hash64(raw: bytes) -> int:
    """CRC-32C and CRC-32 side by side: two C calls, about a third of BLAKE2b's cost, and
    recovery hashes every key of every record. Not collision-proof on purpose: lookups verify
    each candidate against the record, so a collision costs one extra read."""
    return (_CRC32C(raw) << 32) | _CRC32(raw)


def id_hash(message_id: str) -> int:
    return _hash64(b"id\0" + message_id.encode())


def key_hash(topic: str, key: str) -> int:
    return _hash64(b"key\0" + topic.encode() + b"\0" + key.encode())


def hashes_of(topic: str, message_id: str, keys: tuple[str, ...]) -> list[int]:
    if not keys:  # most records
        return [id_hash(message_id)] if message_id else []
    out = [key_hash(topic, k) for k in keys]
    if message_id:
        out.append(id_hash(message_id))
    return out


class MessageIndex:
    def __init__(self, directory: Path, disk: Disk, *, load: bool = True) -> None:
        disk.makedirs(directory)
        self.path = directory / "index.bin"
        self.handle = disk.open(self.path)
        self._heads: dict[int, int] = {}
        self._prev = array("q")
        self._phys = array("q")
        self._buf = bytearray()
        size = self.handle.size()
        self.size = size - size % ENTRY.size  # drop a torn trailing entry
        # Without ``load`` the chains stay empty: for a caller about to wipe and rebuild.
        data = self.handle.pread(self.size, 0) if load else b""
        for h, phys in ENTRY.iter_unpack(data):
            self._remember(h, phys)
        self._dirty = False
        # Entries that appends have reserved space for (written, buffered or in flight), and
        # the file bytes reserved on disk for them (``reserve``).
        self._promised = self.entries
        self._reserved = self.size

    @property
    def entries(self) -> int:
        """Entries written to the file (buffered ones excluded)."""
        return self.size // ENTRY.size

    def _remember(self, h: int, phys: int) -> None:
        self._prev.append(self._heads.get(h, -1))
        self._heads[h] = len(self._phys)
        self._phys.append(phys)

    def add(self, hashes: list[int], phys: int) -> None:
        """Buffer entries for one record; ``write_out`` writes them."""
        for h in hashes:
            self._buf += _PACK_ENTRY(h, phys)
            self._remember(h, phys)

    def reserve(self, entries: int, before_growth: Callable[[int], None]) -> None:
        """Reserve disk space for ``entries`` more entries (and INDEX_RESERVE_AHEAD_BYTES
        beyond), before the log write whose records they index (ADR 0003).

        Raises:
            DiskFullError: no room for them (or it would pass the watermark); nothing changed.
        """
        promised = max(self._promised, self.entries + len(self._buf) // ENTRY.size) + entries
        need = promised * ENTRY.size
        if need > self._reserved:
            ahead = need + limits.INDEX_RESERVE_AHEAD_BYTES
            self._reserved = space.reserve(self.handle, self._reserved, need, ahead, before_growth)
        self._promised = promised

    def write_out(self, at_least: int = 0) -> None:
        """Write the buffered entries once they are ``at_least`` bytes (0: whatever there is).
        A failed write keeps them buffered, so calling again retries it."""
        if self._buf and len(self._buf) >= at_least:
            self.handle.pwrite(bytes(self._buf), self.size)
            self.size += len(self._buf)
            self._buf = bytearray()
            self._dirty = True

    def rows(self) -> list[tuple[int, int]]:
        """Every written (hash, offset) entry, in file order (buffered ones excluded)."""
        return list(ENTRY.iter_unpack(self.handle.pread(self.size, 0)))

    def holds(self, h: int, phys: int) -> bool:
        """Is ``phys`` among the offsets indexed under ``h``? (Chains run newest first, so the
        walk stops at the first offset below it.) True as well when the walk reaches its step
        bound first: a lookup could not reach that entry either, and it is not missing."""
        steps = 0
        for got in self.iter_candidates(h, floor=phys):
            if got == phys:
                return True
            steps += 1
        return steps >= limits.INDEX_CHAIN_STEPS_MAX

    def candidates(self, h: int, *, floor: int = 0) -> list[int]:
        """Commit-log offsets indexed under ``h``, newest first, none below ``floor``."""
        return list(self.iter_candidates(h, floor=floor))

    def iter_candidates(self, h: int, *, floor: int = 0) -> Iterator[int]:
        i = self._heads.get(h, -1)
        steps = 0
        # Chains run newest to oldest, so the first offset below the floor ends the walk.
        while i >= 0 and steps < limits.INDEX_CHAIN_STEPS_MAX and self._phys[i] >= floor:
            yield self._phys[i]
            i = self._prev[i]
            steps += 1

    def truncate_to(self, entries: int) -> None:
        """Keep the first ``entries`` entries (recovery: entries past the checkpoint go).

        Raises:
            CorruptRecordError: the file holds fewer entries than the checkpoint promised.
        """
        invariant(not self._buf, "truncate with buffered entries")
        if entries > self.entries:
            raise CorruptRecordError(-1, f"{self.path} is shorter than the checkpoint")
        if entries == self.entries and len(self._phys) == entries:
            return
        self.size = entries * ENTRY.size
        self.handle.truncate(self.size)
        self._promised, self._reserved = entries, self.size  # truncating drops reservations
        self._dirty = True
        del self._prev[entries:]
        del self._phys[entries:]
        self._heads.clear()
        for i, (h, _phys) in enumerate(ENTRY.iter_unpack(self.handle.pread(self.size, 0))):
            self._heads[h] = i

    def compact(self, floor: int, disk: Disk) -> bool:
        """Rewrite the file without entries below ``floor`` (records retention deleted) when
        they are most of it; True if it did. Entries are in log order, so they are a prefix.

        Call only when a checkpoint follows at once: until then the file is shorter than the
        last checkpoint says, and a crash in between makes the next open rebuild the index
        from the log (correct, only slower).
        """
        invariant(not self._buf, "compact with buffered entries")
        dead = bisect.bisect_left(self._phys, floor)
        if dead < max(_COMPACT_MIN_ENTRIES, len(self._phys) // 2):
            return False
        data = self.handle.pread(self.size, 0)[dead * ENTRY.size :]
        tmp = self.path.with_name(self.path.name + ".tmp")
        out = disk.open(tmp)
        try:
            out.truncate(0)
            out.pwrite(data, 0)
            out.sync()
        except OSError:
            out.close()
            disk.remove(tmp)  # a full disk: keep the old file, and no half copy holding space
            raise
        out.close()
        self.handle.close()
        disk.rename(tmp, self.path)
        self.handle = disk.open(self.path)
        self.size = len(data)
        self._promised, self._reserved = max(0, self._promised - dead), self.size
        self._heads.clear()
        self._prev, self._phys = array("q"), array("q")
        for h, phys in ENTRY.iter_unpack(data):
            self._remember(h, phys)
        return True

    def mark_dirty(self) -> None:
        """The file ``take_dirty`` handed out was not synced after all."""
        self._dirty = True

    def take_dirty(self) -> FileHandle | None:
        """The file, if written since the last call (and forget that): the caller fsyncs it."""
        dirty, self._dirty = self._dirty, False
        return self.handle if dirty else None

    def close(self) -> None:
        self.handle.close()
