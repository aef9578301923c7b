"""A simulated disk in memory, for model and fault tests (TigerBeetle's testing/storage.zig).

Owns: ``SimDisk``, a ``Disk`` whose files live in memory and remember which bytes are durable.
``crash(rng)`` is a simulated power loss: every write or truncate since a file's last ``sync``
is lost, except a seeded prefix of them which "reached the platter" in order, the last one
possibly torn part-way. Also seeded fsync errors, reported disk usage, a capacity (``capacity``
bytes: a write that does not fit writes what fits and raises ENOSPC, as a real file system
does; ``allocate`` reserves space the way fallocate does), failing writes on demand
(``fail_writes_after``) and bit rot (``flip``). Directory operations
(create, remove, rename, ``write_atomic``) are durable at once, as after a directory fsync.
Must not: be used by production code paths; touch real files.

Every handle opened before a crash is dead afterwards (its operations raise), just as a
killed process's descriptors are gone; the test opens a new store on the same ``SimDisk``.
"""

from __future__ import annotations

import errno
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

from txmq.store.files.disk import FileHandle


@dataclass
class _Node:
    data: bytearray = field(default_factory=bytearray)
    durable: bytearray = field(default_factory=bytearray)
    # Writes ("w", offset, bytes) and truncates ("t", size, b"") since the last sync, in order.
    pending: list[tuple[str, int, bytes]] = field(default_factory=list)
    # Bytes reserved by ``allocate`` (fallocate with KEEP_SIZE): they count as used space, and
    # writes below this length need no new space.
    allocated: int = 0

    def footprint(self) -> int:
        return max(len(self.data), self.allocated)


def _apply(buf: bytearray, op: tuple[str, int, bytes]) -> None:
    kind, at, data = op
    if kind == "t":
        del buf[at:]
        return
    if len(buf) < at:
        buf.extend(bytes(at - len(buf)))
    buf[at : at + len(data)] = data


class SimFile:
    def __init__(self, disk: SimDisk, path: str, epoch: int) -> None:
        self._disk = disk
        self._path = path
        self._epoch = epoch

    def _node(self) -> _Node:
        if self._epoch != self._disk.epoch:
            raise OSError(9, f"handle to {self._path} died in a simulated crash")
        node = self._disk.files.get(self._path)
        if node is None:
            raise OSError(2, f"{self._path} was removed")
        return node

    def pwrite(self, data: bytes, offset: int) -> None:
        with self._disk.lock:
            node = self._node()
            self._disk.on_write(self._path)
            data = bytes(data)
            room = self._disk.room_in(node, offset)
            full = room < len(data)
            if full:
                data = data[: max(0, room)]  # a full disk writes what fits, then ENOSPC
            if data:
                op = ("w", offset, data)
                _apply(node.data, op)
                node.pending.append(op)
            if full:
                raise OSError(errno.ENOSPC, f"no space left on the simulated disk: {self._path}")

    def allocate(self, offset: int, length: int) -> bool:
        with self._disk.lock:
            node = self._node()
            self._disk.on_write(self._path)
            grow = offset + length - node.footprint()
            if grow > 0 and self._disk.free() < grow:
                raise OSError(errno.ENOSPC, f"no space to allocate on the sim disk: {self._path}")
            node.allocated = max(node.allocated, offset + length)
            return True

    def pread(self, size: int, offset: int) -> bytes:
        with self._disk.lock:
            data = bytes(self._node().data[offset : offset + size])
            if self._disk.flip_next_read and data and "commitlog" in self._path:
                # A transient read error: this read returns one bit wrong, the disk is fine.
                self._disk.flip_next_read = False
                at = len(data) // 2
                data = data[:at] + bytes([data[at] ^ 0x04]) + data[at + 1 :]
            return data

    def sync(self) -> None:
        with self._disk.lock:
            node = self._node()
            self._disk.on_sync()
            for op in node.pending:
                _apply(node.durable, op)
            node.pending.clear()

    def truncate(self, size: int) -> None:
        with self._disk.lock:
            node = self._node()
            node.allocated = 0  # as on Linux: truncating drops blocks reserved past the size
            op = ("t", size, b"")
            _apply(node.data, op)
            node.pending.append(op)

    def size(self) -> int:
        with self._disk.lock:
            return len(self._node().data)

    def close(self) -> None:
        pass  # Nothing to release; a dead handle stays dead.


