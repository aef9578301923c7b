"""Transactions over the store: prepare, decide, check back, recover.

Owns: turning transaction events into store records (half, commit, rollback, check, dead copy),
the thread-safe wrapper around the pure ``TxnBook``, the snapshot file and recovery from the log.
Must not: know about gRPC or producers' connections (the broker passes ``is_live(group)``) or read
the wall clock (``now_ms`` is injected).

Records written (all carry the transaction id in PROP_TRANSACTION_ID):
- half: topic HALF_TOPIC, queue 0, flag PREPARED, real topic/queue in PROP_REAL_TOPIC/_QUEUE_ID.
- commit: the real message in its real topic/queue, flag COMMIT, prepared_offset = half offset.
  One append is both the durable decision and the message becoming visible.
- rollback: topic OP_TOPIC, flag ROLLBACK, prepared_offset = half offset.
- check: topic OP_TOPIC, flag NORMAL, PROP_CHECK_NUMBER, so check counts survive a crash.
- dead copy: topic DEAD_TRANSACTION_TOPIC, flag NORMAL, after the max-checks rollback.
A decision is appended outside the lock (so concurrent transactions share one fsync) while the
transaction is DECIDING, which makes a concurrent second decision wait instead of appending.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from txmq import limits
from txmq.errors import InvalidTransactionIdError, TransactionError, invariant
from txmq.model import (
    DEAD_TRANSACTION_TOPIC,
    HALF_TOPIC,
    OP_TOPIC,
    PROP_CHECK_NUMBER,
    PROP_CLIENT_ID,
    PROP_DECISION_SOURCE,
    PROP_PRODUCER_GROUP,
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PROP_TRANSACTION_ID,
    AppendResult,
    DecisionSource,
    Outcome,
    Record,
    RecordDraft,
    TxnFlag,
)
from txmq.store.store import Store
from txmq.txn.book import Decided, Txn, TxnBook, TxnState

_SNAPSHOT = "txn-snapshot.json"
_SCAN_BATCH = 4096
_INTERNAL_PROPS = frozenset({PROP_REAL_TOPIC, PROP_REAL_QUEUE_ID, PROP_DECISION_SOURCE})


class Resolver(Protocol):
    """A server-side resolver (e.g. the Spark sink's ledger) for half messages it claims."""

    def claims(self, half: Record) -> bool: ...

    def resolve(self, half: Record) -> Outcome | None: ...


@dataclass(frozen=True)
class CheckRequest:
    """Ask a live producer of ``producer_group`` about a transaction (RocketMQ check-back)."""

    transaction_id: str
    producer_group: str
    client_id: str
    check_number: int
    half: Record


@dataclass
class TxnMetrics:
    checks_sent: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)


