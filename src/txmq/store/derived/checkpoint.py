"""The checkpoint file and the abort marker.

Owns: ``checkpoint.json``, which says how far the derived data is durable and consistent with
the log: every record below ``log_offset`` is durable in the log and dispatched, each consume
queue holds exactly ``queues[(topic, queue id)]`` entries for them and the index exactly
``index_entries``. Recovery truncates the derived files to those numbers (O(queues), no scan of
the queue files) and re-dispatches records from ``log_offset``. Also the ``abort`` marker, which
exists while a store is open: finding it at open means the last run did not close cleanly.
Must not: decide when to checkpoint or sync anything but its own file (the store syncs the
queues and the index before calling ``save``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from txmq.errors import CorruptRecordError
from txmq.store.files.disk import Disk

CHECKPOINT_NAME: Final = "checkpoint.json"
ABORT_NAME: Final = "abort"
_VERSION: Final = 2


@dataclass(frozen=True, slots=True)
class Checkpoint:
    log_offset: int = 0
    index_entries: int = 0
    queues: dict[tuple[str, int], int] = field(default_factory=dict)

    def encode(self) -> bytes:
        rows = [[t, q, n] for (t, q), n in sorted(self.queues.items())]
        doc = {
            "version": _VERSION,
            "log_offset": self.log_offset,
            "index_entries": self.index_entries,
            "queues": rows,
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Checkpoint:
        """Raises CorruptRecordError (offset -1) if the file is not a checkpoint we wrote."""
        try:
            doc = json.loads(raw)
            if doc.get("version") != _VERSION:
                raise ValueError(f"unknown checkpoint version {doc.get('version')!r}")
            queues = {(str(t), int(q)): int(n) for t, q, n in doc["queues"]}
            return cls(int(doc["log_offset"]), int(doc["index_entries"]), queues)
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptRecordError(-1, f"unreadable {CHECKPOINT_NAME}: {exc}") from exc


def load(disk: Disk, data_dir: Path) -> Checkpoint | None:
    """The saved checkpoint, or None when there is none or it is unreadable: then nothing
    vouches for the derived data and recovery rebuilds it from the log (reported as such)."""
    path = data_dir / CHECKPOINT_NAME
    if not disk.exists(path):
        return None
    try:
        return Checkpoint.decode(disk.read_all(path))
    except CorruptRecordError:
        return None


def save(disk: Disk, data_dir: Path, checkpoint: Checkpoint) -> None:
    disk.write_atomic(data_dir / CHECKPOINT_NAME, checkpoint.encode())


def crashed(disk: Disk, data_dir: Path) -> bool:
    return disk.exists(data_dir / ABORT_NAME)


def mark_open(disk: Disk, data_dir: Path) -> None:
    disk.write_atomic(data_dir / ABORT_NAME, b"open\n")


def mark_closed(disk: Disk, data_dir: Path) -> None:
    disk.remove(data_dir / ABORT_NAME)
