"""Read-only views of the transaction book, for operators (the admin channel, the CLI, the
dashboard) and for metrics.

Owns: the queries; ``Transactions`` (coordinator.py) inherits them and owns the state they read,
always under its lock. Must not: change the book or append anything.
"""

from __future__ import annotations

import dataclasses
import heapq
import threading
from collections.abc import Callable

from txmq.errors import InvalidTransactionIdError
from txmq.model import DecisionSource, Outcome
from txmq.store.store import Store
from txmq.txn.book import Txn, TxnBook, describe
from txmq.txn.values import TxnMetrics

# The key ``_outcomes`` counts each decision under: "source:outcome", e.g. "producer:committed".
OUTCOME_KEYS = {(s, o): f"{s.value}:{o.value}" for s in DecisionSource for o in Outcome}


class TxnViews:
    """The base of ``Transactions``: these attributes are set by its constructor."""

    book: TxnBook
    store: Store
    now_ms: Callable[[], int]
    _lock: threading.Lock
    _ops: dict[int, int]
    _outcomes: dict[str, int]
    _checks_sent: int
    _check_errors: int

    def pending(self) -> list[Txn]:
        """Copies of the pending transactions, oldest first."""
        with self._lock:
            txns = [dataclasses.replace(t) for t in self.book.pending.values()]
        return sorted(txns, key=lambda t: (t.prepared_at_ms, t.half_offset))

    def listing(self, *, dead: bool, after_offset: int, count: int) -> list[dict[str, object]]:
        """Up to ``count`` pending (or dead) transactions whose half record is after
        ``after_offset``, in log order, as ``show`` describes them: one page of TxnList."""
        with self._lock:
            table = self.book.dead if dead else self.book.pending
            later = (t for t in table.values() if t.half_offset > after_offset)
            page = heapq.nsmallest(count, later, key=lambda t: t.half_offset)
            return [
                describe(t.transaction_id, t, self.book.outcomes.get(t.transaction_id))
                for t in page
            ]

    def dead(self) -> list[Txn]:
        """Copies of the dead (max-checks rolled back, operator may resolve) transactions."""
        with self._lock:
            return [dataclasses.replace(t) for t in self.book.dead.values()]

    def topic_of(self, transaction_id: str) -> str | None:
        """The real topic of a pending or dead transaction (None when not tracked): what the
        broker's ACL checks a decision against, whatever topic the request names."""
        with self._lock:
            txn = self.book.pending.get(transaction_id) or self.book.dead.get(transaction_id)
            return None if txn is None else txn.topic

    def show(self, transaction_id: str) -> dict[str, object]:
        """Everything known about one transaction, JSON-ready.

        Raises:
            InvalidTransactionIdError: unknown or expired.
        """
        with self._lock:
            txn = self.book.pending.get(transaction_id) or self.book.dead.get(transaction_id)
            decided = self.book.outcomes.get(transaction_id)
            if txn is None and decided is None:
                raise InvalidTransactionIdError(transaction_id, "unknown or expired transaction")
            return describe(transaction_id, txn, decided)

    @property
    def oldest_pending_offset(self) -> int:
        """Lowest log offset a pending transaction still needs (its half record, or where an
        operation in flight started); the log end when there is none. Retention must keep every
        segment from here on. Dead transactions do not pin the log: once retention deleted a
        dead half, an operator can still roll it back but no longer commit it."""
        with self._lock:
            offsets = [t.half_offset for t in self.book.pending.values()]
            offsets.extend(self._ops.values())
        return min(offsets, default=self.store.log_end_offset)

    def oldest_pending_age_ms(self) -> int:
        with self._lock:
            oldest = self.book.oldest_pending()
        return 0 if oldest is None else max(0, self.now_ms() - oldest.prepared_at_ms)

    @property
    def metrics(self) -> TxnMetrics:
        age = self.oldest_pending_age_ms()
        with self._lock:
            by_source: dict[str, int] = {}
            for key, n in self._outcomes.items():
                source = key.split(":", 1)[0]
                by_source[source] = by_source.get(source, 0) + n
            return TxnMetrics(
                pending=len(self.book.pending),
                dead=len(self.book.dead),
                oldest_pending_age_ms=age,
                checks_sent=self._checks_sent,
                check_errors=self._check_errors,
                outcomes_by_source=by_source,
                outcomes=dict(self._outcomes),
            )
