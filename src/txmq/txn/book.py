"""The transaction book: pure bookkeeping of pending, decided and dead transactions.

Owns: the per-transaction state machine, the check-back schedule (a heap ordered by next-check
time, with lazy deletion), the idempotent outcome table and the dead set. Must not: do I/O, read a
clock (``now_ms`` is an argument) or lock (the coordinator serialises calls).

Theory of operation
-------------------
A transaction enters as PREPARED when its half record is durable. A decision moves it to DECIDING
(so a second, concurrent decision waits instead of appending twice), then to COMMITTED or
ROLLED_BACK once the decision record is durable; if the append fails it goes back to PREPARED.
Outcomes stay in ``outcomes`` for a bounded time so a repeated decision returns the first
outcome, and a contradicting one is refused. Check-back: ``due`` pops transactions whose
next-check time has passed; each check spent reschedules with exponential backoff. After
``check_max`` checks the coordinator rolls back with source MAX_CHECKS and the transaction
joins ``dead``, where only an operator may still resolve it.
"""

from __future__ import annotations

import enum
import heapq
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from txmq import limits
from txmq.errors import InvalidTransactionIdError, TransactionConflictError, invariant
from txmq.model import DecisionSource, Outcome


class TxnState(enum.Enum):
    PREPARED = "prepared"
    DECIDING = "deciding"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"


_TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.PREPARED: frozenset({TxnState.DECIDING}),
    TxnState.DECIDING: frozenset({TxnState.PREPARED, TxnState.COMMITTED, TxnState.ROLLED_BACK}),
    TxnState.COMMITTED: frozenset(),
    # Only an operator may turn a max-checks rollback into a commit (see ``dead``).
    TxnState.ROLLED_BACK: frozenset({TxnState.DECIDING}),
}


@dataclass
class Txn:
    transaction_id: str
    message_id: str
    half_offset: int
    producer_group: str
    client_id: str
    topic: str
    prepared_at_ms: int
    timeout_ms: int
    checks: int = 0
    next_check_ms: int = 0
    state: TxnState = TxnState.PREPARED

    def transition_to(self, state: TxnState) -> None:
        invariant(
            state in _TRANSITIONS[self.state],
            f"illegal transaction transition {self.state.value} -> {state.value}",
        )
        self.state = state


@dataclass(frozen=True)
class Decided:
    outcome: Outcome
    source: DecisionSource
    decided_at_ms: int


class TxnBook:
    def __init__(self, *, check_interval_ms: int, check_max: int) -> None:
        self.check_interval_ms = check_interval_ms
        self.check_max = check_max
        self.pending: dict[str, Txn] = {}
        self.outcomes: OrderedDict[str, Decided] = OrderedDict()
        self.dead: dict[str, Txn] = {}
        self._heap: list[tuple[int, str]] = []

    # --- Entering and scheduling. --------------------------------------------------------------

    def add(self, txn: Txn) -> None:
        invariant(txn.transaction_id not in self.pending, "transaction id prepared twice")
        if len(self.pending) >= limits.TRANSACTIONS_PENDING_MAX:
            raise InvalidTransactionIdError(txn.transaction_id, "too many pending transactions")
        txn.next_check_ms = txn.prepared_at_ms + txn.timeout_ms
        self.pending[txn.transaction_id] = txn
        heapq.heappush(self._heap, (txn.next_check_ms, txn.transaction_id))

    def next_delay_ms(self, attempt: int) -> int:
        """Backoff for the check after ``attempt`` checks: interval * 2^(attempt-1), capped."""
        delay = self.check_interval_ms * (2 ** max(0, min(attempt - 1, 20)))
        return int(min(delay, limits.TRANSACTION_CHECK_INTERVAL_MS_MAX))

    def due(self, now_ms: int, limit: int) -> list[Txn]:
        """Pop up to ``limit`` PREPARED transactions whose next check time has passed.

        The caller must reschedule every returned transaction (``reschedule``) or decide it.
        """
        out: list[Txn] = []
        while self._heap and len(out) < limit and self._heap[0][0] <= now_ms:
            at, tid = heapq.heappop(self._heap)
            txn = self.pending.get(tid)
            if txn is None or txn.next_check_ms != at or txn.state is not TxnState.PREPARED:
                continue  # stale heap entry (lazy deletion) or being decided right now
            out.append(txn)
        return out

    def reschedule(self, txn: Txn, at_ms: int) -> None:
        txn.next_check_ms = at_ms
        heapq.heappush(self._heap, (at_ms, txn.transaction_id))

    def spend_check(self, txn: Txn, now_ms: int) -> int:
        """Count one check-back sent; returns its number (1-based) and schedules the next."""
        txn.checks += 1
        self.reschedule(txn, now_ms + self.next_delay_ms(txn.checks))
        return txn.checks

    # --- Decisions. ---------------------------------------------------------------------------

    def begin(self, transaction_id: str, outcome: Outcome, source: DecisionSource) -> Txn | None:
        """Start deciding. Returns the Txn to decide, or None if this outcome is already final.

        Raises:
            TransactionConflictError: the transaction already has the other outcome.
            InvalidTransactionIdError: unknown or expired transaction id.
        """
        decided = self.outcomes.get(transaction_id)
        dead = self.dead.get(transaction_id)
        if dead is not None and source is DecisionSource.OPERATOR:
            dead.transition_to(TxnState.DECIDING)
            return dead
        if decided is not None:
            if decided.outcome is outcome:
                return None
            raise TransactionConflictError(transaction_id, decided.outcome.value, outcome.value)
        txn = self.pending.get(transaction_id)
        if txn is None:
            raise InvalidTransactionIdError(transaction_id, "unknown or expired transaction")
        if txn.state is TxnState.DECIDING:
            return txn  # the caller waits for the concurrent decision
        txn.transition_to(TxnState.DECIDING)
        return txn

    def finish(self, txn: Txn, outcome: Outcome, source: DecisionSource, now_ms: int) -> None:
        txn.transition_to(
            TxnState.COMMITTED if outcome is Outcome.COMMITTED else TxnState.ROLLED_BACK
        )
        self.pending.pop(txn.transaction_id, None)
        if source is DecisionSource.MAX_CHECKS:
            self.dead[txn.transaction_id] = txn
        elif source is DecisionSource.OPERATOR:
            self.dead.pop(txn.transaction_id, None)
        self.outcomes[txn.transaction_id] = Decided(outcome, source, now_ms)
        self.outcomes.move_to_end(txn.transaction_id)
        while len(self.outcomes) > limits.TRANSACTION_OUTCOMES_MAX:
            self.outcomes.popitem(last=False)

    def abort_decision(self, txn: Txn) -> None:
        """The decision record could not be appended: the transaction is still undecided."""
        if txn.transaction_id in self.dead:
            txn.transition_to(TxnState.ROLLED_BACK)
            return
        txn.transition_to(TxnState.PREPARED)
        self.reschedule(txn, txn.next_check_ms)

    def expire_outcomes(self, now_ms: int) -> int:
        """Forget outcomes older than the retention; a later decision then gets not-found."""
        cutoff = now_ms - limits.TRANSACTION_OUTCOME_RETENTION_MS
        n = 0
        while self.outcomes:
            tid, decided = next(iter(self.outcomes.items()))
            if decided.decided_at_ms >= cutoff or tid in self.dead:
                break
            self.outcomes.popitem(last=False)
            n += 1
        return n

    def oldest_pending(self, key: Callable[[Txn], int]) -> Txn | None:
        return min(self.pending.values(), key=key, default=None)
