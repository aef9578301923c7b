"""The transaction book: pure bookkeeping of pending, decided and dead transactions.

Owns: the per-transaction state machine, the check-back schedule (one heap per producer group,
ordered by next-check time, with lazy deletion), the idempotent outcome table, the dead set, and
the replay rules that rebuild all of it from log records. Must not: do I/O, read a clock
(``now_ms`` is always an argument) or lock (the coordinator serialises every call).

Theory of operation
-------------------
States and legal transitions (``Txn.transition_to`` asserts them, aiokafka style)::

    PREPARED --check sent--> CHECKING --check sent--> CHECKING
    PREPARED | CHECKING --decision starts--> DECIDING
    DECIDING --decision durable--> COMMITTED | ROLLED_BACK        (final)
    DECIDING --max-checks rollback durable--> DEAD
    DECIDING --decision append failed--> the state it came from
    DEAD --operator resolve starts--> DECIDING

DECIDING is what makes a decision happen exactly once while its record is appended outside the
coordinator's lock: a second decision for the same transaction sees DECIDING and waits.

Outcomes. ``outcomes`` maps a transaction id to its first final outcome for
``TRANSACTION_OUTCOME_RETENTION_MS`` (bounded in count too). A repeated decision returns that
outcome without a new record; a contradicting one raises TransactionConflictError naming it; an
id in no table raises InvalidTransactionIdError.

Dead transactions. After ``check_max`` checks went unanswered for one more backoff interval the
coordinator rolls the transaction back with source MAX_CHECKS; it then sits in ``dead`` (its
outcome is ROLLED_BACK, so producers and check-backs get a conflict on commit). Only an operator
may still resolve it: commit appends the real message (the only way a rolled-back transaction
ever becomes visible, and a deliberate one); rollback appends an operator ROLLBACK record that
takes it off the dead list. ``dead`` is bounded (oldest dropped first: its copy stays in the log).

Schedule. Each pending transaction sits in the heap of its *route*: its producer group, or
``CLAIMED`` when a server-side resolver owns it (it needs no producer). ``due`` looks only at the
top of each route's heap and skips routes with no live producer, so such transactions cost no
check and stay due for the moment a producer reconnects, and a backlog in a dead group can never
starve a live one. Transactions that already had ``check_max`` checks move to one ``give_up``
heap that fires regardless of liveness. Stale heap entries (decided or rescheduled
transactions) are recognised by a per-transaction generation number and dropped lazily; the heaps
are rebuilt when stale entries outnumber live ones.
"""

from __future__ import annotations

import enum
import heapq
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from txmq import limits
from txmq.errors import (
    InvalidTransactionIdError,
    TooManyRequestsError,
    TransactionConflictError,
    invariant,
)
from txmq.model import DecisionSource, Outcome

# The route of transactions a server-side resolver owns; no producer group can be named this
# because group names are non-empty topic names.
CLAIMED = ""


class TxnState(enum.Enum):
    PREPARED = "prepared"
    CHECKING = "checking"
    DECIDING = "deciding"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    DEAD = "dead"

    __hash__ = object.__hash__  # by identity, as model.Outcome


_TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.PREPARED: frozenset({TxnState.CHECKING, TxnState.DECIDING}),
    TxnState.CHECKING: frozenset({TxnState.CHECKING, TxnState.DECIDING}),
    TxnState.DECIDING: frozenset(
        {
            TxnState.PREPARED,
            TxnState.CHECKING,
            TxnState.COMMITTED,
            TxnState.ROLLED_BACK,
            TxnState.DEAD,
        }
    ),
    TxnState.COMMITTED: frozenset(),
    TxnState.ROLLED_BACK: frozenset(),
    TxnState.DEAD: frozenset({TxnState.DECIDING}),
}
_SCHEDULED = frozenset({TxnState.PREPARED, TxnState.CHECKING})


@dataclass(slots=True)
class Txn:
    """One transaction the book still tracks (pending or dead)."""

    transaction_id: str
    message_id: str
    half_offset: int
    producer_group: str
    client_id: str
    topic: str
    prepared_at_ms: int
    # Delay before the first check: the broker's transaction timeout or the per-message
    # check immunity.
    timeout_ms: int
    checks: int = 0
    next_check_ms: int = 0
    state: TxnState = TxnState.PREPARED
    # A server-side resolver owns it: checked without a live producer.
    claimed: bool = False
    # Heap generation: a heap entry is live only if it carries the current one.
    gen: int = 0
    # Where a failed decision returns to.
    undecided_state: TxnState = TxnState.PREPARED

    def transition_to(self, state: TxnState) -> None:
        if state not in _TRANSITIONS[self.state]:  # the message formatted only on failure
            invariant(
                False,
                f"transaction {self.transaction_id}: illegal transition "
                f"{self.state.value} -> {state.value}",
            )
        self.state = state


