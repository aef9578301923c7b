"""Transactions over a real Store in a tmp dir, with a simulated clock.

Goal: the glue keeps the book and the log in agreement. Commit is visible in the real queue
exactly once (also when many threads decide the same transaction at once), rollback never is,
properties (delay, user) travel with the commit, check records survive a reopen, the snapshot
plus log tail rebuilds the same book as a full replay, dead transactions can be listed and
resolved, resolvers (claiming and plain) decide, and a failing resolver defers only its own
transaction. Method: real files, real fsync, real threads; no mocks.
"""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import pytest

from tests.conftest import SMALL, Clock
from txmq import limits
from txmq.errors import InvalidTransactionIdError, TransactionConflictError
from txmq.model import (
    DEAD_TRANSACTION_TOPIC,
    HALF_TOPIC,
    OP_TOPIC,
    PROP_CHECK_IMMUNITY_MS,
    PROP_DELIVERY_TIMESTAMP_MS,
    PROP_REAL_TOPIC,
    PROP_TRANSACTION_ID,
    DecisionSource,
    Outcome,
    Record,
    RecordDraft,
    TxnFlag,
)
from txmq.store.store import Store
from txmq.txn.coordinator import Transactions

P = DecisionSource.PRODUCER


def open_tx(path: Path, clock: Clock, **kw: object) -> tuple[Store, Transactions]:
    store = Store.open(path / "store", SMALL, now_ms=clock)
    opts: dict[str, object] = dict(timeout_ms=1000, check_interval_ms=2000, check_max=3)
    opts.update(kw)
    return store, Transactions(store, data_dir=path, now_ms=clock, **opts)  # type: ignore[arg-type]


def draft(n: int, topic: str = "orders", **props: str) -> RecordDraft:
    return RecordDraft(
        topic=topic,
        queue_id=n % 2,
        body=f"body-{n}".encode(),
        message_id=f"m{n}",
        tag="t",
        keys=(f"k{n}",),
        properties={"user": f"u{n}", **props},
    )


def delivered(store: Store, topic: str = "orders") -> list[Record]:
    out: list[Record] = []
    for q in range(2):
        out.extend(store.read_queue(topic, q, 0, 1000).records)
    return out


def by_topic(store: Store) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {}
    for rec in store.scan(0, 100_000):
        out.setdefault(rec.topic, []).append(rec)
    return out


def test_commit_is_the_real_message_exactly_once(tmp_path: Path, clock: Clock) -> None:
    store, tx = open_tx(tmp_path, clock)
    later = str(clock.now + 60_000)
    tid, res = tx.prepare(
        draft(1, **{PROP_DELIVERY_TIMESTAMP_MS: later}), producer_group="orders", client_id="c1"
    )
    assert res.queue_offset == -1 and delivered(store) == []
    assert tx.end(tid, commit=True, source=P, message_id="m1") is Outcome.COMMITTED
    [rec] = delivered(store)
    assert (rec.flag, rec.message_id, rec.body, rec.tag, rec.keys, rec.queue_id) == (
        TxnFlag.COMMIT,
        "m1",
        b"body-1",
        "t",
        ("k1",),
        1,
    )
    assert rec.prepared_offset == res.physical_offset
    assert rec.properties["user"] == "u1"
    assert rec.properties[PROP_TRANSACTION_ID] == tid
    assert rec.properties[PROP_DELIVERY_TIMESTAMP_MS] == later, "delay handling sees it"
    assert PROP_REAL_TOPIC not in rec.properties
    half = store.read_at(res.physical_offset)
    assert (half.topic, half.flag, half.queue_id) == (HALF_TOPIC, TxnFlag.PREPARED, 0)
    store.close()


