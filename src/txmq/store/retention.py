"""Retention: whole commit-log segments deleted once every record in them is old enough.

Owns: ``Retention`` (``Store.delete_expired_segments``). Must not: delete the active segment,
a segment the checkpoint does not cover (recovery scans from it) or one at or past the oldest
pending half message (its transaction must stay decidable).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from txmq.store.derived.checkpointer import Checkpointer
from txmq.store.derived.dispatch import Dispatcher
from txmq.store.log.commit_log import CommitLog


class Retention:
    """Thread-safe: one deletion at a time."""

    def __init__(
        self,
        log: CommitLog,
        dispatcher: Dispatcher,
        checkpointer: Checkpointer,
        *,
        retention_ms: int,
        now_ms: Callable[[], int],
    ) -> None:
        self._log = log
        self._dispatcher = dispatcher
        self._checkpointer = checkpointer
        self._retention_ms = retention_ms
        self._now_ms = now_ms
        self._lock = threading.Lock()

    def delete_expired(self, keep_from_offset: int) -> int:
        """Delete whole segments whose records are all older than ``retention_ms`` and which
        lie wholly below ``keep_from_offset`` (the oldest pending half). Never the active one.

        A segment's last record is no newer than the first record of the next segment (store
        timestamps never decrease), so that first record's store time stands for it without
        reading the whole segment. Returns the number of segments deleted.
        """
        with self._lock:
            # Deleted segments must lie below the checkpoint (recovery). On a full disk the last
            # checkpoint bounds what goes: retention must still free space then.
            self._checkpointer.checkpoint_if_room()
            cutoff = self._now_ms() - self._retention_ms
            deleted = 0
            log = self._log
            while len(log.segments) > 1:
                nxt = log.segments[1].start
                if nxt > keep_from_offset or nxt > self._checkpointer.checkpointed:
                    break
                first_ms = log.first_timestamp_of(1)
                if first_ms is None or first_ms >= cutoff:
                    break
                log.delete_oldest()
                deleted += 1
            if deleted:
                self._dispatcher.drop_expired(log.start_offset)
            return deleted
