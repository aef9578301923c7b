"""Log shipping at the store: what a leader ships, and a follower's verbatim append of it.

Owns: ``ship`` (whole verified records from a follower's end offset, below the leader's visible
end, cut at a batch boundary) and ``append_shipped`` (write them at exactly the offsets they
carry, then dispatch them to consume queues and the index as any append is). Same offsets and
same bytes on every replica: a record's stored physical offset and CRC are checked on both
sides (TigerStyle's paired assertions), and a follower whose segment size differs from its
leader's is refused, since its records would land elsewhere.
Must not: know about leaders, epochs or the network (broker/replication does).

A follower's end offset is always a record boundary on the leader too (it only holds what it
was shipped), or the blank at a segment's end, which the leader's scan skips to the next
segment, where the follower's ``reserve`` rolls to the same offset.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from txmq import limits
from txmq.errors import CorruptRecordError, OffsetNotFoundError, invariant
from txmq.format import record as codec
from txmq.model import Record
from txmq.store.flush import Group
from txmq.store.store import Store

_BATCH_LEFT = struct.Struct(">H")
_PHYSICAL_OFFSET = struct.Struct(">q")
_CRC = struct.Struct(">I")  # bytes [8, 12) of a record
# Records a hold publishes at a time when it reads a recovered tail again: one pwrite per queue
# and one for the index per chunk, as recovery does.
_RELEASE_EVERY = 8192


class DivergedError(OffsetNotFoundError):
    """A follower asked for an offset past the leader's end: its log has a tail the leader
    does not (it must truncate by epoch before it fetches again)."""


@dataclass(frozen=True, slots=True)
class Shipment:
    data: bytes  # whole records, concatenated in log order, each verified on the leader
    next_offset: int  # the follower's end once it appended ``data``
    leader_end: int  # the leader's visible (durable) end when this was read


def ship(
    store: Store,
    from_offset: int,
    max_bytes: int = limits.REPLICA_FETCH_BYTES_MAX,
    *,
    end: int | None = None,
) -> Shipment:
    """Records from ``from_offset`` (a follower's end) up to about ``max_bytes``: whole
    batches, at least one when there is one, below ``end`` (default: the durable end; a
    leader passes ``written_out_end``, so a follower's fsync overlaps its own).

    Raises:
        OffsetNotFoundError: ``from_offset`` is below the log start (retention deleted it).
        DivergedError: ``from_offset`` is past the leader's end.
    """
    end = durable_end(store) if end is None else end
    invariant(end <= written_out_end(store), "ship only bytes that are in the log file")
    if from_offset > end:
        raise DivergedError(f"offset {from_offset} is past the leader's end {end}")
    if from_offset < store.log_start_offset:
        raise OffsetNotFoundError(
            f"offset {from_offset} is below the log start {store.log_start_offset}"
        )
    quick = _ship_in_one_read(store, from_offset, end, max_bytes)
    return quick if quick is not None else _ship_scanning(store, from_offset, end, max_bytes)


def _ship_scanning(store: Store, from_offset: int, end: int, max_bytes: int) -> Shipment:
    """``ship`` by the recovery scan: any range (segment ends, blanks), a bad frame named."""
    parts: list[bytes] = []
    taken, next_offset, cut_parts, cut_offset = 0, from_offset, 0, from_offset
    for count, (rec, scan_end) in enumerate(store.log.scan_for_recovery(from_offset)):
        if rec is None:
            if scan_end.bad_reason and scan_end.offset < end:
                raise CorruptRecordError(scan_end.offset, scan_end.bad_reason)
            break
        if rec.physical_offset >= end or count >= limits.REPLICA_FETCH_RECORDS_MAX:
            break
        (view,) = store.log.read_bytes_many([(rec.physical_offset, rec.size)])
        if view is None:
            raise OffsetNotFoundError(f"offset {rec.physical_offset} was deleted meanwhile")
        parts.append(bytes(view))
        taken += rec.size
        next_offset = rec.physical_offset + rec.size
        if _BATCH_LEFT.unpack_from(view, codec.BATCH_LEFT_AT)[0] == 0:
            cut_parts, cut_offset = len(parts), next_offset
            if taken >= max_bytes:
                break
    if cut_parts == 0:  # a batch of more than REPLICA_FETCH_RECORDS_MAX records: ship a part
        cut_parts, cut_offset = len(parts), next_offset
    return Shipment(b"".join(parts[:cut_parts]), cut_offset, end)


def _ship_in_one_read(store: Store, from_offset: int, end: int, max_bytes: int) -> Shipment | None:
    """``ship``'s common case, the whole of [from_offset, end) in one segment, at most
    ``max_bytes`` and REPLICA_FETCH_RECORDS_MAX records, ending at a batch boundary: one pread,
    each record's frame walked and then verified (size, magic, CRC, stored offset) without
    decoding its fields. None otherwise (a blank or a bad frame included): the scan path then
    ships or names what is wrong.

    Why: a follower round ships a few records; the scan path read a scan chunk, decoded every
    field of each record (its properties' JSON too) and read it again, ~230 us of the leader's
    loop per 2 KiB round where this takes a fraction of it.
    """
    size = end - from_offset
    if size <= 0 or size > max_bytes:
        return None
    raw = store.log.read_raw(from_offset, size)
    if len(raw) != size:
        return None  # the range leaves this segment
    view = memoryview(raw)
    spans: list[tuple[int, int]] = []
    pos = 0
    while pos < size:
        if size - pos < codec.RECORD_SIZE_MIN or len(spans) >= limits.REPLICA_FETCH_RECORDS_MAX:
            return None
        rec_size, magic = codec.peek(view, pos)
        if magic != codec.RECORD_MAGIC or not codec.RECORD_SIZE_MIN <= rec_size <= size - pos:
            return None
        spans.append((from_offset + pos, rec_size))
        pos += rec_size
    if _BATCH_LEFT.unpack_from(view, spans[-1][0] - from_offset + codec.BATCH_LEFT_AT)[0] != 0:
        return None
    codec.verify_spans(view, from_offset, spans)
    return Shipment(raw, end, end)


def append_shipped(store: Store, data: bytes) -> int:
    """Append a leader's ``ship`` output at the offsets its records carry; returns the new end
    once they are durable and dispatched.

    Raises:
        CorruptRecordError: a record does not verify, or would not land at its stored offset
            (the follower's log or segment size differs from the leader's).
        StoreFencedError, DiskFullError, StoreClosedError: as ``Store.append_many``.
    """
    group, end = append_shipped_nowait(store, data)
    if group is not None and store.writes.group.inline:
        sync_shipped(store)
    elif group is not None:
        group.wait()
    return shipped_durable(store, group, end)


def sync_shipped(store: Store) -> None:
    """A follower's store (``Store.open(inline_sync=True)``): make what was appended durable
    and readable in this thread (the flusher's steps: pwrite, fdatasync, publication), with no
    hop to the flusher and back; then ``shipped_durable`` tells (a failed fsync fences)."""
    store.writes.group.sync_here()


def append_shipped_nowait(store: Store, data: bytes) -> tuple[Group | None, int]:
    """``append_shipped`` up to the write: returns the group commit to wait for
    (``Group.on_done`` on an event loop; ``sync_shipped`` for a follower's store) and the end
    it brings; then ``shipped_durable``. Raises what ``append_shipped`` raises before writing."""
    if not data:
        return None, store.log_end_offset
    entries = _entries(data)
    group = store.writes.append_placed(data, entries)
    return group, entries[-1].physical_offset + entries[-1].size


def shipped_durable(store: Store, group: Group | None, end: int) -> int:
    """``end`` once ``group`` is done and covered it.

    Raises:
        StoreFencedError: the fsync that would have covered it failed.
    """
    store.writes.group.check_durable(group, end)
    return end


def _entries(data: bytes) -> list[codec.Entry]:
    out: list[codec.Entry] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < codec.RECORD_SIZE_MIN:
            raise CorruptRecordError(-1, f"a shipment ends inside a record at byte {pos}")
        (phys,) = _PHYSICAL_OFFSET.unpack_from(data, pos + codec.PHYSICAL_OFFSET_AT)
        entry = codec.decode_entry(data, pos, phys)
        out.append(entry)
        pos += entry.size
    invariant(pos == len(data), "shipment records add up to its size")
    return out


def last_of(data: bytes) -> tuple[int, int]:
    """(physical offset, CRC) of the last record of a non-empty shipment."""
    pos, last = 0, 0
    while pos < len(data):
        last = pos
        pos += codec.peek(data, pos)[0]
    invariant(pos == len(data) and len(data) > 0, "a shipment is whole records")
    (phys,) = _PHYSICAL_OFFSET.unpack_from(data, last + codec.PHYSICAL_OFFSET_AT)
    return phys, _CRC.unpack_from(data, last + 8)[0]


def tail_of(store: Store) -> tuple[int, int] | None:
    """(physical offset, CRC) of the store's last record, None for an empty log. Reads the
    last segment that holds a record (at most a few segments' worth after a roll)."""
    for seg in reversed(list(store.log.segments)):
        found: tuple[int, int] | None = None
        for rec, _end in store.log.scan_for_recovery(seg.start):
            if rec is None or rec.physical_offset >= store.log_end_offset:
                break
            found = (rec.physical_offset, rec.size)
        if found is not None:
            head = store.log.read_raw(found[0], 12)
            return found[0], _CRC.unpack_from(head, 8)[0]
    return None


def durable_end(store: Store) -> int:
    """The end of what is durable on this store, visible or held back (``Hold``)."""
    return store.writes.group.durable_end


def written_out_end(store: Store) -> int:
    """The end of what is in this store's log file, durable or not yet (always a batch
    boundary: the group commit writes whole groups out before their fsync)."""
    return store.writes.group.written_out_end


class Hold:
    """Keep durable records invisible to readers until ``release`` says the replicas have them
    (Kafka's high watermark): a consumer never reads a record a failover could lose.

    Installed by a leader with min_insync_replicas > 1; without one, publication is as before.
    The flusher hands each durable batch here instead of to the dispatcher; ``release(up_to)``
    publishes, in log order, every held record that ends at or below ``up_to``, and remembers
    ``up_to``: a batch that becomes durable here after the followers already have it (their
    fsync ran alongside ours) is published as it arrives, on the flusher thread.
    It starts with the records the store's open held back (``Store.open(visible_end=...)``:
    the log's tail past the end known to be acknowledged, ADR 0005).
    """

    def __init__(self, store: Store, on_held: Callable[[], None] | None = None) -> None:
        self._on_held = on_held  # told (on the flusher thread) when a durable batch arrives
        self._lock = threading.Lock()
        self._held: list[tuple[list[codec.Entry], int]] = []  # (entries, end) in log order
        # The records the store's open held back, [start, end) of the log, ahead of _held:
        # read again from the log as they are published (a restarted replica's tail may be
        # long: its entries are not kept in memory).
        self._log = store.log
        got = store.recovery
        self._recovered = [got.held_from, got.log_end] if got.held_from is not None else None
        self._recovered_left = got.held_count
        self._allowed = 0  # the followers have every byte below this durable
        self._publish = store.writes.group.replace_publish(self._keep)

    def _keep(self, entries: Sequence[codec.Entry], end: int) -> None:
        with self._lock:
            self._held.append((list(entries), end))
            self._release_locked()
        if self._on_held is not None:
            self._on_held()

    def releasable(self, up_to: int, most: int) -> int:
        """How many records ``release(up_to)`` would publish, counted up to ``most + 1`` (the
        caller only asks "none, a few, or more")."""
        n = 0
        with self._lock:
            if self._recovered is not None:  # read from the log only by release: "more"
                return most + 1 if up_to > self._recovered[0] else 0
            for entries, _end in self._held:
                for e in entries:
                    if e.physical_offset + e.size > up_to or n > most:
                        return n
                    n += 1
        return n

    def release(self, up_to: int) -> None:
        """Publish every held record ending at or below ``up_to`` (the followers have it: every
        held record is durable here already). Blocking (queue writes)."""
        with self._lock:
            self._allowed = max(self._allowed, up_to)
            self._release_locked()

    def _release_locked(self) -> None:
        up_to = self._allowed
        if self._recovered is not None and not self._release_recovered(up_to):
            return
        while self._held:
            entries, end = self._held[0]
            ready = [e for e in entries if e.physical_offset + e.size <= up_to]
            if len(ready) < len(entries):
                if ready:
                    last = ready[-1]
                    self._publish(ready, last.physical_offset + last.size)
                    self._held[0] = (entries[len(ready) :], end)
                return
            self._publish(entries, end)
            self._held.pop(0)

    def _release_recovered(self, up_to: int) -> bool:
        """Publish the recovered records ending at or below ``up_to``, read from the log in
        chunks; True once none is left (the batches kept since come next)."""
        assert self._recovered is not None  # for mypy
        start, end = self._recovered
        while start < min(up_to, end):
            chunk: list[codec.Entry] = []
            for rec, _ in self._log.scan_for_recovery(start):
                if rec is None or rec.physical_offset >= end or len(chunk) >= _RELEASE_EVERY:
                    break
                if rec.physical_offset + rec.size > up_to:
                    break
                chunk.append(_entry(rec))
            if not chunk:
                break
            start = chunk[-1].physical_offset + chunk[-1].size
            self._publish(chunk, start)
            self._recovered = [start, end]
            self._recovered_left -= len(chunk)
        if self._recovered_left > 0:
            return False
        self._recovered = None  # all published (what follows the last one is blanks, if any)
        return True

    @property
    def held(self) -> int:
        with self._lock:
            return self._recovered_left + sum(len(entries) for entries, _ in self._held)


def _entry(rec: Record) -> codec.Entry:
    """What dispatch needs of a record read again from the log."""
    return codec.Entry(
        rec.physical_offset, rec.size, rec.flag, 0, rec.topic, rec.queue_id, rec.queue_offset,
        rec.store_timestamp_ms, rec.tag, rec.message_id, rec.keys,
    )  # fmt: skip


def notify_written(store: Store, callback: Callable[[], None]) -> None:
    """Call ``callback`` (on the flusher thread, no lock held) each time ``written_out_end``
    moves: a leader wakes its followers' long polls before its own fsync."""
    store.writes.group.on_written = callback
