"""Reads through consume queues and the index, each record checked against what led to it.

Owns: ``Reader`` (``read_queue``, ``read_queue_bytes``, ``offset_for_timestamp``, the index
lookups), used by the ``Store`` façade. Must not: write records, take the writer lock, or serve a
record that is not the one its queue entry promises.

Theory of operation
-------------------
Every record reached through a queue entry is checked twice: its own bytes (size, magic, CRC,
stored physical offset, on every read) and that it is the record the entry promises (topic,
queue id, queue offset and size). Then:

* the record verifies but is another one (a damaged or stale queue entry): the queue is rebuilt
  from the log (``repair.rebuild_queue``) and the entry read again; an entry still wrong after
  the rebuild is skipped and reported;
* the record fails its checks while its header still names the promised queue, offset and size:
  the commit log is damaged there; the record is reported (``Health``: log line, count, admin
  status) and skipped, so the rest of its queue keeps flowing;
* otherwise the entry points at garbage: rebuild, as in the first case.

Index lookups already compare each candidate with what was asked, so a bad candidate is skipped
(and a damaged one reported).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from txmq import limits
from txmq.errors import CorruptRecordError, OffsetNotFoundError
from txmq.format import record as codec
from txmq.model import QueueBytes, QueueRead, Record
from txmq.store.derived.consume_queue import ConsumeQueue, tag_hash
from txmq.store.derived.dispatch import Dispatcher
from txmq.store.derived.index import id_hash, key_hash
from txmq.store.derived.recent import Recent, record
from txmq.store.health import Health
from txmq.store.log.commit_log import CommitLog

# Where the header fields an entry promises sit in a record (docs/formats.md).
_QUEUE = struct.Struct(">Hq")  # queue_id, queue_offset
_QUEUE_AT = codec.HEAD_SIZE + 3
_U16 = struct.Struct(">H")

Rebuild = Callable[[tuple[str, int]], int]


def promised(rec: bytes | memoryview, topic: bytes, queue_id: int, queue_offset: int) -> bool:
    """Does the record's header name this topic, queue id and queue offset?"""
    if len(rec) < codec.FIXED_END + 2 + len(topic):
        return False
    if _QUEUE.unpack_from(rec, _QUEUE_AT) != (queue_id, queue_offset):
        return False
    n = _U16.unpack_from(rec, codec.FIXED_END)[0]
    return n == len(topic) and bytes(rec[codec.FIXED_END + 2 : codec.FIXED_END + 2 + n]) == topic


