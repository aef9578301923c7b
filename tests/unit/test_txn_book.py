"""The pure transaction book with a simulated clock (plain ``now_ms`` integers, no I/O).

Goal: every scheduling and decision rule of txmq.txn.book in isolation: timeout, check, re-check
with backoff, max checks and give-up, late decisions, duplicates and conflicts, producer groups
with zero / one / many live producers, the per-tick bound, fairness between groups, the dead set
and operator resolve, the state machine, outcome expiry, and replay idempotence. A seeded random
walk (TXMQ_SEED) checks the invariants against a small model.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from txmq import limits
from txmq.errors import InvalidTransactionIdError, TransactionConflictError
from txmq.model import DecisionSource, Outcome
from txmq.txn.book import Decided, Due, Txn, TxnBook, TxnState, Wait

P = DecisionSource.PRODUCER
T0 = 1_000_000
TIMEOUT = 1_000
INTERVAL = 2_000


def book(check_max: int = 3) -> TxnBook:
    return TxnBook(check_interval_ms=INTERVAL, check_max=check_max)


def txn(tid: str, group: str = "g", at: int = T0, **kw: object) -> Txn:
    fields: dict[str, object] = dict(
        transaction_id=tid,
        message_id=f"m-{tid}",
        half_offset=hash(tid) & 0xFFFF,
        producer_group=group,
        client_id="c1",
        topic=group,
        prepared_at_ms=at,
        timeout_ms=TIMEOUT,
    )
    fields.update(kw)
    return Txn(**fields)  # type: ignore[arg-type]


def everyone(_group: str) -> bool:
    return True


def nobody(_group: str) -> bool:
    return False


def ids(dues: list[Due]) -> list[str]:
    return [d.txn.transaction_id for d in dues]


def decide(b: TxnBook, tid: str, outcome: Outcome, source: DecisionSource, now: int) -> Outcome:
    """The coordinator's protocol without a store: begin, (append), finish."""
    begun = b.begin(tid, outcome, source)
    assert begun is not Wait.IN_FLIGHT
    if begun is not None:
        b.finish(begun, outcome, source, now)
    return outcome


def test_first_check_waits_for_the_timeout() -> None:
    b = book()
    b.add(txn("a"))
    assert b.due(T0 + TIMEOUT - 1, everyone, 10) == []
    assert ids(b.due(T0 + TIMEOUT, everyone, 10)) == ["a"]
    assert b.due(T0 + TIMEOUT, everyone, 10) == [], "popped: off the schedule until spent"


def test_check_immunity_replaces_the_timeout() -> None:
    b = book()
    b.add(txn("slow", timeout_ms=60_000))
    b.add(txn("fast", timeout_ms=0))
    assert ids(b.due(T0, everyone, 10)) == ["fast"]
    assert ids(b.due(T0 + 60_000, everyone, 10)) == ["slow"]


def test_recheck_with_backoff_then_give_up_at_max_checks() -> None:
    b = book(check_max=3)
    b.add(txn("a"))
    now = T0 + TIMEOUT
    waits = []
    for expect in (1, 2, 3):
        [due] = b.due(now, everyone, 10)
        assert not due.give_up
        assert b.spend_check(due.txn, now) == expect
        assert due.txn.state is TxnState.CHECKING
        waits.append(due.txn.next_check_ms - now)
        assert b.due(due.txn.next_check_ms - 1, everyone, 10) == []
        now = due.txn.next_check_ms
    assert waits == [INTERVAL, 2 * INTERVAL, 4 * INTERVAL]
    # After the last check's wait: give up, even though no producer is live.
    [due] = b.due(now, nobody, 10)
    assert due.give_up and due.txn.checks == 3
    decide(b, "a", Outcome.ROLLED_BACK, DecisionSource.MAX_CHECKS, now)
    assert list(b.dead) == ["a"] and b.dead["a"].state is TxnState.DEAD
    assert b.pending == {}


def test_backoff_is_capped() -> None:
    b = TxnBook(check_interval_ms=30_000, check_max=15)
    assert [b.next_delay_ms(n) for n in (1, 2, 3)] == [30_000, 60_000, 120_000]
    assert b.next_delay_ms(15) == limits.TRANSACTION_CHECK_INTERVAL_MS_MAX
    assert b.next_delay_ms(10_000) == limits.TRANSACTION_CHECK_INTERVAL_MS_MAX


