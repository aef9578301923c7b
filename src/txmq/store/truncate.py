"""Cutting a closed store back to an offset: a follower's divergent tail (ADR 0005).

Owns: ``truncate_closed`` (the commit log, the checkpoint and the epoch history of a store
directory nobody has open, cut at a record boundary). Must not: open a ``Store`` (its caller
reopens it, and that recovery cuts the consume queues and the index), decide where to cut
(store/epochs.py) or talk to a leader.

Theory of operation: every index is derived from the log, and recovery already cuts derived
files back to what the checkpoint vouches for and re-dispatches the log past it. So the cut
only has to keep the checkpoint from vouching past the log. Each step is durable before the
next, and a kill -9 after any of them leaves a store that opens consistent:

1. the abort marker, so the next open recovers as after a crash whatever step we reach;
2. a checkpoint that vouches past ``offset`` is replaced by one at ``offset``: the records in
   [offset, its log offset) are read from the log; each of their queues keeps the entries
   below the first queue offset among them, the index loses one entry per hash they added.
   (Stopped here: the next open cuts the derived files and re-dispatches the tail.) The
   acknowledged end kept beside the log (store/acked.py) comes down to ``offset`` too;
3. the commit log: later segments removed, last first (directory fsynced), then the segment
   holding ``offset`` cut and fsynced (stopped half-way: the log ends at a segment boundary
   past ``offset``, still whole);
4. the epoch history: pairs starting at or past ``offset`` dropped (skipped: its load drops
   those starting past the log end).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from txmq.errors import CorruptRecordError, invariant
from txmq.format.record import enters_queue
from txmq.store import checkpoint as cpfile
from txmq.store.acked import cut_acked_end
from txmq.store.commit_log import CommitLog
from txmq.store.config import StoreConfig
from txmq.store.disk import Disk
from txmq.store.epochs import EpochFile
from txmq.store.index import hashes_of


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
        cut_acked_end(disk, store_dir, offset)  # never vouching past the cut (store/acked.py)
        if offset < log.end_offset:
            log.truncate(offset)
        after_step("log")
    finally:
        log.close()
    EpochFile(disk, store_dir, offset).cut(offset)
    after_step("epochs")
    return end - offset


def checkpoint_at(log: CommitLog, saved: cpfile.Checkpoint, offset: int) -> cpfile.Checkpoint:
    """What ``saved`` vouches for below ``offset``: it minus the records in between."""
    queues = dict(saved.queues)
    index_entries = saved.index_entries
    firsts: dict[tuple[str, int], int] = {}
    for rec, scan_end in log.scan_for_recovery(offset):
        if rec is None:  # the end (a checkpoint after a blank vouches for the segment's end)
            if scan_end.bad_reason and scan_end.offset < saved.log_offset:
                raise CorruptRecordError(scan_end.offset, scan_end.bad_reason)
            break
        if rec.physical_offset >= saved.log_offset:
            break
        if enters_queue(rec.flag):
            firsts.setdefault((rec.topic, rec.queue_id), rec.queue_offset)
        index_entries -= len(hashes_of(rec.topic, rec.message_id, rec.keys))
    queues.update(firsts)
    invariant(index_entries >= 0, "the checkpoint's index holds the tail's entries")
    return replace(saved, log_offset=offset, index_entries=index_entries, queues=queues)
