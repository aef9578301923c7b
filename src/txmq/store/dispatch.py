"""The dispatcher: derives consume queues and the message index from commit-log records.

Owns: the set of consume queues, the message index, ``lock`` (which serialises dispatch against
readers of queues and index) and ``end``, the log offset up to which records are dispatched,
i.e. visible. Only NORMAL and COMMIT records (any topic, system topics included) enter a
consume queue; PREPARED and ROLLBACK records are indexed but never queued. Must not: read the
commit log, decide durability (the flusher publishes only durable records in SYNC mode) or
take the writer lock (lock order is writer lock, then this one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from txmq.errors import CorruptRecordError, is_disk_full
from txmq.format.record import Entry, enters_queue
from txmq.store.checkpoint import Checkpoint
from txmq.store.consume_queue import ConsumeQueue
from txmq.store.disk import Disk
from txmq.store.index import MessageIndex, hashes_of


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
        # store's reserve, store/ballast.py), and then the write is retried once.
        self.on_disk_full: Callable[[], bool] = lambda: False
        # Recovery after retention may rebuild a queue whose first records are gone.
        self.allow_late_start = False
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
            try:
                self._write_out(touched.values())
            except OSError as exc:
                if not (is_disk_full(exc) and self.on_disk_full()):
                    raise
                self._write_out(touched.values())  # write_out keeps what it could not write
            self.end = max(self.end, end)

    def _write_out(self, queues: Iterable[ConsumeQueue]) -> None:
        for cq in queues:
            cq.write_out()
        self.index.write_out()

    def snapshot(self) -> Checkpoint:
        """What a checkpoint taken now may promise (call ``sync`` before saving it)."""
        with self.lock:
            queues = {key: cq.max_offset for key, cq in self.queues.items()}
            return Checkpoint(self.end, self.index.entries, queues)

    def sync(self) -> None:
        """fsync every queue file and the index that changed since the last sync."""
        with self.lock:
            for cq in self.queues.values():
                cq.sync()
            self.index.sync()

    def truncate_to(self, checkpoint: Checkpoint) -> None:
        """Recovery: drop queue and index entries the checkpoint does not vouch for.

        Raises:
            CorruptRecordError: a derived file is shorter than the checkpoint says.
        """
        missing = [k for k, n in checkpoint.queues.items() if n and k not in self.queues]
        if missing:
            raise CorruptRecordError(-1, f"consume queue {missing[0]} is missing")
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