def test_check_max_zero_gives_up_without_checking() -> None:
    b = book(check_max=0)
    b.add(txn("a"))
    [due] = b.due(T0 + TIMEOUT, nobody, 10)
    assert due.give_up


def test_late_commit_after_a_check_wins_and_stops_checks() -> None:
    b = book()
    b.add(txn("a"))
    [due] = b.due(T0 + TIMEOUT, everyone, 10)
    b.spend_check(due.txn, T0 + TIMEOUT)
    decide(b, "a", Outcome.COMMITTED, P, T0 + TIMEOUT + 5)
    assert b.due(T0 + 10**9, everyone, 10) == []
    assert b.spend_check(due.txn, T0 + 10**9) == 0, "a check for a decided txn is not spent"
    assert b.outcomes["a"].outcome is Outcome.COMMITTED


def test_duplicate_decisions_return_the_first_outcome_and_conflicts_raise() -> None:
    b = book()
    b.add(txn("c"))
    b.add(txn("r"))
    first = b.begin("c", Outcome.COMMITTED, P)
    assert isinstance(first, Txn) and first.state is TxnState.DECIDING
    assert b.begin("c", Outcome.COMMITTED, P) is Wait.IN_FLIGHT, "concurrent: wait"
    assert b.begin("c", Outcome.ROLLED_BACK, P) is Wait.IN_FLIGHT
    b.finish(first, Outcome.COMMITTED, P, T0)
    assert b.begin("c", Outcome.COMMITTED, DecisionSource.CHECK_BACK) is None
    with pytest.raises(TransactionConflictError) as info:
        b.begin("c", Outcome.ROLLED_BACK, P)
    assert (info.value.existing, info.value.requested) == ("committed", "rolled_back")
    decide(b, "r", Outcome.ROLLED_BACK, P, T0)
    assert b.begin("r", Outcome.ROLLED_BACK, P) is None
    with pytest.raises(TransactionConflictError):
        b.begin("r", Outcome.COMMITTED, P)
    with pytest.raises(InvalidTransactionIdError):
        b.begin("never-prepared", Outcome.COMMITTED, P)


def test_failed_decision_append_returns_to_the_schedule() -> None:
    b = book()
    b.add(txn("a"))
    [due] = b.due(T0 + TIMEOUT, everyone, 10)
    b.spend_check(due.txn, T0 + TIMEOUT)
    begun = b.begin("a", Outcome.COMMITTED, P)
    assert isinstance(begun, Txn)
    assert b.due(T0 + 10**9, everyone, 10) == [], "deciding: never due"
    b.abort_decision(begun)
    assert begun.state is TxnState.CHECKING and begun.checks == 1
    assert ids(b.due(begun.next_check_ms, everyone, 10)) == ["a"]


@pytest.mark.parametrize(
    ("producers", "expect_checked"), [(0, False), (1, True), (5, True)], ids=["0", "1", "many"]
)
def test_groups_by_number_of_live_producers(producers: int, expect_checked: bool) -> None:
    live = {"g": producers}
    asked: list[str] = []

    def is_live(group: str) -> bool:
        asked.append(group)
        return live.get(group, 0) > 0

    b = book()
    for i in range(3):
        b.add(txn(f"t{i}"))
    dues = b.due(T0 + TIMEOUT, is_live, 10)
    assert asked == ["g"], "liveness is asked once per group per tick, not per transaction"
    assert len(dues) == (3 if expect_checked else 0), "one check per txn, however many producers"
    if not expect_checked:
        assert all(t.checks == 0 for t in b.pending.values()), "no check spent"
        live["g"] = 1
        assert len(b.due(T0 + 10 * TIMEOUT, everyone, 10)) == 3, "still due when one is back"


def test_a_backlog_in_a_dead_group_never_starves_a_live_one() -> None:
    b = book()
    for i in range(3 * limits.TRANSACTION_CHECKS_PER_TICK_MAX):
        b.add(txn(f"dead{i}", group="gone", at=T0 - 10_000))
    b.add(txn("x", group="here"))
    dues = b.due(T0 + TIMEOUT, lambda g: g == "here", limits.TRANSACTION_CHECKS_PER_TICK_MAX)
    assert ids(dues) == ["x"]


