"""Retention: whole commit-log segments deleted once every record in them is old enough.

Owns: ``delete_expired`` (``Store.delete_expired_segments``). Must not: delete the active
segment, a segment the checkpoint does not cover (recovery scans from it) or one at or past the
oldest pending half message (its transaction must stay decidable).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from txmq.store.store import Store


def delete_expired(store: Store, keep_from_offset: int) -> int:
    """Delete whole segments whose records are all older than ``retention_ms`` and which lie
    wholly below ``keep_from_offset`` (the oldest pending half). Never the active segment.

    A segment's last record is no newer than the first record of the next segment (store
    timestamps never decrease), so that first record's store time stands for it without
    reading the whole segment. Returns the number of segments deleted.
    """
    with store._retention_lock:
        # Deleted segments must lie below the checkpoint (recovery). On a full disk the last
        # checkpoint bounds what goes: retention must still free space then.
        store._checkpoint_if_room()
        cutoff = store.now_ms() - store.config.retention_ms
        deleted = 0
        log = store.log
        while len(log.segments) > 1:
            nxt = log.segments[1].start
            if nxt > keep_from_offset or nxt > store._checkpointed:
                break
            first_ms = log.first_timestamp_of(1)
            if first_ms is None or first_ms >= cutoff:
                break
            log.delete_oldest()
            deleted += 1
        if deleted:
            store._dispatcher.drop_expired(log.start_offset)
        return deleted
