"""Drive ``txn.steps`` generators on the event loop: wait for the store's fsync without a thread.

Owns: ``drive``. A durable RPC (SendMessage, EndTransaction) writes on the loop (a pwrite into
the page cache, under the store's writer lock, never held across an fsync) and then awaits a
future that the store's flusher resolves, through ``Group.on_done`` and
``call_soon_threadsafe``, once the fsync covering the write returned. That is two thread
hand-offs per RPC (loop -> flusher, flusher -> loop) instead of four through an executor.

Must not: block. What may block beyond a write (creating a topic, the delay schedule, a second
decision of a transaction in flight) is the caller's to send to the executor instead.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from typing import TypeVar

from txmq.store.store import Pending
from txmq.txn.steps import Steps, run_blocking

T = TypeVar("T")
log = logging.getLogger(__name__)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def _durable(loop: asyncio.AbstractEventLoop, pending: Pending) -> None:
    group = pending.group
    if group is None:
        return
    fut = loop.create_future()

    def wake() -> None:
        # Runs on the flusher thread (or here, if the group is done already).
        if not loop.is_closed():
            loop.call_soon_threadsafe(_resolve, fut)

    group.on_done(wake)
    await fut


async def drive(steps: Steps[T], executor: Executor) -> T:
    """Run ``steps`` to its result on the running loop; raises what it raises.

    If the awaiting task is cancelled (the client went away) while a write is in flight, the
    write still lands: the rest of the steps runs in ``executor`` so the transaction book
    follows the log, and the cancellation propagates.
    """
    loop = asyncio.get_running_loop()
    try:
        pending = next(steps)
        while True:
            try:
                await _durable(loop, pending)
            except asyncio.CancelledError:
                loop.run_in_executor(executor, _finish, steps, pending)
                raise
            pending = steps.send(None)
    except StopIteration as stop:
        result: T = stop.value
        return result


def _finish(steps: Steps[T], pending: Pending) -> None:
    """The rest of abandoned steps, in a thread; nobody waits for the result."""

    def resumed() -> Steps[T]:
        yield pending
        return (yield from steps)

    try:
        run_blocking(resumed())
    except Exception:
        log.exception("finishing a write whose request was cancelled failed")
