"""Waiting on the event loop for a wake-up or a timeout, without asyncio.wait_for.

Owns: ``wake`` (resolve a waiter unless it is done) and ``wait`` (await a waiter until it is
woken or a timeout passes). A bare future and one ``call_later`` timer: what
``asyncio.wait_for`` does with a wrapper future, callbacks and a handle each time, which the
per-message paths (long polls, SYNC acks, a follower's fetch) paid for on every wait.
Must not: decide what a wake means (the caller looks again after every return).
"""

from __future__ import annotations

import asyncio


def wake(waiter: asyncio.Future[None]) -> None:
    """Resolve ``waiter`` (a no-op if it was woken, timed out or cancelled already)."""
    if not waiter.done():
        waiter.set_result(None)


async def wait(waiter: asyncio.Future[None], timeout_s: float) -> None:
    """Return once ``waiter`` is woken or ``timeout_s`` passed (the timer then wakes it); a
    cancelled caller cancels ``waiter`` only."""
    timer = asyncio.get_running_loop().call_later(max(0.0, timeout_s), wake, waiter)
    try:
        await waiter
    finally:
        timer.cancel()
