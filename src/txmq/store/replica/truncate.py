"""Cutting a closed store back to an offset: a follower's divergent tail (ADR 0005).

Owns: ``truncate_closed`` (the commit log, the checkpoint and the epoch history of a store
directory nobody has open, cut at a record boundary). Must not: open a ``Store`` (its caller
reopens it, and that recovery cuts the consume queues and the index), decide where to cut
(store/replica/epochs.py) or talk to a leader.

Theory of operation: every index is derived from the log, and recovery already cuts derived
files back to what the checkpoint vouches for and re-dispatches the log past it. So the cut
only has to keep the checkpoint from vouching past the log. Each step is durable before the
next, and a kill -9 after any of them leaves a store that opens consistent:

1. the abort marker, so the next open recovers as after a crash whatever step we reach;
2. a checkpoint that vouches past ``offset`` is replaced by one at ``offset``: the records in
   [offset, its log offset) are read from the log; each of their queues keeps the entries
   below the first queue offset among them, the index loses one entry per hash they added.
   (Stopped here: the next open cuts the derived files and re-dispatches the tail.) The
   acknowledged end kept beside the log (store/replica/acked.py) comes down to ``offset`` too;
3. the commit log: later segments removed, last first (directory fsynced), then the segment
   holding ``offset`` cut and fsynced (stopped half-way: the log ends at a segment boundary
   past ``offset``, still whole);
4. the epoch history: pairs starting at or past ``offset`` dropped (skipped: its load drops
   those starting past the log end).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from txmq.errors import invariant
from txmq.store.config import StoreConfig
from txmq.store.derived import checkpoint as cpfile
from txmq.store.files.disk import Disk
from txmq.store.log.commit_log import CommitLog
from txmq.store.recovery.recover import checkpoint_at
from txmq.store.replica.acked import cut_acked_end
from txmq.store.replica.epochs import EpochFile


def _no_step(name: str) -> None:
    return None


def truncate_closed(
    store_dir: Path,
    config: StoreConfig,
    offset: int,
    disk: Disk,
    *,
    after_step: Callable[[str], None] = _no_step,
) -> int:
    """Cut the closed store in ``store_dir`` at ``offset`` (a record boundary at or past its
    log start); returns how many log bytes went. ``after_step(name)`` is told after each
    durable step ("marked", "checkpoint", "log", "epochs"): the crash tests kill there.

    Raises:
        CorruptRecordError: a record below the checkpoint does not verify.
    """
    log = CommitLog(store_dir / "commitlog", disk, config.segment_size_bytes)
    try:
        # A last segment sealed by its blank ends at the segment's end, as the store sees it.
        sealed = log.segments[-1].start + log.segment_size
        end = sealed if offset == sealed else log.end_offset
        invariant(log.start_offset <= offset <= end, f"cut at {offset} outside the log")
        cpfile.mark_open(disk, store_dir)
        after_step("marked")
        saved = cpfile.load(disk, store_dir)
        if saved is not None and saved.log_offset > offset:
            cpfile.save(disk, store_dir, checkpoint_at(log, saved, offset))
        after_step("checkpoint")
        # Never vouching past the cut (store/replica/acked.py).
        cut_acked_end(disk, store_dir, offset)
        if offset < log.end_offset:
            log.truncate(offset)
        after_step("log")
    finally:
        log.close()
    EpochFile(disk, store_dir, offset).cut(offset)
    after_step("epochs")
    return end - offset
