"""Consumer positions: the live delivery book over the store, and its file that survives restarts.

Owns: ``OffsetFile`` (per (group, topic, queue): ack offset, settled offsets above it as ranges,
attempts of leased messages; JSON written atomically with write-temp + fsync + rename + directory
fsync, so a crash leaves the old or the new file, never half of one) and ``ConsumerPositions``,
the glue that runs the pure ``DeliveryBook`` behind a lock: it reads candidates and records from
the store, signs receipt handles, and turns the book's decisions into deliveries and dead letters.
Blocking and thread-safe: the broker calls it from its executor.
Must not: speak gRPC, append to the store (the caller appends a DLQ copy, then calls ``settle``),
or hold state the book does not (the book is the truth; this file is its snapshot).

Positions are saved when ``save`` runs (the broker does every second, and at close), so after a
crash an ack from the last second may be lost and that message delivered again: at-least-once.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from txmq import limits
from txmq.broker.consume.book import (
    DeadLetter,
    DeliveryBook,
    Expired,
    Grant,
    Position,
    QueueKey,
    candidate,
)
from txmq.broker.consume.receipt import Receipt, ReceiptCodec
from txmq.errors import ConfigError, InvalidReceiptHandleError, TooManyRequestsError, invariant
from txmq.model import PROP_MESSAGE_GROUP, PROP_REDRIVE_GROUP, Record
from txmq.protocol.mapping import validate_group
from txmq.store.files.disk import Disk, OsDisk
from txmq.store.store import Store

FILE_NAME = "consumer-positions.json"
_FORMAT_VERSION = 1


def _ranges(offsets: Iterable[int]) -> list[list[int]]:
    """Sorted offsets -> [[first, last], ...]: filtered-out offsets come in long runs."""
    out: list[list[int]] = []
    for off in sorted(offsets):
        if out and out[-1][1] + 1 == off:
            out[-1][1] = off
        else:
            out.append([off, off])
    return out


def encode_positions(positions: Iterable[tuple[QueueKey, Position]]) -> bytes:
    """The positions file's bytes (a replica leader also ships them to its followers)."""
    rows = [
        {
            "group": k.group,
            "topic": k.topic,
            "queue": k.queue_id,
            "ack": p.ack_offset,
            "settled": _ranges(p.settled),
            "attempts": [list(a) for a in p.attempts],
        }
        for k, p in positions
    ]
    return json.dumps(
        {"version": _FORMAT_VERSION, "positions": rows}, separators=(",", ":")
    ).encode()


class OffsetFile:
    def __init__(self, path: Path, disk: Disk | None = None) -> None:
        self.path = path
        self.disk = disk if disk is not None else OsDisk()

    def save(self, positions: Iterable[tuple[QueueKey, Position]]) -> None:
        self.disk.write_atomic(self.path, encode_positions(positions))

    def load(self) -> dict[QueueKey, Position]:
        if not self.disk.exists(self.path):
            return {}
        try:
            raw = json.loads(self.disk.read_all(self.path))
            if raw.get("version") != _FORMAT_VERSION:
                raise ValueError(f"unknown format version {raw.get('version')!r}")
            return dict(_row(r) for r in raw["positions"])
        except (ValueError, KeyError, TypeError) as exc:
            # Writes are atomic, so this is not a torn write: someone edited or damaged it.
            raise ConfigError(f"consumer positions file {self.path} is unreadable: {exc}") from exc


def _row(r: dict[str, Any]) -> tuple[QueueKey, Position]:
    settled = tuple(o for lo, hi in r["settled"] for o in range(int(lo), int(hi) + 1))
    attempts = tuple((int(o), int(n)) for o, n in r["attempts"])
    key = QueueKey(str(r["group"]), str(r["topic"]), int(r["queue"]))
    return key, Position(int(r["ack"]), settled, attempts)


@dataclass(frozen=True, slots=True)
class Delivery:
    record: Record
    receipt_handle: str
    attempt: int


