"""A follower's copy of its leader's consumer positions (ADR 0006, "consumer positions").

Owns: the positions file in a follower's data directory, the one its full broker reads if it is
promoted: written from what the leader ships with a fetch about once a second, and with the
next fetch after an operator changed them (``offer``; positions_version.py), cut
to what this replica's queues hold then (``clamp_positions``), and cut again to the queues as
they are when the follower closes (``settle``). Why again: a copy cut while the follower was
catching up (its queues short of the leader's) would otherwise stand until the next shipment,
and a promotion right after catching up (the preferred replica's hand-back) then delivered
again every message the group had acknowledged past the cut, however long ago; a copy written
before a divergent tail was cut would point past the queues' new ends, and skip the records
that land there later.
Must not: decide anything about the positions themselves (the leader's book does).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from txmq.store.files.disk import Disk

QueueOffsets = Callable[[str, int], tuple[int, int]]


def clamp_positions(doc: dict[str, Any], queue_offsets: QueueOffsets) -> dict[str, Any]:
    """The leader's consumer positions cut to what this replica's queues hold: an ack offset,
    settled offset or attempt past a queue's end here would skip a record that reaches this
    replica later (after a promotion: a loss); cut, it is at most delivered again. Settled
    offsets above the ack offset are kept (acknowledged out of order)."""
    rows = []
    for r in doc.get("positions", []):
        end = queue_offsets(str(r["topic"]), int(r["queue"]))[1]
        settled = [[lo, min(hi, end - 1)] for lo, hi in r["settled"] if lo < end]
        attempts = [a for a in r["attempts"] if a[0] < end]
        rows.append({**r, "ack": min(int(r["ack"]), end), "settled": settled, "attempts": attempts})
    return {**doc, "positions": rows}


class PositionsCopy:
    """The positions file a follower keeps (blocking: its caller runs ``offer`` in a thread)."""

    def __init__(self, disk: Disk, path: Path) -> None:
        self.disk = disk
        self.path = path
        self._shipped: dict[str, Any] | None = None  # the leader's last, as shipped
        self._written: dict[str, Any] | None = None  # ... as the file holds it (cut)

    def offer(self, shipped: dict[str, Any], queue_offsets: QueueOffsets) -> None:
        """The leader shipped its positions: write them, cut to the queues as they are."""
        self._shipped = shipped
        self._write(clamp_positions(shipped, queue_offsets))

    def settle(self, queue_offsets: QueueOffsets) -> bool:
        """Cut the last shipment again to the queues as they are now, and write it if that
        changes the file (the follower closes: the full broker may read it next). True if it
        wrote."""
        if self._shipped is None:
            return False
        now = clamp_positions(self._shipped, queue_offsets)
        if now == self._written:
            return False
        self._write(now)
        return True

    def _write(self, doc: dict[str, Any]) -> None:
        self.disk.write_atomic(self.path, json.dumps(doc, separators=(",", ":")).encode())
        self._written = doc
