"""The leader-epoch history of a store, and the rule that finds where a divergent tail starts.

Owns: ``leader-epochs.json`` beside the commit log (Kafka's leader-epoch-checkpoint): the list of
(epoch, start offset) pairs, one per leadership whose records this log holds, epochs strictly
increasing, starts non-decreasing. A leader appends (its epoch, its log end) before its first
write; a follower appends the leader's pairs as the records they start arrive, before it
appends them. Also the pure rule ``divergence_point`` (given two histories and log ends, the
offset up to which both logs hold the same records).
Must not: know about etcd or the network, or change the commit log (store/replica/truncate.py does).

Why a file and not a marker record in the log: a record would enter the format, every reader
(queues, the transaction book, Spark, scans) would have to skip it, and a follower's log would
still have to be cut by the same rule; the file is written only on a change of leader (one
fsync each), and the log stays the truth for everything else: at load, pairs that start past
the log's end are dropped (a truncation that stopped before it cut this file).

Theory: epoch E's records were all written by E's leader, at the offsets they hold on every
replica that has them, and a replica holding any of E's records held that leader's log below
E's start. So if both histories name E, the two logs agree below min(E's end here, E's end
there), where E's end is the next pair's start (or the log end). The largest shared epoch gives
the longest agreed prefix; with none shared, nothing is known to agree (0).
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from txmq import limits
from txmq.errors import invariant
from txmq.store.files.disk import Disk

FILE_NAME: Final = "leader-epochs.json"
EpochStart = tuple[int, int]  # (epoch, first offset of its records)
log = logging.getLogger(__name__)


def epoch_end(history: Sequence[EpochStart], epoch: int, log_end: int) -> int:
    """Where ``epoch``'s records end in a log with this history and end (the next pair's
    start, or the log end for the last epoch)."""
    for i, (e, _start) in enumerate(history):
        if e == epoch:
            return min(history[i + 1][1], log_end) if i + 1 < len(history) else log_end
    raise KeyError(epoch)


def divergence_point(
    mine: Sequence[EpochStart], my_end: int, theirs: Sequence[EpochStart], their_end: int
) -> int:
    """The offset below which two logs hold the same records: the end of the largest epoch
    both histories name, the smaller of its two ends; 0 when they share none."""
    shared = {e for e, _ in mine} & {e for e, _ in theirs}
    if not shared:
        return 0
    epoch = max(shared)
    return min(epoch_end(mine, epoch, my_end), epoch_end(theirs, epoch, their_end))


def check(history: Sequence[EpochStart]) -> None:
    """Epochs strictly increase, starts never decrease."""
    for (e0, s0), (e1, s1) in itertools.pairwise(history):
        invariant(e1 > e0 and s1 >= s0, f"epoch history out of order: {(e0, s0)} then {(e1, s1)}")


class EpochFile:
    """The history of one store directory, loaded at open and saved on every change."""

    def __init__(self, disk: Disk, store_dir: Path, log_end: int) -> None:
        self.disk = disk
        self.path = store_dir / FILE_NAME
        self.history: list[EpochStart] = []
        if disk.exists(self.path):
            self.history = _decode(disk.read_all(self.path))
        kept = [p for p in self.history if p[1] <= log_end]
        if len(kept) < len(self.history):
            log.warning("dropping epochs that start past the log end %d: %s", log_end, kept)
            self.history = kept
            self._save()

    @property
    def latest(self) -> int:
        """The epoch of this log's last records (0 for none)."""
        return self.history[-1][0] if self.history else 0

    def append(self, epoch: int, start: int) -> None:
        """Record that ``epoch``'s records start at ``start``; durable when it returns. The
        oldest pairs go past REPLICA_EPOCHS_MAX (a lost pair only makes a later cut deeper)."""
        invariant(epoch > self.latest, f"epoch {epoch} after epoch {self.latest}")
        invariant(not self.history or start >= self.history[-1][1], "epoch start went back")
        self.history = [*self.history, (epoch, start)][-limits.REPLICA_EPOCHS_MAX :]
        self._save()

    def adopt(self, pairs: Sequence[EpochStart], start: int, end: int) -> None:
        """A follower's copy of its leader's pairs that start in [start, end) (the records it is
        about to append), skipping those it has."""
        new = [(e, s) for e, s in pairs if start <= s < end and e > self.latest]
        if new:
            check([*self.history, *new])
            self.history = [*self.history, *new][-limits.REPLICA_EPOCHS_MAX :]
            self._save()

    def cut(self, offset: int) -> None:
        """Forget the epochs whose records start at or past ``offset`` (the log was cut there)."""
        kept = [p for p in self.history if p[1] < offset]
        if len(kept) < len(self.history):
            self.history = kept
            self._save()

    def _save(self) -> None:
        doc = {"version": 1, "epochs": [list(p) for p in self.history]}
        self.disk.write_atomic(self.path, json.dumps(doc, separators=(",", ":")).encode())


def _decode(raw: bytes) -> list[EpochStart]:
    """An unreadable file counts as no history: a later cut then goes to 0 (deeper, never
    wrong). write_atomic never leaves a torn one."""
    try:
        doc = json.loads(raw)
        history = [(int(e), int(s)) for e, s in doc["epochs"]]
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("unreadable %s (%s): no epoch history", FILE_NAME, exc)
        return []
    check(history)
    return history
