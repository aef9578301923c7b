"""What the store found wrong while it ran: damaged records, rebuilt queues, scrub progress.

Owns: ``Health``, a thread-safe, bounded report that reads, the scrub and repairs write to and
the broker shows (admin ``store_status``, ``txmq store status``, Prometheus). Each damaged
record is logged once, at ERROR, when first found. Must not: decide anything or touch files.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from txmq import limits

log = logging.getLogger("txmq.store")


@dataclass
class Health:
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Commit-log offset -> reason, oldest first; at most DAMAGED_RECORDS_REPORTED_MAX kept.
    damaged: dict[int, str] = field(default_factory=dict)
    damaged_total: int = 0
    queues_rebuilt: int = 0
    entries_repaired: int = 0
    scrub_passes: int = 0
    scrub_offset: int = 0
    scrubbed_bytes: int = 0
    index_rebuilds: int = 0
    # The offline verifier reports in its own output instead of the log.
    log_damage: bool = True

    def record_damaged(self, offset: int, reason: str) -> bool:
        """Report a damaged commit-log record; True the first time this offset is seen."""
        with self.lock:
            if offset in self.damaged:
                return False
            self.damaged_total += 1
            if len(self.damaged) >= limits.DAMAGED_RECORDS_REPORTED_MAX:
                self.damaged.pop(next(iter(self.damaged)))
            self.damaged[offset] = reason
        if self.log_damage:
            log.error(
                "damaged commit-log record at offset %d: %s (readers skip it)", offset, reason
            )
        return True

    def record_rebuild(self, topic: str, queue_id: int, repaired: int) -> None:
        with self.lock:
            self.queues_rebuilt += 1
            self.entries_repaired += repaired
        log.error(
            "consume queue %s/%d disagreed with the commit log: rebuilt from the log"
            " (%d entries repaired)",
            topic,
            queue_id,
            repaired,
        )

    def record_index_rebuild(self, entries: int) -> None:
        with self.lock:
            self.index_rebuilds += 1
        log.error("the message index missed records of the log: rebuilt (%d entries)", entries)

    def is_damaged(self, offset: int) -> bool:
        with self.lock:
            return offset in self.damaged

    def report(self) -> dict[str, Any]:
        with self.lock:
            return {
                "damaged_records": self.damaged_total,
                "damaged": [{"offset": o, "reason": r} for o, r in self.damaged.items()],
                "queues_rebuilt": self.queues_rebuilt,
                "entries_repaired": self.entries_repaired,
                "index_rebuilds": self.index_rebuilds,
                "scrub_passes": self.scrub_passes,
                "scrub_offset": self.scrub_offset,
                "scrubbed_bytes": self.scrubbed_bytes,
            }
