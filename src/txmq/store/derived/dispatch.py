"""The dispatcher: derives consume queues and the message index from commit-log records.

Owns: the set of consume queues, the message index, ``lock`` (which serialises dispatch against
readers of queues and index) and ``end``, the log offset up to which records are dispatched,
i.e. visible. Only NORMAL and COMMIT records (any topic, system topics included) enter a
consume queue; PREPARED and ROLLBACK records are indexed but never queued. Must not: read the
commit log, decide durability (the flusher publishes only durable records in SYNC mode) or
take the writer lock (lock order is writer lock, then this one).

Derived writes: ``publish`` puts entries in memory, where readers see them at once,
and writes a queue's or the index's buffer to its file only once it holds DERIVED_WRITE_BYTES,
so most publishes make no syscall, and hold ``lock`` across none. The rule that keeps recovery
exact: **a derived file may lag its entries in memory, but never what a checkpoint records**.
``snapshot`` writes every buffer out (under ``lock``) before it reads the lengths the checkpoint
will promise, and ``sync`` then fsyncs those files; recovery truncates each file to the
checkpoint and re-dispatches the log from there, so entries a crash lost from memory come back
from the commit log, the only truth. Whatever changes files under an entry (``patch``,
``truncate_to``, ``compact_index``, ``replace_index``) writes the buffers out
first, so it works on files that hold every entry; retention (``drop_expired``) writes
nothing, so it works on a full disk, and moves a queue's start no further than its file's end.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Final

from txmq import limits
from txmq.errors import CorruptRecordError, is_disk_full
from txmq.format.record import Entry, enters_queue
from txmq.store.derived.checkpoint import Checkpoint
from txmq.store.derived.consume_queue import ENTRY as CQ_ENTRY
from txmq.store.derived.consume_queue import ConsumeQueue
from txmq.store.derived.index import ENTRY, MessageIndex, hashes_of
from txmq.store.files.disk import Disk, FileHandle

CqEntry = tuple[int, int, int]  # (physical offset, size, tag hash)
# A queue's or the index's buffered entries are written to its file once they are this many
# bytes (~200 queue entries, 256 index entries): one pwrite per that many instead of one per
# group commit, and most publishes make no syscall under ``lock``.
DERIVED_WRITE_BYTES: Final = 4 * limits.KiB

log = logging.getLogger(__name__)


def _holds(files: dict[int, FileHandle], base: int, handle: FileHandle) -> bool:
    """Is ``handle`` still the queue's file at ``base``?"""
    return files.get(base) is handle