def test_concurrent_decisions_append_once(tmp_path: Path, clock: Clock) -> None:
    store, tx = open_tx(tmp_path, clock)
    tids = [tx.prepare(draft(i), producer_group="orders")[0] for i in range(8)]
    results: list[object] = []
    lock = threading.Lock()

    def decide(k: int) -> None:
        for tid in tids:
            commit = tids.index(tid) % 2 == 0 or k % 3 != 0
            try:
                got: object = tx.end(tid, commit=commit, source=P)
            except TransactionConflictError as exc:
                got = exc.existing
            with lock:
                results.append((tid, got))

    threads = [threading.Thread(target=decide, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 16 * 8
    committed = {r.properties[PROP_TRANSACTION_ID] for r in delivered(store)}
    assert len(delivered(store)) == len(committed), "never twice"
    decisions = [r for r in store.scan(0, 10_000) if r.flag in (TxnFlag.COMMIT, TxnFlag.ROLLBACK)]
    assert len(decisions) == 8, "exactly one decision record per transaction"
    for tid in tids:
        outcome = tx.show(tid)["outcome"]
        assert (outcome == "committed") == (tid in committed)
        assert {str(getattr(g, "value", g)) for t, g in results if t == tid} == {outcome}
    store.close()


def test_rollback_is_never_delivered_and_ids_are_checked(tmp_path: Path, clock: Clock) -> None:
    store, tx = open_tx(tmp_path, clock)
    tid, _ = tx.prepare(draft(1), producer_group="orders", transaction_id="fixed-id")
    assert tid == "fixed-id"
    with pytest.raises(InvalidTransactionIdError):
        tx.prepare(draft(2), producer_group="orders", transaction_id="fixed-id")
    with pytest.raises(InvalidTransactionIdError):
        tx.end(tid, commit=False, source=P, message_id="another-message")
    assert tx.end(tid, commit=False, source=P) is Outcome.ROLLED_BACK
    assert tx.end(tid, commit=False, source=P) is Outcome.ROLLED_BACK
    with pytest.raises(TransactionConflictError):
        tx.end(tid, commit=True, source=P)
    assert delivered(store) == []
    [op] = by_topic(store)[OP_TOPIC]
    assert op.flag is TxnFlag.ROLLBACK and op.queue_offset == -1
    generated = tx.prepare(draft(3), producer_group="orders")[0]
    assert len(generated) == 32 and generated != tid
    store.close()


def test_reopen_restores_pending_checks_and_immunity(tmp_path: Path, clock: Clock) -> None:
    store, tx = open_tx(tmp_path, clock)
    a = tx.prepare(draft(1), producer_group="orders")[0]
    b = tx.prepare(draft(2), producer_group="orders", check_immunity_ms=50_000)[0]
    c = tx.prepare(draft(3), producer_group="orders")[0]
    tx.end(c, commit=True, source=P)
    clock.advance(1000)
    assert [r.transaction_id for r in tx.due_checks({"orders": 1})] == [a]
    assert store.read_at(tx.show(b)["half_offset"]).properties[PROP_CHECK_IMMUNITY_MS] == "50000"  # type: ignore[arg-type]
    before = {t.transaction_id: (t.checks, t.next_check_ms) for t in tx.pending()}
    # Crash: nothing closed, no snapshot; the log alone rebuilds the book.
    store2, tx2 = open_tx(tmp_path, clock)
    assert {t.transaction_id: (t.checks, t.next_check_ms) for t in tx2.pending()} == before
    assert tx2.end(c, commit=True, source=P) is Outcome.COMMITTED
    assert len(delivered(store2)) == 1
    clock.advance(2000)
    assert [(r.transaction_id, r.check_number) for r in tx2.due_checks(lambda g: True)] == [(a, 2)]
    clock.advance(50_000)
    assert {r.transaction_id for r in tx2.due_checks(lambda g: True)} == {a, b}
    tx2.close()
    store2.close()


def test_snapshot_plus_tail_equals_full_replay(tmp_path: Path, clock: Clock) -> None:
    _store, tx = open_tx(tmp_path, clock)
    tids = [tx.prepare(draft(i), producer_group="orders")[0] for i in range(6)]
    tx.end(tids[0], commit=True, source=P)
    clock.advance(1000)
    tx.due_checks(lambda g: True)
    tx.snapshot()
    tx.end(tids[1], commit=False, source=P)  # after the snapshot: only in the log tail
    tids.append(tx.prepare(draft(9), producer_group="orders")[0])
    clock.advance(2000)
    tx.due_checks(lambda g: True)
    expect = {t.transaction_id: (t.checks, t.next_check_ms, t.state) for t in tx.pending()}
    _store2, tx2 = open_tx(tmp_path, clock)  # crash: snapshot + tail
    got = {t.transaction_id: (t.checks, t.next_check_ms, t.state) for t in tx2.pending()}
    assert got == expect
    assert tx2.show(tids[1])["outcome"] == "rolled_back"
    (tmp_path / "txn-snapshot.json").unlink()
    store3, tx3 = open_tx(tmp_path, clock)  # full replay
    got = {t.transaction_id: (t.checks, t.next_check_ms, t.state) for t in tx3.pending()}
    assert got == expect
    store3.close()


def test_max_checks_dead_copy_and_operator_resolve(tmp_path: Path, clock: Clock) -> None:
    store, tx = open_tx(tmp_path, clock, check_max=1)
    a = tx.prepare(draft(1), producer_group="orders")[0]
    b = tx.prepare(draft(2), producer_group="orders")[0]
    clock.advance(1000)
    assert len(tx.due_checks(lambda g: True)) == 2
    clock.advance(2000)
    assert tx.due_checks(lambda g: False) == [], "give-up needs no live producer"
    assert sorted(t.transaction_id for t in tx.dead()) == sorted([a, b])
    dead_copies = by_topic(store)[DEAD_TRANSACTION_TOPIC]
    assert sorted(r.message_id for r in dead_copies) == ["m1", "m2"]
    assert tx.metrics.outcomes_by_source == {"max_checks": 2}
    with pytest.raises(TransactionConflictError):
        tx.end(a, commit=True, source=P)
    store.close()
    store, tx = open_tx(tmp_path, clock, check_max=1)  # dead set survives a crash
    assert sorted(t.transaction_id for t in tx.dead()) == sorted([a, b])
    assert tx.show(a)["state"] == "dead"
    assert tx.resolve(a, commit=True) is Outcome.COMMITTED
    assert tx.resolve(b, commit=False) is Outcome.ROLLED_BACK
    assert tx.dead() == []
    assert [r.message_id for r in delivered(store)] == ["m1"]
    assert tx.metrics.outcomes_by_source == {"operator": 2}
    store.close()
    store, tx = open_tx(tmp_path, clock, check_max=1)
    assert tx.dead() == [] and tx.resolve(a, commit=True) is Outcome.COMMITTED
    assert [r.message_id for r in delivered(store)] == ["m1"]
    store.close()


class Ledger:
    """A claiming resolver of the test's own (owns topic "sink")."""

    def __init__(self) -> None:
        self.answer: Outcome | None = None

    def claims(self, half: Record) -> bool:
        return half.properties.get(PROP_REAL_TOPIC) == "sink"

    def resolve(self, half: Record) -> Outcome | None:
        return self.answer


def test_claiming_and_plain_resolvers(tmp_path: Path, clock: Clock) -> None:
    ledger = Ledger()
    seen: list[str] = []

    def plain(half: Record) -> Outcome | None:
        seen.append(half.message_id)
        return Outcome.ROLLED_BACK if half.message_id == "m2" else None

    store, tx = open_tx(tmp_path, clock, resolvers=[ledger, plain])
    s = tx.prepare(draft(1, topic="sink"), producer_group="sink")[0]
    r = tx.prepare(draft(2), producer_group="orders")[0]
    q = tx.prepare(draft(3), producer_group="orders")[0]
    clock.advance(1000)
    requests = tx.due_checks(lambda g: True)
    assert [x.transaction_id for x in requests] == [q], "resolved or claimed: no producer"
    assert sorted(seen) == ["m2", "m3"], "plain resolvers never see claimed messages"
    assert tx.show(r)["outcome"] == "rolled_back"
    assert tx.show(s)["checks"] == 1
    store.close()
    ledger.answer = Outcome.COMMITTED
    store, tx = open_tx(tmp_path, clock, resolvers=[ledger])  # claim re-derived on replay
    clock.advance(2000)
    tx.due_checks(lambda g: False)
    assert tx.show(s)["outcome"] == "committed"
    assert [x.message_id for x in delivered(store, "sink")] == ["m1"]
    assert tx.metrics.outcomes_by_source == {"check_back": 1}
    store.close()


def test_failing_resolver_defers_only_its_transaction(tmp_path: Path, clock: Clock) -> None:
    def broken(half: Record) -> Outcome | None:
        if half.message_id == "m1":
            raise RuntimeError("ledger unreachable")
        return None

    store, tx = open_tx(tmp_path, clock, resolvers=[broken])
    bad = tx.prepare(draft(1), producer_group="orders")[0]
    good = tx.prepare(draft(2), producer_group="orders")[0]
    clock.advance(1000)
    assert [x.transaction_id for x in tx.due_checks(lambda g: True)] == [good]
    assert tx.metrics.check_errors == 1
    assert tx.show(bad)["checks"] == 0
    assert tx.show(bad)["next_check_ms"] == clock.now + 2000
    store.close()


def test_metrics_and_retention_floor(tmp_path: Path, clock: Clock) -> None:
    store, tx = open_tx(tmp_path, clock)
    assert tx.oldest_pending_offset == store.log_end_offset
    a, res = tx.prepare(draft(1), producer_group="orders")
    clock.advance(700)
    tx.prepare(draft(2), producer_group="orders")
    clock.advance(300)
    assert tx.oldest_pending_offset == res.physical_offset
    assert tx.due_checks(lambda g: True)[0].half_offset == res.physical_offset
    m = tx.metrics
    assert (m.pending, m.dead, m.oldest_pending_age_ms, m.checks_sent) == (2, 0, 1000, 1)
    tx.end(a, commit=True, source=P)
    assert tx.oldest_pending_offset > res.physical_offset
    assert tx.metrics.outcomes == {"producer:committed": 1}
    store.close()


def test_checks_per_tick_bound_over_the_store(tmp_path: Path, clock: Clock) -> None:
    store, tx = open_tx(tmp_path, clock)
    n = limits.TRANSACTION_CHECKS_PER_TICK_MAX + 3
    for i in range(n):
        tx.prepare(draft(i), producer_group="orders")
    clock.advance(1000)
    assert len(tx.due_checks(lambda g: True)) == limits.TRANSACTION_CHECKS_PER_TICK_MAX
    assert len(tx.due_checks(lambda g: True)) == 3
    checks = [r for r in by_topic(store)[OP_TOPIC] if r.flag is TxnFlag.NORMAL]
    assert len(checks) == n, "every check sent is recorded"
    store.close()


def test_retention_keeps_pending_halves_and_dead_ones_can_still_be_rolled_back(
    tmp_path: Path, clock: Clock
) -> None:
    store, tx = open_tx(tmp_path, clock, check_max=0)
    dead = tx.prepare(draft(1), producer_group="orders")[0]
    clock.advance(1000)
    tx.due_checks(lambda g: False)  # check_max=0: straight to the dead set
    assert [t.transaction_id for t in tx.dead()] == [dead]
    pending, res = tx.prepare(draft(2), producer_group="orders")
    filler = b"f" * 60_000
    for i in range(12):  # several 256 KiB segments
        store.append(RecordDraft(topic="filler", queue_id=0, body=filler, message_id=f"f{i}"))
    clock.advance(SMALL.retention_ms + 1000)
    store.append(RecordDraft(topic="filler", queue_id=0, body=b"x", message_id="last"))
    assert store.delete_expired_segments(keep_from_offset=tx.oldest_pending_offset) == 0
    assert store.read_at(res.physical_offset).message_id == "m2", "a pending half is kept"
    tx.end(pending, commit=False, source=P)
    assert store.delete_expired_segments(keep_from_offset=tx.oldest_pending_offset) > 0
    with pytest.raises(InvalidTransactionIdError) as info:
        tx.resolve(dead, commit=True)
    assert "retention" in info.value.reason
    assert tx.show(dead)["state"] == "dead", "a refused resolve leaves it dead"
    assert tx.resolve(dead, commit=False) is Outcome.ROLLED_BACK
    assert tx.dead() == []
    store.close()


@pytest.mark.parametrize("damage", [b"{not json", b'{"version": 1}', b'{"version": 2}'])
def test_damaged_or_old_snapshot_falls_back_to_a_full_replay(
    tmp_path: Path, clock: Clock, damage: bytes
) -> None:
    store, tx = open_tx(tmp_path, clock)
    a = tx.prepare(draft(1), producer_group="orders")[0]
    b = tx.prepare(draft(2), producer_group="orders")[0]
    tx.end(b, commit=True, source=P)
    tx.close()
    store.close()
    (tmp_path / "txn-snapshot.json").write_bytes(damage)
    store, tx = open_tx(tmp_path, clock)
    assert [t.transaction_id for t in tx.pending()] == [a]
    assert tx.end(b, commit=True, source=P) is Outcome.COMMITTED
    assert len(delivered(store)) == 1
    store.close()


def test_snapshot_during_a_tick_replays_what_was_in_flight(tmp_path: Path, clock: Clock) -> None:
    """A snapshot never waits for quiet: taken mid-tick, while a's check is counted but not yet
    recorded, it saves a as unchecked and an offset before the tick, so recovery replays the
    check record and lands exactly where the live book is."""
    holder: list[Transactions] = []

    def snapshot_now(half: Record) -> Outcome | None:
        if half.message_id == "m2":
            holder[0].snapshot()
        return Outcome.COMMITTED if half.message_id == "m3" else None

    _store, tx = open_tx(tmp_path, clock, resolvers=[snapshot_now])
    holder.append(tx)
    a = tx.prepare(draft(1), producer_group="orders")[0]
    clock.advance(1)  # a is due first, so its check is counted when b's resolver runs
    b = tx.prepare(draft(2), producer_group="orders")[0]
    clock.advance(1)
    c = tx.prepare(draft(3), producer_group="orders")[0]
    clock.advance(1000)
    assert [r.transaction_id for r in tx.due_checks(lambda g: True)] == [a, b]
    assert tx.metrics.check_errors == 0
    expect = {t.transaction_id: (t.checks, t.next_check_ms) for t in tx.pending()}
    assert expect == {a: (1, clock.now + 2000), b: (1, clock.now + 2000)}
    saved = json.loads((tmp_path / "txn-snapshot.json").read_bytes())
    assert {t["id"]: t["checks"] for t in saved["pending"]} == {a: 0, b: 0, c: 0}
    store2, tx2 = open_tx(tmp_path, clock)  # crash after the tick
    assert {t.transaction_id: (t.checks, t.next_check_ms) for t in tx2.pending()} == expect
    assert tx2.show(c)["outcome"] == "committed"
    assert len(delivered(store2)) == 1
    store2.close()


def test_concurrent_everything_then_reopen_equals_the_live_book(
    tmp_path: Path, clock: Clock, seed: int
) -> None:
    """Producers, check ticks and snapshots run at once (bounded); afterwards a crash-like
    reopen from the last snapshot plus the log equals the live book exactly."""
    store, tx = open_tx(tmp_path, clock, timeout_ms=0, check_interval_ms=1, check_max=4)
    stop = threading.Event()
    errors: list[BaseException] = []

    def producer(k: int) -> None:
        rng = random.Random(seed + k)
        try:
            for i in range(60):
                tid = tx.prepare(draft(1000 * k + i), producer_group=f"g{k % 3}")[0]
                if rng.random() < 0.6:
                    tx.end(tid, commit=rng.random() < 0.5, source=P)
        except BaseException as exc:
            errors.append(exc)

    def background() -> None:
        try:
            for _ in range(10_000):
                if stop.is_set():
                    return
                clock.advance(1)
                tx.due_checks(lambda g: g != "g2")
                tx.snapshot()
        except BaseException as exc:
            errors.append(exc)

    bg = threading.Thread(target=background)
    bg.start()
    producers = [threading.Thread(target=producer, args=(k,)) for k in range(6)]
    for t in producers:
        t.start()
    for t in producers:
        t.join(timeout=120)
    stop.set()
    bg.join(timeout=120)
    assert not errors, errors

    def view(t: Transactions) -> object:
        return (
            {p.transaction_id: (p.checks, p.next_check_ms, p.state) for p in t.pending()},
            sorted(d.transaction_id for d in t.dead()),
            {tid: d.outcome for tid, d in t.book.outcomes.items()},
        )

    live = view(tx)
    _store2, tx2 = open_tx(tmp_path, clock, timeout_ms=0, check_interval_ms=1, check_max=4)
    assert view(tx2) == live
    committed = [r.properties[PROP_TRANSACTION_ID] for r in delivered(store)]
    assert len(committed) == len(set(committed))
    assert {t for t, d in tx.book.outcomes.items() if d.outcome is Outcome.COMMITTED} == set(
        committed
    )
    store.close()
