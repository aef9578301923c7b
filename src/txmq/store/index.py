"""The message index: look up records by message id and by (topic, key).

Owns: an append-only index file (``index/index.bin``) of 16-byte entries (64-bit key hash, commit-
log offset) and its in-memory map, loaded at open. Why not RocketMQ's hash-slot IndexFile: the
in-memory map gives the same O(1) lookup, the append-only file is trivially crash-safe
(truncate entries past the checkpoint, re-dispatch), and loading 16 bytes per entry with
``struct.iter_unpack`` is fast. Derived data: rebuildable from the commit log. Hash collisions
are resolved by the caller, which reads each candidate record and compares.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

from txmq.store.disk import Disk

ENTRY = struct.Struct(">QQ")
# Bound on candidates kept per hash, so one hot key cannot grow a list without limit.
_CANDIDATES_MAX = 4096


def id_hash(message_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(b"id\0" + message_id.encode(), digest_size=8).digest())


def key_hash(topic: str, key: str) -> int:
    raw = b"key\0" + topic.encode() + b"\0" + key.encode()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest())


class MessageIndex:
    def __init__(self, directory: Path, disk: Disk) -> None:
        self.path = directory / "index.bin"
        self.handle = disk.open(self.path)
        self.map: dict[int, list[int]] = {}
        size = self.handle.size()
        self.size = size - size % ENTRY.size  # drop a torn trailing entry
        data = self.handle.pread(self.size, 0)
        for h, phys in ENTRY.iter_unpack(data):
            self._remember(h, phys)
        self._dirty = False

    def _remember(self, h: int, phys: int) -> None:
        lst = self.map.setdefault(h, [])
        lst.append(phys)
        if len(lst) > _CANDIDATES_MAX:
            del lst[0]

    def add(self, hashes: list[int], phys: int) -> None:
        if not hashes:
            return
        self.handle.pwrite(b"".join(ENTRY.pack(h, phys) for h in hashes), self.size)
        self.size += ENTRY.size * len(hashes)
        for h in hashes:
            self._remember(h, phys)
        self._dirty = True

    def candidates(self, h: int) -> list[int]:
        return list(self.map.get(h, ()))

    def truncate_from_physical(self, physical_offset: int) -> None:
        """Drop entries at or past ``physical_offset`` (recovery), keeping the file in order."""
        data = self.handle.pread(self.size, 0)
        keep = 0
        for _h, phys in ENTRY.iter_unpack(data):
            if phys >= physical_offset:
                break
            keep += 1
        if keep * ENTRY.size == self.size:
            return
        self.size = keep * ENTRY.size
        self.handle.truncate(self.size)
        self.map.clear()
        for h, phys in ENTRY.iter_unpack(data[: self.size]):
            self._remember(h, phys)

    def forget_before(self, physical_offset: int) -> None:
        """Retention: candidates below the log start can no longer be read."""
        for h in list(self.map):
            lst = [p for p in self.map[h] if p >= physical_offset]
            if lst:
                self.map[h] = lst
            else:
                del self.map[h]

    def sync(self) -> None:
        if self._dirty:
            self.handle.sync()
            self._dirty = False

    def close(self) -> None:
        self.handle.close()
