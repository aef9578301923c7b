"""Steps: an operation that waits for the store's fsync, written once for threads and loops.

A ``Steps[T]`` is a generator that yields each ``store.Pending`` write it must wait for and
returns its result. It reads the write's outcome itself after the yield
(``store.durable(pending)``), so a failed fsync raises inside it, where its own cleanup runs.
``run_blocking`` drives one in a thread (waiting on the write's group); the broker's event loop
drives one with ``Group.on_done`` callbacks (txmq.broker.durable), so no thread sits waiting
for the flusher and the loop never blocks.

Why: a durable RPC used to cross four threads (event loop -> executor -> flusher -> executor ->
event loop), and each hand-off costs more CPU here than the write itself.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar

from txmq.errors import TransactionError
from txmq.store.store import Pending

T = TypeVar("T")
Steps = Generator[Pending, None, T]


class DecisionInFlightError(TransactionError):
    """Another decision of this transaction is being stored; a caller that must not block
    retries in a thread (``Transactions.end`` waits for it). Never reaches a client."""

    def __init__(self, transaction_id: str) -> None:
        super().__init__(f"a decision of transaction {transaction_id!r} is in flight")
        self.transaction_id = transaction_id


def run_blocking(steps: Steps[T]) -> T:
    """Drive ``steps`` to the end in this thread; returns its result or raises its error."""
    try:
        pending = next(steps)
        while True:
            if pending.group is not None:
                pending.group.wait()
            pending = steps.send(None)
    except StopIteration as stop:
        result: T = stop.value
        return result
