"""Flow control for ReceiveMessage: a bound on message bytes the broker holds for its streams.

Owns: ``ByteBudget``, the broker-wide count of record bytes read for ReceiveMessage streams and
not yet handed to gRPC. Why: a stream's messages are read from the store before they are
written, and gRPC writes wait for the client to read (HTTP/2 flow control); a client that never
reads would otherwise pin a whole batch (32 x 4 MiB) per stream, and a few hundred such streams
would exhaust memory. With the budget, each stream holds at most RECEIVE_STREAM_BYTES_MAX, all
of them together at most RECEIVE_BYTES_HELD_MAX; a stream gives its bytes back message by
message as gRPC takes them. A receive that finds the budget spent waits (within its long-poll
time) and then gets fewer messages or none: a slow reader costs messages, not memory.
Must not: block the event loop or hold the store's locks.
"""

from __future__ import annotations

import asyncio

from txmq import limits
from txmq.errors import invariant


class ByteBudget:
    def __init__(self, total_max: int = limits.RECEIVE_BYTES_HELD_MAX) -> None:
        self.total_max = total_max
        self.held = 0
        self._freed = asyncio.Event()
        # Receives waiting in ``room``: ``give`` sets the event only for them (an Event.set is
        # a Python call, and a receive gives back once per message).
        self._waiting = 0

    async def room(self, timeout_s: float) -> int:
        """Bytes a new batch may take (at most RECEIVE_STREAM_BYTES_MAX): waits up to
        ``timeout_s`` for some to be given back; 0 if none came."""
        if self.held < self.total_max:  # the common case: no clock read
            return min(limits.RECEIVE_STREAM_BYTES_MAX, self.total_max - self.held)
        deadline = asyncio.get_running_loop().time() + max(0.0, timeout_s)
        while self.held >= self.total_max:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return 0
            self._freed.clear()
            self._waiting += 1
            try:
                await asyncio.wait_for(self._freed.wait(), left)
            except TimeoutError:
                return 0
            finally:
                self._waiting -= 1
        return min(limits.RECEIVE_STREAM_BYTES_MAX, self.total_max - self.held)

    def take(self, nbytes: int) -> None:
        invariant(nbytes >= 0, "negative take")
        self.held += nbytes

    def give(self, nbytes: int) -> None:
        invariant(0 <= nbytes <= self.held, "gave back more than was taken")
        self.held -= nbytes
        if self._waiting:
            self._freed.set()
