"""The store façade: commit log + consume queues + index + checkpoint + group-commit flush.

Owns: serialising writers, assigning queue offsets, durability (SYNC group commit or ASYNC
interval flush), dispatch of durable records to consume queues and the index, checkpoints, the
abort marker, retention and the disk watermark. Must not: use asyncio or read the wall clock
(time comes from ``now_ms``), or do file I/O except through ``Disk``.

Theory of operation
-------------------
Writers call ``append``. Under ``_lock`` a writer encodes its record, reserves room in the log,
writes it (page cache only) and queues it for dispatch; then, in SYNC mode, it waits on
``_durable`` until the flusher thread has fdatasync'ed past its record. The flusher takes
whatever has been written when it wakes, so one fdatasync covers every writer that arrived
meanwhile (group commit). Only after the fsync does the flusher dispatch those records to the
consume queues and the index, so a reader never sees a record a crash could lose.

A failed fsync fences the store: every waiting and later writer gets StoreFencedError, and only
a restart (which recovers from what is really on disk) clears it. We never retry an fsync.

Checkpoint ``checkpoint.json`` holds ``log_offset``: every record below it is durable and is in
the consume queues and the index, which were fsynced before the checkpoint was written. The
``abort`` marker exists while the store is open; finding it at open means the last run crashed,
so recovery scans from the checkpoint: verifies CRCs, truncates a torn tail, and re-dispatches.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from txmq import limits
from txmq.errors import (
    CorruptRecordError,
    DiskFullError,
    StoreClosedError,
    StoreFencedError,
    invariant,
)
from txmq.model import AppendResult, FlushMode, QueueRead, Record, RecordDraft
from txmq.store import record as codec
from txmq.store.commit_log import CommitLog
from txmq.store.config import StoreConfig
from txmq.store.consume_queue import ConsumeQueue, tag_hash
from txmq.store.disk import Disk, OsDisk
from txmq.store.index import MessageIndex, id_hash, key_hash

# Check disk usage every this many appends: statvfs per append would cost more than the write.
_DISK_CHECK_EVERY = 256
# A checkpoint is taken after this many dispatched bytes, bounding recovery work after a crash.
_CHECKPOINT_EVERY_BYTES = 64 * limits.MiB


@dataclass(frozen=True)
class _Pending:
    """A written record waiting for durability before dispatch."""

    end: int
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    tag: str
    hashes: list[int]


@dataclass(frozen=True)
class RecoveryReport:
    crashed: bool
    scanned_from: int
    log_end: int
    truncated_bytes: int
    records_redispatched: int
    # Set when bytes were dropped although a valid record followed them: saved, never silent.
    salvage_file: str = ""


class Store:
    """See the module docstring. Thread-safe."""

    def __init__(self, data_dir: Path, config: StoreConfig, now_ms: Callable[[], int], disk: Disk):
        self.data_dir = data_dir
        self.config = config
        self.now_ms = now_ms
        self.disk = disk
        self._lock = threading.Lock()
        self._durable = threading.Condition(self._lock)
        self._dispatch_lock = threading.Lock()
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._pending: list[_Pending] = []
        # Queue offsets assigned to written records not yet dispatched to their queue.
        self._next_queue_offset: dict[tuple[str, int], int] = {}
        self._fenced = ""
        self._closed = False
        self._appends = 0
        self._disk_used = 0.0
        self._checkpoint_offset = 0
        data_dir.mkdir(parents=True, exist_ok=True)
        self.log = CommitLog(data_dir / "commitlog", disk, config.segment_size_bytes)
        self.index = MessageIndex(data_dir / "index", disk)
        self._load_queues()
        self.recovery = self._recover()
        self._written_end = self.log.end_offset
        self._durable_end = self.log.end_offset
        self.disk.write_atomic(data_dir / "abort", b"running\n")
        self._flusher = threading.Thread(target=self._flush_loop, name="txmq-flush", daemon=True)
        self._flusher.start()

    @classmethod
    def open(
        cls,
        data_dir: Path,
        config: StoreConfig | None = None,
        *,
        now_ms: Callable[[], int],
        disk: Disk | None = None,
    ) -> Store:
        return cls(Path(data_dir), config or StoreConfig(), now_ms, disk or OsDisk())

    # --- Opening and recovery. ---------------------------------------------------------------

    def _load_queues(self) -> None:
        root = self.data_dir / "consumequeue"
        for topic in self.disk.list(root):
            for qid in self.disk.list(root / topic):
                if qid.isdigit():
                    self._queue(topic, int(qid))

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            directory = self.data_dir / "consumequeue" / topic / str(queue_id)
            cq = ConsumeQueue(directory, self.disk, self.config.consume_queue_entries_per_file)
            self._queues[key] = cq
        return cq

    def _recover(self) -> RecoveryReport:
        path = self.data_dir / "checkpoint.json"
        checkpoint = 0
        if self.disk.exists(path):
            checkpoint = int(json.loads(self.disk.read_all(path))["log_offset"])
        crashed = self.disk.exists(self.data_dir / "abort") or not self.disk.exists(path)
        checkpoint = max(checkpoint, self.log.start_offset)
        invariant(checkpoint <= self.log.end_offset or crashed, "checkpoint past the log end")
        for cq in self._queues.values():
            cq.truncate_from_physical(checkpoint)
        self.index.truncate_from_physical(checkpoint)
        count, end, truncated, salvage = 0, checkpoint, 0, ""
        for rec, stop in self.log.scan_for_recovery(checkpoint):
            if rec is None:
                end = stop.offset
                if stop.bad_reason:
                    truncated = self.log.end_offset - end
                    salvage = self._salvage(end, stop.bad_reason) if stop.valid_after else ""
                    if not crashed:
                        raise CorruptRecordError(end, stop.bad_reason)
                    self.log.truncate(end)
                break
            self._dispatch_record(rec)
            count += 1
        invariant(end == self.log.end_offset, "recovery must end at the log end")
        for cq in self._queues.values():
            if cq.min_offset < cq.max_offset:
                cq.drop_before(self._first_live_entry(cq))
        self._checkpoint_offset = checkpoint
        return RecoveryReport(crashed, checkpoint, end, truncated, count, salvage)

    def _salvage(self, offset: int, reason: str) -> str:
        """Copy bytes we are about to drop to a side file: an operator decides, not us."""
        seg = self.log.segments[-1]
        data = seg.handle.pread(seg.handle.size() - (offset - seg.start), offset - seg.start)
        name = f"salvage-{offset:020d}.bin"
        self.disk.write_atomic(self.data_dir / name, data)
        return f"{name} ({reason})"

    def _first_live_entry(self, cq: ConsumeQueue) -> int:
        start = self.log.start_offset
        lo, hi = cq.min_offset, cq.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            if cq.entry(mid)[0] < start:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _dispatch_record(self, rec: Record) -> None:
        if codec.enters_queue(rec.flag):
            cq = self._queue(rec.topic, rec.queue_id)
            if rec.queue_offset != cq.max_offset:
                raise CorruptRecordError(
                    rec.physical_offset,
                    f"queue offset {rec.queue_offset} but queue {rec.topic}/{rec.queue_id} "
                    f"expects {cq.max_offset}",
                )
            cq.append(rec.queue_offset, rec.physical_offset, rec.size, rec.tag)
        self.index.add(_hashes(rec.topic, rec.message_id, rec.keys), rec.physical_offset)

    # --- Writing. ------------------------------------------------------------------------------

    def append(self, draft: RecordDraft) -> AppendResult:
        return self.append_many([draft])[0]

    def append_many(self, drafts: Sequence[RecordDraft]) -> list[AppendResult]:
        """Append records; return once they are as durable as the flush mode promises.

        Raises:
            MessageBodyTooLargeError and other input errors: nothing was written.
            StoreFencedError: a previous fsync failed; restart to recover.
            DiskFullError: disk usage is above the watermark.
        """
        for d in drafts:
            codec.validate_draft(d, body_size_max=self.config.body_size_max)
        with self._lock:
            self._check_writable()
            now = self.now_ms()
            results = [self._write_one(d, now) for d in drafts]
            end = self._written_end
            if self.config.flush_mode is FlushMode.SYNC:
                self._durable.notify_all()
                while self._durable_end < end and not self._fenced:
                    self._durable.wait()
                if self._durable_end < end:
                    raise StoreFencedError(self._fenced)
            else:
                self._dispatch_pending_locked(end)
        return results

    def _check_writable(self) -> None:
        if self._closed:
            raise StoreClosedError()
        if self._fenced:
            raise StoreFencedError(self._fenced)
        if self._appends % _DISK_CHECK_EVERY == 0:
            self._disk_used = self.disk.used_ratio(self.data_dir)
        self._appends += 1
        if self._disk_used > self.config.disk_watermark:
            raise DiskFullError(self._disk_used, self.config.disk_watermark)

    def _write_one(self, draft: RecordDraft, now: int) -> AppendResult:
        in_queue = codec.enters_queue(draft.flag)
        queue_offset = -1
        if in_queue:
            key = (draft.topic, draft.queue_id)
            queue_offset = self._next_queue_offset.get(key, -1)
            if queue_offset < 0:
                queue_offset = self._queue(*key).max_offset
            self._next_queue_offset[key] = queue_offset + 1
        buf = codec.encode(draft, queue_offset=queue_offset, store_timestamp_ms=now)
        phys = self.log.reserve(len(buf))
        self.log.write(phys, codec.place(buf, phys))
        self._written_end = phys + len(buf)
        self._pending.append(
            _Pending(
                self._written_end,
                draft.topic,
                draft.queue_id,
                queue_offset,
                phys,
                len(buf),
                draft.tag,
                _hashes(draft.topic, draft.message_id, draft.keys),
            )
        )
        return AppendResult(phys, len(buf), queue_offset, now, draft.message_id)

    def _flush_loop(self) -> None:
        """The flusher thread: one fdatasync per group of writers."""
        interval = self.config.flush_interval_ms / 1000.0
        sync_mode = self.config.flush_mode is FlushMode.SYNC
        while True:
            with self._lock:
                while self._written_end <= self._durable_end and not self._closed:
                    self._durable.wait(None if sync_mode else interval)
                if self._closed and self._written_end <= self._durable_end:
                    return
                target = self._written_end
                handle = self.log.active_handle()
            try:
                handle.sync()
            except OSError as exc:
                with self._lock:
                    self._fenced = f"fsync failed: {exc}"
                    self._durable.notify_all()
                return
            with self._lock:
                if sync_mode:
                    self._dispatch_pending_locked(target)
                self._durable_end = max(self._durable_end, target)
                self._durable.notify_all()
            self._maybe_checkpoint()

    def _dispatch_pending_locked(self, upto: int) -> None:
        with self._dispatch_lock:
            n = 0
            for p in self._pending:
                if p.end > upto:
                    break
                if p.queue_offset >= 0:
                    self._queue(p.topic, p.queue_id).append(
                        p.queue_offset, p.physical_offset, p.size, p.tag
                    )
                self.index.add(p.hashes, p.physical_offset)
                n += 1
            del self._pending[:n]

    # --- Checkpoints, flush, close. --------------------------------------------------------------

    def _maybe_checkpoint(self) -> None:
        if self._durable_end - self._checkpoint_offset >= _CHECKPOINT_EVERY_BYTES:
            self.checkpoint()

    def checkpoint(self) -> None:
        """Flush consume queues and index, then record the durable, dispatched log offset.

        Lock order is always _lock before _dispatch_lock; here they are taken one after the
        other, never nested. Every record below ``offset`` was dispatched before ``offset`` was
        read, so the syncs below cover it.
        """
        with self._lock:
            offset = self._durable_end
            if self._pending:
                offset = min(offset, self._pending[0].physical_offset)
        with self._dispatch_lock:
            for cq in list(self._queues.values()):
                cq.sync()
            self.index.sync()
        self.disk.write_atomic(
            self.data_dir / "checkpoint.json", json.dumps({"log_offset": offset}).encode()
        )
        self._checkpoint_offset = offset

    def flush(self) -> None:
        """Make everything appended so far durable (useful in ASYNC mode)."""
        with self._lock:
            self._check_open()
            end = self._written_end
            self._durable.notify_all()
            while self._durable_end < end and not self._fenced:
                self._durable.wait()
            if self._durable_end < end:
                raise StoreFencedError(self._fenced)

    def close(self) -> None:
        """Clean shutdown: flush, checkpoint, remove the abort marker. Idempotent."""
        with self._lock:
            if self._closed:
                return
            fenced = self._fenced
        if not fenced:
            self.flush()
        with self._lock:
            self._closed = True
            self._durable.notify_all()
        self._flusher.join(timeout=10)
        if not fenced:
            self.checkpoint()
            self.disk.remove(self.data_dir / "abort")
        for cq in self._queues.values():
            cq.close()
        self.index.close()
        self.log.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError()

    # --- Reading. --------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._durable_end

    @property
    def log_start_offset(self) -> int:
        return self.log.start_offset

    def read_at(self, physical_offset: int) -> Record:
        self._check_open()
        return self.log.read(physical_offset)

    def scan(self, from_offset: int, max_count: int) -> list[Record]:
        """Durable records in log order from ``from_offset`` (a record boundary)."""
        self._check_open()
        end = self._durable_end
        return [r for r in self.log.scan(from_offset, max_count) if r.physical_offset < end]

    def queues(self) -> dict[str, int]:
        out: dict[str, int] = {}
        with self._dispatch_lock:
            for topic, qid in self._queues:
                out[topic] = max(out.get(topic, 0), qid + 1)
        return out

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min, max) of a queue; max is the next offset to be assigned. (0, 0) when unknown."""
        with self._dispatch_lock:
            cq = self._queues.get((topic, queue_id))
            return (cq.min_offset, cq.max_offset) if cq else (0, 0)

    def read_queue(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        *,
        tags: frozenset[str] | None = None,
    ) -> QueueRead:
        """Read up to ``max_count`` records from a queue, optionally filtered by tag."""
        self._check_open()
        max_count = max(0, min(max_count, limits.READ_BATCH_MAX))
        with self._dispatch_lock:
            cq = self._queues.get((topic, queue_id))
            if cq is None:
                return QueueRead((), offset, 0, 0)
            lo, hi = cq.min_offset, cq.max_offset
            start = min(max(offset, lo), hi)
            entries = cq.entries(start, min(hi - start, limits.READ_SCAN_ENTRIES_MAX))
        wanted = None if tags is None else {tag_hash(t) for t in tags}
        out: list[Record] = []
        next_offset = start
        for phys, _size, thash in entries:
            if len(out) >= max_count:
                break
            next_offset += 1
            if wanted is not None and thash not in wanted:
                continue
            rec = self.log.read(phys)
            if tags is not None and rec.tag not in tags:
                continue
            out.append(rec)
        return QueueRead(tuple(out), next_offset, lo, hi)

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose record was stored at or after ``timestamp_ms``."""
        with self._dispatch_lock:
            cq = self._queues.get((topic, queue_id))
            if cq is None:
                return 0
            lo, hi = cq.min_offset, cq.max_offset
            while lo < hi:
                mid = (lo + hi) // 2
                if self.log.read(cq.entry(mid)[0]).store_timestamp_ms < timestamp_ms:
                    lo = mid + 1
                else:
                    hi = mid
            return lo

    def find_by_message_id(self, message_id: str) -> Record | None:
        with self._dispatch_lock:
            candidates = self.index.candidates(id_hash(message_id))
        for phys in reversed(candidates):
            rec = self.log.read(phys)
            if rec.message_id == message_id:
                return rec
        return None

    def find_by_key(self, topic: str, key: str, max_count: int) -> list[Record]:
        with self._dispatch_lock:
            candidates = self.index.candidates(key_hash(topic, key))
        out: list[Record] = []
        for phys in reversed(candidates):
            rec = self.log.read(phys)
            if rec.topic == topic and key in rec.keys:
                out.append(rec)
                if len(out) >= min(max_count, limits.FIND_BY_KEY_RESULTS_MAX):
                    break
        return out

    # --- Retention. ------------------------------------------------------------------------------

    def delete_expired_segments(self, *, keep_from_offset: int) -> int:
        """Delete whole segments older than retention that lie below ``keep_from_offset``.

        A segment's newest record is older than the first record of the segment after it, so that
        first record's store time bounds the whole segment without reading it.
        """
        deleted = 0
        cutoff = self.now_ms() - self.config.retention_ms
        with self._lock:
            while len(self.log.segments) > 1:
                nxt = self.log.segments[1]
                if nxt.start > keep_from_offset:
                    break
                first_ts = self.log.first_timestamp_of(1)
                if first_ts is None or first_ts >= cutoff:
                    break
                self.log.delete_segment(self.log.segments[0].start)
                deleted += 1
        if deleted:
            with self._dispatch_lock:
                for cq in self._queues.values():
                    cq.drop_before(self._first_live_entry(cq))
                self.index.forget_before(self.log.start_offset)
        return deleted


def _hashes(topic: str, message_id: str, keys: Sequence[str]) -> list[int]:
    out = [key_hash(topic, k) for k in keys]
    if message_id:
        out.append(id_hash(message_id))
    return out
