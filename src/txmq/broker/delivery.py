"""Consumer-group delivery: POP-style receive, receipt handles, ack, redelivery, DLQ choice.

Owns: per (group, topic, queue) cursors (ack offset, next offset, acked set, in-flight messages
with their invisible deadline and attempt), receipt handles (HMAC-signed, so a forged or stale
handle is refused), and the decision to dead-letter after ``attempts_max`` deliveries. Persists
positions in ``consumer-offsets.json`` (atomic). Thread-safe; called from the executor.
Must not: use asyncio or read the wall clock (``now_ms`` is passed in), or append to the store
(the caller appends DLQ copies, then calls ``settle``).

Semantics: at-least-once. A received message is invisible to the group until its deadline; an ack
removes it; an expired one is delivered again with attempt + 1, and after ``attempts_max``
deliveries it is dead-lettered instead. After a restart, every message not acked is delivered
again (positions are saved at most ``save_interval`` late, so a just-acked message may repeat).
FIFO topics deliver one message per queue at a time, in queue order.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from txmq import limits
from txmq.errors import InvalidReceiptHandleError
from txmq.model import Record
from txmq.store.disk import Disk
from txmq.store.store import Store


@dataclass
class Inflight:
    queue_offset: int
    attempt: int
    deadline_ms: int
    seq: int


@dataclass
class Cursor:
    ack_offset: int
    next_offset: int
    done: set[int] = field(default_factory=set)
    inflight: dict[int, Inflight] = field(default_factory=dict)

    def mark_done(self, queue_offset: int) -> None:
        self.inflight.pop(queue_offset, None)
        if queue_offset >= self.ack_offset:
            self.done.add(queue_offset)
        while self.ack_offset in self.done:
            self.done.remove(self.ack_offset)
            self.ack_offset += 1


@dataclass(frozen=True)
class Delivery:
    record: Record
    receipt_handle: str
    attempt: int


@dataclass(frozen=True)
class DeadLetter:
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    record: Record
    attempts: int


@dataclass(frozen=True)
class Handle:
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    seq: int


class Deliveries:
    def __init__(self, store: Store, data_dir: Path, disk: Disk, *, attempts_max: int) -> None:
        self.store = store
        self.path = data_dir / "consumer-offsets.json"
        self.disk = disk
        self.attempts_max = attempts_max
        self._lock = threading.Lock()
        self._cursors: dict[tuple[str, str, int], Cursor] = {}
        self._seq = 0
        self._dirty = False
        secret_path = data_dir / "receipt-secret"
        if not disk.exists(secret_path):
            disk.write_atomic(secret_path, os.urandom(32).hex().encode())
        self._secret = bytes.fromhex(disk.read_all(secret_path).decode())
        if disk.exists(self.path):
            for key, (ack, done) in json.loads(disk.read_all(self.path)).items():
                group, topic, qid = key.split("\n")
                self._cursors[(group, topic, int(qid))] = Cursor(ack, ack, set(done))

    # --- Receipt handles. -------------------------------------------------------------------

    def _encode_handle(self, h: Handle) -> str:
        raw = json.dumps([h.group, h.topic, h.queue_id, h.queue_offset, h.seq]).encode()
        sig = hmac.new(self._secret, raw, hashlib.sha256).digest()[:12]
        return base64.urlsafe_b64encode(sig + raw).decode()

    def decode_handle(self, text: str) -> Handle:
        try:
            blob = base64.urlsafe_b64decode(text.encode())
            sig, raw = blob[:12], blob[12:]
            good = hmac.compare_digest(
                sig, hmac.new(self._secret, raw, hashlib.sha256).digest()[:12]
            )
            if not good:
                raise InvalidReceiptHandleError("receipt handle signature does not match")
            g, t, q, o, s = json.loads(raw)
            return Handle(str(g), str(t), int(q), int(o), int(s))
        except (ValueError, TypeError) as exc:
            raise InvalidReceiptHandleError(f"malformed receipt handle: {exc}") from exc

    # --- Receiving. ---------------------------------------------------------------------------

    def _cursor(self, group: str, topic: str, queue_id: int) -> Cursor:
        key = (group, topic, queue_id)
        c = self._cursors.get(key)
        if c is None:
            # A new group starts at the earliest retained message of the queue.
            start = self.store.queue_offsets(topic, queue_id)[0]
            c = Cursor(start, start)
            self._cursors[key] = c
        return c

    def receive(
        self,
        group: str,
        topic: str,
        queue_ids: list[int],
        *,
        tags: frozenset[str] | None,
        batch: int,
        invisible_ms: int,
        now_ms: int,
        fifo: bool,
    ) -> tuple[list[Delivery], list[DeadLetter]]:
        """Pick up to ``batch`` messages: expired in-flight ones first, then new ones."""
        out: list[Delivery] = []
        dead: list[DeadLetter] = []
        with self._lock:
            for qid in queue_ids:
                if len(out) >= batch:
                    break
                c = self._cursor(group, topic, qid)
                self._redeliver(
                    c, group, topic, qid, batch - len(out), invisible_ms, now_ms, out, dead
                )
                if fifo and c.inflight:
                    continue
                want = 1 if fifo else batch - len(out)
                self._fresh(c, group, topic, qid, tags, want, invisible_ms, now_ms, out)
        return out, dead

    def _redeliver(
        self,
        c: Cursor,
        group: str,
        topic: str,
        qid: int,
        room: int,
        invisible_ms: int,
        now_ms: int,
        out: list[Delivery],
        dead: list[DeadLetter],
    ) -> None:
        expired = sorted(o for o, f in c.inflight.items() if f.deadline_ms <= now_ms)
        for off in expired[:room]:
            f = c.inflight[off]
            rec = self._read(topic, qid, off)
            if rec is None:
                c.mark_done(off)  # retention removed it: nothing left to deliver
                continue
            if f.attempt >= self.attempts_max:
                f.deadline_ms = now_ms + invisible_ms  # hidden while the DLQ copy is written
                dead.append(DeadLetter(group, topic, qid, off, rec, f.attempt))
                continue
            out.append(
                self._deliver(c, group, topic, qid, rec, f.attempt + 1, invisible_ms, now_ms)
            )

    def _fresh(
        self,
        c: Cursor,
        group: str,
        topic: str,
        qid: int,
        tags: frozenset[str] | None,
        want: int,
        invisible_ms: int,
        now_ms: int,
        out: list[Delivery],
    ) -> None:
        if want <= 0 or len(c.inflight) >= limits.INFLIGHT_PER_GROUP_QUEUE_MAX:
            return
        lo, hi = self.store.queue_offsets(topic, qid)
        c.next_offset = max(c.next_offset, lo)
        if c.ack_offset < lo:
            c.ack_offset = lo
        while c.next_offset < hi and want > 0:
            start = c.next_offset
            read = self.store.read_queue(topic, qid, start, want, tags=tags)
            got = {r.queue_offset for r in read.records}
            for off in range(start, read.next_offset):
                if off not in got and off not in c.inflight:
                    c.mark_done(off)  # filtered out by tag: nothing to deliver to this group
            c.next_offset = read.next_offset
            for rec in read.records:
                if rec.queue_offset in c.done or rec.queue_offset in c.inflight:
                    continue
                out.append(self._deliver(c, group, topic, qid, rec, 1, invisible_ms, now_ms))
                want -= 1
            self._dirty = True
            if read.next_offset == start:
                break

    def _deliver(
        self,
        c: Cursor,
        group: str,
        topic: str,
        qid: int,
        rec: Record,
        attempt: int,
        invisible_ms: int,
        now_ms: int,
    ) -> Delivery:
        self._seq += 1
        off = rec.queue_offset
        c.inflight[off] = Inflight(off, attempt, now_ms + invisible_ms, self._seq)
        handle = self._encode_handle(Handle(group, topic, qid, off, self._seq))
        return Delivery(rec, handle, attempt)

    def _read(self, topic: str, qid: int, off: int) -> Record | None:
        read = self.store.read_queue(topic, qid, off, 1)
        if not read.records or read.records[0].queue_offset != off:
            return None
        return read.records[0]

    def sweep_dead(self, now_ms: int, limit: int = 256) -> list[DeadLetter]:
        """Expired messages that used their last attempt, even if nobody receives any more:
        a group whose consumers all left must still dead-letter what they failed on."""
        dead: list[DeadLetter] = []
        with self._lock:
            for (group, topic, qid), c in self._cursors.items():
                for off, f in list(c.inflight.items()):
                    if len(dead) >= limit:
                        return dead
                    if f.deadline_ms > now_ms or f.attempt < self.attempts_max:
                        continue
                    rec = self._read(topic, qid, off)
                    if rec is None:
                        c.mark_done(off)
                        continue
                    f.deadline_ms = now_ms + 60_000  # hidden while the DLQ copy is written
                    dead.append(DeadLetter(group, topic, qid, off, rec, f.attempt))
        return dead

    # --- Acks and invisibility. ----------------------------------------------------------------

    def _match(self, group: str, text: str) -> tuple[Cursor, Handle, Inflight]:
        h = self.decode_handle(text)
        if h.group != group:
            raise InvalidReceiptHandleError("receipt handle belongs to another consumer group")
        c = self._cursors.get((h.group, h.topic, h.queue_id))
        f = c.inflight.get(h.queue_offset) if c else None
        if c is None or f is None or f.seq != h.seq:
            raise InvalidReceiptHandleError(
                "receipt handle is stale: the message was acked, redelivered or expired"
            )
        return c, h, f

    def ack(self, group: str, handle: str) -> None:
        with self._lock:
            c, h, _ = self._match(group, handle)
            c.mark_done(h.queue_offset)
            self._dirty = True

    def change_invisible(self, group: str, handle: str, invisible_ms: int, now_ms: int) -> str:
        with self._lock:
            _c, h, f = self._match(group, handle)
            self._seq += 1
            f.seq = self._seq
            f.deadline_ms = now_ms + invisible_ms
            return self._encode_handle(
                Handle(h.group, h.topic, h.queue_id, h.queue_offset, self._seq)
            )

    def take_for_dead_letter(self, group: str, handle: str) -> DeadLetter:
        """Client-requested DLQ (ForwardMessageToDeadLetterQueue)."""
        with self._lock:
            _c, h, f = self._match(group, handle)
            rec = self._read(h.topic, h.queue_id, h.queue_offset)
            if rec is None:
                raise InvalidReceiptHandleError("message is no longer retained")
            return DeadLetter(group, h.topic, h.queue_id, h.queue_offset, rec, f.attempt)

    def settle(self, dead: DeadLetter) -> None:
        """The DLQ copy is durable: the original counts as consumed."""
        with self._lock:
            self._cursors[(dead.group, dead.topic, dead.queue_id)].mark_done(dead.queue_offset)
            self._dirty = True

    # --- Positions. ------------------------------------------------------------------------------

    def positions(self) -> list[tuple[str, str, int, int, int]]:
        """(group, topic, queue, ack offset, in-flight count) for every cursor."""
        with self._lock:
            return [
                (g, t, q, c.ack_offset, len(c.inflight))
                for (g, t, q), c in sorted(self._cursors.items())
            ]

    def set_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        with self._lock:
            self._cursors[(group, topic, queue_id)] = Cursor(offset, offset)
            self._dirty = True

    def offset(self, group: str, topic: str, queue_id: int) -> int:
        with self._lock:
            return self._cursor(group, topic, queue_id).ack_offset

    def save(self, *, force: bool = False) -> None:
        with self._lock:
            if not (self._dirty or force):
                return
            data = {
                f"{g}\n{t}\n{q}": [
                    c.ack_offset,
                    sorted(c.done)[: limits.INFLIGHT_PER_GROUP_QUEUE_MAX],
                ]
                for (g, t, q), c in self._cursors.items()
            }
            self._dirty = False
        self.disk.write_atomic(self.path, json.dumps(data).encode())
