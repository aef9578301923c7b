"""Recovery at open: bring the log, consume queues and index back to one consistent state.

Owns: choosing where to scan from (the checkpoint, or the log start when derived data must be
rebuilt), the forward scan that verifies every record's CRC and re-dispatches it, and the
decision between a torn tail (truncated) and mid-log corruption (reported, never skipped).
Must not: write records, take the writer lock (nothing else runs during open) or read a clock.

Theory of operation
-------------------
The checkpoint vouches for a prefix: records below ``log_offset`` are durable and the queues and
index hold exactly the entries it lists for them. Derived files are truncated to those numbers
(anything past them was written after the checkpoint and may be torn), then the log is scanned
from ``log_offset``. Each valid record is dispatched again; records of an ``append_many`` batch
are held until the batch's last record (``batch_left == 0``) verifies, so a torn batch
disappears whole. The first bad frame or CRC ends the scan:

* a verifiable record anywhere after it means the damage is in the middle of the log:
  CorruptRecordError with the offset, and nothing is changed;
* otherwise it is a torn tail, which only a crash can leave: the log is truncated there (or at
  the start of the unfinished batch). After a clean shutdown a torn tail is corruption too.

An end-of-segment blank seals its segment (even the last one: a roll the disk refused after the
blank leaves no next segment), and a valid record inside the span a blank claims is mid-log
corruption (ADR 0003), never data to skip.

A missing or unreadable checkpoint, or a derived file shorter than the checkpoint says, means the
derived data cannot be trusted: it is wiped and rebuilt from the log start.

With ``visible_end`` (a replica opening as a SYNC leader, ADR 0005) only the records ending at
or below it are dispatched; the rest are verified as usual and handed back in the report
(``held``) for the read hold (store/replica/hold.Hold) to publish once the in-sync replicas have
them. The caller's checkpoint must not vouch past ``visible_end`` (``Store`` cuts it first).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from txmq.errors import CorruptRecordError, invariant
from txmq.format.record import Entry, decode_entry, enters_queue
from txmq.store.derived import checkpoint as cpfile
from txmq.store.derived.checkpoint import Checkpoint
from txmq.store.derived.dispatch import Dispatcher
from txmq.store.derived.index import hashes_of
from txmq.store.files.disk import Disk
from txmq.store.log.commit_log import CommitLog
from txmq.store.log.search import blank_span_reason
from txmq.store.log.segment import iter_raw

log_ = logging.getLogger(__name__)

# Records dispatched per publish during recovery: one pwrite per queue and one for the index.
_PUBLISH_EVERY: Final = 8192


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    crashed: bool
    scanned_from: int
    log_end: int
    truncated_bytes: int
    records_redispatched: int
    rebuilt: bool = False
    # Past ``visible_end``: verified, not dispatched: from where, how many, and the next queue
    # offset of each queue they enter.
    held_from: int | None = None
    held_count: int = 0
    held_queue_ends: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass
class _Scan:
    """Mutable state of one recovery scan."""

    ready: list[Entry]
    batch: list[Entry]
    good_end: int
    count: int = 0
    bad_at: int = -1
    bad_reason: str = ""
    visible_end: int | None = None
    held_from: int | None = None
    held_count: int = 0
    held_ends: dict[tuple[str, int], int] = field(default_factory=dict)

    def publish(self, dispatcher: Dispatcher, end: int) -> None:
        """Dispatch the ready records (visible below ``end``), but keep back those past
        ``visible_end`` (counted, not kept: store/replica/hold.Hold reads them again when it
        publishes them); then the visible end stops at the first one kept back."""
        shown = self.ready
        if self.visible_end is not None:
            cut = self.visible_end
            n = next((i for i, e in enumerate(shown) if e.physical_offset + e.size > cut), None)
            if n is not None:
                if self.held_from is None:
                    self.held_from = shown[n].physical_offset
                for e in shown[n:]:
                    if enters_queue(e.flag):
                        self.held_ends[(e.topic, e.queue_id)] = e.queue_offset + 1
                self.held_count += len(shown) - n
                shown = shown[:n]
            if self.held_from is not None:
                end = self.held_from
        dispatcher.publish(shown, end)
        self.count += len(shown)
        self.ready = []

    def take(self, e: Entry) -> str:
        """Accept one verified record; return a reason if it breaks batch framing."""
        if self.batch and e.batch_left != self.batch[-1].batch_left - 1:
            return f"batch broken: {e.batch_left} left after {self.batch[-1].batch_left}"
        if self.batch or e.batch_left:
            self.batch.append(e)
            if e.batch_left:
                return ""
            self.ready.extend(self.batch)
            self.batch = []
        else:
            self.ready.append(e)
        self.good_end = e.physical_offset + e.size
        return ""

    def fail(self, offset: int, reason: str) -> None:
        self.bad_at, self.bad_reason = offset, reason


def recover(
    log: CommitLog,
    dispatcher: Dispatcher,
    checkpoint: Checkpoint | None,
    *,
    crashed: bool,
    visible_end: int | None = None,
) -> RecoveryReport:
    """Recover; see the module docstring.

    Raises:
        CorruptRecordError: mid-log corruption, a torn tail after a clean shutdown, or a log
            that ends before the checkpoint (durable data is missing).
    """
    start, rebuilt = _start(log, dispatcher, checkpoint)
    scan = _Scan([], [], start, visible_end=visible_end)
    _walk(log, start, dispatcher, scan)
    truncated = 0
    if scan.bad_at >= 0 or scan.batch:
        at = scan.bad_at if scan.bad_at >= 0 else log.end_offset
        reason = scan.bad_reason or "unfinished batch at the log end"
        after = log.valid_record_after(at)
        if after is not None:
            raise CorruptRecordError(at, f"{reason}; a valid record follows at {after}")
        if not crashed:
            raise CorruptRecordError(at, f"{reason} after a clean shutdown")
        cut = scan.batch[0].physical_offset if scan.batch else at
        truncated = log.end_offset - cut
        log.truncate(cut)
    scan.publish(dispatcher, log.end_offset)
    return RecoveryReport(
        crashed, start, log.end_offset, truncated, scan.count + scan.held_count, rebuilt,
        scan.held_from, scan.held_count, scan.held_ends,
    )  # fmt: skip


def recover_store(
    log: CommitLog,
    data_dir: Path,
    disk: Disk,
    entries_per_file: int,
    *,
    visible_end: int | None = None,
) -> tuple[Dispatcher, RecoveryReport]:
    """Open the derived data (queues, index) of the store in ``data_dir`` and ``recover``. With
    ``visible_end``, a checkpoint vouching past it is first cut back to it (durable before the
    derived files are cut to it), so that what lies past it can be held back."""
    saved = cpfile.load(disk, data_dir)
    if visible_end is not None:
        visible_end = min(max(visible_end, log.start_offset), log.end_offset)
        if saved is not None and saved.log_offset > visible_end:
            try:
                saved = checkpoint_at(log, saved, visible_end)
                cpfile.save(disk, data_dir, saved)
            except CorruptRecordError as exc:
                log_.warning("checkpoint not cut to %d (%s): rebuilding", visible_end, exc)
                saved = None
    # No checkpoint means recovery rebuilds the index anyway: do not load it first.
    dispatcher = Dispatcher(data_dir, disk, entries_per_file, load_index=saved is not None)
    crashed = cpfile.crashed(disk, data_dir) or saved is None
    report = recover(log, dispatcher, saved, crashed=crashed, visible_end=visible_end)
    return dispatcher, report


def _start(log: CommitLog, dispatcher: Dispatcher, cp: Checkpoint | None) -> tuple[int, bool]:
    """Where to scan from, truncating derived data to the checkpoint or wiping it."""
    if cp is not None and cp.log_offset > log.end_offset:
        raise CorruptRecordError(log.end_offset, f"log ends before checkpoint {cp.log_offset}")
    if cp is not None and cp.log_offset >= log.start_offset:
        try:
            dispatcher.truncate_to(cp)
            return cp.log_offset, False
        except CorruptRecordError:
            pass  # A derived file lost entries the checkpoint vouched for: rebuild it below.
    dispatcher.wipe()
    dispatcher.allow_late_start = log.start_offset > 0
    dispatcher.end = log.start_offset
    return log.start_offset, log.end_offset > log.start_offset


def _walk(log: CommitLog, start: int, dispatcher: Dispatcher, scan: _Scan) -> None:
    """Verify and collect records from ``start``; stops at the first bad one (``scan.fail``)."""
    first = min(max(0, (start - log.start_offset) // log.segment_size), len(log.segments) - 1)
    segments = log.segments[first:]
    pos = start - segments[0].start
    for n, seg in enumerate(segments):
        last = n + 1 == len(segments)
        for item in iter_raw(seg, log.segment_size, pos):
            if item.kind == "record":
                try:
                    entry = decode_entry(item.buf, item.pos, item.offset)
                except CorruptRecordError as exc:
                    return scan.fail(item.offset, exc.reason)
                reason = scan.take(entry)
                if reason:
                    return scan.fail(item.offset, reason)
                if len(scan.ready) >= _PUBLISH_EVERY:
                    scan.publish(dispatcher, scan.good_end)
            elif item.kind == "bad":
                return scan.fail(item.offset, item.reason)
            elif item.kind == "blank":
                if scan.batch:
                    return scan.fail(scan.batch[0].physical_offset, "batch cut by segment end")
                inside = log.record_in_blank(seg, item.offset - seg.start)
                if inside is not None:
                    return scan.fail(item.offset, blank_span_reason(item.offset, inside))
                scan.good_end = seg.start + log.segment_size
                log.seal(seg)  # a roll may have stopped after the blank: never write past it
            elif not last:
                return scan.fail(item.offset, "segment ends early without an end marker")
        pos = 0
    return None


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
