"""The read hold: durable records kept from readers until the in-sync replicas have them.

Owns: ``Hold`` (Kafka's high watermark at the store), installed by a leader with
min_insync_replicas > 1 in place of the group commit's publication, and the publication of a
restarted leader's recovered tail (``Store.open(visible_end=...)``, ADR 0005). Must not: know
about followers, epochs or the network (broker/replication says how far they are).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from txmq.format import record as codec
from txmq.model import Record
from txmq.store.store import Store

# Records a hold publishes at a time when it reads a recovered tail again: one pwrite per queue
# and one for the index per chunk, as recovery does.
_RELEASE_EVERY = 8192


class Hold:
    """Keep durable records invisible to readers until ``release`` says the replicas have them
    (Kafka's high watermark): a consumer never reads a record a failover could lose.

    Installed by a leader with min_insync_replicas > 1; without one, publication is as before.
    The flusher hands each durable batch here instead of to the dispatcher; ``release(up_to)``
    publishes, in log order, every held record that ends at or below ``up_to``, and remembers
    ``up_to``: a batch that becomes durable here after the followers already have it (their
    fsync ran alongside ours) is published as it arrives, on the flusher thread.
    It starts with the records the store's open held back (``Store.open(visible_end=...)``:
    the log's tail past the end known to be acknowledged, ADR 0005).
    """

    def __init__(self, store: Store, on_held: Callable[[], None] | None = None) -> None:
        self._on_held = on_held  # told (on the flusher thread) when a durable batch arrives
        self._lock = threading.Lock()
        self._held: list[tuple[list[codec.Entry], int]] = []  # (entries, end) in log order
        # The records the store's open held back, [start, end) of the log, ahead of _held:
        # read again from the log as they are published (a restarted replica's tail may be
        # long: its entries are not kept in memory).
        self._log = store.log
        got = store.recovery
        self._recovered = [got.held_from, got.log_end] if got.held_from is not None else None
        self._recovered_left = got.held_count
        self._allowed = 0  # the followers have every byte below this durable
        self._publish = store.writes.group.replace_publish(self._keep)

    def _keep(self, entries: Sequence[codec.Entry], end: int) -> None:
        with self._lock:
            self._held.append((list(entries), end))
            self._release_locked()
        if self._on_held is not None:
            self._on_held()

    def releasable(self, up_to: int, most: int) -> int:
        """How many records ``release(up_to)`` would publish, counted up to ``most + 1`` (the
        caller only asks "none, a few, or more")."""
        n = 0
        with self._lock:
            if self._recovered is not None:  # read from the log only by release: "more"
                return most + 1 if up_to > self._recovered[0] else 0
            for entries, _end in self._held:
                for e in entries:
                    if e.physical_offset + e.size > up_to or n > most:
                        return n
                    n += 1
        return n

    def release(self, up_to: int) -> None:
        """Publish every held record ending at or below ``up_to`` (the followers have it: every
        held record is durable here already). Blocking (queue writes)."""
        with self._lock:
            self._allowed = max(self._allowed, up_to)
            self._release_locked()

    def _release_locked(self) -> None:
        up_to = self._allowed
        if self._recovered is not None and not self._release_recovered(up_to):
            return
        while self._held:
            entries, end = self._held[0]
            ready = [e for e in entries if e.physical_offset + e.size <= up_to]
            if len(ready) < len(entries):
                if ready:
                    last = ready[-1]
                    self._publish(ready, last.physical_offset + last.size)
                    self._held[0] = (entries[len(ready) :], end)
                return
            self._publish(entries, end)
            self._held.pop(0)

    def _release_recovered(self, up_to: int) -> bool:
        """Publish the recovered records ending at or below ``up_to``, read from the log in
        chunks; True once none is left (the batches kept since come next)."""
        assert self._recovered is not None  # for mypy
        start, end = self._recovered
        while start < min(up_to, end):
            chunk: list[codec.Entry] = []
            for rec, _ in self._log.scan_for_recovery(start):
                if rec is None or rec.physical_offset >= end or len(chunk) >= _RELEASE_EVERY:
                    break
                if rec.physical_offset + rec.size > up_to:
                    break
                chunk.append(_entry(rec))
            if not chunk:
                break
            start = chunk[-1].physical_offset + chunk[-1].size
            self._publish(chunk, start)
            self._recovered = [start, end]
            self._recovered_left -= len(chunk)
        if self._recovered_left > 0:
            return False
        self._recovered = None  # all published (what follows the last one is blanks, if any)
        return True

    @property
    def held(self) -> int:
        with self._lock:
            return self._recovered_left + sum(len(entries) for entries, _ in self._held)


def _entry(rec: Record) -> codec.Entry:
    """What dispatch needs of a record read again from the log."""
    return codec.Entry(
        rec.physical_offset, rec.size, rec.flag, 0, rec.topic, rec.queue_id, rec.queue_offset,
        rec.store_timestamp_ms, rec.tag, rec.message_id, rec.keys,
    )  # fmt: skip
