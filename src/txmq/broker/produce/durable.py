"""Drive ``txn.steps`` generators on the event loop: wait for the store's fsync without a thread.

Owns: ``drive``. A durable RPC (SendMessage, EndTransaction) writes on the loop (a pwrite into
the page cache, under the store's writer lock, never held across an fsync) and then awaits a
future that the store's flusher resolves, through ``Group.on_done`` and
``call_soon_threadsafe``, once the fsync covering the write returned. That is two thread
hand-offs per RPC (loop -> flusher, flusher -> loop) instead of four through an executor, and
the flusher wakes the loop once per group commit, not once per RPC in it.

Must not: block. What may block beyond a write (creating a topic, the delay schedule, a second
decision of a transaction in flight) is the caller's to send to the executor instead.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from concurrent.futures import Executor
from typing import TypeVar

from txmq.store.write.group_commit import Group, Pending
from txmq.txn.steps import Steps, run_blocking

T = TypeVar("T")
log = logging.getLogger(__name__)


class _Waiters:
    """The loop's futures waiting on each group commit. Each group gets one ``on_done``
    callback, and so one ``call_soon_threadsafe`` from the flusher however many RPCs wait on
    it (each call wakes the loop). Touched only on the loop's thread (the flusher thread only
    schedules ``_resolve``), so it needs no lock."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.futures: dict[Group, list[asyncio.Future[None]]] = {}

    def wait(self, group: Group) -> asyncio.Future[None]:
        fut = self.loop.create_future()
        waiting = self.futures.get(group)
        if waiting is not None:
            waiting.append(fut)
            return fut
        self.futures[group] = [fut]
        loop = self.loop

        def wake() -> None:
            # Runs on the flusher thread (or here, if the group is done already).
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._resolve, group)

        group.on_done(wake)
        return fut

    def _resolve(self, group: Group) -> None:
        for fut in self.futures.pop(group, ()):
            if not fut.done():
                fut.set_result(None)


_waiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Waiters] = (
    weakref.WeakKeyDictionary()
)


# The last loop's: a broker runs one loop, and ``WeakKeyDictionary.get`` is a Python call
# (twice per transaction). It keeps that one loop alive until another loop drives.
_last: _Waiters | None = None


def _waiters_of(loop: asyncio.AbstractEventLoop) -> _Waiters:
    global _last
    last = _last
    if last is not None and last.loop is loop:
        return last
    waiters = _waiters.get(loop)
    if waiters is None:
        waiters = _waiters[loop] = _Waiters(loop)
    _last = waiters
    return waiters


async def drive(steps: Steps[T], executor: Executor) -> T:
    """Run ``steps`` to its result on the running loop; raises what it raises.

    If the awaiting task is cancelled (the client went away) while a write is in flight, the
    write still lands: the rest of the steps runs in ``executor`` so the transaction book
    follows the log, and the cancellation propagates.
    """
    loop = asyncio.get_running_loop()
    waiters: _Waiters | None = None
    result: list[T] = []
    # The steps end as None from ``next(..., None)``; ``_into`` keeps their result.
    boxed = _into(steps, result)
    pending = next(boxed, None)
    while pending is not None:
        group = pending.group
        if group is not None:  # None: durable at once (ASYNC mode, an empty batch)
            if waiters is None:
                waiters = _waiters_of(loop)
            try:
                await waiters.wait(group)
            except asyncio.CancelledError:
                loop.run_in_executor(executor, _finish, boxed, pending)
                raise
        pending = next(boxed, None)
    return result[0]


def _into(steps: Steps[T], result: list[T]) -> Steps[None]:
    """``steps``, its result appended to ``result`` when it returns."""
    result.append((yield from steps))


def _finish(steps: Steps[T], pending: Pending) -> None:
    """The rest of abandoned steps, in a thread; nobody waits for the result."""

    def resumed() -> Steps[T]:
        yield pending
        return (yield from steps)

    try:
        run_blocking(resumed())
    except Exception:
        log.exception("finishing a write whose request was cancelled failed")