def test_per_tick_bound_earliest_first_across_groups() -> None:
    b = book()
    for i in range(25):
        b.add(txn(f"a{i:02d}", group="a", at=T0 + 2 * i))
        b.add(txn(f"b{i:02d}", group="b", at=T0 + 2 * i + 1))
    now = T0 + TIMEOUT + 1000
    first = b.due(now, everyone, 20)
    assert len(first) == 20
    assert ids(first) == [f"{g}{i:02d}" for i in range(10) for g in "ab"], "merged by time"
    rest = b.due(now, everyone, 100)
    assert len(rest) == 30 and not set(ids(first)) & set(ids(rest))


def test_claimed_transactions_need_no_live_producer() -> None:
    b = book()
    b.add(txn("sink", group="sinktopic", claimed=True))
    b.add(txn("plain", group="sinktopic"))
    assert ids(b.due(T0 + TIMEOUT, nobody, 10)) == ["sink"]


def test_dead_transactions_and_operator_resolve() -> None:
    b = book(check_max=0)
    for tid in ("d1", "d2", "d3"):
        b.add(txn(tid))
        [due] = b.due(T0 + TIMEOUT, nobody, 10)
        assert due.give_up
        decide(b, tid, Outcome.ROLLED_BACK, DecisionSource.MAX_CHECKS, T0 + TIMEOUT)
    assert sorted(b.dead) == ["d1", "d2", "d3"]
    # Too late for producers and check-backs to commit; a rollback is idempotent.
    with pytest.raises(TransactionConflictError):
        b.begin("d1", Outcome.COMMITTED, P)
    with pytest.raises(TransactionConflictError):
        b.begin("d1", Outcome.COMMITTED, DecisionSource.CHECK_BACK)
    assert b.begin("d1", Outcome.ROLLED_BACK, P) is None
    assert "d1" in b.dead
    # An operator may commit (visible from then on) or confirm the rollback.
    op = DecisionSource.OPERATOR
    begun = b.begin("d1", Outcome.COMMITTED, op)
    assert isinstance(begun, Txn)
    assert b.begin("d1", Outcome.COMMITTED, op) is Wait.IN_FLIGHT
    b.finish(begun, Outcome.COMMITTED, op, T0)
    decide(b, "d2", Outcome.ROLLED_BACK, op, T0)
    assert list(b.dead) == ["d3"]
    assert b.outcomes["d1"] == Decided(Outcome.COMMITTED, op, T0)
    assert b.begin("d2", Outcome.ROLLED_BACK, op) is None, "resolved: idempotent"
    with pytest.raises(TransactionConflictError):
        b.begin("d1", Outcome.ROLLED_BACK, op)
    # A failed operator append leaves it dead.
    begun = b.begin("d3", Outcome.COMMITTED, op)
    assert isinstance(begun, Txn)
    b.abort_decision(begun)
    assert b.dead["d3"].state is TxnState.DEAD


def test_illegal_transitions_are_programmer_errors() -> None:
    t = txn("a")
    t.transition_to(TxnState.DECIDING)
    t.transition_to(TxnState.COMMITTED)
    for state in TxnState:
        with pytest.raises(AssertionError):
            t.transition_to(state)
    with pytest.raises(AssertionError):
        txn("b").transition_to(TxnState.DEAD)


def test_outcomes_expire_after_retention() -> None:
    b = book()
    b.add(txn("a"))
    decide(b, "a", Outcome.COMMITTED, P, T0)
    assert b.expire_outcomes(T0 + limits.TRANSACTION_OUTCOME_RETENTION_MS) == 0
    assert b.begin("a", Outcome.COMMITTED, P) is None
    assert b.expire_outcomes(T0 + limits.TRANSACTION_OUTCOME_RETENTION_MS + 1) == 1
    with pytest.raises(InvalidTransactionIdError):
        b.begin("a", Outcome.COMMITTED, P)


