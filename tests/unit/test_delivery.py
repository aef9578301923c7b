"""The pure delivery book with a simulated clock: receive, ack, expiry, redelivery with attempt
+ 1 after a backoff, max attempts -> DLQ decision, FIFO per message group, two consumers, stale
handles, restart positions and bounds. The "queue" here is a list of (group, tag) per offset; a
helper plays the store's read (the book never reads the store itself)."""

from __future__ import annotations

import random

import pytest

from tests.conftest import Clock
from txmq.broker.consume.book import Candidate, DeliveryBook, Expired, Grant, QueueKey
from txmq.errors import InvalidReceiptHandleError

K = QueueKey("g", "t", 0)
INV = 10_000


def book(attempts_max: int = 3, window_max: int = 1000) -> DeliveryBook:
    b = DeliveryBook(
        attempts_max=attempts_max,
        backoff_initial_ms=1_000,
        backoff_max_ms=8_000,
        window_max=window_max,
    )
    b.open(K, 0)
    return b


def receive(
    b: DeliveryBook,
    queue: list[tuple[str, str]],
    now_ms: int,
    room: int = 32,
    *,
    fifo: bool = False,
    tags: set[str] | None = None,
    invisible_ms: int = INV,
) -> tuple[list[Grant], list[Expired]]:
    """One receive as the glue does it: due leases first, then one scan of new offsets."""
    grants, dead = b.take_due(K, now_ms=now_ms, invisible_ms=invisible_ms, room=room)
    room -= len(grants)
    start, count = b.scan_window(K, 32 if fifo else room)
    if room > 0 and count > 0 and start < len(queue):
        end = min(len(queue), start + count)
        cands = [
            Candidate(o, queue[o][0])
            for o in range(start, end)
            if tags is None or queue[o][1] in tags
        ]
        more, more_dead = b.offer(
            K, end, cands, now_ms=now_ms, invisible_ms=invisible_ms, room=room, fifo=fifo
        )
        grants += more
        dead += more_dead
    return grants, dead


def plain(n: int) -> list[tuple[str, str]]:
    return [("", "") for _ in range(n)]


def test_receive_then_ack_moves_the_ack_offset_and_stales_the_handle(clock: Clock) -> None:
    b = book()
    grants, _ = receive(b, plain(3), clock.now)
    assert [(g.queue_offset, g.attempt) for g in grants] == [(0, 1), (1, 1), (2, 1)]
    b.ack(K, 1, grants[1].seq)
    assert b.books[K].ack_offset == 0  # offset 0 still unacked
    b.ack(K, 0, grants[0].seq)
    assert b.books[K].ack_offset == 2
    with pytest.raises(InvalidReceiptHandleError):
        b.ack(K, 0, grants[0].seq)  # acked twice
    with pytest.raises(InvalidReceiptHandleError):
        b.ack(K, 2, grants[2].seq + 1000)  # forged seq
    with pytest.raises(InvalidReceiptHandleError):
        b.ack(QueueKey("other", "t", 0), 2, grants[2].seq)


def test_in_flight_message_is_invisible_until_expiry_then_redelivered(clock: Clock) -> None:
    b = book()
    q = plain(1)
    (first,), _ = receive(b, q, clock.now)
    clock.advance(INV - 1)
    assert receive(b, q, clock.now) == ([], [])  # a second consumer gets nothing
    clock.advance(1)
    (again,), _ = receive(b, q, clock.now)
    assert (again.queue_offset, again.attempt) == (0, 2)
    assert again.seq != first.seq
    with pytest.raises(InvalidReceiptHandleError):
        b.ack(K, 0, first.seq)  # the first consumer's handle is stale now
    b.ack(K, 0, again.seq)
    assert b.books[K].ack_offset == 1


