"""The store façade: commit log + write path + dispatcher (consume queues, index) + recovery.

Owns: the public ``Store`` API (docs/ARCHITECTURE.md) and putting its parts together: the
commit log (log/), the write path (write/: the writer lock, queue offsets and store timestamps,
the disk watermark, the group commit), the dispatcher of queues and index and its reader
(derived/), recovery at open and repair (recovery/), checkpoints (derived/checkpointer.py) and
retention (retention.py). Must not:
use asyncio, read the wall clock (time comes from ``now_ms``) or do file I/O except through
``Disk``.

Theory of operation
-------------------
``append_many`` hands its drafts to the write path, which writes them under the writer lock
and hands their dispatch entries to the group commit. In SYNC mode the writer then waits
until the flusher's fdatasync covers its bytes; the flusher dispatches the covered records to
queues and index before waking the writers, so a record is readable exactly when it is
durable ("visible end", ``log_end_offset``). ASYNC dispatches at once, fsyncs every interval.

Checkpoints (after every ``checkpointer.CHECKPOINT_EVERY_BYTES`` flushed, at retention and at
close) sync queues and index and record their sizes, bounding recovery work after a crash.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from txmq import limits
from txmq.errors import OffsetNotFoundError
from txmq.model import AppendResult, FlushMode, QueueBytes, QueueRead, Record, RecordDraft
from txmq.store.config import StoreConfig
from txmq.store.derived import checkpoint as cpfile
from txmq.store.derived.checkpointer import Checkpointer
from txmq.store.derived.reader import Reader
from txmq.store.derived.recent import Recent
from txmq.store.files.ballast import Ballast
from txmq.store.files.disk import Disk, OsDisk
from txmq.store.health import Health
from txmq.store.log.commit_log import CommitLog
from txmq.store.recovery.recover import recover_store
from txmq.store.recovery.repair import Scrubber, rebuild_queue
from txmq.store.retention import Retention
from txmq.store.write.group_commit import Pending
from txmq.store.write.watermark import Watermark
from txmq.store.write.write_path import WritePath


class Store:
    """See the module docstring. Thread-safe; open with ``Store.open``. ``writes`` is the
    write path (store/write/write_path.py): replication writes shipped records through it and waits
    on its group commit."""

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
        watermark = Watermark(disk, data_dir, config.disk_watermark, self._ballast)
        self.log = CommitLog(
            data_dir / "commitlog",
            disk,
            config.segment_size_bytes,
            before_growth=watermark.check_growth,
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
        self._checkpoints = Checkpointer(
            self._dispatcher,
            disk,
            data_dir,
            fenced=lambda: self.writes.group.fenced,
            sync_log=self.log.sync if config.flush_mode is FlushMode.ASYNC else None,
        )
        self._retention = Retention(
            self.log,
            self._dispatcher,
            self._checkpoints,
            retention_ms=config.retention_ms,
            now_ms=now_ms,
        )
        next_queue_offsets = self._dispatcher.next_queue_offsets()
        next_queue_offsets.update(self.recovery.held_queue_ends)  # held from readers only
        self.writes = WritePath(
            self.log,
            self._dispatcher,
            config,
            now_ms=now_ms,
            watermark=watermark,
            recent=self._recent,
            next_queue_offsets=next_queue_offsets,
            after_flush=self._checkpoints.after_flush,
            inline_sync=inline_sync,
        )
        self._dispatcher.on_disk_full = lambda: self._ballast.release(disk_full=True)
        self._dispatcher.before_growth = watermark.check_growth
        self._checkpoints.checkpoint_if_room()
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
        made readable (``recovery.held``, for the caller's store/replica/hold.Hold: ADR 0005).
        ``inline_sync``: a follower's store, written only by store/replica, which syncs each
        shipment in the writing thread (write/group_commit.py ``inline``; never ``append_many``).

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
        pending = self.writes.append_nowait(drafts)
        if pending.group is not None:
            pending.group.wait()
        return self.writes.durable(pending)

    def append_many_nowait(self, drafts: Sequence[RecordDraft]) -> Pending:
        """``append_many`` up to the write: returns at once, before the fsync.

        The records are durable (and readable) once ``pending.group`` is done, which a caller
        waits for (``group.wait()``) or asks to be told of (``group.on_done``: how the broker's
        event loop waits without a thread); then ``durable(pending)`` gives the results or
        raises StoreFencedError. Raises what ``append_many`` raises before writing.
        """
        return self.writes.append_nowait(drafts)

    def durable(self, pending: Pending) -> list[AppendResult]:
        """The results of a write from ``append_many_nowait`` once its group is done.

        Raises:
            StoreFencedError: the fsync that would have covered it failed.
        """
        return self.writes.durable(pending)

    def flush(self) -> None:
        """Make everything appended so far durable (useful in ASYNC mode).

        Raises:
            StoreFencedError: the fsync failed.
        """
        self.writes.check_open()
        self.writes.group.flush()

    # --- Checkpoints, close. ---------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Sync queues and index and record how far they are consistent with the log.

        Raises:
            StoreFencedError: the store is fenced; nothing is synced or written.
        """
        self._checkpoints.checkpoint()

    def close(self) -> None:
        """Clean shutdown: flush, checkpoint, remove the abort marker. Idempotent.

        After a fence nothing more is written and the abort marker stays, so the next open
        recovers from what is really on disk.
        """
        if not self.writes.close():
            return
        self._ballast.release()  # the last saves must fit on a full disk
        if not self.writes.group.fenced:
            # Skipped on a full disk: the flush above made the log durable, and the previous
            # checkpoint vouches for a prefix; the next open re-dispatches the rest.
            self._checkpoints.checkpoint_if_room()
            cpfile.mark_closed(self.disk, self.data_dir)
        self._dispatcher.close()
        self.log.close()

    def release_reserve(self) -> bool:
        """Give the disk reserve back (the broker does before its last saves on a full disk)."""
        return self._ballast.release()

    def abandon(self) -> None:
        """Stop at once without flushing, checkpointing or removing the abort marker, as if
        the process had died. For crash tests over a simulated disk."""
        self.writes.abandon()

    def _check_open(self) -> None:
        self.writes.check_open()

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
        return self.writes.group.fenced

    def read_at(self, physical_offset: int, *, held: bool = False) -> Record:
        """The record at ``physical_offset``; with ``held``, also one durable but held back
        from readers (a SYNC leader's read hold: the transaction book reads those).

        Raises:
            OffsetNotFoundError: outside the retained, visible (or held) log.
            CorruptRecordError: the bytes there fail verification.
        """
        self._check_open()
        if physical_offset >= (self.writes.group.durable_end if held else self._dispatcher.end):
            raise OffsetNotFoundError(f"commit-log offset {physical_offset} is not visible")
        return self.log.read(physical_offset)

    def scan(self, from_offset: int, max_count: int, *, held: bool = False) -> list[Record]:
        """Visible (with ``held``: also held, as ``read_at``) records of every flag in log order
        from ``from_offset`` (a record boundary; below the log start means from the start). A
        damaged record is reported in ``health`` and skipped, the scan going on at the next
        record that verifies."""
        self._check_open()
        end = self.writes.group.durable_end if held else None
        return self._reader.scan(from_offset, max_count, end=end)

    @property
    def durable_end_offset(self) -> int:
        """Next physical offset after the last durable record, visible or held back."""
        return self.writes.group.durable_end

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
        where: Callable[[Record], bool] | None = None,
        max_bytes: int | None = None,
    ) -> QueueRead:
        """Read up to ``max_count`` records of a queue from ``offset``, optionally only those
        whose tag is in ``tags`` and for which ``where`` (a consumer's SQL92 filter: pure, it
        must not raise) is true, stopping before their sizes pass ``max_bytes`` (the first
        record always comes). A filtered read looks at most READ_SCAN_ENTRIES_MAX entries
        (READ_FILTER_RECORDS_MAX with ``where``, which decodes each);
        ``next_offset`` moves past entries it skipped, so a filtered reader still progresses.
        Each record is checked against its queue entry (store/derived/reader.py): a damaged record
        is reported in ``health`` and skipped, a wrong entry makes the queue be rebuilt."""
        self._check_open()
        return self._reader.read_queue(
            topic, queue_id, offset, max_count, tags=tags, where=where, max_bytes=max_bytes
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
        returns the queues it rebuilt. The broker calls this every second
        (store/recovery/repair.py)."""
        self._check_open()
        with self._scrub_lock:
            rebuilt = self._scrubber.step(
                budget, now_ms=self.now_ms(), pause_ms=limits.SCRUB_PASS_PAUSE_MS
            )
        if self._scrubber.index_rebuilt:
            self._checkpoints.retake()
        return rebuilt

    def rebuild_queue(self, key: tuple[str, int]) -> int:
        """Rewrite queue ``key``'s entries from the log where they disagree; returns how many."""
        with self._scrub_lock:
            return rebuild_queue(self.log, self._dispatcher, self.health, key)

    # --- Retention. ------------------------------------------------------------------------------

    def delete_expired_segments(self, *, keep_from_offset: int) -> int:
        """See ``retention.Retention.delete_expired``."""
        self._check_open()
        return self._retention.delete_expired(keep_from_offset)
