"""Transactions with a simulated clock over a real store in a tmp dir: timeout, check, re-check
with backoff, max checks, late decisions, duplicates, conflicts, liveness, per-tick bound,
resolvers, crash recovery of the pending set with check counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SMALL, Clock
from txmq import limits
from txmq.errors import InvalidTransactionIdError, TransactionConflictError
from txmq.model import DecisionSource, Outcome, Record, RecordDraft
from txmq.store.store import Store
from txmq.txn.book import TxnBook
from txmq.txn.coordinator import Transactions

P = DecisionSource.PRODUCER


def open_tx(path: Path, clock: Clock, **kw: object) -> tuple[Store, Transactions]:
    store = Store.open(path, SMALL, now_ms=clock)
    opts: dict[str, object] = dict(timeout_ms=1000, check_interval_ms=2000, check_max=3)
    opts.update(kw)
    return store, Transactions(store, path, now_ms=clock, **opts)  # type: ignore[arg-type]


def prep(tx: Transactions, n: int, topic: str = "orders") -> str:
    tid, _ = tx.prepare(
        RecordDraft(topic=topic, queue_id=0, body=f"b{n}".encode(), message_id=f"m{n}"),
        producer_group=topic,
    )
    return tid


def delivered(store: Store, topic: str = "orders") -> list[bytes]:
    return [r.body for r in store.read_queue(topic, 0, 0, 100).records]


def test_half_is_invisible_until_commit_and_commit_is_exactly_once(
    tmp_path: Path, clock: Clock
) -> None:
    store, tx = open_tx(tmp_path, clock)
    tid = prep(tx, 1)
    assert delivered(store) == []
    assert tx.end(tid, commit=True, source=P) is Outcome.COMMITTED
    assert tx.end(tid, commit=True, source=P) is Outcome.COMMITTED  # repeated: same outcome
    assert delivered(store) == [b"b1"]
    with pytest.raises(TransactionConflictError) as info:
        tx.end(tid, commit=False, source=P)
    assert info.value.existing == "committed"
    store.close()


def test_rollback_is_never_delivered(tmp_path: Path, clock: Clock) -> None:
    store, tx = open_tx(tmp_path, clock)
    tid = prep(tx, 1)
    tx.end(tid, commit=False, source=P)
    tx.end(tid, commit=False, source=P)
    with pytest.raises(TransactionConflictError):
        tx.end(tid, commit=True, source=P)
    assert delivered(store) == []
    with pytest.raises(InvalidTransactionIdError):
        tx.end("nope", commit=True, source=P)
    store.close()


def test_check_schedule_backoff_and_max_checks(tmp_path: Path, clock: Clock) -> None:
    store, tx = open_tx(tmp_path, clock)
    tid = prep(tx, 1)
    assert tx.due_checks(lambda g: True) == []  # younger than the timeout
    clock.advance(1000)
    first = tx.due_checks(lambda g: True)
    assert [(c.transaction_id, c.check_number) for c in first] == [(tid, 1)]
    assert first[0].half.message_id == "m1"
    clock.advance(1999)
    assert tx.due_checks(lambda g: True) == []
    clock.advance(1)
    assert [c.check_number for c in tx.due_checks(lambda g: True)] == [2]
    clock.advance(4000)  # backoff doubled
    assert [c.check_number for c in tx.due_checks(lambda g: True)] == [3]
    clock.advance(8000)
    assert tx.due_checks(lambda g: True) == []  # max reached: rolled back instead
    assert [t.transaction_id for t in tx.dead()] == [tid]
    assert tx.metrics.outcomes == {"max_checks:rolled_back": 1}
    with pytest.raises(TransactionConflictError):
        tx.end(tid, commit=True, source=P)  # too late for the producer
    assert tx.resolve(tid, commit=True) is Outcome.COMMITTED  # an operator may still commit
    assert delivered(store) == [b"b1"]
    assert tx.dead() == []
    store.close()


def test_late_commit_after_a_check_wins(tmp_path: Path, clock: Clock) -> None:
    store, tx = open_tx(tmp_path, clock)
    tid = prep(tx, 1)
    clock.advance(1000)
    assert len(tx.due_checks(lambda g: True)) == 1
    tx.end(tid, commit=True, source=DecisionSource.CHECK_BACK)
    tx.end(tid, commit=True, source=P)  # the producer's own late commit: idempotent
    clock.advance(100_000)
    assert tx.due_checks(lambda g: True) == []
    assert delivered(store) == [b"b1"]
    store.close()


def test_no_live_producer_spends_no_check(tmp_path: Path, clock: Clock) -> None:
    store, tx = open_tx(tmp_path, clock)
    prep(tx, 1)
    for _ in range(10):
        clock.advance(5000)
        assert tx.due_checks(lambda g: False) == []
    assert tx.pending()[0].checks == 0
    assert tx.dead() == []
    clock.advance(5000)
    assert [c.check_number for c in tx.due_checks(lambda g: g == "orders")] == [1]
    store.close()


def test_checks_per_tick_are_bounded(tmp_path: Path, clock: Clock) -> None:
    store, tx = open_tx(tmp_path, clock)
    for i in range(limits.TRANSACTION_CHECKS_PER_TICK_MAX + 10):
        prep(tx, i)
    clock.advance(1000)
    assert len(tx.due_checks(lambda g: True)) == limits.TRANSACTION_CHECKS_PER_TICK_MAX
    assert len(tx.due_checks(lambda g: True)) == 10
    store.close()


class LedgerStub:
    """A real resolver implementation of the test's own: claims topic "sink"."""

    def __init__(self) -> None:
        self.answer: Outcome | None = None

    def claims(self, half: Record) -> bool:
        return half.properties.get("REAL_TOPIC") == "sink"

    def resolve(self, half: Record) -> Outcome | None:
        return self.answer