def test_backoff_delays_redelivery_past_a_short_invisible_time(clock: Clock) -> None:
    b = book(attempts_max=10)
    q = plain(1)
    assert [b.backoff_ms(a) for a in range(1, 6)] == [1000, 2000, 4000, 8000, 8000]
    start = clock.now
    seen = []
    for _ in range(5):
        for _ in range(100):  # step the clock until the message is due again
            grants, _ = receive(b, q, clock.now, invisible_ms=100)
            if grants:
                seen.append((grants[0].attempt, clock.now - start))
                start = clock.now
                break
            clock.advance(100)
    # Attempt n+1 comes backoff(n) after attempt n, not 100 ms (the invisible time) after it.
    assert seen == [(1, 0), (2, 1000), (3, 2000), (4, 4000), (5, 8000)]


def test_change_invisible_duration_honours_the_clients_time(clock: Clock) -> None:
    b = book(attempts_max=10)
    q = plain(1)
    for _ in range(3):  # reach attempt 3, whose backoff (4 s) exceeds what the client asks
        clock.advance(60_000)
        (g,), _ = receive(b, q, clock.now)
    new_seq = b.change_invisible(K, 0, g.seq, now_ms=clock.now, invisible_ms=1_000)
    with pytest.raises(InvalidReceiptHandleError):
        b.ack(K, 0, g.seq)
    clock.advance(999)
    assert receive(b, q, clock.now)[0] == []
    clock.advance(1)
    (again,), _ = receive(b, q, clock.now)
    assert again.attempt == 4 and again.seq != new_seq


def test_max_attempts_decides_dead_letter_and_settle_counts_it_consumed(clock: Clock) -> None:
    b = book(attempts_max=3)
    q = plain(2)
    attempts = []
    for _ in range(3):
        grants, dead = receive(b, q, clock.now, room=1)
        attempts.append(grants[0].attempt)
        assert dead == []
        clock.advance(60_000)
    assert attempts == [1, 2, 3]
    grants, dead = receive(b, q, clock.now, room=1)
    assert dead == [Expired(K, 0, 3)]
    assert [g.queue_offset for g in grants] == [1]  # the next message is not blocked
    with pytest.raises(InvalidReceiptHandleError):
        b.ack(K, 0, b.books[K].leases[0].seq - 1)
    assert receive(b, q, clock.now) == ([], [])  # hidden while the DLQ copy is written
    b.settle(K, 0)
    b.ack(K, 1, grants[0].seq)
    assert b.books[K].ack_offset == 2


def test_sweep_dead_letters_last_attempts_nobody_receives(clock: Clock) -> None:
    b = book(attempts_max=1)
    (g,), _ = receive(b, plain(1), clock.now)
    assert b.sweep(clock.now, limit=10) == []
    clock.advance(INV)
    assert b.sweep(clock.now, limit=10) == [Expired(K, 0, 1)]
    assert b.sweep(clock.now, limit=10) == []  # decided once, then held
    with pytest.raises(InvalidReceiptHandleError):
        b.ack(K, 0, g.seq)


def test_client_forwarding_to_the_dlq(clock: Clock) -> None:
    b = book()
    (g,), _ = receive(b, plain(1), clock.now)
    assert b.take_for_dead_letter(K, 0, g.seq, clock.now) == Expired(K, 0, 1)
    with pytest.raises(InvalidReceiptHandleError):
        b.take_for_dead_letter(K, 0, g.seq, clock.now)
    b.settle(K, 0)
    assert b.books[K].ack_offset == 1


def test_fifo_one_message_per_group_in_order_other_groups_proceed(clock: Clock) -> None:
    b = book(attempts_max=5)
    q = [("A", ""), ("A", ""), ("B", ""), ("A", ""), ("B", "")]
    grants, _ = receive(b, q, clock.now, fifo=True)
    assert [g.queue_offset for g in grants] == [0, 2]  # heads of A and B only
    assert receive(b, q, clock.now, fifo=True) == ([], [])
    b.ack(K, 2, grants[1].seq)
    (g,), _ = receive(b, q, clock.now, fifo=True)
    assert g.queue_offset == 4  # B's next, while A's head is still in flight
    clock.advance(60_000)  # A's head expires: it comes again before anything else of A
    (again,), _ = receive(b, q, clock.now, fifo=True, room=1)
    assert (again.queue_offset, again.attempt) == (0, 2)
    b.ack(K, 0, again.seq)
    order = []
    for _ in range(5):
        grants, _ = receive(b, q, clock.now, fifo=True)
        for x in grants:
            order.append(x.queue_offset)
            b.ack(K, x.queue_offset, x.seq)
    assert [o for o in order if q[o][0] == "A"] == [1, 3]


