"""Finding and repairing damage while the store runs: a resilient log walk, queue rebuilds and
the background scrub.

Owns: ``walk`` (every verifiable record of a log range, reporting damaged ones and resyncing
past them instead of stopping, as recovery must), ``rebuild_queue`` (a consume queue rewritten
from the log where it disagrees) and ``Scrubber`` (re-verifies the whole log, CRCs, blank spans
and consume-queue entries, a bounded step at a time). Must not: change the commit log (a damaged
record is reported, never rewritten or dropped) or run during recovery.

Theory of operation: the commit log is the truth; consume queues are derived. A queue entry that
disagrees with the record it points at, or that names a record the log does not hold there,
is rewritten from the log. A record whose CRC fails stays where it is and is reported; where
its queue offset cannot be read back, its old queue entry is kept, so readers meet it, see the
damage and skip it with the report.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from txmq import limits
from txmq.errors import CorruptRecordError
from txmq.format.record import Entry, decode_entry, enters_queue
from txmq.store.derived.consume_queue import tag_hash
from txmq.store.derived.dispatch import Dispatcher
from txmq.store.derived.index import hashes_of, id_hash
from txmq.store.health import Health
from txmq.store.log.commit_log import CommitLog
from txmq.store.log.search import blank_span_reason
from txmq.store.log.segment import iter_raw

QueueKey = tuple[str, int]
CqEntry = tuple[int, int, int]


@dataclass
class Cursor:
    offset: int
    scanned: int = 0


def walk(log: CommitLog, cursor: Cursor, end: int, health: Health, budget: int) -> Iterator[Entry]:
    """Verified records from ``cursor.offset`` below ``end``, for at most about ``budget``
    bytes; moves the cursor. Damaged records and spans are reported to ``health`` and skipped:
    after a bad frame the walk resumes at the next record that verifies."""
    stop = cursor.scanned + budget
    while cursor.offset < end and cursor.scanned < stop:
        segments = [s for s in list(log.segments) if s.start <= cursor.offset]
        if not segments:
            cursor.offset = log.start_offset
            continue
        seg = segments[-1]
        nxt = seg.start + log.segment_size
        for item in iter_raw(seg, log.segment_size, cursor.offset - seg.start):
            if item.offset >= end or cursor.scanned >= stop:
                return
            if item.kind == "record":
                cursor.offset = item.offset + item.size
                cursor.scanned += item.size
                entry = _entry_or_report(log, item.buf, item.pos, item.offset, item.size, health)
                if entry is not None:
                    yield entry
                continue
            if item.kind == "blank":
                inside = log.record_in_blank(seg, item.offset - seg.start)
                if inside is not None:
                    health.record_damaged(item.offset, blank_span_reason(item.offset, inside))
                cursor.scanned += nxt - item.offset
                cursor.offset = nxt
            elif item.kind == "bad":
                health.record_damaged(item.offset, item.reason)
                after = log.valid_record_after(item.offset)
                cursor.scanned += (after or end) - item.offset
                cursor.offset = after if after is not None else end
            else:  # "end": the log's end, or a segment that stops early
                cursor.offset = nxt if nxt < end else end
            break


def _entry_or_report(
    log: CommitLog, buf: bytes, pos: int, offset: int, size: int, health: Health
) -> Entry | None:
    """The record's dispatch fields, or None with the damage reported; a record that fails is
    read once more first, since a read error may be transient."""
    try:
        return decode_entry(buf, pos, offset)
    except CorruptRecordError:
        pass
    try:
        return decode_entry(log.read_raw(offset, size), 0, offset)
    except CorruptRecordError as exc:
        health.record_damaged(offset, exc.reason)
        return None


def rebuild_queue(log: CommitLog, dispatcher: Dispatcher, health: Health, key: QueueKey) -> int:
    """Rewrite the entries of queue ``key`` that disagree with the log; returns how many.

    Entries for records dispatched while the walk ran come from verified writes and are kept.
    """
    cq = dispatcher.queue_range(*key)[0]
    if cq is None:
        return 0
    end = dispatcher.end
    found: dict[int, CqEntry] = {}
    cursor = Cursor(log.start_offset)
    for e in walk(log, cursor, end, health, budget=1 << 62):
        if (e.topic, e.queue_id) == key and enters_queue(e.flag):
            found[e.queue_offset] = (e.physical_offset, e.size, tag_hash(e.tag))
    repaired = dispatcher.patch(cq, found)
    health.record_rebuild(key[0], key[1], repaired)
    return repaired


def rebuild_index(log: CommitLog, dispatcher: Dispatcher, health: Health) -> int:
    """Rewrite the message index from the log; returns its entries. Records dispatched while
    the walk ran keep the entries they were given (from verified writes)."""
    with dispatcher.lock:
        end = dispatcher.end
    rows: list[tuple[int, int]] = []
    for e in walk(log, Cursor(log.start_offset), end, health, budget=1 << 62):
        rows += [(h, e.physical_offset) for h in hashes_of(e.topic, e.message_id, e.keys)]
    with dispatcher.lock:
        dispatcher.replace_index(rows, end)
        entries = dispatcher.index.entries
    health.record_index_rebuild(entries)
    return entries


class Scrubber:
    """Re-verifies the log below the visible end, SCRUB_BYTES_PER_STEP at a time, round and
    round: CRCs (damage reported), blank spans, and each record's consume-queue entry (a queue
    that disagrees is rebuilt)."""

    def __init__(self, log: CommitLog, dispatcher: Dispatcher, health: Health) -> None:
        self.log = log
        self.dispatcher = dispatcher
        self.health = health
        self._cursor = Cursor(log.start_offset)
        self.index_rebuilt = False
        self._rest_until = -1  # when the pass just finished may be followed by the next

    def step(
        self, budget: int = limits.SCRUB_BYTES_PER_STEP, *, now_ms: int = 0, pause_ms: int = 0
    ) -> list[QueueKey]:
        """Verify the next ``budget`` bytes; returns the queues it rebuilt (and rebuilds the
        message index when a record is missing from it: ``index_rebuilt``). After a whole
        pass it rests ``pause_ms`` before the next one starts.

        A pass is whole once a step reaches the visible end it started from, even if records
        were appended meanwhile: they are left to the next pass. Why: on a broker that keeps
        writing, chasing the end would re-read and re-verify every record about a second after
        its write (which checked it already), a cost per message forever, and the
        rest would never come."""
        self.index_rebuilt = False
        end = self.dispatcher.end
        if self._rest_until >= 0 or self._cursor.offset < self.log.start_offset:
            if now_ms < self._rest_until:
                return []
            self._rest_until = -1
            self._cursor = Cursor(self.log.start_offset)
        before = self._cursor.scanned
        wrong: set[QueueKey] = set()
        unindexed = False
        for e in walk(self.log, self._cursor, end, self.health, budget):
            if enters_queue(e.flag) and not self._entry_agrees(e):
                wrong.add((e.topic, e.queue_id))
            unindexed = unindexed or not self._indexed(e)
        with self.health.lock:
            self.health.scrub_offset = self._cursor.offset
            self.health.scrubbed_bytes += self._cursor.scanned - before
            if self._cursor.offset >= end and end > self.log.start_offset:
                self._rest_until = now_ms + pause_ms  # the pass is whole: rest, then restart
                self.health.scrub_passes += 1
        for key in sorted(wrong):
            rebuild_queue(self.log, self.dispatcher, self.health, key)
        if unindexed:
            rebuild_index(self.log, self.dispatcher, self.health)
            self.index_rebuilt = True
        return sorted(wrong)

    def _indexed(self, e: Entry) -> bool:
        with self.dispatcher.lock:
            index = self.dispatcher.index
            # The message id, unique per record, stands for the record's other entries: keys can
            # be shared by very many records.
            return not e.message_id or index.holds(id_hash(e.message_id), e.physical_offset)

    def _entry_agrees(self, e: Entry) -> bool:
        got = self.dispatcher.written_entry(e.topic, e.queue_id, e.queue_offset)
        if isinstance(got, bool):
            return got  # True: expired by retention, or not yet written out
        return got == (e.physical_offset, e.size, tag_hash(e.tag))