def test_resolver_decides_without_a_producer(tmp_path: Path, clock: Clock) -> None:
    ledger = LedgerStub()
    store, tx = open_tx(tmp_path, clock, resolvers=[ledger])
    tid = prep(tx, 1, topic="sink")
    clock.advance(1000)
    assert tx.due_checks(lambda g: False) == []  # unknown yet: a check is spent
    assert tx.pending()[0].checks == 1
    ledger.answer = Outcome.COMMITTED
    clock.advance(2000)
    tx.due_checks(lambda g: False)
    assert tx.show(tid)["outcome"] == "committed"
    assert delivered(store, "sink") == [b"b1"]
    store.close()


def test_recovery_rebuilds_pending_with_check_counts(tmp_path: Path, clock: Clock) -> None:
    _store, tx = open_tx(tmp_path, clock)
    a, b, c = prep(tx, 1), prep(tx, 2), prep(tx, 3)
    tx.end(a, commit=True, source=P)
    tx.end(b, commit=False, source=P)
    clock.advance(1000)
    tx.due_checks(lambda g: True)
    # Crash: neither the store nor the coordinator is closed.
    store2, tx2 = open_tx(tmp_path, clock)
    assert [t.transaction_id for t in tx2.pending()] == [c]
    assert tx2.pending()[0].checks == 1
    assert tx2.end(a, commit=True, source=P) is Outcome.COMMITTED  # no second append
    assert delivered(store2) == [b"b1"]
    with pytest.raises(TransactionConflictError):
        tx2.end(b, commit=True, source=P)
    tx2.end(c, commit=True, source=P)
    assert delivered(store2) == [b"b1", b"b3"]
    tx2.close()
    store2.close()
    store3, tx3 = open_tx(tmp_path, clock)  # clean restart from the snapshot
    assert tx3.pending() == []
    assert tx3.end(c, commit=True, source=P) is Outcome.COMMITTED
    assert delivered(store3) == [b"b1", b"b3"]
    store3.close()


def test_book_backoff_is_capped() -> None:
    book = TxnBook(check_interval_ms=30_000, check_max=15)
    assert book.next_delay_ms(1) == 30_000
    assert book.next_delay_ms(2) == 60_000
    assert book.next_delay_ms(15) == limits.TRANSACTION_CHECK_INTERVAL_MS_MAX
