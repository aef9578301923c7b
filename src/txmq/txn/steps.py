"""Steps: an operation that waits for the store's fsync, written once for threads and loops.

A ``Steps[T]`` is a generator that yields each ``flush.Pending`` write it must wait for and
returns its result. It reads the write's outcome itself after the yield
(``store.durable(pending)``), so a failed fsync raises inside it, where its own cleanup runs.
``run_blocking`` drives one in a thread (waiting on the write's group); the broker's event loop
drives one with ``Group.on_done`` callbacks (txmq.broker.produce.durable), so no thread sits waiting
for the flusher and the loop never blocks.

Why: a durable RPC used to cross four threads (event loop -> executor -> flusher -> executor ->
event loop), and each hand-off costs more CPU here than the write itself.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TypeVar

from txmq.errors import TransactionError
from txmq.store.write.group_commit import Pending

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


def run_all(all_steps: Sequence[Steps[T]]) -> list[T | Exception]:
    """Drive several ``steps`` together in this thread: every write of a round is started
    before any is waited for, so they share group-commit fsyncs instead of paying one each.
    Returns, in order, each one's result or the error it raised (one failure stops only its
    own steps)."""
    results: list[T | Exception | None] = [None] * len(all_steps)
    waiting: dict[int, Pending] = {}

    def advance(i: int, first: bool) -> None:
        try:
            waiting[i] = next(all_steps[i]) if first else all_steps[i].send(None)
        except StopIteration as stop:
            waiting.pop(i, None)
            results[i] = stop.value
        except Exception as exc:
            waiting.pop(i, None)
            results[i] = exc

    for i in range(len(all_steps)):
        advance(i, True)
    while waiting:  # each round ends one yield of every steps still running: bounded
        for pending in list(waiting.values()):
            if pending.group is not None:
                pending.group.wait()
        for i in list(waiting):
            advance(i, False)
    return results  # type: ignore[return-value]