class Transactions:
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
        self.store = store
        self.data_dir = data_dir
        self.timeout_ms = timeout_ms
        self.now_ms = now_ms
        self.resolvers = list(resolvers)
        self.book = TxnBook(check_interval_ms=check_interval_ms, check_max=check_max)
        self.metrics = TxnMetrics()
        self._lock = threading.Lock()
        self._decided = threading.Condition(self._lock)
        # Operations between "book says so" and "log says so"; a snapshot needs none in flight.
        self._inflight = 0
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
        """Store a half message durably; returns (transaction id, where it was stored)."""
        tid = transaction_id or uuid.uuid4().hex
        props = dict(draft.properties)
        props.update(
            {
                PROP_REAL_TOPIC: draft.topic,
                PROP_REAL_QUEUE_ID: str(draft.queue_id),
                PROP_TRANSACTION_ID: tid,
                PROP_PRODUCER_GROUP: producer_group,
                PROP_CLIENT_ID: client_id,
            }
        )
        half = _replace(draft, topic=HALF_TOPIC, queue_id=0, flag=TxnFlag.PREPARED, props=props)
        with self._lock:
            if tid in self.book.pending or tid in self.book.outcomes:
                raise InvalidTransactionIdError(tid, "transaction id already used")
            self._inflight += 1
        try:
            result = self.store.append(half)
            with self._lock:
                timeout = self.timeout_ms if check_immunity_ms is None else check_immunity_ms
                self.book.add(
                    Txn(
                        tid,
                        draft.message_id,
                        result.physical_offset,
                        producer_group,
                        client_id,
                        draft.topic,
                        result.store_timestamp_ms,
                        max(0, timeout),
                    )
                )
        finally:
            with self._lock:
                self._inflight -= 1
        return tid, result

    def end(self, transaction_id: str, *, commit: bool, source: DecisionSource) -> Outcome:
        """Decide a transaction; idempotent. Returns the outcome now in force.

        Raises:
            TransactionConflictError: it already has the other outcome.
            InvalidTransactionIdError: unknown or expired.
        """
        outcome = Outcome.COMMITTED if commit else Outcome.ROLLED_BACK
        with self._lock:
            while True:
                txn = self.book.begin(transaction_id, outcome, source)
                if txn is None:
                    return outcome
                if txn.state is TxnState.DECIDING and txn is self._deciding.get(transaction_id):
                    self._decided.wait(timeout=5.0)  # a concurrent decision is being appended
                    continue
                break
            self._deciding[transaction_id] = txn
            self._inflight += 1
        try:
            self._append_decision(txn, outcome, source)
        except BaseException:
            with self._lock:
                self.book.abort_decision(txn)
                self._settle(transaction_id)
            raise
        with self._lock:
            self.book.finish(txn, outcome, source, self.now_ms())
            key = f"{source.value}:{outcome.value}"
            self.metrics.outcomes[key] = self.metrics.outcomes.get(key, 0) + 1
            self._settle(transaction_id)
        return outcome

    _deciding: dict[str, Txn]

    def _settle(self, transaction_id: str) -> None:
        self._deciding.pop(transaction_id, None)
        self._inflight -= 1
        self._decided.notify_all()

    def _append_decision(self, txn: Txn, outcome: Outcome, source: DecisionSource) -> None:
        half = self.store.read_at(txn.half_offset)
        invariant(half.flag is TxnFlag.PREPARED, "decision must point at a half record")
        tid_props = {PROP_TRANSACTION_ID: txn.transaction_id, PROP_DECISION_SOURCE: source.value}
        if outcome is Outcome.COMMITTED:
            props = {k: v for k, v in half.properties.items() if k not in _INTERNAL_PROPS}
            props.update(tid_props)
            draft = RecordDraft(
                topic=half.properties[PROP_REAL_TOPIC],
                queue_id=int(half.properties[PROP_REAL_QUEUE_ID]),
                body=half.body,
                flag=TxnFlag.COMMIT,
                message_id=half.message_id,
                tag=half.tag,
                keys=half.keys,
                properties=props,
                born_timestamp_ms=half.born_timestamp_ms,
                born_host=half.born_host,
                prepared_offset=half.physical_offset,
            )
            self.store.append(draft)
            return
        drafts = [
            RecordDraft(
                topic=OP_TOPIC,
                queue_id=0,
                body=txn.transaction_id.encode(),
                flag=TxnFlag.ROLLBACK,
                message_id=half.message_id,
                properties=tid_props,
                prepared_offset=half.physical_offset,
            )
        ]
        if source is DecisionSource.MAX_CHECKS:
            props = dict(half.properties)
            props.update(tid_props)
            drafts.append(
                RecordDraft(
                    topic=DEAD_TRANSACTION_TOPIC,
                    queue_id=0,
                    body=half.body,
                    message_id=half.message_id,
                    tag=half.tag,
                    keys=half.keys,
                    properties=props,
                    born_timestamp_ms=half.born_timestamp_ms,
                    born_host=half.born_host,
                    prepared_offset=half.physical_offset,
                )
            )
        self.store.append_many(drafts)

    # --- Check-back. ---------------------------------------------------------------------------

    def due_checks(self, is_live: Callable[[str], bool]) -> list[CheckRequest]:
        """Transactions to check now, at most TRANSACTION_CHECKS_PER_TICK_MAX.

        Resolvers run first (they need no producer). Transactions of a group with no live
        producer are pushed back without spending a check. At the check limit the transaction
        is rolled back with source MAX_CHECKS and kept in the dead set.
        """
        now = self.now_ms()
        with self._lock:
            due = self.book.due(now, limits.TRANSACTION_CHECKS_PER_TICK_MAX)
        requests: list[CheckRequest] = []
        checks: list[RecordDraft] = []
        for txn in due:
            half = self.store.read_at(txn.half_offset)
            resolver = next((r for r in self.resolvers if r.claims(half)), None)
            if resolver is None and not is_live(txn.producer_group):
                with self._lock:
                    self.book.reschedule(txn, now + self.book.check_interval_ms)
                continue
            if txn.checks >= self.book.check_max:
                self._end_quietly(txn.transaction_id, False, DecisionSource.MAX_CHECKS)
                continue
            if resolver is not None:
                outcome = resolver.resolve(half)
                if outcome is not None:
                    commit = outcome is Outcome.COMMITTED
                    self._end_quietly(txn.transaction_id, commit, DecisionSource.CHECK_BACK)
                    continue
            with self._lock:
                number = self.book.spend_check(txn, now)
                self.metrics.checks_sent += 1
            checks.append(_check_record(txn, number))
            if resolver is None:
                requests.append(
                    CheckRequest(
                        txn.transaction_id, txn.producer_group, txn.client_id, number, half
                    )
                )
        if checks:
            self.store.append_many(checks)
        return requests

    def _end_quietly(self, transaction_id: str, commit: bool, source: DecisionSource) -> None:
        """Decide from the check loop. A producer deciding at the same moment may win the race:
        its outcome then stands, and ours is refused, which is correct, not an error."""
        try:
            self.end(transaction_id, commit=commit, source=source)
        except TransactionError:
            return

    # --- Operator view. -------------------------------------------------------------------------

    def pending(self) -> list[Txn]:
        with self._lock:
            return list(self.book.pending.values())

    def dead(self) -> list[Txn]:
        with self._lock:
            return list(self.book.dead.values())

    def show(self, transaction_id: str) -> dict[str, object]:
        with self._lock:
            txn = self.book.pending.get(transaction_id) or self.book.dead.get(transaction_id)
            decided = self.book.outcomes.get(transaction_id)
        if txn is None and decided is None:
            raise InvalidTransactionIdError(transaction_id, "unknown or expired transaction")
        out: dict[str, object] = {"transaction_id": transaction_id}
        if txn is not None:
            out.update(
                message_id=txn.message_id,
                topic=txn.topic,
                producer_group=txn.producer_group,
                state=txn.state.value,
                checks=txn.checks,
                prepared_at_ms=txn.prepared_at_ms,
                half_offset=txn.half_offset,
                dead=transaction_id in self.book.dead,
            )
        if decided is not None:
            out.update(outcome=decided.outcome.value, source=decided.source.value)
        return out

    def resolve(self, transaction_id: str, *, commit: bool) -> Outcome:
        return self.end(transaction_id, commit=commit, source=DecisionSource.OPERATOR)

    @property
    def oldest_pending_offset(self) -> int:
        with self._lock:
            offsets = [t.half_offset for t in self.book.pending.values()]
        return min(offsets, default=self.store.log_end_offset)

    def oldest_pending_age_ms(self) -> int:
        with self._lock:
            oldest = self.book.oldest_pending(key=lambda t: t.prepared_at_ms)
        return 0 if oldest is None else max(0, self.now_ms() - oldest.prepared_at_ms)

    # --- Snapshot and recovery. ----------------------------------------------------------------

    def snapshot(self) -> bool:
        """Persist the book with the log offset it reflects; skipped while a decision is in
        flight (the book and the log could disagree). Returns whether one was written."""
        with self._lock:
            if self._inflight:
                return False
            offset = self.store.log_end_offset
            data = {
                "offset": offset,
                "pending": [_txn_json(t) for t in self.book.pending.values()],
                "dead": [_txn_json(t) for t in self.book.dead.values()],
                "outcomes": [
                    [tid, d.outcome.value, d.source.value, d.decided_at_ms]
                    for tid, d in self.book.outcomes.items()
                ],
            }
        self.store.disk.write_atomic(self.data_dir / _SNAPSHOT, json.dumps(data).encode())
        return True

    def _recover(self) -> None:
        self._deciding = {}
        path = self.data_dir / _SNAPSHOT
        offset = self.store.log_start_offset
        if self.store.disk.exists(path):
            data = json.loads(self.store.disk.read_all(path))
            offset = max(offset, int(data["offset"]))
            for raw in data["pending"]:
                txn = _txn_from_json(raw)
                next_check_ms = txn.next_check_ms
                self.book.add(txn)
                self.book.reschedule(txn, next_check_ms)
            for raw in data["dead"]:
                txn = _txn_from_json(raw)
                txn.state = TxnState.ROLLED_BACK
                self.book.dead[txn.transaction_id] = txn
            for tid, outcome, source, at in data["outcomes"]:
                self.book.outcomes[tid] = _decided(outcome, source, at)
        end = self.store.log_end_offset
        while offset < end:
            batch = self.store.scan(offset, _SCAN_BATCH)
            if not batch:
                break
            for rec in batch:
                self._replay(rec)
            offset = batch[-1].next_physical_offset

    def _replay(self, rec: Record) -> None:
        tid = rec.properties.get(PROP_TRANSACTION_ID, "")
        if not tid:
            return
        if rec.flag is TxnFlag.PREPARED:
            if tid not in self.book.pending and tid not in self.book.outcomes:
                self.book.add(
                    Txn(
                        tid,
                        rec.message_id,
                        rec.physical_offset,
                        rec.properties.get(PROP_PRODUCER_GROUP, ""),
                        rec.properties.get(PROP_CLIENT_ID, ""),
                        rec.properties.get(PROP_REAL_TOPIC, ""),
                        rec.store_timestamp_ms,
                        self.timeout_ms,
                    )
                )
            return
        if rec.flag in (TxnFlag.COMMIT, TxnFlag.ROLLBACK):
            source = DecisionSource(rec.properties.get(PROP_DECISION_SOURCE, "producer"))
            outcome = Outcome.COMMITTED if rec.flag is TxnFlag.COMMIT else Outcome.ROLLED_BACK
            txn = self.book.pending.get(tid) or self.book.dead.get(tid)
            if txn is not None:
                txn.state = TxnState.DECIDING
                self.book.finish(txn, outcome, source, rec.store_timestamp_ms)
            return
        number = rec.properties.get(PROP_CHECK_NUMBER)
        if rec.topic == OP_TOPIC and number is not None:
            txn = self.book.pending.get(tid)
            if txn is not None and int(number) > txn.checks:
                txn.checks = int(number)
                self.book.reschedule(
                    txn, rec.store_timestamp_ms + self.book.next_delay_ms(txn.checks)
                )

    def close(self) -> None:
        self.snapshot()


