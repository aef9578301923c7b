"""The store's write path: every record enters the log here, under one writer lock.

Owns: ``WritePath``: the writer lock (its group commit's ``lock``), the checks before a write
(closed, fenced, the disk watermark), assigning queue offsets and store timestamps, placing a
batch in the log with one reservation and one write, and handing its dispatch entries to the
group commit (store/write/group_commit.py), which makes them durable and then readable. Two ways
in: a producer's drafts (``append_nowait``: encoded here) and a replica's shipped records, which
carry their offsets already (``append_placed``: written where the leader wrote them). ``group``
is public for whoever waits on durability (its ends, ``check_durable``, ``sync_here``, the read
hold's ``replace_publish``).
Must not: read or scan the log, checkpoint (``after_flush`` is the caller's), use asyncio, or
read the wall clock except through ``now_ms``.

Theory of operation: ``append_nowait`` validates and encodes its drafts, then under the writer
lock assigns queue offsets, reserves room for the whole batch in one segment (and for its
queue and index entries), writes it with one pwrite (staged for the flusher in SYNC mode) and
hands the entries to the group commit. A failed reservation on a full disk refuses the write
with nothing written; any other failure to write fences the store (ADR 0001).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from txmq.errors import (
    BadRequestError,
    CorruptRecordError,
    DiskFullError,
    StoreClosedError,
    StoreFencedError,
)
from txmq.format import record as codec
from txmq.model import AppendResult, FlushMode, RecordDraft
from txmq.store.config import StoreConfig
from txmq.store.derived.dispatch import Dispatcher
from txmq.store.derived.recent import Recent
from txmq.store.log.commit_log import CommitLog
from txmq.store.write.group_commit import Group, GroupCommit, Pending
from txmq.store.write.watermark import Watermark


class WritePath:
    """Thread-safe: writers serialise on ``group.lock``."""

    def __init__(
        self,
        log: CommitLog,
        dispatcher: Dispatcher,
        config: StoreConfig,
        *,
        now_ms: Callable[[], int],
        watermark: Watermark,
        recent: Recent,
        next_queue_offsets: dict[tuple[str, int], int],
        after_flush: Callable[[int], None],
        inline_sync: bool,
    ) -> None:
        self._log = log
        self._dispatcher = dispatcher
        self._now_ms = now_ms
        self._watermark = watermark
        self._recent = recent  # queue records as written: a read of one skips its decode
        self._next_queue_offset = next_queue_offsets
        self._body_size_max = config.body_size_max
        self._segment_size = config.segment_size_bytes
        self._stage_writes = config.flush_mode is FlushMode.SYNC
        self._last_store_ms = 0
        self._closed = False
        self.group = GroupCommit(
            sync_mode=config.flush_mode is FlushMode.SYNC,
            interval_ms=config.flush_interval_ms,
            end=log.end_offset,
            sync_log=log.sync,
            publish=dispatcher.publish,
            take_writes=log.take_staged,
            after_flush=after_flush,
            inline=inline_sync,
            linger_us=config.group_commit_linger_us,
        )

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        """Raises StoreClosedError once the store is closed."""
        if self._closed:
            raise StoreClosedError()

    # --- A producer's drafts. ------------------------------------------------------------------

    def append_nowait(self, drafts: Sequence[RecordDraft]) -> Pending:
        """Write ``drafts`` as one batch; returns at once, before the fsync (``Pending``:
        durable once its group is done, then ``durable`` gives the results).

        Raises:
            MessageBodyTooLargeError and other input errors, or BadRequestError for a batch
                larger than a segment: nothing was written.
            StoreFencedError, DiskFullError, StoreClosedError.
        """
        if not drafts:
            return Pending([], self.group.written_end, None)
        for d in drafts:
            codec.validate_draft(d, body_size_max=self._body_size_max)
        with self.group.lock:
            self.check_writable(clock := self._now_ms())
            now = max(clock, self._last_store_ms)
            results, end, group = self._write_locked(drafts, now)
            self._last_store_ms = now
        return Pending(results, end, group)

    def durable(self, pending: Pending) -> list[AppendResult]:
        """The results of ``pending`` once its group is done.

        Raises:
            StoreFencedError: the fsync that would have covered it failed.
        """
        self.group.check_durable(pending.group, pending.end)
        return pending.results

    def check_writable(self, now: int | None = None) -> None:
        """Under the writer lock: refuse a write to a closed, fenced or too full store.
        ``now``: the caller's reading of the clock, if it has one."""
        if self._closed:
            raise StoreClosedError()
        self.group.check_writable()
        self._watermark.check(self._now_ms() if now is None else now)

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
        phys = self._reserve(total, assigned, index_entries)
        parts: list[bytes] = []
        entries: list[codec.Entry] = []
        results: list[AppendResult] = []
        at, n = phys, len(bufs)
        for i in range(n):
            d, qoff = drafts[i], qoffs[i]
            parts.append(placed := codec.place(bufs[i], at, batch_left=n - 1 - i))
            size = len(placed)
            entries.append(codec.Entry(
                at, size, d.flag, 0, d.topic, d.queue_id, qoff, now, d.tag, d.message_id, d.keys
            ))  # fmt: skip
            results.append(AppendResult(at, size, qoff, now, d.message_id))
            at += size
        try:
            self._log.write(phys, parts[0] if n == 1 else b"".join(parts), stage=self._stage_writes)
            self._next_queue_offset.update(assigned)
            group = self.group.add(entries, at)
        except DiskFullError:
            raise  # the cut-short write was undone: refused, not fenced
        except OSError as exc:
            self.group.fence(f"writing the log failed: {exc}")
            raise StoreFencedError(self.group.fenced) from exc
        for i in range(n):
            if qoffs[i] >= 0:
                self._recent.add(parts[i], drafts[i], results[i])
        return results, at, group

    def _reserve(
        self, size: int, queue_ends: dict[tuple[str, int], int], index_entries: int
    ) -> int:
        """The log's space for ``size`` bytes, then its derived data's; returns where the bytes
        go. A full disk refuses here, with nothing written; any other failure fences."""
        try:
            phys = self._log.reserve(size)
            self._dispatcher.reserve(queue_ends, index_entries)
        except DiskFullError:
            raise  # nothing was written: refused, not fenced
        except OSError as exc:
            self.group.fence(f"rolling a segment failed: {exc}")
            raise StoreFencedError(self.group.fenced) from exc
        return phys

    # --- A replica's shipped records. ------------------------------------------------------------

    def append_placed(self, data: bytes, entries: Sequence[codec.Entry]) -> Group | None:
        """Write records that carry their offsets already (``entries`` describes ``data``, in
        order) where they say, one reservation per batch as the leader made, and hand them to
        the group commit; returns the group to wait for.

        Raises:
            CorruptRecordError: a batch would land elsewhere (the log or the segment size
                differs from the leader's).
            StoreFencedError, DiskFullError, StoreClosedError: as ``append_nowait``.
        """
        with self.group.lock:
            self.check_writable()
            first, pos = 0, 0
            for i, e in enumerate(entries):
                if e.batch_left == 0 or i == len(entries) - 1:
                    batch = entries[first : i + 1]
                    size = sum(b.size for b in batch)
                    self._write_placed(data[pos : pos + size], batch)
                    first, pos = i + 1, pos + size
            last = entries[-1]
            return self.group.add(entries, last.physical_offset + last.size)

    def _write_placed(self, chunk: bytes, batch: Sequence[codec.Entry]) -> None:
        start = batch[0].physical_offset
        at = self._log.reserve(len(chunk))
        if at != start:
            raise CorruptRecordError(
                start,
                f"a shipped batch would land at {at}: the follower's log or segment size differs"
                " from its leader's",
            )
        queued = [e for e in batch if codec.enters_queue(e.flag)]
        ends = {(e.topic, e.queue_id): e.queue_offset + 1 for e in queued}
        self._dispatcher.reserve(ends, sum(len(e.keys) + 1 for e in batch))  # as the leader did
        try:
            self._log.write(at, chunk, stage=self._stage_writes)  # the flusher pwrites it
        except OSError as exc:
            self.group.fence(f"writing a shipped record failed: {exc}")
            raise StoreFencedError(self.group.fenced) from exc
        for e in batch:
            if codec.enters_queue(e.flag):
                self._next_queue_offset[(e.topic, e.queue_id)] = e.queue_offset + 1
            self._last_store_ms = max(self._last_store_ms, e.store_timestamp_ms)

    # --- Stopping. -------------------------------------------------------------------------------

    def close(self) -> bool:
        """Refuse writes from now on and stop the group commit after syncing what was written;
        True the first time (the caller then checkpoints), False if already closed."""
        with self.group.lock:
            if self._closed:
                return False
            self._closed = True
        self.group.stop(flush=True)
        return True

    def abandon(self) -> None:
        """Stop at once without syncing, as if the process had died (crash tests)."""
        with self.group.lock:
            self._closed = True
            self.group.fence("the store was abandoned")  # wakes waiting writers with an error
        self.group.stop(flush=False)