@dataclass(init=False)
class Ask:
    """What a receive asks for: the tags it accepts (None: all) and the records (``where``, a
    SQL92 filter; None: all), at most ``batch`` messages of
    at most ``max_bytes`` of records (the first always comes), each leased ``invisible_ms``
    from ``now_ms``; ``fifo``: the topic's queues deliver each message group in order. One
    value, not six keywords, passed from the receive down to each queue's delivery book."""

    tags: Final[frozenset[str] | None]
    where: Final[Callable[[Record], bool] | None]
    batch: Final[int]
    invisible_ms: Final[int]
    now_ms: Final[int]
    fifo: Final[bool]
    max_bytes: Final[int]

    def __init__(
        self,
        *,
        tags: frozenset[str] | None,
        batch: int,
        invisible_ms: int,
        now_ms: int,
        fifo: bool,
        max_bytes: int = limits.RECEIVE_STREAM_BYTES_MAX,
        where: Callable[[Record], bool] | None = None,
    ) -> None:
        self.tags = tags
        self.where = where
        self.batch = batch
        self.invisible_ms = invisible_ms
        self.now_ms = now_ms
        self.fifo = fifo
        self.max_bytes = max_bytes


class ConsumerPositions:
    def __init__(
        self,
        store: Store,
        data_dir: Path,
        disk: Disk | None = None,
        *,
        attempts_max: int,
        backoff_initial_ms: int = 1_000,
        backoff_max_ms: int = 60_000,
        now_ms: Callable[[], int],
    ) -> None:
        self.store = store
        self.now_ms = now_ms
        self.file = OffsetFile(data_dir / FILE_NAME, disk)
        self.book = DeliveryBook(
            attempts_max=attempts_max,
            backoff_initial_ms=backoff_initial_ms,
            backoff_max_ms=backoff_max_ms,
        )
        # A fresh secret per run: handles from before a restart no longer verify, which is
        # right because their leases did not survive either.
        self.codec = ReceiptCodec(os.urandom(32))
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()
        self._dirty = False
        for key, position in self.file.load().items():
            self.book.restore(key, position)

    # --- Receiving. ------------------------------------------------------------------------------

    def _open(self, key: QueueKey) -> None:
        lo = self.store.queue_offsets(key.topic, key.queue_id)[0]
        book = self.book.books.get(key)
        if book is not None and book.ack_offset >= lo:
            return  # nothing to clamp: what ``clamp`` would find, without its call
        if book is None:
            validate_group(key.group)
            if len(self.book.books) >= limits.CONSUMER_QUEUES_MAX:
                raise TooManyRequestsError(
                    f"too many (group, topic, queue) positions: {limits.CONSUMER_QUEUES_MAX}"
                )
            # A new group starts at the earliest retained message of the queue.
            self.book.open(key, lo)
        self.book.clamp(key, lo)

    def receive_recent(
        self, group: str, topic: str, queue_ids: list[int], ask: Ask
    ) -> tuple[list[Delivery], list[DeadLetter]] | None:
        """``receive`` (same arguments) when it reads only records near the end of these
        queues: every queue already has this group's book and ends at most
        RECEIVE_ON_LOOP_LAG_MAX entries past its ack offset (due redeliveries, held FIFO
        messages and new ones all lie in between), so the event loop may run it itself (see
        limits.py). None, with nothing done, otherwise."""
        with self._lock:
            keys: list[QueueKey] = []
            for qid in queue_ids:
                key = self.book.known_key(group, topic, qid)
                if key is None:
                    return None  # no book for this queue yet
                keys.append(key)
            ends = self.store.queue_ends(topic, queue_ids)
            invariant(len(ends) == len(keys), "an end per queue")
            books = self.book.books
            # By index, not ``zip(..., strict=True)``: a call with a keyword, ~8k instructions.
            for i in range(len(keys)):
                book = books.get(keys[i])
                if book is None or ends[i] - book.ack_offset > limits.RECEIVE_ON_LOOP_LAG_MAX:
                    return None
            return self._receive(keys, ends, ask)

    def receive(
        self, group: str, topic: str, queue_ids: list[int], ask: Ask
    ) -> tuple[list[Delivery], list[DeadLetter]]:
        """Up to ``ask.batch`` messages: due redeliveries first, then new ones, queue by queue;
        stops before their records pass ``ask.max_bytes`` (the first always comes), so a
        stream never holds more than that (broker/consume/flow.py). From any position: the broker
        calls it in its executor when ``receive_recent`` would not serve it."""
        with self._lock:
            keys = [self.book.key_of(group, topic, qid) for qid in queue_ids]
            ends = self.store.queue_ends(topic, queue_ids)
            invariant(len(ends) == len(keys), "an end per queue")
            return self._receive(keys, ends, ask)

    def _receive(
        self, keys: list[QueueKey], ends: list[int], ask: Ask
    ) -> tuple[list[Delivery], list[DeadLetter]]:
        """``receive`` under ``_lock``, each queue's end read once (``ends``). A queue
        with nothing due, nothing held and nothing new before its end is skipped unread: the
        common case of a long poll's first look, once per queue of the topic."""
        batch, invisible_ms, now_ms = ask.batch, ask.invisible_ms, ask.now_ms
        max_bytes = ask.max_bytes
        invariant(1 <= batch <= limits.RECEIVE_BATCH_MAX, "batch out of range")
        out: list[Delivery] = []
        dead: list[DeadLetter] = []
        taken = 0  # bytes of the records in ``out``
        for i in range(len(keys)):
            key, end = keys[i], ends[i]
            if len(out) >= batch or taken >= max_bytes:
                break
            if self.book.idle(key, end, now_ms):
                continue
            self._open(key)
            # Due redeliveries one at a time, so the byte bound holds for them too.
            for _ in range(batch):
                if len(out) >= batch or (out and taken >= max_bytes):
                    break
                grants, expired = self.book.take_due(
                    key, now_ms=now_ms, invisible_ms=invisible_ms, room=1
                )
                if not grants and not expired:
                    break
                taken += self._collect(grants, expired, {}, out, dead)
            if out and taken >= max_bytes:
                break
            left = max_bytes - taken
            taken += self._scan(key, end, ask, out, dead, left)
        self._dirty = True
        return out, dead

    def _scan(
        self,
        key: QueueKey,
        end: int,
        ask: Ask,
        out: list[Delivery],
        dead: list[DeadLetter],
        max_bytes: int,
    ) -> int:
        """New messages of one queue (below ``end``, its end when the receive began) that pass
        the ask's filter into ``out``, at most ``max_bytes`` of records (the batch's first always
        comes); returns the bytes added. What the filter passes over is settled (book.offer)."""
        batch, invisible_ms, now_ms, fifo = ask.batch, ask.invisible_ms, ask.now_ms, ask.fifo
        left = max_bytes
        # A SQL92 filter's read decodes every record it scans: one read (READ_FILTER_RECORDS_MAX
        # records) per queue and receive; consume/receive.py looks again while that moves.
        rounds = 1 if ask.where is not None else limits.RECEIVE_SCANS_PER_QUEUE_MAX
        for _ in range(rounds):
            room = batch - len(out)
            if room <= 0 or (out and left <= 0):
                break
            # FIFO reads past held messages to find other groups' heads, so it reads a batch.
            start, count = self.book.scan_window(key, limits.RECEIVE_BATCH_MAX if fifo else room)
            if count <= 0 or start >= end:
                break
            read = self.store.read_queue(
                key.topic,
                key.queue_id,
                start,
                count,
                tags=ask.tags,
                where=ask.where,
                max_bytes=max(1, left),
            )
            records, nxt = list(read.records), read.next_offset
            if out:  # the batch has its first message: nothing more past the byte bound
                fit, room_left = 0, left
                while fit < len(records) and records[fit].size <= room_left:
                    room_left -= records[fit].size
                    fit += 1
                if fit < len(records):
                    records, nxt = records[:fit], records[fit].queue_offset
            if nxt <= start:
                break
            cands = [candidate(r.queue_offset, _group_of(r)) for r in records if _for(r, key)]
            grants, expired = self.book.offer(
                key, nxt, cands, now_ms=now_ms, invisible_ms=invisible_ms, room=room, fifo=fifo
            )
            left -= self._collect(grants, expired, {r.queue_offset: r for r in records}, out, dead)
        return max_bytes - left

    def _collect(
        self,
        grants: list[Grant],
        expired: list[Expired],
        known: dict[int, Record],
        out: list[Delivery],
        dead: list[DeadLetter],
    ) -> int:
        """Deliveries of ``grants`` into ``out``, dead letters of ``expired`` into ``dead``;
        returns the bytes of the records added to ``out``."""
        added = 0
        for g in grants:
            rec = known.get(g.queue_offset) or self._read(g.key, g.queue_offset)
            if rec is None:
                continue
            receipt = Receipt(g.key.group, g.key.topic, g.key.queue_id, g.queue_offset, g.seq)
            out.append(Delivery(rec, self.codec.encode(receipt), g.attempt))
            added += rec.size
        dead.extend(self._dead_letters(expired, known))
        return added

    def _dead_letters(self, expired: list[Expired], known: dict[int, Record]) -> list[DeadLetter]:
        out: list[DeadLetter] = []
        for e in expired:
            rec = known.get(e.queue_offset) or self._read(e.key, e.queue_offset)
            if rec is not None:
                k = e.key
                out.append(
                    DeadLetter(k.group, k.topic, k.queue_id, e.queue_offset, rec, e.attempts)
                )
        return out

    def _read(self, key: QueueKey, queue_offset: int) -> Record | None:
        """The record at an offset, or None (and the offset settled) if retention removed it."""
        read = self.store.read_queue(key.topic, key.queue_id, queue_offset, 1)
        if read.records and read.records[0].queue_offset == queue_offset:
            return read.records[0]
        self.book.settle(key, queue_offset)
        return None

    def scanned(self, group: str, topic: str, queue_ids: list[int]) -> int:
        """How far ``group`` has looked into these queues (their scan offsets, summed): a
        filtered receive that found nothing but moved it has more to look at. Memory only."""
        with self._lock:
            total = 0
            for qid in queue_ids:
                key = self.book.known_key(group, topic, qid)
                book = None if key is None else self.book.books.get(key)
                total += 0 if book is None else book.scan_offset
            return total

    def sweep_dead(self, now_ms: int, limit: int = 256) -> list[DeadLetter]:
        """Expired last attempts of every group, including groups with no consumer left."""
        with self._lock:
            return self._dead_letters(self.book.sweep(now_ms, limit), {})

    # --- Handles. --------------------------------------------------------------------------------

    def decode_handle(self, group: str, text: str) -> Receipt:
        r = self.codec.decode(text)
        if r.group != group:
            raise InvalidReceiptHandleError("receipt handle belongs to another consumer group")
        return r

    def ack(self, group: str, handle: str) -> None:
        r = self.decode_handle(group, handle)
        with self._lock:
            self.book.ack(self.book.key_of(r.group, r.topic, r.queue_id), r.queue_offset, r.seq)
            self._dirty = True

    def change_invisible(self, group: str, handle: str, invisible_ms: int, now_ms: int) -> str:
        r = self.decode_handle(group, handle)
        key = QueueKey(r.group, r.topic, r.queue_id)
        with self._lock:
            seq = self.book.change_invisible(
                key, r.queue_offset, r.seq, now_ms=now_ms, invisible_ms=invisible_ms
            )
        return self.codec.encode(Receipt(r.group, r.topic, r.queue_id, r.queue_offset, seq))

    def take_for_dead_letter(
        self, group: str, handle: str, now_ms: int | None = None
    ) -> DeadLetter:
        """The consumer gave up on a message (ForwardMessageToDeadLetterQueue)."""
        r = self.decode_handle(group, handle)
        key = QueueKey(r.group, r.topic, r.queue_id)
        with self._lock:
            lease = self.book.lease_for(key, r.queue_offset, r.seq)
            rec = self._read(key, r.queue_offset)
            if rec is None:
                raise InvalidReceiptHandleError("the message is no longer retained")
            at = self.now_ms() if now_ms is None else now_ms
            e = self.book.take_for_dead_letter(key, lease.queue_offset, lease.seq, at)
            return DeadLetter(group, r.topic, r.queue_id, r.queue_offset, rec, e.attempts)

    def settle(self, dead: DeadLetter) -> None:
        """The DLQ copy is durable: the original counts as consumed. Unless an operator reset
        the group's position on that queue meanwhile (``reset_group``: the lease it was held
        under is gone): the offset is then the new position's to deliver or not."""
        with self._lock:
            key = QueueKey(dead.group, dead.topic, dead.queue_id)
            book = self.book.books.get(key)
            lease = book.leases.get(dead.queue_offset) if book is not None else None
            if lease is not None and lease.dead:
                self.book.settle(key, dead.queue_offset)
                self._dirty = True

    # --- Positions. ------------------------------------------------------------------------------

    def positions(self) -> list[tuple[str, str, int, int, int]]:
        """(group, topic, queue, ack offset, leased count) for every queue book."""
        with self._lock:
            return [
                (k.group, k.topic, k.queue_id, b.ack_offset, len(b.leases))
                for k, b in sorted(self.book.books.items())
            ]

    def retrying(self, group: str) -> int:
        """Messages of ``group`` delivered more than once and not yet settled (leased again or
        waiting for their redelivery): how much the group's consumers are failing."""
        with self._lock:
            return sum(
                sum(1 for lease in b.leases.values() if lease.attempt > 1)
                + sum(1 for o, n in b.prior_attempts.items() if n >= 1 and o not in b.leases)
                for k, b in self.book.books.items()
                if k.group == group
            )

    def set_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        with self._lock:
            self.book.reset(QueueKey(group, topic, queue_id), offset)
            self._dirty = True

    def reset_group(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Move ``group`` to ``offsets`` (queue id -> ack offset) on ``topic``: every named
        queue or none. The positions file is written first, with the new positions in place
        of the old (a failed write changes nothing), then the books are replaced, so the move
        is durable when this returns and a restart keeps it. What the group had in flight on
        those queues is dropped: its receipt handles go stale, and a message at or after its
        queue's new position is delivered again (docs/operations.md).

        Raises:
            TooManyRequestsError: the new positions would pass CONSUMER_QUEUES_MAX.
            OSError: the positions file could not be written; nothing moved.
        """
        validate_group(group)
        for offset in offsets.values():
            invariant(offset >= 0, "an offset is >= 0")
        with self._save_lock, self._lock:
            keys = {q: self.book.key_of(group, topic, q) for q in offsets}
            added = sum(1 for k in keys.values() if k not in self.book.books)
            if len(self.book.books) + added > limits.CONSUMER_QUEUES_MAX:
                raise TooManyRequestsError(
                    f"too many (group, topic, queue) positions: {limits.CONSUMER_QUEUES_MAX}"
                )
            moved = {keys[q]: Position(off) for q, off in offsets.items()}
            kept = [(k, p) for k, p in self.book.positions() if k not in moved]
            self.file.save([*kept, *moved.items()])
            for key, position in moved.items():
                self.book.reset(key, position.ack_offset)

    def delete_group(self, group: str) -> list[tuple[str, int, int, int]]:
        """Forget every position of ``group``: (topic, queue, ack offset, leased count) of each
        queue it held. The positions file is written first without them (a failed write
        changes nothing), then the books go, so the deletion is durable when this returns and
        a restart keeps it. Its receipt handles go stale; a consumer of the group that
        receives again starts as a new group does, at each queue's earliest retained message.

        Raises:
            OSError: the positions file could not be written; nothing was deleted.
        """
        validate_group(group)
        with self._save_lock, self._lock:
            gone = sorted(k for k in self.book.books if k.group == group)
            rows = [
                (k.topic, k.queue_id, self.book.books[k].ack_offset,
                 len(self.book.books[k].leases))
                for k in gone
            ]  # fmt: skip
            if gone:
                dropped = set(gone)
                self.file.save([(k, p) for k, p in self.book.positions() if k not in dropped])
                for key in gone:
                    self.book.drop(key)
            return rows

    def offset(self, group: str, topic: str, queue_id: int) -> int:
        """The group's ack offset, or the queue's first retained offset for a new group."""
        key = QueueKey(group, topic, queue_id)
        with self._lock:
            book = self.book.books.get(key)
            if book is not None:
                return book.ack_offset
        return self.store.queue_offsets(topic, queue_id)[0]

    def snapshot(self) -> bytes:
        """The positions as the positions file holds them, now (for replica followers)."""
        with self._lock:
            return encode_positions(list(self.book.positions()))

    def save(self, *, force: bool = False) -> None:
        # One saver at a time, so an older snapshot never replaces a newer one on disk.
        with self._save_lock:
            with self._lock:
                if not (self._dirty or force):
                    return
                snapshot = list(self.book.positions())
                self._dirty = False
            try:
                self.file.save(snapshot)
            except BaseException:
                self._dirty = True  # not on disk: the next save must write it
                raise


def _group_of(rec: Record) -> str:
    return rec.properties.get(PROP_MESSAGE_GROUP, "")


def _for(rec: Record, key: QueueKey) -> bool:
    """Whether ``key``'s group receives ``rec``: a copy re-driven from one group's DLQ is that
    group's alone; the topic's other groups settle it unread, as a tag filter does."""
    props = rec.properties
    return PROP_REDRIVE_GROUP not in props or props[PROP_REDRIVE_GROUP] == key.group