def _check_record(txn: Txn, number: int) -> RecordDraft:
    return RecordDraft(
        topic=OP_TOPIC,
        queue_id=0,
        body=b"",
        message_id="",
        properties={PROP_TRANSACTION_ID: txn.transaction_id, PROP_CHECK_NUMBER: str(number)},
        prepared_offset=txn.half_offset,
    )


def _replace(
    d: RecordDraft, *, topic: str, queue_id: int, flag: TxnFlag, props: Mapping[str, str]
) -> RecordDraft:
    return RecordDraft(
        topic=topic,
        queue_id=queue_id,
        body=d.body,
        flag=flag,
        message_id=d.message_id,
        tag=d.tag,
        keys=d.keys,
        properties=props,
        born_timestamp_ms=d.born_timestamp_ms,
        born_host=d.born_host,
        reconsume_times=d.reconsume_times,
    )


def _txn_json(t: Txn) -> list[object]:
    return [
        t.transaction_id,
        t.message_id,
        t.half_offset,
        t.producer_group,
        t.client_id,
        t.topic,
        t.prepared_at_ms,
        t.timeout_ms,
        t.checks,
        t.next_check_ms,
    ]


def _txn_from_json(raw: list[object]) -> Txn:
    tid, mid, off, group, client, topic, at, timeout, checks, nxt = raw
    txn = Txn(
        str(tid),
        str(mid),
        int(str(off)),
        str(group),
        str(client),
        str(topic),
        int(str(at)),
        int(str(timeout)),
    )
    txn.checks = int(str(checks))
    txn.next_check_ms = int(str(nxt))
    return txn


def _decided(outcome: str, source: str, at: int) -> Decided:
    return Decided(Outcome(outcome), DecisionSource(source), int(at))