def test_replay_is_idempotent_and_first_decision_stands() -> None:
    def rebuild() -> TxnBook:
        b = book()
        for _ in range(2):  # every record applied twice
            b.replay_prepared(txn("a"))
            b.replay_prepared(txn("b"))
            b.replay_prepared(txn("c"))
            b.replay_check("b", 1, T0 + TIMEOUT)
            b.replay_check("b", 2, T0 + TIMEOUT + INTERVAL)
            b.replay_decision("a", Outcome.COMMITTED, P, T0 + 5)
            b.replay_decision("a", Outcome.ROLLED_BACK, P, T0 + 6)  # contradicts: ignored
            b.replay_decision("c", Outcome.ROLLED_BACK, DecisionSource.MAX_CHECKS, T0 + 7)
            b.replay_decision("c", Outcome.COMMITTED, DecisionSource.OPERATOR, T0 + 8)
        return b

    b = rebuild()
    assert list(b.pending) == ["b"]
    assert b.pending["b"].checks == 2
    assert b.pending["b"].next_check_ms == T0 + TIMEOUT + INTERVAL + 2 * INTERVAL
    assert b.outcomes["a"].outcome is Outcome.COMMITTED
    assert b.outcomes["c"].outcome is Outcome.COMMITTED and b.dead == {}
    assert ids(b.due(T0 + 10**9, everyone, 10)) == ["b"]


def test_lazy_deletion_keeps_the_heaps_bounded() -> None:
    b = book(check_max=1000)
    b.add(txn("a"))
    for i in range(5000):  # many reschedules leave stale entries behind
        b.reschedule(b.pending["a"], T0 + i)
    assert b._entries <= 2 * len(b.pending) + 1024 + 1
    assert ids(b.due(T0 + 10**6, everyone, 10)) == ["a"]


def test_random_walk_keeps_the_invariants(seed: int) -> None:
    """Random adds, ticks with random liveness, checks and decisions against a model: each
    transaction is decided at most once, never due after a decision, and every pending one
    is either due eventually or waiting for its group."""
    rng = random.Random(seed)
    b = book(check_max=2)
    decided: dict[str, Outcome] = {}
    live: dict[str, bool] = {"g0": True, "g1": False, "g2": True}
    now = T0
    for step in range(3000):
        now += rng.randrange(0, 800)
        op = rng.random()
        if op < 0.3:
            b.add(txn(f"t{step}", group=rng.choice(list(live)), at=now))
        elif op < 0.4:
            live[rng.choice(list(live))] = rng.random() < 0.6
        elif op < 0.55 and b.pending:
            tid = rng.choice(list(b.pending))
            outcome = rng.choice(list(Outcome))
            decide(b, tid, outcome, P, now)
            decided[tid] = outcome
        else:
            _tick(b, now, live.__getitem__, rng, decided)
        _check_invariants(b, decided)
    for _ in range(2000):  # all groups live again: everything ends, 8 per tick
        if not b.pending:
            break
        now += limits.TRANSACTION_CHECK_INTERVAL_MS_MAX
        _tick(b, now, lambda g: True, rng, decided)
        _check_invariants(b, decided)
    assert b.pending == {}, "every pending transaction is eventually checked or given up"


def _tick(
    b: TxnBook,
    now: int,
    is_live: Callable[[str], bool],
    rng: random.Random,
    decided: dict[str, Outcome],
) -> None:
    for due in b.due(now, is_live, 8):
        tid = due.txn.transaction_id
        assert tid not in decided, "a decided transaction is never due"
        if due.give_up:
            decide(b, tid, Outcome.ROLLED_BACK, DecisionSource.MAX_CHECKS, now)
            decided[tid] = Outcome.ROLLED_BACK
        elif rng.random() < 0.2:
            decide(b, tid, Outcome.COMMITTED, DecisionSource.CHECK_BACK, now)
            decided[tid] = Outcome.COMMITTED
        else:
            assert b.spend_check(due.txn, now) == due.txn.checks


def _check_invariants(b: TxnBook, decided: dict[str, Outcome]) -> None:
    for tid, outcome in decided.items():
        assert tid not in b.pending
        final = b.outcomes[tid].outcome
        assert final is outcome, "the first outcome stands"
    for txn_ in b.pending.values():
        assert txn_.state in (TxnState.PREPARED, TxnState.CHECKING)
        assert txn_.checks <= b.check_max