class Reader:
    def __init__(
        self,
        log: CommitLog,
        dispatcher: Dispatcher,
        health: Health,
        rebuild: Rebuild,
        recent: Recent,
    ) -> None:
        self.log = log
        self.dispatcher = dispatcher
        self.health = health
        self._rebuild = rebuild
        self._recent = recent

    def _queue(self, topic: str, queue_id: int) -> tuple[ConsumeQueue | None, int, int]:
        return self.dispatcher.queue_range(topic, queue_id)

    def _entries(
        self, cq: ConsumeQueue, start: int, count: int
    ) -> tuple[int, list[tuple[int, int, int]]]:
        """(where they start, entries): retention may have moved the queue's start past
        ``start`` since the caller looked, and then the entries begin there."""
        return self.dispatcher.entries(cq, start, count)

    def read_live(self, physical_offset: int, size_hint: int = 0) -> Record | None:
        """Read a record a queue or the index points at (``size_hint``: its size if known);
        None if retention deleted it. A record that fails verification is read once more
        before the failure stands: a transient read error must not make a reader skip a good
        record."""
        if physical_offset < self.log.start_offset:
            return None
        try:
            try:
                # A record kept as written, if the log still holds its very bytes (recent.py).
                kept = self._recent.get(physical_offset)
                if kept is not None and self.log.read_raw(physical_offset, len(kept[0])) == kept[0]:
                    return record(kept)
                return self.log.read(physical_offset, size_hint)
            except CorruptRecordError:
                return self.log.read(physical_offset)
        except OffsetNotFoundError:
            if physical_offset < self.log.start_offset:
                return None  # Deleted by retention between the check and the read.
            raise

    def checked(
        self, topic: str, queue_id: int, queue_offset: int, entry: tuple[int, int, int]
    ) -> Record | None:
        """The record ``entry`` (at ``queue_offset``) promises; None when retention deleted it
        or it is damaged (reported). Rebuilds the queue once if the entry is wrong."""
        for attempt in range(2):
            phys, size, _thash = entry
            try:
                rec = self.read_live(phys, size)
            except (CorruptRecordError, OffsetNotFoundError) as exc:
                if self._damaged_in_log(phys, size, topic, queue_id, queue_offset):
                    self.health.record_damaged(phys, str(exc))
                    return None
                rec = None
                if attempt:
                    self.health.record_damaged(phys, f"{topic}/{queue_id}@{queue_offset}: {exc}")
                    return None
            else:
                if rec is None or (
                    rec.topic == topic
                    and rec.queue_id == queue_id
                    and rec.queue_offset == queue_offset
                    and rec.size == size
                ):
                    return rec
                if attempt:
                    self.health.record_damaged(
                        phys, f"{topic}/{queue_id}@{queue_offset}: entry names another record"
                    )
                    return None
            self._rebuild((topic, queue_id))
            cq, lo, hi = self._queue(topic, queue_id)
            if cq is None or not lo <= queue_offset < hi:
                return None
            at, got = self._entries(cq, queue_offset, 1)  # under the dispatcher's lock
            if at != queue_offset or not got:
                return None  # retention moved the queue past it meanwhile
            entry = got[0]
        return None

    def _damaged_in_log(
        self, phys: int, size: int, topic: str, queue_id: int, queue_offset: int
    ) -> bool:
        """True when the bytes at ``phys`` still carry the promised frame and header (size,
        magic, stored offset, queue, topic) but failed verification: the log is damaged, not
        the entry."""
        if phys < self.log.start_offset or phys >= self.log.end_offset:
            return False
        try:
            raw = self.log.read_raw(phys, size)
        except OffsetNotFoundError:
            return False
        if len(raw) != size or len(raw) < codec.FIXED_END:
            return False
        got_size, magic = codec.peek(raw)
        (stored,) = struct.unpack_from(">q", raw, _QUEUE_AT + 10)
        return (
            got_size == size
            and magic == codec.RECORD_MAGIC
            and stored == phys
            and promised(raw, topic.encode(), queue_id, queue_offset)
        )

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
        """See ``Store.read_queue``; every record is ``checked``."""
        max_count = max(0, min(max_count, limits.READ_BATCH_MAX))
        wanted = None if tags is None else {tag_hash(t) for t in tags}
        filtered = tags is not None or where is not None
        # A predicate needs each record decoded: it looks at fewer entries than a tag filter.
        scan_max = limits.READ_SCAN_ENTRIES_MAX if where is None else limits.READ_FILTER_RECORDS_MAX
        out: list[Record] = []
        cq, lo, hi = self._queue(topic, queue_id)
        if cq is None:
            return QueueRead((), offset, 0, 0)
        next_offset, scanned, taken = min(max(offset, lo), hi), 0, 0
        while len(out) < max_count and next_offset < hi:
            if scanned >= scan_max:
                break
            chunk = (
                min(limits.READ_BATCH_MAX, scan_max - scanned) if filtered else max_count - len(out)
            )
            next_offset, entries = self._entries(cq, next_offset, min(chunk, hi - next_offset))
            for entry in entries:
                if len(out) >= max_count:
                    break
                if max_bytes is not None and out and taken + entry[1] > max_bytes:
                    return QueueRead(tuple(out), next_offset, lo, hi)  # the first always goes
                at = next_offset
                next_offset += 1
                scanned += 1
                if wanted is not None and entry[2] not in wanted:
                    continue
                rec = self.checked(topic, queue_id, at, entry)
                if (
                    rec is not None
                    and (tags is None or rec.tag in tags)
                    and (where is None or where(rec))
                ):
                    out.append(rec)
                    taken += rec.size
            if not entries:
                break
        return QueueRead(tuple(out), next_offset, lo, hi)

    def read_queue_bytes(
        self, topic: str, queue_id: int, offset: int, max_count: int, *, max_bytes: int
    ) -> QueueBytes:
        """See ``Store.read_queue_bytes``. Records are verified in bulk and checked against
        their entries; a batch with a bad one is redone record by record (``checked``)."""
        max_count = max(0, min(max_count, limits.PULL_COUNT_MAX))
        cq, lo, hi = self._queue(topic, queue_id)
        if cq is None:
            return QueueBytes([], offset, 0, 0)
        name = topic.encode()
        out: list[bytes | memoryview] = []
        next_offset, taken, full = min(max(offset, lo), hi), 0, False
        while len(out) < max_count and next_offset < hi and not full:
            want = min(max_count - len(out), hi - next_offset)
            next_offset, entries = self._entries(cq, next_offset, want)
            if not entries:
                break
            spans: list[tuple[int, int]] = []
            for phys, size, _thash in entries:
                if taken and taken + size > max_bytes:  # the first record always goes
                    full = True
                    break
                spans.append((phys, size))
                taken += size
            try:
                got = self.log.read_bytes_many(spans)
                ok = all(
                    b is None or promised(b, name, queue_id, next_offset + i)
                    for i, b in enumerate(got)
                )
            except (CorruptRecordError, OffsetNotFoundError):
                ok = False
            if not ok:
                got = self._one_by_one(topic, queue_id, next_offset, entries[: len(spans)])
            out += [b for b in got if b is not None]
            next_offset += len(spans)
        return QueueBytes(out, next_offset, lo, hi)

    def _one_by_one(
        self, topic: str, queue_id: int, start: int, entries: list[tuple[int, int, int]]
    ) -> list[memoryview | None]:
        out: list[memoryview | None] = []
        for i, entry in enumerate(entries):
            rec = self.checked(topic, queue_id, start + i, entry)
            if rec is None:
                out.append(None)
                continue
            out += self.log.read_bytes_many([(rec.physical_offset, rec.size)])
        return out

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """See ``Store.offset_for_timestamp``."""
        cq, lo, hi = self._queue(topic, queue_id)
        if cq is None:
            return 0
        while lo < hi:
            mid = (lo + hi) // 2
            got = self.dispatcher.read_entry(cq, mid)
            rec = self.checked(topic, queue_id, mid, got) if got else None
            if rec is None or rec.store_timestamp_ms < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def scan(self, from_offset: int, max_count: int, *, end: int | None = None) -> list[Record]:
        """See ``Store.scan`` (below ``end``, default the visible end). Bounded: each round
        either fills ``out`` or moves past a damaged record to the next one that verifies."""
        out: list[Record] = []
        end = self.dispatcher.end if end is None else end
        offset, retried = from_offset, -1
        while len(out) < max_count and offset < end:
            bad = None
            for rec, stop in self.log.scan_for_recovery(offset):
                if rec is None:
                    bad = stop if stop.bad_reason and stop.offset < end else None
                    break
                if rec.physical_offset >= end or len(out) >= max_count:
                    return out
                out.append(rec)
            if bad is None:
                return out
            if bad.offset != retried:  # read it once more: a read error may be transient
                offset = retried = bad.offset
                continue
            self.health.record_damaged(bad.offset, bad.bad_reason)
            after = self.log.valid_record_after(bad.offset)
            if after is None:
                return out
            offset = after
        return out

    def _candidates(self, h: int) -> list[int]:
        return self.dispatcher.candidates(h, self.log.start_offset)

    def _indexed(self, phys: int) -> Record | None:
        try:
            return self.read_live(phys)
        except (CorruptRecordError, OffsetNotFoundError):
            return None  # a bad candidate is not the record asked for; the scrub reports it

    def find_by_message_id(self, message_id: str) -> Record | None:
        """See ``Store.find_by_message_id``."""
        for phys in self._candidates(id_hash(message_id)):
            rec = self._indexed(phys)
            if rec is not None and rec.message_id == message_id:
                return rec
        return None

    def find_by_key(self, topic: str, key: str, max_count: int) -> list[Record]:
        """See ``Store.find_by_key``."""
        limit = max(0, min(max_count, limits.FIND_BY_KEY_RESULTS_MAX))
        out: list[Record] = []
        for phys in self._candidates(key_hash(topic, key)):
            if len(out) >= limit:
                break
            rec = self._indexed(phys)
            if rec is not None and rec.topic == topic and key in rec.keys:
                out.append(rec)
        return out