def test_fifo_next_message_after_dead_letter_of_the_head(clock: Clock) -> None:
    b = book(attempts_max=1)
    q = [("A", ""), ("A", "")]
    (_head,), _ = receive(b, q, clock.now, fifo=True)
    clock.advance(INV)
    grants, dead = receive(b, q, clock.now, fifo=True)
    assert dead == [Expired(K, 0, 1)] and grants == []  # A waits for the DLQ copy
    b.settle(K, 0)
    (nxt,), _ = receive(b, q, clock.now, fifo=True)
    assert nxt.queue_offset == 1


def test_filtered_out_offsets_are_settled_for_the_group(clock: Clock) -> None:
    b = book()
    q = [("", "a"), ("", "b"), ("", "a"), ("", "c")]
    grants, _ = receive(b, q, clock.now, tags={"a"})
    assert [g.queue_offset for g in grants] == [0, 2]
    for g in grants:
        b.ack(K, g.queue_offset, g.seq)
    assert b.books[K].ack_offset == 4


def test_two_consumers_share_without_double_delivery(clock: Clock, seed: int) -> None:
    rng = random.Random(seed)
    b = book(attempts_max=16)
    q = plain(200)
    delivered: list[int] = []
    for _ in range(200):
        grants, _ = receive(b, q, clock.now, room=rng.randint(1, 8))  # either consumer
        for g in grants:
            delivered.append(g.queue_offset)
            b.ack(K, g.queue_offset, g.seq)
        clock.advance(rng.randint(0, 50))
    assert sorted(delivered) == list(range(200))


def test_window_bounds_leases_held_and_settled(clock: Clock) -> None:
    b = book(window_max=5)
    q = plain(50)
    grants, _ = receive(b, q, clock.now)
    assert len(grants) == 5
    assert b.scan_window(K, 32) == (5, 0)
    for g in grants[1:]:
        b.ack(K, g.queue_offset, g.seq)
    assert receive(b, q, clock.now) == ([], [])  # offset 0 holds the window shut
    b.ack(K, 0, grants[0].seq)
    assert len(receive(b, q, clock.now)[0]) == 5


def test_positions_restore_redelivers_with_prior_attempts(clock: Clock) -> None:
    b = book(attempts_max=3)
    q = plain(4)
    grants, _ = receive(b, q, clock.now)
    b.ack(K, 1, grants[1].seq)
    b.ack(K, 3, grants[3].seq)
    clock.advance(60_000)
    receive(b, q, clock.now)  # offsets 0 and 2 at attempt 2
    clock.advance(60_000)
    receive(b, q, clock.now, room=1)  # offset 0 (earliest due, lowest offset) at attempt 3
    saved = dict(b.positions())[K]
    assert saved.ack_offset == 0 and saved.settled == (1, 3)
    assert saved.attempts == ((0, 3), (2, 2))
    fresh = book(attempts_max=3)
    fresh.restore(K, saved)
    grants, dead = receive(fresh, q, clock.now)
    assert dead == [Expired(K, 0, 3)]  # no fourth attempt after a restart
    assert [(g.queue_offset, g.attempt) for g in grants] == [(2, 3)]


def test_reset_and_retention_clamp(clock: Clock) -> None:
    b = book()
    q = plain(10)
    (g, *_), _ = receive(b, q, clock.now)
    b.clamp(K, 4)
    assert b.books[K].ack_offset == 4
    with pytest.raises(InvalidReceiptHandleError):
        b.ack(K, 0, g.seq)
    b.reset(K, 8)
    grants, _ = receive(b, q, clock.now)
    assert [x.queue_offset for x in grants] == [8, 9]


