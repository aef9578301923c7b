"""Log writes staged for the flusher: the bytes a SYNC writer wrote but did not pwrite.

Owns: ``Staging``, the staged writes of the active segment in log order, taken by the group
commit's flusher (``take``: one pwrite for the whole group, outside the writer lock, before its
fdatasync) or written at once before a segment roll syncs the full segment (``drain``). Why:
the event loop never gives up the GIL to write; the flusher does.
Must not: stage anything outside the reservation made for it (the pwrite cannot then meet a
full disk, ADR 0003), or write anywhere but where the writer placed the bytes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from txmq.errors import invariant
from txmq.store.log.segment import Segment


class Staging:
    """``stage``, ``take`` and ``drain`` run under the store's writer lock; the function
    ``take`` returns runs outside it, and until it returns ``drain`` waits."""

    def __init__(self) -> None:
        # (segment, position, bytes), contiguous in the active segment.
        self._staged: list[tuple[Segment, int, bytes]] = []
        # Held from ``take`` until the flusher's pwrite is done: a roll's ``drain`` waits on it.
        self._writeout_lock = threading.Lock()

    def __len__(self) -> int:
        """How many writes are staged."""
        return len(self._staged)

    def stage(self, seg: Segment, pos: int, data: bytes) -> None:
        self._staged.append((seg, pos, data))

    def take(self, active: Callable[[], Segment]) -> Callable[[], None]:
        """Take the staged writes; returns the function that pwrites them (once, outside the
        writer lock, before the sync; a failed write raises, the caller fences). ``active``
        gives the log's active segment, where staged bytes must lie."""
        self._writeout_lock.acquire()
        staged, self._staged = self._staged, []

        def write_out() -> None:
            try:
                _pwrite(staged, active())
            finally:
                self._writeout_lock.release()

        return write_out

    def drain(self, active: Segment) -> None:
        """Before a roll's sync: write what is staged (after the flusher's write-out, if one
        is under way)."""
        with self._writeout_lock:
            staged, self._staged = self._staged, []
            _pwrite(staged, active)


def _pwrite(staged: list[tuple[Segment, int, bytes]], active: Segment) -> None:
    """One pwrite for a whole group: staged writes are contiguous in the active segment."""
    if staged:
        (seg, pos, _), (_, last, tail) = staged[0], staged[-1]
        data = staged[0][2] if len(staged) == 1 else b"".join(d for _, _, d in staged)
        invariant(seg is active, "staged bytes outside the active segment")
        invariant(last + len(tail) == pos + len(data), "staged writes are not contiguous")
        seg.handle.pwrite(data, pos)
