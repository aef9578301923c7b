"""Saving a replica's acknowledged end beside its log (store/replica/acked.py) without waiting for
it.

Owns: ``KeptEnd.offer``, called by a leader for each fetch it answers and by a follower for
each fetch reply it applies: when a higher end is due (``AckedEnd.due``: at most every
SAVE_EVERY_MS), one background task writes it in a thread, and no save starts while one is
under way. Neither the fetch a leader answers nor a follower's fetch loop awaits the write.
Must not: decide the end (replication.py: the group's durable end; follower.py: its leader's
``committed``, cut to its own end).
"""

from __future__ import annotations

import asyncio
import logging

from txmq.store.replica.acked import AckedEnd

log = logging.getLogger(__name__)


class KeptEnd:
    """One replica's ``acked-end.json``, saved lazily from the event loop."""

    def __init__(self, acked: AckedEnd) -> None:
        self.acked = acked  # replaced by a follower that reopened its store after a cut
        self._saving: asyncio.Task[None] | None = None

    def offer(self, end: int, now_ms: int) -> None:
        """Start saving ``end`` if it is due and no save is under way."""
        if self._saving is None and self.acked.due(end, now_ms):
            self._saving = asyncio.get_running_loop().create_task(self._save(end, now_ms))

    async def _save(self, end: int, now_ms: int) -> None:
        try:
            await asyncio.to_thread(self.acked.save, end, now_ms)
        except OSError as exc:  # the file keeps a lower end: more is held after a restart
            log.warning("acknowledged end %d not saved: %s", end, exc)
        finally:
            self._saving = None
