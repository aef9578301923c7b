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
from collections.abc import Callable
from dataclasses import dataclass

from txmq import limits
from txmq.errors import CorruptRecordError, OffsetNotFoundError, invariant
from txmq.format import record as codec
from txmq.store.store import Store
from txmq.store.write.group_commit import Group

_BATCH_LEFT = struct.Struct(">H")
_PHYSICAL_OFFSET = struct.Struct(">q")
_CRC = struct.Struct(">I")  # bytes [8, 12) of a record


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


def notify_written(store: Store, callback: Callable[[], None]) -> None:
    """Call ``callback`` (on the flusher thread, no lock held) each time ``written_out_end``
    moves: a leader wakes its followers' long polls before its own fsync."""
    store.writes.group.on_written = callback
