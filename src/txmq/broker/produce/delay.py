"""Delay messages: held in DELAY_TOPIC, re-appended to their real topic when due.

Owns: the delay schedule (a heap ordered by delivery time), its persisted progress file, and
releasing due messages. Any precision, not RocketMQ's 18 fixed levels. The schedule is rebuilt
at start from the delay topic's consume queue past the persisted progress, so nothing lives
only in memory. Delivery is at-least-once: a crash between the re-append and saving progress
delivers that message again (same message id, so consumers can tell).
Must not: speak gRPC, read the clock (``now_ms`` is passed in) or run on the event loop (every
method blocks on the store).
"""

from __future__ import annotations

import heapq
import json
import logging
import threading
from pathlib import Path

from txmq import limits
from txmq.errors import invariant
from txmq.model import (
    DELAY_TOPIC,
    PROP_DELIVERY_TIMESTAMP_MS,
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    AppendResult,
    Record,
    RecordDraft,
    copy_to_topic,
)
from txmq.store.files.disk import Disk
from txmq.store.store import Store

log = logging.getLogger("txmq.broker")
DELAY_FILE = "delay.json"  # beside the store, in the broker's data directory

# Delay-queue entries loaded into the heap per release call, so one tick after a restart with a
# long backlog does not stall the loop; the rest loads on the following ticks.
_LOAD_BATCH = 256
_LOAD_BATCHES_PER_CALL = 16


def delivery_ms(draft: RecordDraft | Record) -> int:
    return int(draft.properties.get(PROP_DELIVERY_TIMESTAMP_MS, "0"))


def due_later(draft: RecordDraft, now_ms: int) -> bool:
    """True when the message must wait; a time already past is delivered at once."""
    return delivery_ms(draft) > now_ms


class DelaySchedule:
    def __init__(self, store: Store, path: Path, disk: Disk) -> None:
        self.store = store
        self.path = path
        self.disk = disk
        self._lock = threading.Lock()
        # Every delay-queue offset below ``low`` is released; ``done`` holds released offsets
        # above it (messages due earlier than one still waiting below them).
        self.low = 0
        self.done: set[int] = set()
        if self.disk.exists(path):
            raw = json.loads(self.disk.read_all(path))
            self.low, self.done = int(raw["low"]), {int(o) for o in raw["done"]}
        invariant(self.low >= 0, "delay progress is a queue offset")
        self.loaded = self.low
        self.heap: list[tuple[int, int]] = []

    def schedule(self, draft: RecordDraft) -> AppendResult:
        """Hold ``draft`` in the delay topic, its destination kept in properties. Blocking."""
        props = dict(draft.properties)
        props[PROP_REAL_TOPIC] = draft.topic
        props[PROP_REAL_QUEUE_ID] = str(draft.queue_id)
        held = copy_to_topic(
            draft, topic=DELAY_TOPIC, queue_id=0, properties=props, reconsume_times=0
        )
        return self.store.append(held)

    def _load(self) -> None:
        hi = self.store.queue_offsets(DELAY_TOPIC, 0)[1]
        for _ in range(_LOAD_BATCHES_PER_CALL):
            if self.loaded >= hi:
                return
            read = self.store.read_queue(DELAY_TOPIC, 0, self.loaded, _LOAD_BATCH)
            for rec in read.records:
                if rec.queue_offset not in self.done:
                    heapq.heappush(self.heap, (delivery_ms(rec), rec.queue_offset))
            if read.next_offset <= self.loaded:
                return
            self.loaded = read.next_offset

    def release_due(self, now_ms: int) -> list[tuple[str, int]]:
        """Re-append due messages to their topics; returns the (topic, queue) pairs touched.

        Blocking. At most DELAY_RELEASE_PER_CALL_MAX messages per call, appended as one batch (one
        fsync); progress is saved after the batch is durable.
        """
        with self._lock:
            self._load()
            due: list[int] = []
            while (
                self.heap
                and self.heap[0][0] <= now_ms
                and len(due) < limits.DELAY_RELEASE_PER_CALL_MAX
            ):
                due.append(heapq.heappop(self.heap)[1])
        drafts: list[RecordDraft] = []
        for off in due:
            read = self.store.read_queue(DELAY_TOPIC, 0, off, 1)
            if not read.records or read.records[0].queue_offset != off:
                # Retention removed it before it was due; nothing is left to deliver.
                log.warning("delayed message at delay-queue offset %d is gone", off)
                continue
            drafts.append(released_draft(read.records[0]))
        if drafts:
            self.store.append_many(drafts)
        if due:
            with self._lock:
                self.done.update(due)
                while self.low in self.done:
                    self.done.remove(self.low)
                    self.low += 1
            self.save()
        return sorted({(d.topic, d.queue_id) for d in drafts})

    def save(self) -> None:
        with self._lock:
            data = json.dumps({"low": self.low, "done": sorted(self.done)}).encode()
        self.disk.write_atomic(self.path, data)


def released_draft(rec: Record) -> RecordDraft:
    """The message as it enters its real topic: same id, body and user properties."""
    invariant(rec.topic == DELAY_TOPIC, "only delay-topic records are released")
    props = {
        k: v for k, v in rec.properties.items() if k not in (PROP_REAL_TOPIC, PROP_REAL_QUEUE_ID)
    }
    return copy_to_topic(
        rec,
        topic=rec.properties[PROP_REAL_TOPIC],
        queue_id=int(rec.properties[PROP_REAL_QUEUE_ID]),
        properties=props,
        reconsume_times=0,
    )