@dataclass(frozen=True, slots=True)
class Decided:
    outcome: Outcome
    source: DecisionSource
    decided_at_ms: int


@dataclass(frozen=True, slots=True)
class Due:
    """A transaction whose time has come: check it, or (give_up) roll it back at max checks."""

    txn: Txn
    give_up: bool


class Wait(enum.Enum):
    """``begin`` found a decision for this transaction in flight; wait for it and retry."""

    IN_FLIGHT = "in_flight"


_Entry = tuple[int, int, str]  # (at_ms, generation, transaction id)


class TxnBook:
    def __init__(self, *, check_interval_ms: int, check_max: int) -> None:
        invariant(check_interval_ms > 0 and check_max >= 0, "bad check schedule")
        self.check_interval_ms = check_interval_ms
        self.check_max = check_max
        self.pending: dict[str, Txn] = {}
        self.outcomes: OrderedDict[str, Decided] = OrderedDict()
        self.dead: dict[str, Txn] = {}
        self._routes: dict[str, list[_Entry]] = {}
        self._give_up: list[_Entry] = []
        self._entries = 0

    # --- Entering and scheduling. --------------------------------------------------------------

    def add(self, txn: Txn) -> None:
        """Track a transaction whose half record is durable; first check at prepared + timeout.

        Raises:
            TooManyRequestsError: TRANSACTIONS_PENDING_MAX transactions are pending already.
        """
        tid = txn.transaction_id
        invariant(tid not in self.pending and tid not in self.dead, "transaction added twice")
        invariant(txn.state in _SCHEDULED, "a new transaction is prepared or checking")
        if len(self.pending) >= limits.TRANSACTIONS_PENDING_MAX:
            raise TooManyRequestsError(
                f"{len(self.pending)} transactions are pending; the maximum is "
                f"{limits.TRANSACTIONS_PENDING_MAX}"
            )
        if txn.next_check_ms == 0:
            txn.next_check_ms = txn.prepared_at_ms + max(0, txn.timeout_ms)
        self.pending[tid] = txn
        self._push(txn)

    def next_delay_ms(self, attempt: int) -> int:
        """Wait after check number ``attempt``: interval * 2^(attempt-1), capped."""
        delay = self.check_interval_ms * (2 ** max(0, min(attempt - 1, 30)))
        return int(min(delay, limits.TRANSACTION_CHECK_INTERVAL_MS_MAX))

    def reschedule(self, txn: Txn, at_ms: int) -> None:
        """Move a pending transaction's next check (or give-up) to ``at_ms``."""
        if txn.transaction_id in self.pending and txn.state in _SCHEDULED:
            txn.next_check_ms = at_ms
            self._push(txn)

    def due(self, now_ms: int, is_live: Callable[[str], bool], limit: int) -> list[Due]:
        """Pop up to ``limit`` transactions whose time has come, earliest first.

        Give-ups come first (they need no producer). ``is_live`` is asked once per producer
        group with a due transaction; groups it rejects are left untouched. Every returned
        transaction is off the schedule: the caller must ``spend_check``, decide it, or
        ``reschedule`` it.
        """
        out: list[Due] = []
        stale_budget = [limits.STALE_CHECK_POPS_PER_TICK_MAX]
        heap = self._give_up
        while len(out) < limit and self._drop_stale(heap, stale_budget) and heap[0][0] <= now_ms:
            out.append(Due(self.pending[heapq.heappop(heap)[2]], give_up=True))
            self._entries -= 1
        ready: list[tuple[int, str]] = []
        for route, heap in list(self._routes.items()):
            if not self._drop_stale(heap, stale_budget):
                if not heap:
                    del self._routes[route]
                continue
            if heap[0][0] <= now_ms and (route == CLAIMED or is_live(route)):
                ready.append((heap[0][0], route))
        heapq.heapify(ready)
        while ready and len(out) < limit:
            _, route = heapq.heappop(ready)
            heap = self._routes[route]
            out.append(Due(self.pending[heapq.heappop(heap)[2]], give_up=False))
            self._entries -= 1
            if self._drop_stale(heap, stale_budget) and heap[0][0] <= now_ms:
                heapq.heappush(ready, (heap[0][0], route))
        return out

    def spend_check(self, txn: Txn, now_ms: int) -> int:
        """Count one check-back sent at ``now_ms``; returns its number (1-based), or 0 when the
        transaction was decided meanwhile (no check is due any more)."""
        if txn.transaction_id not in self.pending or txn.state not in _SCHEDULED:
            return 0
        txn.transition_to(TxnState.CHECKING)
        txn.checks += 1
        txn.next_check_ms = now_ms + self.next_delay_ms(txn.checks)
        self._push(txn)
        return txn.checks

    def unspend_check(self, txn: Txn, number: int, retry_at_ms: int) -> None:
        """The record of check ``number`` could not be appended, so it was never sent."""
        if txn.checks == number and txn.transaction_id in self.pending:
            txn.checks -= 1
            self.reschedule(txn, retry_at_ms)

    # --- Decisions. ---------------------------------------------------------------------------

    def begin(
        self, transaction_id: str, outcome: Outcome, source: DecisionSource
    ) -> Txn | Wait | None:
        """Start deciding. Returns the Txn to decide (now DECIDING), Wait.IN_FLIGHT when another
        decision is being appended, or None when ``outcome`` is already final (nothing to do).

        Raises:
            TransactionConflictError: the transaction already has the other outcome.
            InvalidTransactionIdError: unknown or expired transaction id.
        """
        txn = self.pending.get(transaction_id) or self.dead.get(transaction_id)
        if txn is not None and txn.state is TxnState.DECIDING:
            return Wait.IN_FLIGHT
        if txn is not None and txn.state is TxnState.DEAD:
            if source is DecisionSource.OPERATOR:
                txn.undecided_state = TxnState.DEAD
                txn.transition_to(TxnState.DECIDING)
                return txn
            if outcome is Outcome.ROLLED_BACK:
                return None
            raise TransactionConflictError(transaction_id, "rolled_back", outcome.value)
        decided = self.outcomes.get(transaction_id)
        if decided is not None:
            if decided.outcome is outcome:
                return None
            raise TransactionConflictError(transaction_id, decided.outcome.value, outcome.value)
        if txn is None:
            raise InvalidTransactionIdError(transaction_id, "unknown or expired transaction")
        txn.undecided_state = txn.state
        txn.transition_to(TxnState.DECIDING)
        return txn

    def finish(self, txn: Txn, outcome: Outcome, source: DecisionSource, now_ms: int) -> None:
        """The decision record is durable: make the outcome final."""
        tid = txn.transaction_id
        self.pending.pop(tid, None)
        if source is DecisionSource.MAX_CHECKS:
            invariant(outcome is Outcome.ROLLED_BACK, "max checks only ever rolls back")
            txn.transition_to(TxnState.DEAD)
            self.dead[tid] = txn
            while len(self.dead) > limits.TRANSACTIONS_DEAD_MAX:
                del self.dead[next(iter(self.dead))]
        else:
            final = TxnState.COMMITTED if outcome is Outcome.COMMITTED else TxnState.ROLLED_BACK
            txn.transition_to(final)
            self.dead.pop(tid, None)
        self.outcomes[tid] = Decided(outcome, source, now_ms)
        self.outcomes.move_to_end(tid)
        while len(self.outcomes) > limits.TRANSACTION_OUTCOMES_MAX:
            self.outcomes.popitem(last=False)

    def abort_decision(self, txn: Txn) -> None:
        """The decision record could not be appended: the transaction is undecided again."""
        txn.transition_to(txn.undecided_state)
        if txn.state in _SCHEDULED:
            self._push(txn)

    def expire_outcomes(self, now_ms: int) -> int:
        """Forget outcomes older than the retention; a later decision then gets not-found.
        Dead transactions keep their outcome through the dead set."""
        cutoff = now_ms - limits.TRANSACTION_OUTCOME_RETENTION_MS
        n = 0
        while self.outcomes and n < limits.TRANSACTION_OUTCOMES_MAX:
            decided = next(iter(self.outcomes.values()))
            if decided.decided_at_ms >= cutoff:
                break
            self.outcomes.popitem(last=False)
            n += 1
        return n

    def oldest_pending(self) -> Txn | None:
        return min(self.pending.values(), key=lambda t: t.prepared_at_ms, default=None)

    # --- Replay from the log (recovery). -------------------------------------------------------

    def replay_prepared(self, txn: Txn) -> bool:
        """A half record read back from the log; ignored if already known. Returns whether
        it was added."""
        tid = txn.transaction_id
        if tid in self.pending or tid in self.dead or tid in self.outcomes:
            return False
        self.add(txn)
        return True

    def replay_decision(
        self, transaction_id: str, outcome: Outcome, source: DecisionSource, at_ms: int
    ) -> None:
        """A COMMIT or ROLLBACK record read back from the log. Applying one twice is harmless;
        a decision that contradicts an earlier final one is ignored (the first one stands)."""
        txn = self.pending.get(transaction_id) or self.dead.get(transaction_id)
        if txn is None:
            if transaction_id not in self.outcomes:
                self.outcomes[transaction_id] = Decided(outcome, source, at_ms)
            return
        if txn.state is TxnState.DEAD and source is not DecisionSource.OPERATOR:
            return
        txn.undecided_state = txn.state
        txn.transition_to(TxnState.DECIDING)
        self.finish(txn, outcome, source, at_ms)

    def replay_check(self, transaction_id: str, number: int, at_ms: int) -> None:
        """A check record read back: restore the count and the next check time."""
        txn = self.pending.get(transaction_id)
        if txn is None or number <= txn.checks or txn.state not in _SCHEDULED:
            return
        txn.state = TxnState.CHECKING
        txn.checks = number
        self.reschedule(txn, at_ms + self.next_delay_ms(number))

    # --- Heaps. -------------------------------------------------------------------------------

    def _push(self, txn: Txn) -> None:
        txn.gen += 1
        entry = (txn.next_check_ms, txn.gen, txn.transaction_id)
        if txn.checks >= self.check_max:
            heapq.heappush(self._give_up, entry)
        else:
            route = CLAIMED if txn.claimed else txn.producer_group
            heapq.heappush(self._routes.setdefault(route, []), entry)
        self._entries += 1
        if self._entries > 2 * len(self.pending) + 1024:
            self._rebuild()

    def _live(self, entry: _Entry) -> bool:
        txn = self.pending.get(entry[2])
        return txn is not None and txn.gen == entry[1] and txn.state in _SCHEDULED

    def _drop_stale(self, heap: list[_Entry], budget: list[int]) -> bool:
        """Pop stale entries off the top; True if a live entry is on top."""
        while heap and not self._live(heap[0]) and budget[0] > 0:
            heapq.heappop(heap)
            self._entries -= 1
            budget[0] -= 1
        return bool(heap) and self._live(heap[0])

    def _rebuild(self) -> None:
        """Drop every stale entry: O(pending), amortised over as many pushes."""
        self._routes, self._give_up, self._entries = {}, [], 0
        for txn in self.pending.values():
            if txn.state in _SCHEDULED:
                txn.gen += 1
                entry = (txn.next_check_ms, txn.gen, txn.transaction_id)
                if txn.checks >= self.check_max:
                    self._give_up.append(entry)
                else:
                    route = CLAIMED if txn.claimed else txn.producer_group
                    self._routes.setdefault(route, []).append(entry)
                self._entries += 1
        heapq.heapify(self._give_up)
        for heap in self._routes.values():
            heapq.heapify(heap)


def describe(transaction_id: str, txn: Txn | None, decided: Decided | None) -> dict[str, object]:
    """One transaction for operators, JSON-ready: its book entry and/or its outcome."""
    out: dict[str, object] = {"transaction_id": transaction_id}
    if txn is not None:
        out.update(
            message_id=txn.message_id,
            topic=txn.topic,
            producer_group=txn.producer_group,
            client_id=txn.client_id,
            state=txn.state.value,
            checks=txn.checks,
            next_check_ms=txn.next_check_ms,
            prepared_at_ms=txn.prepared_at_ms,
            half_offset=txn.half_offset,
            dead=txn.state is TxnState.DEAD,
        )
    if decided is not None:
        out.update(
            outcome=decided.outcome.value,
            source=decided.source.value,
            decided_at_ms=decided.decided_at_ms,
        )
    return out
