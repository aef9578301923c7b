"""The consumer-group delivery book: a pure core, no I/O and no clock (``now_ms`` is an argument).

Owns, per (group, topic, queue): the ack offset (lowest offset not yet settled), the scan offset
(next offset never looked at), the settled offsets between them, the leases (messages handed to
a consumer and invisible until their deadline, each with its attempt count and a sequence number
that receipt handles must match), and for FIFO topics the messages held back behind an earlier
message of their message group. It decides redelivery (attempt + 1 after the invisible time and
a backoff), dead-lettering (after ``attempts_max`` deliveries) and FIFO order.
Must not: read the store, append, sign handles, lock, or persist. The glue in
``txmq.broker.consume.positions`` feeds it candidates read from the store and carries out its
decisions.

Semantics: at-least-once. A settled offset (acked, dead-lettered, filtered out, or gone
by retention) is never delivered to the group again. Every other offset in [ack, scan) is leased
or held. The window scan - ack never exceeds ``window_max``, which bounds every structure here.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from txmq import limits
from txmq.errors import InvalidReceiptHandleError, invariant
from txmq.model import Record

# A lease picked for the DLQ stays invisible this long while the copy is appended; if the
# append fails, the sweep decides again after it instead of losing the message.
DEAD_LETTER_HOLD_MS = 60_000


class QueueKey(NamedTuple):
    group: str
    topic: str
    queue_id: int


class Candidate(NamedTuple):
    """A message the store returned for a scan: its offset and FIFO message group ("" = none)."""

    queue_offset: int
    message_group: str


# A namedtuple's ``__new__`` is a Python function (a frame per key); ``tuple.__new__`` builds
# the same tuple in C. Several keys are built per receive and ack.
def queue_key(group: str, topic: str, queue_id: int) -> QueueKey:
    """``QueueKey(group, topic, queue_id)``, built in C."""
    return tuple.__new__(QueueKey, (group, topic, queue_id))


def candidate(queue_offset: int, message_group: str) -> Candidate:
    """``Candidate(queue_offset, message_group)``, built in C."""
    return tuple.__new__(Candidate, (queue_offset, message_group))


@dataclass(slots=True)
class Lease:
    queue_offset: int
    message_group: str
    attempt: int
    seq: int
    delivered_ms: int
    deadline_ms: int
    # When an expired lease may be delivered again: the deadline, or later if the backoff for
    # this attempt says so. A client that set the deadline itself gets exactly its deadline.
    visible_ms: int
    dead: bool = False


@dataclass(frozen=True, slots=True)
class Grant:
    """Deliver this offset now, with this attempt number; the receipt handle carries ``seq``."""

    key: QueueKey
    queue_offset: int
    attempt: int
    seq: int


@dataclass(frozen=True, slots=True)
class Expired:
    """Dead-letter this offset: it was delivered ``attempts`` times without an ack."""

    key: QueueKey
    queue_offset: int
    attempts: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An ``Expired`` decision with its record, ready for the glue to append to the DLQ."""

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    record: Record
    attempts: int


@dataclass(frozen=True, slots=True)
class Position:
    """What survives a restart: the ack offset, settled offsets above it, attempts so far."""

    ack_offset: int
    settled: tuple[int, ...] = ()
    attempts: tuple[tuple[int, int], ...] = ()


@dataclass
class QueueBook:
    ack_offset: int
    scan_offset: int
    settled: set[int] = field(default_factory=set)
    leases: dict[int, Lease] = field(default_factory=dict)
    # FIFO only: scanned offsets waiting for their message group, in offset order.
    held: dict[int, str] = field(default_factory=dict)
    # Message groups with a lease, each mapped to that lease's offset (FIFO only).
    busy: dict[str, int] = field(default_factory=dict)
    # Attempts made before a restart, for offsets not yet leased again.
    prior_attempts: dict[int, int] = field(default_factory=dict)
    # (visible_ms, offset, seq) per lease change, earliest first; entries whose lease has
    # changed since are dropped when they surface, and the heap is rebuilt when mostly stale.
    due: list[tuple[int, int, int]] = field(default_factory=list)

    def check(self) -> None:
        invariant(self.ack_offset <= self.scan_offset, "ack offset passed the scan offset")
        invariant(self.ack_offset not in self.settled, "the ack offset itself is settled")
        window = self.scan_offset - self.ack_offset
        invariant(len(self.leases) + len(self.held) <= window, "more in flight than the window")