def test_random_operations_keep_at_least_once_and_bounds(clock: Clock, seed: int) -> None:
    """Random receives, acks, nacks and expiries: every offset is acked exactly once in the
    end, no offset is granted while leased, attempts never exceed the maximum."""
    rng = random.Random(seed)
    b = book(attempts_max=4, window_max=16)
    fifo = rng.random() < 0.5
    q = [(rng.choice("ABC"), "") for _ in range(60)]
    live: dict[int, Grant] = {}
    acked: set[int] = set()
    dead: set[int] = set()
    for _ in range(3000):
        grants, expired = receive(b, q, clock.now, room=rng.randint(1, 4), fifo=fifo)
        for g in grants:
            assert g.attempt <= 4
            live[g.queue_offset] = g
        for e in expired:
            live.pop(e.queue_offset, None)
            dead.add(e.queue_offset)
            b.settle(K, e.queue_offset)
        if fifo:
            groups = [q[o][0] for o in live]
            assert len(groups) == len(set(groups)), "two messages of a group in flight"
        for off, g in list(live.items()):
            if rng.random() < 0.3:
                b.ack(K, off, g.seq)
                acked.add(off)
                del live[off]
        assert len(b.books[K].leases) <= 16
        clock.advance(rng.choice([0, 500, 5_000, 20_000]))
        if len(acked) + len(dead) == len(q):
            break
    assert acked | dead == set(range(len(q)))
    assert not acked & dead
    assert b.books[K].ack_offset == len(q)


def test_due_heap_stays_bounded_under_repeated_invisibility_changes(clock: Clock) -> None:
    b = book(attempts_max=16)
    grants, _ = receive(b, plain(10), clock.now)
    seqs = {g.queue_offset: g.seq for g in grants}
    for i in range(5_000):
        off = i % 10
        seqs[off] = b.change_invisible(K, off, seqs[off], now_ms=clock.now, invisible_ms=5_000)
        assert len(b.books[K].due) <= 2 * 10 + 64 + 1
    clock.advance(5_000)
    again, _ = receive(b, plain(10), clock.now)
    assert sorted(g.queue_offset for g in again) == list(range(10))


def test_a_books_key_is_found_as_the_very_object_books_holds() -> None:
    """``known_key``/``key_of`` (what a receive and an ack use instead of building keys): the
    key of every book however it came (opened, restored from a saved position, reset), the
    same object ``books`` holds; None for a queue, group or topic without a book."""
    from txmq import limits
    from txmq.broker.consume.book import Position

    b = book()
    assert b.known_key("g", "t", 0) is K and b.key_of("g", "t", 0) is K
    for group, topic, qid in [("g", "t", 1), ("g", "t", -1), ("g", "u", 0), ("h", "t", 0)]:
        assert b.known_key(group, topic, qid) is None
        assert b.key_of(group, topic, qid) == QueueKey(group, topic, qid)
    opened, restored, reset = QueueKey("g", "t", 5), QueueKey("r", "t", 2), QueueKey("s", "u", 0)
    b.open(opened, 0)
    b.restore(restored, Position(4))
    b.reset(reset, 7)
    for key in (opened, restored, reset):
        assert b.known_key(*key) is key and next(k for k in b.books if k == key) is key
    assert b.known_key("g", "t", 3) is None, "the queues between stay unknown"
    b.reset(QueueKey("g", "t", 5), 9)  # a reset keeps the book's key
    assert b.known_key("g", "t", 5) is opened
    outside = QueueKey("g", "t", limits.QUEUES_PER_TOPIC_MAX)  # no topic has this queue
    b.restore(outside, Position(0))
    assert b.known_key(*outside) is None and b.key_of(*outside) == outside
    assert b.books[b.key_of(*outside)].ack_offset == 0
