"""An audit's outcome as plain values: counts, examples, the per-minute series and the verdict.

Owns: the four kinds of discrepancy (``KINDS``: lost, phantom, duplicate, undecided), what makes
a run consistent, the ``--json`` document (an interface: fields are added, never renamed or
removed) and the exit code. Pure: the Spark job (job.py) and the broker's transaction listing
(undecided.py) fill it; render.py and page.py show it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from txmq.audit.spec import Window, iso_ms

KINDS: Final = ("lost", "phantom", "duplicate", "undecided")
KIND_MEANING: Final = {
    "lost": "row committed in the database, no committed message",
    "phantom": "committed message, no row in the database",
    "duplicate": "key delivered more than once in the topic",
    "undecided": "transaction still undecided, or dead, on the broker",
}
EXIT_CONSISTENT: Final = 0
EXIT_INCONSISTENT: Final = 1


@dataclass(frozen=True, slots=True)
class Bucket:
    """Rows and messages stored in ``[start_ms, start_ms + bucket minutes)``."""

    start_ms: int
    db_rows: int
    messages: int


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A transaction of the topic still undecided (or dead: rolled back at max checks, an
    operator may still resolve it) on one broker."""

    transaction_id: str
    message_id: str
    broker: str
    state: str
    dead: bool
    checks: int
    prepared_at_ms: int
    key: str | None = None  # None: not looked up (past the lookup bound) or the message has none
    db_row: bool | None = None  # the key has a row in the database (None: unknown)

    def as_json(self, now_ms: int) -> dict[str, Any]:
        return {
            "key": self.key,
            "transaction_id": self.transaction_id,
            "message_id": self.message_id,
            "broker": self.broker,
            "state": self.state,
            "dead": self.dead,
            "checks": self.checks,
            "prepared_at": iso_ms(self.prepared_at_ms),
            "age_ms": max(0, now_ms - self.prepared_at_ms),
            "db_row": self.db_row,
        }


@dataclass
class AuditResult:
    """Everything one audit found. ``counts`` are complete; ``examples`` hold the first few of
    each kind (oldest first), JSON-ready."""

    window: Window
    source: dict[str, str]
    now_ms: int
    db_rows: int = 0
    messages: int = 0
    unkeyed_messages: int = 0  # committed messages in the window without a join value
    db_duplicate_keys: int = 0  # keys with more than one row in the window
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    duplicate_copies: int = 0  # copies beyond the first, over every duplicate key
    dead: int = 0  # of the undecided transactions, those rolled back at max checks
    lost_pending: int = 0  # lost rows whose transaction is still undecided (may yet commit)
    examples: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {k: [] for k in KINDS}
    )
    bucket_minutes: int = 1
    buckets: list[Bucket] = field(default_factory=list)
    report_dir: str | None = None

    @property
    def consistent(self) -> bool:
        return not any(self.counts[k] for k in KINDS)

    @property
    def exit_code(self) -> int:
        return EXIT_CONSISTENT if self.consistent else EXIT_INCONSISTENT

    def as_json(self) -> dict[str, Any]:
        return {
            "consistent": self.consistent,
            "source": dict(self.source),
            "window": self.window.as_json(),
            "audited_at": iso_ms(self.now_ms),
            "totals": {
                "db_rows": self.db_rows,
                "messages": self.messages,
                "unkeyed_messages": self.unkeyed_messages,
                "db_duplicate_keys": self.db_duplicate_keys,
            },
            "counts": {
                **{k: self.counts[k] for k in KINDS},
                "duplicate_copies": self.duplicate_copies,
                "dead": self.dead,
                "lost_pending": self.lost_pending,
            },
            "examples": {k: list(self.examples[k]) for k in KINDS},
            "bucket_minutes": self.bucket_minutes,
            "per_minute": [
                {"minute": iso_ms(b.start_ms), "db_rows": b.db_rows, "messages": b.messages}
                for b in self.buckets
            ],
            "report": self.report_dir,
        }


def bucket_minutes(first_ms: int | None, last_ms: int | None, buckets_max: int) -> int:
    """The width of the series' buckets in minutes: 1, or wider when ``[first, last]`` holds
    more than ``buckets_max`` minutes, so the series has at most ``buckets_max`` buckets."""
    if first_ms is None or last_ms is None or last_ms <= first_ms:
        return 1
    minutes = (last_ms - first_ms) // 60_000 + 1
    return max(1, -(-minutes // buckets_max))


def merge_buckets(db: dict[int, int], messages: dict[int, int], width_minutes: int) -> list[Bucket]:
    """One bucket per start minute present in either stream, in time order; a gap between
    buckets is filled with zeros so a chart shows a quiet minute as zero, not as a line."""
    starts = sorted(set(db) | set(messages))
    if not starts:
        return []
    step = width_minutes * 60_000
    out = []
    for start in range(starts[0], starts[-1] + step, step):
        out.append(Bucket(start, db.get(start, 0), messages.get(start, 0)))
    return out
