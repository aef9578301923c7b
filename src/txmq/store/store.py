"""The store façade: commit log + dispatcher (consume queues, index) + group commit + recovery.

Owns: the public ``Store`` API (docs/ARCHITECTURE.md), serialising writers, assigning queue
offsets and store timestamps, checkpoints, retention and the disk watermark. The parts it
composes: ``commit_log`` (segments), ``dispatch`` (queues + index), ``flush`` (group commit,
fencing), ``recovery`` (open after a crash), ``checkpoint`` (file + abort marker). Must not: use
asyncio, read the wall clock (time comes from ``now_ms``) or do file I/O except through ``Disk``.

Theory of operation
-------------------
``append_many`` validates and encodes its drafts, then under the writer lock assigns queue
offsets, reserves room for the whole batch in one segment, writes it with one pwrite and hands
the dispatch entries to the group commit. In SYNC mode it then releases the lock and waits
until the flusher's fdatasync covers its bytes; the flusher dispatches the covered records to
queues and index before waking the writers, so a record is readable exactly when it is
durable ("visible end", ``log_end_offset``). ASYNC dispatches at once, fsyncs every interval.

Checkpoints (after every ``_CHECKPOINT_EVERY_BYTES`` flushed, at retention and at close) sync
queues and index and record their sizes, bounding recovery work after a crash.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from txmq import limits
from txmq.errors import (
    BadRequestError,
    DiskFullError,
    OffsetNotFoundError,
    StoreClosedError,
    StoreFencedError,
    is_disk_full,
)
from txmq.format import record as codec
from txmq.model import AppendResult, FlushMode, QueueBytes, QueueRead, Record, RecordDraft
from txmq.store import checkpoint as cpfile
from txmq.store.ballast import Ballast
from txmq.store.commit_log import CommitLog
from txmq.store.config import StoreConfig
from txmq.store.disk import Disk, OsDisk
from txmq.store.flush import Group, GroupCommit, Pending
from txmq.store.health import Health
from txmq.store.reader import Reader
from txmq.store.recent import Recent
from txmq.store.recovery import recover_store
from txmq.store.repair import Scrubber, rebuild_queue
from txmq.store.retention import delete_expired

# Disk usage is checked every this many appends or milliseconds, whichever comes first: a
# statvfs per append would cost more than the write.
_DISK_CHECK_EVERY: Final = 256
_DISK_CHECK_MS: Final = 1_000
# A checkpoint is taken after this many flushed bytes, bounding recovery work after a crash.
_CHECKPOINT_EVERY_BYTES: Final = 64 * limits.MiB
logger = logging.getLogger(__name__)


class Store:
    """See the module docstring. Thread-safe; open with ``Store.open``."""

    def __init__(
        self,
        data_dir: Path,
        config: StoreConfig,
        now_ms: Callable[[], int],
        disk: Disk,
        visible_end: int | None = None,
        inline_sync: bool = False,
    ):
        self.data_dir = data_dir
        self.config = config
        self.now_ms = now_ms
        self.disk = disk
        disk.makedirs(data_dir)
        # Give the reserve back first, so recovery and the markers fit on a full disk.
        self._ballast = Ballast(disk, data_dir)
        self._ballast.release()
        self.log = CommitLog(
            data_dir / "commitlog",
            disk,
            config.segment_size_bytes,
            before_growth=self._check_growth,
        )
        self._dispatcher, self.recovery = recover_store(
            self.log, data_dir, disk, config.consume_queue_entries_per_file, visible_end=visible_end
        )
        self._dispatcher.drop_expired(self.log.start_offset)
        # Retention leaves dead index entries behind; drop them here, where a checkpoint
        # follows at once.
        self._dispatcher.compact_index(self.log.start_offset)
        self.health = Health()
        self._scrub_lock = threading.Lock()
        self._recent = Recent()  # queue records as written: a read of one skips its decode
        self._reader = Reader(
            self.log, self._dispatcher, self.health, self.rebuild_queue, self._recent
        )
        self._scrubber = Scrubber(self.log, self._dispatcher, self.health)
        self._checkpoint_lock = threading.Lock()
        self._retention_lock = threading.Lock()
        self._checkpointed = -1
        self._next_queue_offset = self._dispatcher.next_queue_offsets()
        self._next_queue_offset.update(self.recovery.held_queue_ends)  # held from readers only
        self._closed = False
        self._appends = 0
        self._disk_checked_ms = -_DISK_CHECK_MS
        self._disk_used = 0.0
        self._last_store_ms = 0
        self._stage_writes = config.flush_mode is FlushMode.SYNC
        self._segment_size = config.segment_size_bytes  # StoreConfig is not compiled
        self._group = GroupCommit(
            sync_mode=config.flush_mode is FlushMode.SYNC,
            interval_ms=config.flush_interval_ms,
            end=self.log.end_offset,
            sync_log=self.log.sync,
            publish=self._dispatcher.publish,
            take_writes=self.log.take_staged,
            after_flush=self._after_flush,
            inline=inline_sync,
            linger_us=config.group_commit_linger_us,
        )
        self._dispatcher.on_disk_full = self._ballast.release
        self._dispatcher.before_growth = self._check_growth
        self._checkpoint_if_room()
        cpfile.mark_open(disk, data_dir)
        self._ballast.take()

    @classmethod
    def open(
        cls,
        data_dir: Path,
        config: StoreConfig | None = None,
        *,
        now_ms: Callable[[], int],
        disk: Disk | None = None,
        visible_end: int | None = None,
        inline_sync: bool = False,
    ) -> Store:
        """Create or recover the store in ``data_dir``; records past ``visible_end`` are not
        made readable (``recovery.held``, for the caller's store/replica.Hold: ADR 0005).
        ``inline_sync``: a follower's store, written only by store/replica, which syncs each
        shipment in the writing thread (flush.py ``inline``; never ``append_many``).

        Raises:
            CorruptRecordError: mid-log corruption, or a torn tail after a clean shutdown.
        """
        args = (Path(data_dir), config or StoreConfig(), now_ms, disk or OsDisk())
        return cls(*args, visible_end, inline_sync)

    # --- Writing. ------------------------------------------------------------------------------

    def append(self, draft: RecordDraft) -> AppendResult:
        """Append one record; see ``append_many``."""
        return self.append_many([draft])[0]

    def append_many(self, drafts: Sequence[RecordDraft]) -> list[AppendResult]:
        """Append records with one write and one fsync; all or nothing after a crash.

        Returns once the records are as durable as the flush mode promises (SYNC: fsynced and
        visible to readers). Queue offsets go only to NORMAL/COMMIT records; others get -1.

        Raises:
            MessageBodyTooLargeError, MessagePropertiesTooLargeError and other input errors, or
                BadRequestError for a batch larger than a segment: nothing was written.
            StoreFencedError: an fsync failed; restart to recover.
            DiskFullError: disk usage is above the watermark.
            StoreClosedError: the store is closed.
        """
        pending = self.append_many_nowait(drafts)
        if pending.group is not None:
            pending.group.wait()
        return self.durable(pending)

    def append_many_nowait(self, drafts: Sequence[RecordDraft]) -> Pending:
        """``append_many`` up to the write: returns at once, before the fsync.

        The records are durable (and readable) once ``pending.group`` is done, which a caller
        waits for (``group.wait()``) or asks to be told of (``group.on_done``: how the broker's
        event loop waits without a thread); then ``durable(pending)`` gives the results or
        raises StoreFencedError. Raises what ``append_many`` raises before writing.
        """
        if not drafts:
            return Pending([], self._group.written_end, None)
        for d in drafts:
            codec.validate_draft(d, body_size_max=self.config.body_size_max)
        with self._group.lock:
            self._check_writable(clock := self.now_ms())
            now = max(clock, self._last_store_ms)
            results, end, group = self._write_locked(drafts, now)
            self._last_store_ms = now
        return Pending(results, end, group)

    def durable(self, pending: Pending) -> list[AppendResult]:
        """The results of a write from ``append_many_nowait`` once its group is done.

        Raises:
            StoreFencedError: the fsync that would have covered it failed.
        """
        self._group.check_durable(pending.group, pending.end)
        return pending.results

    def _check_writable(self, now: int | None = None) -> None:
        if self._closed:
            raise StoreClosedError()
        self._group.check_writable()
        now = self.now_ms() if now is None else now  # the caller's reading of the clock, if any
        self._appends += 1
        if self._appends % _DISK_CHECK_EVERY == 1 or now - self._disk_checked_ms >= _DISK_CHECK_MS:
            self._disk_used = self.disk.used_ratio(self.data_dir)
            self._disk_checked_ms = now
            self._ballast.retake(self.disk.space(self.data_dir)[1])
        if self._disk_used > self.config.disk_watermark:
            raise DiskFullError.above_watermark(self._disk_used, self.config.disk_watermark)

    def _check_growth(self, nbytes: int) -> None:
        """Refuse a reservation (log or derived data) that would pass the watermark (ADR 0003)."""
        total, free = self.disk.space(self.data_dir)
        after = (total - free + nbytes) / total if total else 0.0
        if after > self.config.disk_watermark:
            self._disk_used = (total - free) / total
            raise DiskFullError.above_watermark(after, self.config.disk_watermark, nbytes <= free)

    def _write_locked(
        self, drafts: Sequence[RecordDraft], now: int
    ) -> tuple[list[AppendResult], int, Group | None]:
        """Encode, place and write a batch under the writer lock; returns the results, the end
        offset and the group commit to wait for (None in ASYNC mode)."""
        assigned: dict[tuple[str, int], int] = {}
        bufs: list[bytearray] = []
        qoffs: list[int] = []
        total = index_entries = 0
        for d in drafts:
            qoff = -1
            if codec.enters_queue(d.flag):
                key = (d.topic, d.queue_id)
                qoff = assigned.get(key, self._next_queue_offset.get(key, 0))
                assigned[key] = qoff + 1
            buf = codec.encode(d, queue_offset=qoff, store_timestamp_ms=now)
            bufs.append(buf)
            qoffs.append(qoff)
            total += len(buf) + codec.HEAD_SIZE  # ``place`` puts the head in front
            index_entries += len(d.keys) + 1
        if total + codec.HEAD_SIZE > self._segment_size:
            raise BadRequestError(f"a batch of {total} bytes does not fit one log segment")
        try:  # the log's space, then its derived data's: a full disk refuses here
            phys = self.log.reserve(total)
            self._dispatcher.reserve(assigned, index_entries)
        except DiskFullError:
            raise  # nothing was written: refused, not fenced
        except OSError as exc:
            self._group.fence(f"rolling a segment failed: {exc}")
            raise StoreFencedError(self._group.fenced) from exc
        parts: list[bytes] = []
        entries: list[codec.Entry] = []
        results: list[AppendResult] = []
        at, n = phys, len(bufs)
        for i in range(n):  # by index: a zip(strict=True) is a generic call compiled (issue 17)
            d, qoff = drafts[i], qoffs[i]
            parts.append(placed := codec.place(bufs[i], at, batch_left=n - 1 - i))
            size = len(placed)
            entries.append(codec.Entry(
                at, size, d.flag, 0, d.topic, d.queue_id, qoff, now, d.tag, d.message_id, d.keys
            ))  # fmt: skip
            results.append(AppendResult(at, size, qoff, now, d.message_id))
            at += size
        try:
            self.log.write(phys, parts[0] if n == 1 else b"".join(parts), stage=self._stage_writes)
            self._next_queue_offset.update(assigned)
            group = self._group.add(entries, at)
        except DiskFullError:
            raise  # the cut-short write was undone: refused, not fenced
        except OSError as exc:
            self._group.fence(f"writing the log failed: {exc}")
            raise StoreFencedError(self._group.fenced) from exc
        for i in range(n):
            if qoffs[i] >= 0:
                self._recent.add(parts[i], drafts[i], results[i])
        return results, at, group

    def flush(self) -> None:
        """Make everything appended so far durable (useful in ASYNC mode).

        Raises:
            StoreFencedError: the fsync failed.
        """
        self._check_open()
        self._group.flush()

    # --- Checkpoints, close. ---------------------------------------------------------------------

    def _after_flush(self, durable_end: int) -> None:
        if durable_end - self._checkpointed >= _CHECKPOINT_EVERY_BYTES:
            self._checkpoint_if_room()

    def _checkpoint_if_room(self) -> None:
        """Checkpoint, unless the disk is full: the previous checkpoint still vouches for a
        prefix of the log, so skipping one costs only recovery time (logged)."""
        try:
            self.checkpoint()
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            logger.warning("disk full: checkpoint not updated (%s)", exc)

    def checkpoint(self) -> None:
        """Sync queues and index and record how far they are consistent with the log.

        Raises:
            StoreFencedError: the store is fenced; nothing is synced or written.
        """
        with self._checkpoint_lock:
            if self._group.fenced:
                # Never: it would fsync again after a failed fsync (ADR 0001).
                raise StoreFencedError(self._group.fenced)
            snap = self._dispatcher.snapshot()
            if snap.log_offset <= self._checkpointed:
                return
            if self.config.flush_mode is FlushMode.ASYNC:
                self.log.sync()  # ASYNC dispatches before the fsync; the checkpoint may not.
            self._dispatcher.sync()
            cpfile.save(self.disk, self.data_dir, snap)
            self._checkpointed = snap.log_offset

    def close(self) -> None:
        """Clean shutdown: flush, checkpoint, remove the abort marker. Idempotent.

        After a fence nothing more is written and the abort marker stays, so the next open
        recovers from what is really on disk.
        """
        with self._group.lock:
            if self._closed:
                return
            self._closed = True
        self._group.stop(flush=True)
        self._ballast.release()  # the last saves must fit on a full disk
        if not self._group.fenced:
            # Skipped on a full disk: the flush above made the log durable, and the previous
            # checkpoint vouches for a prefix; the next open re-dispatches the rest.
            self._checkpoint_if_room()
            cpfile.mark_closed(self.disk, self.data_dir)
        self._dispatcher.close()
        self.log.close()

    def release_reserve(self) -> bool:
        """Give the disk reserve back (the broker does before its last saves on a full disk)."""
        return self._ballast.release()

    def abandon(self) -> None:
        """Stop at once without flushing, checkpointing or removing the abort marker, as if
        the process had died. For crash tests over a simulated disk."""
        with self._group.lock:
            self._closed = True
            self._group.fence("the store was abandoned")  # wakes waiting writers with an error
        self._group.stop(flush=False)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError()

    # --- Reading. --------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        """Next physical offset after the last visible (in SYNC mode: durable) record."""
        return self._dispatcher.end

    @property
    def log_start_offset(self) -> int:
        return self.log.start_offset

    @property
    def fenced(self) -> str:
        """Why the store refuses writes, or "" while it accepts them."""
        return self._group.fenced

    def read_at(self, physical_offset: int, *, held: bool = False) -> Record:
        """The record at ``physical_offset``; with ``held``, also one durable but held back
        from readers (a SYNC leader's read hold: the transaction book reads those).

        Raises:
            OffsetNotFoundError: outside the retained, visible (or held) log.
            CorruptRecordError: the bytes there fail verification.
        """
        self._check_open()
        if physical_offset >= (self._group.durable_end if held else self._dispatcher.end):
            raise OffsetNotFoundError(f"commit-log offset {physical_offset} is not visible")
        return self.log.read(physical_offset)

    def scan(self, from_offset: int, max_count: int, *, held: bool = False) -> list[Record]:
        """Visible (with ``held``: also held, as ``read_at``) records of every flag in log order
        from ``from_offset`` (a record boundary; below the log start means from the start). A
        damaged record is reported in ``health`` and skipped, the scan going on at the next
        record that verifies."""
        self._check_open()
        end = self._group.durable_end if held else None
        return self._reader.scan(from_offset, max_count, end=end)

    @property
    def durable_end_offset(self) -> int:
        """Next physical offset after the last durable record, visible or held back."""
        return self._group.durable_end

    def queues(self) -> dict[str, int]:
        """Topic -> number of queue ids seen (highest id + 1)."""
        return self._dispatcher.topics()

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min, max) of a queue; max is the next offset to be assigned. (0, 0) when unknown."""
        return self._dispatcher.queue_range(topic, queue_id)[1:]

    def queue_ends(self, topic: str, queue_ids: Sequence[int]) -> list[int]:
        """The max offset of each of ``queue_ids`` (as ``queue_offsets``), under one lock."""
        return self._dispatcher.queue_ends(topic, queue_ids)

    def read_queue(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        *,
        tags: frozenset[str] | None = None,
        max_bytes: int | None = None,
    ) -> QueueRead:
        """Read up to ``max_count`` records of a queue from ``offset``, optionally only those
        whose tag is in ``tags``, stopping before their sizes pass ``max_bytes`` (the first
        record always comes). A filtered read looks at most READ_SCAN_ENTRIES_MAX entries;
        ``next_offset`` moves past entries it skipped, so a filtered reader still progresses.
        Each record is checked against its queue entry (store/reader.py): a damaged record is
        reported in ``health`` and skipped, a wrong entry makes the queue be rebuilt."""
        self._check_open()
        return self._reader.read_queue(
            topic, queue_id, offset, max_count, tags=tags, max_bytes=max_bytes
        )

    def read_queue_bytes(
        self, topic: str, queue_id: int, offset: int, max_count: int, *, max_bytes: int
    ) -> QueueBytes:
        """Like ``read_queue`` without a filter, but each record comes as its verified bytes
        (commit-log format, docs/formats.md) and the read stops before their total passes
        ``max_bytes`` (it always returns at least one record when one is there). For bulk
        readers that decode on their side: no field decoding here, one segment lookup per
        batch of entries."""
        self._check_open()
        return self._reader.read_queue_bytes(
            topic, queue_id, offset, max_count, max_bytes=max_bytes
        )

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose record was stored at or after ``timestamp_ms`` (the
        queue's max offset if none). Binary search over the queue."""
        return self._reader.offset_for_timestamp(topic, queue_id, timestamp_ms)

    def find_by_message_id(self, message_id: str) -> Record | None:
        """The newest visible record with this message id, or None."""
        self._check_open()
        return self._reader.find_by_message_id(message_id)

    def find_by_key(self, topic: str, key: str, max_count: int) -> list[Record]:
        """Up to ``max_count`` (at most FIND_BY_KEY_RESULTS_MAX) records of ``topic`` carrying
        ``key``, newest first."""
        self._check_open()
        return self._reader.find_by_key(topic, key, max_count)

    # --- Damage. ---------------------------------------------------------------------------------

    def scrub_step(self, budget: int = limits.SCRUB_BYTES_PER_STEP) -> list[tuple[str, int]]:
        """Re-verify the next ``budget`` bytes of the log (CRCs, blank spans, queue entries);
        returns the queues it rebuilt. The broker calls this every second (store/repair.py)."""
        self._check_open()
        with self._scrub_lock:
            rebuilt = self._scrubber.step(
                budget, now_ms=self.now_ms(), pause_ms=limits.SCRUB_PASS_PAUSE_MS
            )
        if self._scrubber.index_rebuilt:
            # The checkpoint must count the new file's entries (recovery truncates to them),
            # even with no record appended since the last one.
            with self._checkpoint_lock:
                self._checkpointed = -1
            self._checkpoint_if_room()
        return rebuilt

    def rebuild_queue(self, key: tuple[str, int]) -> int:
        """Rewrite queue ``key``'s entries from the log where they disagree; returns how many."""
        with self._scrub_lock:
            return rebuild_queue(self.log, self._dispatcher, self.health, key)

    # --- Retention. ------------------------------------------------------------------------------

    def delete_expired_segments(self, *, keep_from_offset: int) -> int:
        """See ``retention.delete_expired``."""
        self._check_open()
        return delete_expired(self, keep_from_offset)
