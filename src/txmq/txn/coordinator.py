"""Transactions over the store: prepare, decide, check back, recover. Used by the broker.

Owns: the thread-safe glue between the pure ``TxnBook`` and ``Store`` (records are built in
``records.py``), server-side resolvers, the snapshot file and recovery from the log, and the
transaction metrics. Must not: know about gRPC or producer connections (the broker passes a
liveness predicate and picks the instance to ask), or read the wall clock (``now_ms`` is
injected).

API (all methods are thread-safe and may block on the store's fsync)::

    tx = Transactions(store, d, timeout_ms=6000, check_interval_ms=30000,
                      check_max=15, now_ms=clock, resolvers=[...])
    tid, res = tx.prepare(draft, producer_group=g, transaction_id="", client_id=cid,
                          check_immunity_ms=None)   # half message durable; tid generated if ""
    tx.end(tid, commit=True, source=DecisionSource.PRODUCER, message_id="") -> Outcome
    tx.due_checks(is_live) -> list[CheckRequest]     # call every tick; sends are recorded
    tx.pending(), tx.dead(), tx.show(tid), tx.resolve(tid, commit=...)   # operators
    tx.metrics, tx.oldest_pending_offset, tx.snapshot(), tx.close()

Decisions. ``end`` is idempotent and final: repeating a decision returns the first outcome
without a second append; the opposite decision raises TransactionConflictError(existing=...); an
unknown or expired id raises InvalidTransactionIdError. The decision record is appended outside
the lock, so concurrent transactions share one group-commit fsync; the transaction is DECIDING
meanwhile, which makes a concurrent decision for the same id wait for the first and return its
outcome. If the append fails the transaction is undecided again and the error propagates.

Check-back. ``due_checks(is_live)`` returns at most TRANSACTION_CHECKS_PER_TICK_MAX requests.
A transaction becomes due ``timeout_ms`` (or its check immunity) after its half message was
stored; each check is recorded durably (a check record) before it is returned, and the next one
is due ``check_interval_ms * 2^(n-1)`` later (capped). Producer groups for which ``is_live``
is false are not asked and spend no check: they stay due until a producer is back (or an
operator resolves them). After ``check_max`` checks and one more interval without an answer the
transaction is rolled back with source MAX_CHECKS, whether or not a producer is live, and joins
the dead set; ``resolve`` (source OPERATOR) may then still commit it (the message becomes
visible) or confirm the rollback (it leaves the dead set). Producers and check-back answers for a
dead transaction get ROLLED_BACK (rollback) or a conflict (commit).

Resolvers. A resolver is either an object with ``claims(half) -> bool`` and
``resolve(half) -> Outcome | None`` (it owns the half messages it claims: they are checked on
schedule without any live producer, a None answer spends a check, so max checks still applies),
or a plain callable ``(half) -> Outcome | None`` consulted before asking a live producer (None:
ask the producer). Both run outside the lock and may do I/O. A resolver or half read that fails
defers that one transaction by one interval (logged, counted in ``metrics.check_errors``) so one
bad transaction cannot stop check-back for the others.

Recovery. ``open`` loads the snapshot (written atomically at ``close`` and whenever the broker
calls ``snapshot``) and replays the log from the offset it covers: half records add pending
transactions, COMMIT/ROLLBACK records (``prepared_offset`` set) decide them, check records
restore counts and times. Replay is idempotent, so a decision is never lost nor applied twice.
``oldest_pending_offset`` tells the store's retention which segments a pending half needs.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

from txmq import limits
from txmq.errors import InvalidTransactionIdError, TransactionError, invariant
from txmq.model import (
    PROP_TRANSACTION_ID,
    AppendResult,
    DecisionSource,
    Outcome,
    Record,
    RecordDraft,
    TxnFlag,
)
from txmq.store.store import Store
from txmq.store.write.group_commit import Pending
from txmq.txn import records
from txmq.txn.book import Due, Txn, TxnBook, Wait
from txmq.txn.ids import new_transaction_id
from txmq.txn.replay import load_book
from txmq.txn.steps import DecisionInFlightError, Steps, run_all, run_blocking
from txmq.txn.values import CheckRequest as CheckRequest
from txmq.txn.values import ClaimingResolver as ClaimingResolver
from txmq.txn.values import LiveGroups as LiveGroups
from txmq.txn.values import Resolver as Resolver
from txmq.txn.values import ResolverFn as ResolverFn
from txmq.txn.values import TickDecision, is_claiming, live_predicate
from txmq.txn.views import OUTCOME_KEYS, TxnViews

log = logging.getLogger(__name__)

_SNAPSHOT = "txn-snapshot.json"
SNAPSHOT_FILE = _SNAPSHOT  # replica_node: a follower drops it (its log is the leader's)
# How long a decision waits for a concurrent decision of the same transaction before it looks
# again; the loop ends when the other append returns or fails, which the store bounds.
_DECIDING_WAIT_S = 1.0


class Transactions(TxnViews):
    def __init__(
        self,
        store: Store,
        data_dir: Path,
        *,
        timeout_ms: int = limits.TRANSACTION_TIMEOUT_MS_DEFAULT,
        check_interval_ms: int = limits.TRANSACTION_CHECK_INTERVAL_MS_DEFAULT,
        check_max: int = limits.TRANSACTION_CHECK_MAX_DEFAULT,
        now_ms: Callable[[], int],
        resolvers: Sequence[Resolver] = (),
    ) -> None:
        """Open over ``store``, recovering from the snapshot in ``data_dir`` and the log."""
        invariant(timeout_ms >= 0, "timeout_ms must not be negative")
        self.store = store
        self.data_dir = data_dir
        self.timeout_ms = timeout_ms
        self.now_ms = now_ms
        self._claiming: list[ClaimingResolver] = []
        self._plain: list[ResolverFn] = []
        for r in resolvers:
            if is_claiming(r):
                self._claiming.append(r)
            else:
                invariant(callable(r), "a resolver is a callable or has claims/resolve")
                self._plain.append(r)  # type: ignore[arg-type]
        self.book = TxnBook(check_interval_ms=check_interval_ms, check_max=check_max)
        self._lock = threading.Lock()
        self._decided = threading.Condition(self._lock)
        self._deciding_waits = 0  # threads in ``_decided.wait``: settling wakes only those
        self._tick = threading.Lock()  # one check-back tick at a time
        self._snapshotting = threading.Lock()  # one snapshot writer at a time (one temp file)
        self._preparing: set[str] = set()
        # Operations whose record may be between the log and the book, by token, with the log
        # end when they started: their record lands at or after it, so a snapshot taken now
        # covers the log only up to the lowest such offset (replay is idempotent).
        self._ops: dict[int, int] = {}
        self._op_token = 0
        # Checks counted in the book whose check record is not appended yet: tid -> number.
        self._unrecorded_checks: dict[str, int] = {}
        self._checks_sent = 0
        self._check_errors = 0
        self._outcomes: dict[str, int] = {}
        # Recent half records by transaction id (bounded in bytes), with their properties
        # block: most decisions arrive milliseconds after the prepare, so needs no read.
        self._halves: OrderedDict[str, tuple[Record, bytes]] = OrderedDict()
        self._halves_bytes = 0
        self._recover()

    # --- Prepare and decide. -------------------------------------------------------------------

    def prepare(
        self,
        draft: RecordDraft,
        *,
        producer_group: str,
        transaction_id: str = "",
        client_id: str = "",
        check_immunity_ms: int | None = None,
    ) -> tuple[str, AppendResult]:
        """Store the half message durably; returns (transaction id, where it was stored).

        ``draft`` names the real topic and queue. A new random hex id (txn/ids.py) is used when
        ``transaction_id`` is empty. ``check_immunity_ms`` replaces the broker's transaction
        timeout before the first check-back for this message.

        Raises:
            InvalidTransactionIdError: the id is in use (pending, decided or being prepared).
            TooManyRequestsError: TRANSACTIONS_PENDING_MAX transactions are pending.
            StoreError and MessageBodyTooLargeError from the append.
        """
        return run_blocking(
            self.prepare_steps(
                draft,
                producer_group=producer_group,
                transaction_id=transaction_id,
                client_id=client_id,
                check_immunity_ms=check_immunity_ms,
            )
        )

    def prepare_steps(
        self,
        draft: RecordDraft,
        *,
        producer_group: str,
        transaction_id: str = "",
        client_id: str = "",
        check_immunity_ms: int | None = None,
        queue_id: int | None = None,
    ) -> Steps[tuple[str, AppendResult]]:
        """``prepare`` as steps (``Steps``); ``queue_id``: the real queue if not the draft's."""
        invariant(draft.flag is TxnFlag.NORMAL, "prepare takes the real message as a draft")
        tid = transaction_id or new_transaction_id()
        half = records.half_draft(
            draft,
            queue_id=draft.queue_id if queue_id is None else queue_id,
            transaction_id=tid,
            producer_group=producer_group,
            client_id=client_id,
            check_immunity_ms=check_immunity_ms,
        )
        with self._lock:
            known = tid in self.book.pending or tid in self.book.dead
            if known or tid in self.book.outcomes or tid in self._preparing:
                raise InvalidTransactionIdError(tid, "transaction id already used")
            self._preparing.add(tid)
            token = self._op_start()
        try:
            pending = self.store.append_many_nowait([half])
            yield pending
            (result,) = self.store.durable(pending)
            stored = records.stored_half(half, result)
            txn = records.txn_of_half(
                stored, default_timeout_ms=self.timeout_ms, claimed=self._claimed(stored)
            )
            with self._lock:
                self.book.add(txn)
                self._cache_half(stored, half.properties_block)
        finally:
            with self._lock:
                self._preparing.discard(tid)
                self._op_end(token)
        return tid, result

    def end(
        self, transaction_id: str, *, commit: bool, source: DecisionSource, message_id: str = ""
    ) -> Outcome:
        """Decide a transaction; idempotent and final. Returns the outcome now in force.

        Raises:
            TransactionConflictError: it already has the other outcome.
            InvalidTransactionIdError: unknown or expired, or ``message_id`` names another
                message.
            StoreError: the decision record could not be appended (still undecided).
        """
        steps = self.end_steps(
            transaction_id, commit=commit, source=source, message_id=message_id, block=True
        )
        return run_blocking(steps)

    def end_steps(
        self,
        transaction_id: str,
        *,
        commit: bool,
        source: DecisionSource,
        message_id: str = "",
        block: bool,
    ) -> Steps[Outcome]:
        """``end`` as steps (see ``Steps``). With ``block`` false a decision of the same
        transaction already in flight raises DecisionInFlightError instead of waiting for it
        (an event loop must not wait on a lock): the caller then runs ``end`` in a thread."""
        outcome = Outcome.COMMITTED if commit else Outcome.ROLLED_BACK
        with self._lock:
            while True:
                begun = self.book.begin(transaction_id, outcome, source)
                if begun is not Wait.IN_FLIGHT:
                    break
                if not block:
                    raise DecisionInFlightError(transaction_id)
                self._deciding_waits += 1  # left high if wait raises: only extra wake-ups
                self._decided.wait(timeout=_DECIDING_WAIT_S)
                self._deciding_waits -= 1
            if begun is None:
                return outcome
            txn = begun
            if message_id and txn.message_id and message_id != txn.message_id:
                self.book.abort_decision(txn)
                raise InvalidTransactionIdError(
                    transaction_id, f"belongs to message {txn.message_id!r}, not {message_id!r}"
                )
            token = self._op_start()
        try:
            pending = self._append_decision(txn, outcome, source)
            yield pending
            self.store.durable(pending)
        except BaseException:
            with self._lock:
                self.book.abort_decision(txn)
                self._settle(token)
            raise
        with self._lock:
            self.book.finish(txn, outcome, source, self.now_ms())
            self._uncache_half(transaction_id)
            key = OUTCOME_KEYS[source, outcome]
            self._outcomes[key] = self._outcomes.get(key, 0) + 1
            self._settle(token)
        return outcome

    def resolve(self, transaction_id: str, *, commit: bool) -> Outcome:
        """Operator decision; the only one allowed on a dead (max-checks) transaction."""
        return self.end(transaction_id, commit=commit, source=DecisionSource.OPERATOR)

    def _op_start(self) -> int:
        """Under the lock."""
        self._op_token = token = self._op_token + 1
        self._ops[token] = self.store.log_end_offset
        return token

    def _op_end(self, token: int) -> None:
        """Under the lock."""
        del self._ops[token]

    def _settle(self, token: int) -> None:
        self._op_end(token)
        if self._deciding_waits:  # Condition.notify_all runs a few Python frames even idle
            self._decided.notify_all()

    def _half(self, txn: Txn) -> tuple[Record, bytes]:
        """The half record and its properties block (empty when read from the log)."""
        with self._lock:
            half = self._halves.get(txn.transaction_id)
        return (self.store.read_at(txn.half_offset, held=True), b"") if half is None else half

    def _cache_half(self, half: Record, block: bytes) -> None:
        """Under the lock."""
        self._halves[half.properties[PROP_TRANSACTION_ID]] = (half, block)
        self._halves_bytes += half.size
        while self._halves_bytes > limits.TRANSACTION_HALF_CACHE_BYTES:
            _, (old, _) = self._halves.popitem(last=False)
            self._halves_bytes -= old.size

    def _uncache_half(self, transaction_id: str) -> None:
        """Under the lock."""
        if (cached := self._halves.pop(transaction_id, None)) is not None:
            self._halves_bytes -= cached[0].size

    def _append_decision(self, txn: Txn, outcome: Outcome, source: DecisionSource) -> Pending:
        if outcome is Outcome.ROLLED_BACK and source is not DecisionSource.MAX_CHECKS:
            # A rollback needs only the half's offset, so it works even after retention
            # deleted a dead transaction's half message.
            return self.store.append_many_nowait(records.rollback_drafts(txn, source, None))
        if txn.half_offset < self.store.log_start_offset:
            raise InvalidTransactionIdError(
                txn.transaction_id, "its half message was deleted by retention"
            )
        half, block = self._half(txn)
        invariant(
            half.flag is TxnFlag.PREPARED
            and half.properties.get(PROP_TRANSACTION_ID) == txn.transaction_id,
            "a decision must point at its own half record",
        )
        if outcome is Outcome.COMMITTED:
            return self.store.append_many_nowait(records.commit_drafts(half, source, block))
        return self.store.append_many_nowait(records.rollback_drafts(txn, source, half))

    # --- Check-back. ---------------------------------------------------------------------------

    def due_checks(self, live_groups: LiveGroups, now_ms: int | None = None) -> list[CheckRequest]:
        """One check-back tick: at most TRANSACTION_CHECKS_PER_TICK_MAX requests to send now.

        ``live_groups`` says which producer groups have a live producer: a predicate, or a
        mapping whose keys are the live groups. Each returned request is already recorded
        durably. Resolvers and max-checks rollbacks run here too. ``now_ms`` defaults to the
        injected clock.
        """
        is_live = live_predicate(live_groups)
        with self._tick:
            now = self.now_ms() if now_ms is None else now_ms
            with self._lock:
                # The tick's check records land after this offset; a snapshot meanwhile must
                # replay them.
                token = self._op_start()
                self.book.expire_outcomes(now)
                dues = self.book.due(now, is_live, limits.TRANSACTION_CHECKS_PER_TICK_MAX)
            try:
                spent: list[tuple[Txn, int, Record]] = []
                decisions: list[TickDecision] = []
                for due in dues:
                    checked = self._handle_due_logged(due, now)
                    if isinstance(checked, TickDecision):
                        decisions.append(checked)
                    elif checked is not None:
                        spent.append(checked)
                self._decide_all(decisions, now)
                return self._record_checks(spent, now)
            finally:
                with self._lock:
                    self._op_end(token)

    def _decide_all(self, decisions: list[TickDecision], now_ms: int) -> None:
        """The tick's decisions (resolver answers, max-checks rollbacks) appended together:
        one shared fsync, not one each in turn. One failure defers only its transaction."""
        all_steps = [
            self.end_steps(d.txn.transaction_id, commit=d.commit, source=d.source, block=True)
            for d in decisions
        ]
        for d, result in zip(decisions, run_all(all_steps), strict=True):
            if isinstance(result, TransactionError):
                continue  # a producer decided it meanwhile: its outcome stands
            if isinstance(result, Exception):
                log.error(
                    "check-back decision of %s failed; retried later: %r",
                    d.txn.transaction_id,
                    result,
                )
                with self._lock:
                    self._check_errors += 1
                    self.book.reschedule(d.txn, now_ms + self.book.check_interval_ms)

    def _handle_due_logged(
        self, due: Due, now_ms: int
    ) -> tuple[Txn, int, Record] | TickDecision | None:
        """``_handle_due``, with one transaction's failure contained to that transaction."""
        try:
            return self._handle_due(due, now_ms)
        except TransactionError:
            return None  # a producer decided it meanwhile: its outcome stands
        except Exception:
            log.exception("check-back of %s failed; retried later", due.txn.transaction_id)
            with self._lock:
                self._check_errors += 1
                self.book.reschedule(due.txn, now_ms + self.book.check_interval_ms)
            return None

    def _handle_due(self, due: Due, now_ms: int) -> tuple[Txn, int, Record] | TickDecision | None:
        """Resolve or spend a check for one due transaction; returns the spent check, or the
        decision to append (``_decide_all``)."""
        txn = due.txn
        if due.give_up:
            return TickDecision(txn, False, DecisionSource.MAX_CHECKS)
        half, _ = self._half(txn)
        outcome = self._run_resolvers(txn, half)
        if outcome is not None:
            return TickDecision(txn, outcome is Outcome.COMMITTED, DecisionSource.CHECK_BACK)
        with self._lock:
            number = self.book.spend_check(txn, now_ms)
            if number == 0:
                return None
            self._unrecorded_checks[txn.transaction_id] = number
        return txn, number, half

    def _run_resolvers(self, txn: Txn, half: Record) -> Outcome | None:
        if txn.claimed:
            for claiming in self._claiming:
                if claiming.claims(half):
                    return claiming.resolve(half)
            return None
        for fn in self._plain:
            outcome = fn(half)
            if outcome is not None:
                return outcome
        return None

    def _record_checks(
        self, spent: list[tuple[Txn, int, Record]], now_ms: int
    ) -> list[CheckRequest]:
        """Append one check record per spent check (one fsync), then hand out the requests."""
        if not spent:
            return []
        try:
            self.store.append_many([records.check_draft(t, n) for t, n, _ in spent])
        except BaseException:
            with self._lock:
                for txn, number, _ in spent:
                    self.book.unspend_check(txn, number, now_ms + self.book.check_interval_ms)
                    self._unrecorded_checks.pop(txn.transaction_id, None)
            raise
        with self._lock:
            for txn, _, _ in spent:
                self._unrecorded_checks.pop(txn.transaction_id, None)
            self._checks_sent += len(spent)
        return [
            CheckRequest(t.transaction_id, t.producer_group, t.client_id, n, half)
            for t, n, half in spent
            if not t.claimed
        ]

    def _claimed(self, half: Record) -> bool:
        return bool(self._claiming) and any(r.claims(half) for r in self._claiming)

    # --- Snapshot and recovery. ----------------------------------------------------------------

    def snapshot(self) -> None:
        """Persist the book with the log offset it reflects (write-temp, fsync, rename).

        Concurrent operations do not block it: the snapshot's offset is the log end, lowered to
        where the earliest in-flight operation started, so their records are replayed on
        recovery; a check counted but not yet recorded is saved as not sent. The store is
        flushed before the file is written so a snapshot never reflects a record a crash could
        still lose.
        """
        with self._snapshotting:
            with self._lock:
                offset = min([self.store.log_end_offset, *self._ops.values()])
                raw = records.encode_snapshot(self.book, offset, self._unrecorded_checks)
            self.store.flush()
            self.store.disk.write_atomic(self.data_dir / _SNAPSHOT, raw)

    def close(self) -> None:
        """Write a final snapshot. The store is the caller's to close (after this)."""
        self.snapshot()

    def _recover(self) -> None:
        self.book, rewrite = load_book(
            self.store,
            self.data_dir / _SNAPSHOT,
            self.book,
            timeout_ms=self.timeout_ms,
            claimed=self._claimed,
        )
        if rewrite:
            self.snapshot()