class DeliveryBook:
    """Every queue book of a broker. ``receive``-side calls return decisions; the caller reads
    the records and calls back ``settle`` once a dead letter is durable or a record is gone."""

    def __init__(
        self,
        *,
        attempts_max: int,
        backoff_initial_ms: int,
        backoff_max_ms: int,
        window_max: int = limits.INFLIGHT_PER_GROUP_QUEUE_MAX,
    ) -> None:
        invariant(attempts_max >= 1, "attempts_max must be >= 1")
        invariant(0 < backoff_initial_ms <= backoff_max_ms, "bad backoff bounds")
        invariant(window_max >= 1, "window_max must be >= 1")
        self.attempts_max = attempts_max
        self.backoff_initial_ms = backoff_initial_ms
        self.backoff_max_ms = backoff_max_ms
        self.window_max = window_max
        self.books: dict[QueueKey, QueueBook] = {}
        # Per (group, topic), the keys of ``books`` by queue id (None: no book): a receive or
        # an ack finds its keys here instead of building them (a namedtuple each, ~1.5k
        # instructions), and the very objects ``books`` holds, so its lookups compare keys by
        # identity. One entry per book: bounded as ``books`` is.
        self.keys: dict[tuple[str, str], list[QueueKey | None]] = {}
        self._seq = 0

    # --- Queue books. ----------------------------------------------------------------------------

    def _remember(self, key: QueueKey) -> None:
        qid = key.queue_id
        if not 0 <= qid < limits.QUEUES_PER_TOPIC_MAX:
            return  # not a queue a topic can have: ``key_of`` builds it each time
        row = self.keys.setdefault((key.group, key.topic), [])
        while len(row) <= qid:
            row.append(None)
        row[qid] = key

    def known_key(self, group: str, topic: str, queue_id: int) -> QueueKey | None:
        """The key of the book of (group, topic, queue_id) as ``books`` holds it, or None when
        there is no such book."""
        row = self.keys.get((group, topic))
        if row is not None and 0 <= queue_id < len(row):
            return row[queue_id]
        return None

    def key_of(self, group: str, topic: str, queue_id: int) -> QueueKey:
        """``queue_key(group, topic, queue_id)``, the very object ``books`` holds if it has it."""
        key = self.known_key(group, topic, queue_id)
        return key if key is not None else queue_key(group, topic, queue_id)

    def open(self, key: QueueKey, start_offset: int) -> QueueBook:
        """The book of ``key``, created at ``start_offset`` for a group new to this queue."""
        book = self.books.get(key)
        if book is None:
            invariant(start_offset >= 0, "start offset must be >= 0")
            book = QueueBook(start_offset, start_offset)
            self.books[key] = book
            self._remember(key)
        return book

    def restore(self, key: QueueKey, position: Position) -> None:
        """Load a saved position: leases from before the restart are delivered again."""
        book = QueueBook(position.ack_offset, position.ack_offset)
        book.settled = {o for o in position.settled if o > position.ack_offset}
        book.prior_attempts = {o: n for o, n in position.attempts if o >= position.ack_offset}
        book.check()
        self.books[key] = book
        self._remember(key)

    def reset(self, key: QueueKey, offset: int) -> None:
        """Move a group to ``offset`` (UpdateOffset); outstanding receipt handles become stale."""
        invariant(offset >= 0, "offset must be >= 0")
        if key not in self.books:
            self._remember(key)
        self.books[key] = QueueBook(offset, offset)

    def drop(self, key: QueueKey) -> None:
        """Forget ``key``'s book (its group was deleted): its leases, held messages and
        attempts go with it, so its receipt handles are stale; a receive opens it anew."""
        self.books.pop(key, None)
        row = self.keys.get((key.group, key.topic))
        if row is not None and 0 <= key.queue_id < len(row):
            row[key.queue_id] = None
            if not any(k is not None for k in row):
                del self.keys[(key.group, key.topic)]

    def clamp(self, key: QueueKey, min_offset: int) -> None:
        """Retention removed offsets below ``min_offset``: nothing there can be delivered."""
        book = self.books[key]
        if book.ack_offset >= min_offset:
            return
        for off in [o for o in book.leases if o < min_offset]:
            self._drop_lease(book, off)
        for off in [o for o in book.held if o < min_offset]:
            del book.held[off]
        book.settled = {o for o in book.settled if o >= min_offset}
        book.prior_attempts = {o: n for o, n in book.prior_attempts.items() if o >= min_offset}
        book.ack_offset = min_offset
        book.scan_offset = max(book.scan_offset, min_offset)
        self._advance(book)

    def positions(self) -> Iterator[tuple[QueueKey, Position]]:
        for key, book in self.books.items():
            attempts = {**book.prior_attempts, **{o: f.attempt for o, f in book.leases.items()}}
            settled = tuple(sorted(book.settled))
            yield key, Position(book.ack_offset, settled, tuple(sorted(attempts.items())))

    # --- Receiving. ------------------------------------------------------------------------------

    def backoff_ms(self, attempt: int) -> int:
        """Delay before attempt + 1: initial, doubling per attempt, capped."""
        invariant(attempt >= 1, "attempt must be >= 1")
        return min(self.backoff_initial_ms << min(attempt - 1, 40), self.backoff_max_ms)

    def take_due(
        self, key: QueueKey, *, now_ms: int, invisible_ms: int, room: int
    ) -> tuple[list[Grant], list[Expired]]:
        """Expired leases (redelivered, or dead-lettered after their last attempt) and, for FIFO,
        held messages whose group is free again; at most ``room`` grants."""
        book = self.books[key]
        grants: list[Grant] = []
        dead: list[Expired] = []
        while (lease := self._next_due(book, now_ms)) is not None:
            if lease.attempt >= self.attempts_max:
                dead.append(self._hold_dead(key, lease, now_ms))
            elif len(grants) < room:
                grants.append(
                    self._lease(key, book, lease, lease.attempt + 1, now_ms, invisible_ms)
                )
            else:
                break
        for off, group in list(book.held.items()):
            if len(grants) >= room:
                break
            if group not in book.busy:
                del book.held[off]
                got = self._grant_new(key, book, off, group, now_ms, invisible_ms)
                if isinstance(got, Expired):
                    dead.append(got)
                else:
                    grants.append(got)
        return grants, dead

    def idle(self, key: QueueKey, end: int, now_ms: int) -> bool:
        """Whether ``key`` has nothing to deliver at ``now_ms`` while its queue ends at ``end``:
        its book exists and has scanned up to ``end``, holds nothing back and has no lease due
        (a stale heap entry counts as due: ``take_due`` drops it)."""
        book = self.books.get(key)
        return (
            book is not None
            and book.scan_offset >= end
            and not book.held
            and not (book.due and book.due[0][0] <= now_ms)
        )

    def scan_window(self, key: QueueKey, want: int) -> tuple[int, int]:
        """Where the next store read starts and how many entries it may look at."""
        book = self.books[key]
        room = self.window_max - (book.scan_offset - book.ack_offset)
        return book.scan_offset, max(0, min(want, room, limits.READ_BATCH_MAX))

    def offer(
        self,
        key: QueueKey,
        scanned_to: int,
        candidates: Iterable[Candidate],
        *,
        now_ms: int,
        invisible_ms: int,
        room: int,
        fifo: bool,
    ) -> tuple[list[Grant], list[Expired]]:
        """Take the result of a store read over [scan offset, ``scanned_to``): offsets without a
        candidate were filtered out for this group and are settled; candidates are granted
        (FIFO: only the first unsettled message of each message group), others held."""
        book = self.books[key]
        invariant(scanned_to >= book.scan_offset, "a scan went backwards")
        # A filtered read may step over up to READ_SCAN_ENTRIES_MAX entries past its window.
        span_max = self.window_max + limits.READ_SCAN_ENTRIES_MAX
        invariant(scanned_to - book.ack_offset <= span_max, "a scan went past the window")
        start, book.scan_offset = book.scan_offset, scanned_to
        offered: set[int] = set()
        grants: list[Grant] = []
        dead: list[Expired] = []
        for cand in candidates:
            invariant(start <= cand.queue_offset < scanned_to, "candidate outside the scan")
            offered.add(cand.queue_offset)
            if cand.queue_offset in book.settled:
                continue  # acked before a restart; the rescan from the ack offset meets it
            group = cand.message_group if fifo else ""
            if fifo and (group in book.busy or len(grants) >= room):
                book.held[cand.queue_offset] = group
                continue
            invariant(len(grants) < room or fifo, "a non-FIFO scan returned more than room")
            got = self._grant_new(key, book, cand.queue_offset, group, now_ms, invisible_ms)
            if isinstance(got, Expired):
                dead.append(got)
            else:
                grants.append(got)
        for off in range(start, scanned_to):
            if off not in offered:
                self._settle(book, off)
        return grants, dead

    def _grant_new(
        self,
        key: QueueKey,
        book: QueueBook,
        queue_offset: int,
        message_group: str,
        now_ms: int,
        invisible_ms: int,
    ) -> Grant | Expired:
        prior = book.prior_attempts.pop(queue_offset, 0)
        lease = Lease(queue_offset, message_group, prior, 0, now_ms, now_ms, now_ms)
        book.leases[queue_offset] = lease
        if message_group:
            book.busy[message_group] = queue_offset
        if prior >= self.attempts_max:
            return self._hold_dead(key, lease, now_ms)  # it used its last attempt before a restart
        return self._lease(key, book, lease, prior + 1, now_ms, invisible_ms)

    def _lease(
        self, key: QueueKey, book: QueueBook, lease: Lease, attempt: int, now_ms: int, inv_ms: int
    ) -> Grant:
        invariant(1 <= attempt <= self.attempts_max, "attempt out of range")
        self._seq += 1
        lease.attempt = attempt
        lease.seq = self._seq
        lease.delivered_ms = now_ms
        lease.deadline_ms = now_ms + inv_ms
        self._show_at(book, lease, max(lease.deadline_ms, now_ms + self.backoff_ms(attempt)))
        return Grant(key, lease.queue_offset, attempt, lease.seq)

    def _hold_dead(self, key: QueueKey, lease: Lease, now_ms: int) -> Expired:
        self._seq += 1
        lease.seq = self._seq  # the consumer's handle is stale from now on
        lease.dead = True
        lease.deadline_ms = now_ms + DEAD_LETTER_HOLD_MS
        self._show_at(self.books[key], lease, lease.deadline_ms)
        return Expired(key, lease.queue_offset, lease.attempt)

    def sweep(self, now_ms: int, limit: int) -> list[Expired]:
        """Expired last attempts in every queue, so a group whose consumers all left still
        dead-letters what they failed on."""
        out: list[Expired] = []
        for key, book in self.books.items():
            if not book.due or book.due[0][0] > now_ms:
                continue  # nothing due in this queue: the common case, checked in O(1)
            for lease in list(book.leases.values()):
                if len(out) >= limit:
                    return out
                if lease.visible_ms <= now_ms and lease.attempt >= self.attempts_max:
                    out.append(self._hold_dead(key, lease, now_ms))
        return out

    def _show_at(self, book: QueueBook, lease: Lease, visible_ms: int) -> None:
        lease.visible_ms = visible_ms
        heapq.heappush(book.due, (visible_ms, lease.queue_offset, lease.seq))
        if len(book.due) > 2 * len(book.leases) + 64:
            book.due = [(f.visible_ms, o, f.seq) for o, f in book.leases.items()]
            heapq.heapify(book.due)

    def _next_due(self, book: QueueBook, now_ms: int) -> Lease | None:
        """The earliest lease visible again at ``now_ms``; stale heap entries are dropped."""
        while book.due and book.due[0][0] <= now_ms:
            visible_ms, off, seq = book.due[0]
            lease = book.leases.get(off)
            if lease is not None and lease.seq == seq and lease.visible_ms == visible_ms:
                return lease  # left in the heap: granting or holding it pushes a new entry
            heapq.heappop(book.due)
        return None

    # --- Handles. --------------------------------------------------------------------------------

    def lease_for(self, key: QueueKey, queue_offset: int, seq: int) -> Lease:
        """The live lease a receipt handle names, or InvalidReceiptHandleError if it is stale."""
        book = self.books.get(key)
        lease = book.leases.get(queue_offset) if book is not None else None
        if lease is None or lease.seq != seq or lease.dead:
            raise InvalidReceiptHandleError(
                "receipt handle is stale: the message was acked, redelivered or dead-lettered"
            )
        return lease

    def ack(self, key: QueueKey, queue_offset: int, seq: int) -> None:
        self.lease_for(key, queue_offset, seq)
        self._settle(self.books[key], queue_offset)

    def change_invisible(
        self, key: QueueKey, queue_offset: int, seq: int, *, now_ms: int, invisible_ms: int
    ) -> int:
        """The client chose when to see the message again: honour exactly that time. Returns
        the new seq (the old handle is stale)."""
        lease = self.lease_for(key, queue_offset, seq)
        self._seq += 1
        lease.seq = self._seq
        lease.deadline_ms = now_ms + invisible_ms
        self._show_at(self.books[key], lease, lease.deadline_ms)
        return lease.seq

    def take_for_dead_letter(
        self, key: QueueKey, queue_offset: int, seq: int, now_ms: int
    ) -> Expired:
        """The client gave up (ForwardMessageToDeadLetterQueue): hide it until ``settle``."""
        return self._hold_dead(key, self.lease_for(key, queue_offset, seq), now_ms)

    def settle(self, key: QueueKey, queue_offset: int) -> None:
        """The offset is done for the group: its dead letter is durable, or the record is gone."""
        book = self.books.get(key)
        if book is not None and queue_offset >= book.ack_offset:
            book.held.pop(queue_offset, None)
            self._settle(book, queue_offset)

    def _settle(self, book: QueueBook, queue_offset: int) -> None:
        if queue_offset in book.leases:
            self._drop_lease(book, queue_offset)
        if queue_offset >= book.ack_offset:
            book.settled.add(queue_offset)
        self._advance(book)

    def _drop_lease(self, book: QueueBook, queue_offset: int) -> None:
        lease = book.leases.pop(queue_offset)
        if book.busy.get(lease.message_group) == queue_offset:
            del book.busy[lease.message_group]

    def _advance(self, book: QueueBook) -> None:
        while book.ack_offset in book.settled:
            book.settled.remove(book.ack_offset)
            book.ack_offset += 1
        book.check()
