"""The end of this log its group is known to have acknowledged, kept beside the log (ADR 0005).

Owns: ``acked-end.json`` in a replica's store directory, ``{"version": 1, "end": n}``: every
byte below ``end`` was, when this replica learned it, durable on every member of the group's
stored in-sync set at the same offsets (as a follower: its leader's ``committed``, cut to its
own end; as a leader: the group's durable end). Any replica that may lead holds those bytes, so
readers may see them. A replica opening as a SYNC leader starts its read hold there
(``Store.open(visible_end=...)``, store/replica/hold.Hold): a tail it holds past that end becomes
readable only once the in-sync replicas have it.
Written lazily (``AckedEnd.due``: at most every SAVE_EVERY_MS), so the file may say
less than the replica knew: the safe direction (a restarted replica holds back more, until its
followers confirm it, and shows nothing early). Lowered before a cut moves the log below it
(store/replica/truncate.py), and never read past the log's end, so it never vouches for bytes this
log does not hold or holds differently. An unreadable file counts as 0 (everything held).
Must not: decide what is acknowledged (broker/replication/leader.py and follower.py do).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Final

from txmq.store.files.disk import Disk

FILE_NAME: Final = "acked-end.json"
# A higher end is written at most this often: one small fsynced file per second per replica.
SAVE_EVERY_MS: Final = 1_000
log = logging.getLogger(__name__)


def load_acked_end(disk: Disk, store_dir: Path, log_end: int) -> int:
    """The stored end, at most ``log_end``; 0 when there is none or it is unreadable."""
    path = store_dir / FILE_NAME
    if not disk.exists(path):
        return 0
    raw = disk.read_all(path)
    try:
        end = int(json.loads(raw)["end"])
    except (ValueError, KeyError, TypeError):
        log.warning("%s is unreadable (%r): the read hold starts at 0", path, raw[:80])
        return 0
    return max(0, min(end, log_end))


def save_acked_end(disk: Disk, store_dir: Path, end: int) -> None:
    """Store ``end`` (temporary file, fsync, rename: never torn)."""
    doc = json.dumps({"version": 1, "end": end}).encode()
    disk.write_atomic(store_dir / FILE_NAME, doc)


def cut_acked_end(disk: Disk, store_dir: Path, offset: int) -> None:
    """Before the log is cut at ``offset``: a stored end past it comes down to it."""
    path = store_dir / FILE_NAME
    if disk.exists(path) and load_acked_end(disk, store_dir, offset + 1) > offset:
        save_acked_end(disk, store_dir, offset)


class AckedEnd:
    """This process's view of the file: what it holds, and when to write a higher end."""

    def __init__(self, disk: Disk, store_dir: Path, log_end: int) -> None:
        self.disk = disk
        self.store_dir = store_dir
        self.saved = load_acked_end(disk, store_dir, log_end)
        self._saved_ms: int | None = None

    def due(self, end: int, now_ms: int) -> bool:
        """Should ``end`` be saved now: higher than the saved one, and SAVE_EVERY_MS
        since the last save (the first one at once)."""
        if end <= self.saved:
            return False
        last = self._saved_ms
        return last is None or now_ms - last >= SAVE_EVERY_MS

    def save(self, end: int, now_ms: int) -> None:
        """Write ``end`` (blocking: run it in a thread off the event loop)."""
        save_acked_end(self.disk, self.store_dir, end)
        self.saved = max(self.saved, end)
        self._saved_ms = now_ms