class SimDisk:
    """In-memory ``Disk`` with seeded crash, torn-write and fsync faults."""

    def __init__(
        self,
        *,
        fsync_error_after: int | None = None,
        used_ratio: float = 0.0,
        capacity: int | None = None,
    ) -> None:
        self.lock = threading.Lock()
        self.capacity = capacity
        # Every write-side call (pwrite, allocate, write_atomic) from this count on raises
        # ENOSPC before changing anything; ``capacity`` models the partial write instead.
        self.fail_writes_after: int | None = None
        self.writes = 0
        # The next pread of a commit-log file returns one flipped bit (a transient read error).
        self.flip_next_read = False
        self.files: dict[str, _Node] = {}
        self.dirs: set[str] = set()
        self.epoch = 0
        self.fsync_error_after = fsync_error_after
        self.syncs = 0
        self.used = used_ratio

    def on_sync(self) -> None:
        n = self.syncs
        self.syncs += 1
        if self.fsync_error_after is not None and n >= self.fsync_error_after:
            raise OSError(5, "injected fsync failure (EIO)")

    def on_write(self, path: str) -> None:
        """Count a write-side call; raise ENOSPC once ``fail_writes_after`` is reached."""
        n = self.writes
        self.writes += 1
        if self.fail_writes_after is not None and n >= self.fail_writes_after:
            raise OSError(errno.ENOSPC, f"injected: no space left on the simulated disk: {path}")

    def usage(self) -> int:
        return sum(node.footprint() for node in self.files.values())

    def free(self) -> int:
        """Bytes left under ``capacity`` (caller holds ``lock``); effectively unbounded without."""
        if self.capacity is None:
            return 1 << 50
        return max(0, self.capacity - self.usage())

    def room_in(self, node: _Node, offset: int) -> int:
        """How many bytes a write at ``offset`` may put down before the disk is full."""
        return max(0, node.footprint() - offset) + self.free()

    def flip(self, path: Path, offset: int, mask: int = 0x01) -> None:
        """Bit rot: XOR ``mask`` into the byte at ``offset`` of ``path``, durably."""
        with self.lock:
            node = self.files[str(path)]
            for buf in (node.data, node.durable):
                if offset < len(buf):
                    buf[offset] ^= mask

    def crash(self, rng: random.Random, *, torn: bool = True) -> None:
        """Simulated power loss: keep durable bytes plus a seeded in-order prefix of the rest."""
        with self.lock:
            for node in self.files.values():
                keep = rng.randint(0, len(node.pending))
                buf = bytearray(node.durable)
                for op in node.pending[:keep]:
                    _apply(buf, op)
                if torn and keep < len(node.pending) and node.pending[keep][0] == "w":
                    kind, at, data = node.pending[keep]
                    _apply(buf, (kind, at, data[: rng.randint(0, len(data))]))
                node.data, node.durable, node.pending = buf, bytearray(buf), []
            self.epoch += 1

    # --- Disk protocol. ------------------------------------------------------------------------

    def open(self, path: Path) -> FileHandle:
        with self.lock:
            key = str(path)
            if key not in self.files:
                self.files[key] = _Node()
                self._add_dirs(path.parent)
            return SimFile(self, key, self.epoch)

    def _add_dirs(self, directory: Path) -> None:
        self.dirs.update(str(p) for p in (directory, *directory.parents))

    def list(self, directory: Path) -> list[str]:
        prefix = str(directory).rstrip("/") + "/"
        with self.lock:
            names = {k[len(prefix) :].split("/")[0] for k in (*self.files, *self.dirs)}
        return sorted(n for n in names if n and not n.startswith("/") and prefix + n != prefix)

    def makedirs(self, directory: Path) -> None:
        with self.lock:
            self._add_dirs(directory)

    def remove(self, path: Path) -> None:
        with self.lock:
            if self.files.pop(str(path), None) is None:
                raise FileNotFoundError(2, "no such file", str(path))

    def sync_dir(self, directory: Path) -> None:
        pass  # directory operations are durable at once here

    def rename(self, source: Path, target: Path) -> None:
        with self.lock:
            node = self.files.pop(str(source))
            node.durable, node.pending = bytearray(node.data), []
            self.files[str(target)] = node

    def exists(self, path: Path) -> bool:
        with self.lock:
            return str(path) in self.files or str(path) in self.dirs

    def write_atomic(self, path: Path, data: bytes) -> None:
        with self.lock:
            self.on_write(str(path))
            old = self.files.get(str(path))
            if self.free() + (old.footprint() if old else 0) < len(data):
                # The temporary copy did not fit; the old file is untouched.
                raise OSError(errno.ENOSPC, f"no space left on the simulated disk: {path}")
            self.files[str(path)] = _Node(bytearray(data), bytearray(data), [])
            self._add_dirs(path.parent)

    def read_all(self, path: Path) -> bytes:
        with self.lock:
            node = self.files.get(str(path))
            if node is None:
                raise FileNotFoundError(2, "no such file", str(path))
            return bytes(node.data)

    def used_ratio(self, directory: Path) -> float:
        if self.capacity is not None:
            with self.lock:
                return max(self.used, self.usage() / self.capacity)
        return self.used

    def space(self, directory: Path) -> tuple[int, int]:
        """(total bytes, free bytes): the capacity, or 1 TiB with ``used_ratio`` of it used."""
        with self.lock:
            if self.capacity is not None:
                return self.capacity, self.free()
        total = 1 << 40
        return total, int(total * (1.0 - self.used))