class Dispatcher:
    def __init__(
        self, data_dir: Path, disk: Disk, entries_per_file: int, *, load_index: bool = True
    ) -> None:
        self.root = data_dir / "consumequeue"
        self.disk = disk
        self.entries_per_file = entries_per_file
        self.lock = threading.Lock()
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.index = MessageIndex(data_dir / "index", disk, load=load_index)
        self.end = 0
        # Called when a write of derived data meets a full disk; True if it freed space (the
        # store's reserve, store/files/ballast.py), and then the write is retried once.
        self.on_disk_full: Callable[[], bool] = lambda: False
        # Called with the bytes a derived reservation is about to add to the disk; raises
        # DiskFullError to refuse (the store's write watermark).
        self.before_growth: Callable[[int], None] = lambda nbytes: None
        # Recovery after retention may rebuild a queue whose first records are gone.
        self.allow_late_start = False
        # A queue's or the index's buffer is written to its file once it holds this many bytes
        # (see the module docstring; tests lower it).
        self.write_bytes = DERIVED_WRITE_BYTES
        disk.makedirs(self.root)
        for topic in disk.list(self.root):
            for qid in disk.list(self.root / topic):
                if qid.isdigit():
                    self.queue(topic, int(qid))

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue for (topic, queue id), created empty if new. Caller holds ``lock`` (or is
        the only thread, during recovery)."""
        key = (topic, queue_id)
        cq = self.queues.get(key)
        if cq is None:
            cq = ConsumeQueue(self.root / topic / str(queue_id), self.disk, self.entries_per_file)
            self.queues[key] = cq
        return cq

    def publish(self, entries: Sequence[Entry], end: int) -> None:
        """Dispatch ``entries`` (in log order) and make records below ``end`` visible.

        Raises:
            CorruptRecordError: a record's queue offset is not its queue's next offset.
            OSError: writing a queue or the index failed (the caller fences).
        """
        with self.lock:
            touched: dict[tuple[str, int], ConsumeQueue] = {}
            for e in entries:
                if enters_queue(e.flag):
                    key = (e.topic, e.queue_id)
                    cq = touched.get(key) or self.queue(e.topic, e.queue_id)
                    touched[key] = cq
                    if self.allow_late_start and cq.min_offset == cq.max_offset < e.queue_offset:
                        cq.start_at(e.queue_offset)
                    cq.append(e.queue_offset, e.physical_offset, e.size, e.tag)
                self.index.add(hashes_of(e.topic, e.message_id, e.keys), e.physical_offset)
            self._write_out(touched.values(), self.write_bytes)
            self.end = max(self.end, end)

    def reserve(self, queue_ends: dict[tuple[str, int], int], index_entries: int) -> None:
        """Reserve disk space for the derived data of a log write about to happen: entries
        below ``queue_ends[(topic, queue id)]`` and ``index_entries`` more index entries
        (ADR 0003). Derived writes into that space cannot meet a full disk, so a full disk
        refuses the append here instead of failing a dispatch later.

        Raises:
            DiskFullError: no room (or past the watermark); the caller writes nothing.
        """
        with self.lock:
            for (topic, queue_id), end in queue_ends.items():
                self.queue(topic, queue_id).reserve_to(end, self.before_growth)
            self.index.reserve(index_entries, self.before_growth)

    def _write_out(self, queues: Iterable[ConsumeQueue], at_least: int = 0) -> None:
        """Write the buffers of ``queues`` and the index that hold ``at_least`` bytes (0: all).
        Caller holds ``lock``.

        Raises:
            OSError: a write failed (a full disk only if giving the reserve back did not help);
                what was not written stays buffered.
        """
        try:
            self._write_each(queues, at_least)
        except OSError as exc:
            if not (is_disk_full(exc) and self.on_disk_full()):
                raise
            self._write_each(queues, at_least)  # write_out keeps what it could not write

    def _write_each(self, queues: Iterable[ConsumeQueue], at_least: int) -> None:
        for cq in queues:
            cq.write_out(at_least)
        self.index.write_out(at_least)

    def snapshot(self) -> Checkpoint:
        """What a checkpoint taken now may promise (call ``sync`` before saving it): every
        buffered entry is written out first, so the lengths it records are the files'.

        Raises:
            OSError: writing a buffer out failed (see ``_write_out``).
        """
        with self.lock:
            self._write_out(list(self.queues.values()))
            queues = {key: cq.max_offset for key, cq in self.queues.items()}
            return Checkpoint(self.end, self.index.entries, queues)

    def sync(self) -> None:
        """fsync every queue file and the index that changed since the last sync.

        The files are picked under ``lock`` and synced after letting go of it, so publish (the
        flusher) and readers do not wait out the fsyncs. Everything written before this call
        is durable when it returns, which is all a checkpoint taken before it promises
        (``snapshot`` wrote every buffered entry out); a write racing the fsync marks its file
        dirty again for the next sync. A file retired meanwhile (retention, an index rebuild or
        compaction) is skipped: its entries are expired, or its replacement was synced before
        it took its place.

        Raises:
            OSError: an fsync of a live file failed (fatal: ADR 0001).
        """
        with self.lock:
            todo: list[tuple[FileHandle, ConsumeQueue | None, int]] = []
            for queue in self.queues.values():
                todo += [(handle, queue, base) for base, handle in queue.take_dirty()]
            index_file = self.index.take_dirty()
            if index_file is not None:
                todo.append((index_file, None, 0))
        for i, (handle, cq, base) in enumerate(todo):
            try:
                handle.sync()
            except OSError:
                with self.lock:
                    if self._live(handle, cq, base):
                        # Not synced: dirty again, so a retry (after a disk-full skip) does.
                        q: ConsumeQueue | None
                        for h, q, b in todo[i:]:
                            if q is not None and self._live(h, q, b):
                                q.mark_dirty(b)
                            elif q is None and self._live(h, q, b):
                                self.index.mark_dirty()
                        raise
                log.debug("fsync skipped: the file was retired while it ran")

    def _live(self, handle: FileHandle, cq: ConsumeQueue | None, base: int) -> bool:
        """Is ``handle`` still the file of queue ``cq`` at ``base`` (of the index if no queue)?"""
        if cq is None:
            return self.index.handle is handle
        return _holds(cq.files, base, handle)

    def truncate_to(self, checkpoint: Checkpoint) -> None:
        """Recovery: drop queue and index entries the checkpoint does not vouch for.

        Raises:
            CorruptRecordError: a derived file is shorter than the checkpoint says.
        """
        missing = [k for k, n in checkpoint.queues.items() if n and k not in self.queues]
        if missing:
            raise CorruptRecordError(-1, f"consume queue {missing[0]} is missing")
        self._write_out(list(self.queues.values()))
        for key, cq in self.queues.items():
            cq.truncate_to(checkpoint.queues.get(key, cq.min_offset))
        self.index.truncate_to(checkpoint.index_entries)
        self.end = checkpoint.log_offset

    def wipe(self) -> None:
        """Delete every queue and index file, to rebuild them from the log."""
        for cq in self.queues.values():
            for base in list(cq.files):
                cq.files.pop(base).close()
                self.disk.remove(cq.directory / f"{base:020d}")
        self.queues.clear()
        self.index.close()
        self.disk.remove(self.index.path)
        self.index = MessageIndex(self.index.path.parent, self.disk)
        self.end = 0

    # --- Queries: each takes ``lock`` itself; no caller reaches into queues or index. ------

    def queue_range(self, topic: str, queue_id: int) -> tuple[ConsumeQueue | None, int, int]:
        """(queue, min offset, max offset) of a queue; (None, 0, 0) when unknown."""
        with self.lock:
            cq = self.queues.get((topic, queue_id))
            return (cq, cq.min_offset, cq.max_offset) if cq else (None, 0, 0)

    def queue_ends(self, topic: str, queue_ids: Iterable[int]) -> list[int]:
        """The max offset (next to be assigned) of each queue, 0 when unknown, read at once."""
        with self.lock:
            queues = self.queues
            return [cq.max_offset if (cq := queues.get((topic, q))) else 0 for q in queue_ids]

    def entries(self, cq: ConsumeQueue, start: int, count: int) -> tuple[int, list[CqEntry]]:
        """(where they start, up to ``count`` written entries): retention may have moved the
        queue's start past ``start`` since the caller looked, and then they begin there."""
        with self.lock:
            at = max(start, cq.min_offset)
            return at, cq.entries(at, count)

    def read_entry(self, cq: ConsumeQueue, queue_offset: int) -> CqEntry | None:
        """The queue's written entry at ``queue_offset``, found under ``lock`` and read after
        letting go of it; None when the offset is outside what the queue holds, or retention
        retired its file meanwhile."""
        with self.lock:
            if cq.written_end <= queue_offset < cq.max_offset:
                return cq.entries(queue_offset, 1)[0]  # buffered: from memory
            where = cq.locate(queue_offset)
        if where is None:
            return None
        handle, pos = where
        try:
            data = handle.pread(CQ_ENTRY.size, pos)
        except OSError:
            with self.lock:
                if _holds(cq.files, queue_offset - queue_offset % cq.per_file, handle):
                    raise
            return None
        if len(data) != CQ_ENTRY.size:
            return None
        phys, size, tag = CQ_ENTRY.unpack(data)
        return phys, size, tag

    def written_entry(self, topic: str, queue_id: int, queue_offset: int) -> CqEntry | bool:
        """The queue's entry at ``queue_offset`` (written or buffered); True when the offset is
        outside what the queue holds (expired, or not yet published), False when the queue is
        unknown."""
        with self.lock:
            cq = self.queues.get((topic, queue_id))
            if cq is None:
                return False
            if not cq.min_offset <= queue_offset < cq.max_offset:
                return True
            got = cq.entries(queue_offset, 1)
        return got[0] if got else False

    def patch(self, cq: ConsumeQueue, found: dict[int, CqEntry]) -> int:
        """``ConsumeQueue.patch`` under the lock, its buffer written first; returns how many
        entries changed."""
        with self.lock:
            self._write_out([cq])
            return cq.patch(found)

    def candidates(self, key_hash: int, floor: int) -> list[int]:
        """Physical offsets of indexed records whose key hash is ``key_hash``, from ``floor``."""
        with self.lock:
            return self.index.candidates(key_hash, floor=floor)

    def replace_index(self, rows: list[tuple[int, int]], end: int) -> None:
        """Swap in an index of ``rows`` ((hash, offset) in log order, for records below
        ``end``) plus the entries of records dispatched since, re-read from the live index.
        Caller holds ``lock``; writes a new file and renames it over the old one."""
        self._write_out([])
        later = [(h, p) for h, p in self.index.rows() if p >= end]
        tmp = self.index.path.with_name(self.index.path.name + ".rebuild")
        out = self.disk.open(tmp)
        out.truncate(0)
        out.pwrite(b"".join(ENTRY.pack(h, p) for h, p in [*rows, *later]), 0)
        out.sync()
        out.close()
        self.index.close()
        self.disk.rename(tmp, self.index.path)
        self.index = MessageIndex(self.index.path.parent, self.disk)

    def compact_index(self, floor: int) -> None:
        """Drop index entries below ``floor`` (retention's leftovers); at open, before any
        reader. Skipped on a full disk (the old file stays correct, only longer)."""
        with self.lock:
            try:
                self._write_out([])
                self.index.compact(floor, self.disk)
            except OSError as exc:
                if not is_disk_full(exc):
                    raise
                log.warning("disk full: index not compacted (%s)", exc)

    def next_queue_offsets(self) -> dict[tuple[str, int], int]:
        with self.lock:
            return {k: q.max_offset for k, q in self.queues.items()}

    def drop_expired(self, log_start: int) -> None:
        """Move each queue's min offset past entries whose records retention deleted (those
        below ``log_start``)."""
        with self.lock:
            for cq in self.queues.values():
                lo, hi = cq.min_offset, cq.max_offset
                while lo < hi:
                    mid = (lo + hi) // 2
                    if cq.entry(mid)[0] < log_start:
                        lo = mid + 1
                    else:
                        hi = mid
                cq.drop_before(lo)

    def topics(self) -> dict[str, int]:
        with self.lock:
            out: dict[str, int] = {}
            for topic, qid in self.queues:
                out[topic] = max(out.get(topic, 0), qid + 1)
            return out

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()
        self.index.close()
