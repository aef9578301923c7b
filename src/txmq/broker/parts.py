"""The broker's parts, opened together from one data directory, and the blocking operations
the gRPC layer runs in the executor.

Owns: opening and closing store, transactions, topics, deliveries and the delay schedule in the
right order; send (normal / FIFO / delay / transactional), dead-lettering, and the delay
schedule. Must not: speak gRPC (service.py does) or run the event loop (app.py does).
"""

from __future__ import annotations

import heapq
import itertools
import json
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from txmq.broker.clients import Clients
from txmq.broker.config import BrokerConfig
from txmq.broker.delivery import DeadLetter, Deliveries
from txmq.broker.metrics import Metrics
from txmq.broker.topics import TopicInfo, TopicRegistry
from txmq.errors import MessageTypeConflictError
from txmq.model import (
    DELAY_TOPIC,
    DLQ_PREFIX,
    PROP_DELIVERY_ATTEMPT,
    PROP_DELIVERY_TIMESTAMP_MS,
    PROP_MESSAGE_GROUP,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    AppendResult,
    MessageType,
    RecordDraft,
)
from txmq.store.disk import Disk
from txmq.store.store import Store
from txmq.txn.coordinator import Resolver, Transactions
from txmq.txn.ledger import SinkLedger


def wall_ms() -> int:
    """The broker's clock. Only the broker layer reads it; cores get it injected."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Sent:
    message_id: str
    transaction_id: str
    queue_offset: int
    topic: str
    queue_id: int


class Parts:
    def __init__(self, config: BrokerConfig, *, resolvers: list[Resolver] | None = None) -> None:
        self.config = config
        d = config.data_dir
        d.mkdir(parents=True, exist_ok=True)
        self.store = Store.open(d / "store", config.store, now_ms=wall_ms)
        self.disk = self.store.disk
        self.metrics = Metrics()
        self.topics = TopicRegistry(
            d / "topics.json",
            self.disk,
            auto_create=config.auto_create_topics,
            default_queues=config.default_queue_count,
        )
        self.tx = Transactions(
            self.store,
            d,
            timeout_ms=config.transaction_timeout_ms,
            check_interval_ms=config.transaction_check_interval_ms,
            check_max=config.transaction_check_max,
            now_ms=wall_ms,
            resolvers=resolvers if resolvers is not None else [SinkLedger(self.store.find_by_key)],
        )
        self.deliveries = Deliveries(
            self.store, d, self.disk, attempts_max=config.delivery_attempts_max
        )
        self.clients = Clients()
        self.delay = DelaySchedule(self.store, d / "delay.json", self.disk)
        self._round_robin = itertools.count()

    def close(self) -> None:
        self.deliveries.save(force=True)
        self.delay.save()
        self.tx.close()
        self.store.close()

    # --- Sending. -------------------------------------------------------------------------------

    def pick_queue(self, info: TopicInfo, draft: RecordDraft) -> int:
        group = draft.properties.get(PROP_MESSAGE_GROUP)
        if group:
            # One message group always maps to one queue, which is what keeps it ordered.
            return zlib.crc32(group.encode()) % info.queue_count
        return next(self._round_robin) % info.queue_count

    def check_type(self, info: TopicInfo, mtype: MessageType) -> None:
        if info.message_type is not mtype and not info.accepts_all:
            raise MessageTypeConflictError(
                f"topic {info.name!r} accepts {info.message_type.value} messages, not {mtype.value}"
            )

    def send(
        self, draft: RecordDraft, mtype: MessageType, *, client_id: str, immunity_ms: int | None
    ) -> Sent:
        """Store one message durably. Blocking: run in the executor."""
        started = time.perf_counter()
        tid = ""
        if mtype is MessageType.TRANSACTION:
            tid, res = self.tx.prepare(
                draft,
                producer_group=draft.topic,
                client_id=client_id,
                check_immunity_ms=immunity_ms,
            )
        elif mtype is MessageType.DELAY and _due_later(draft):
            res = self.delay.schedule(draft)
        else:
            res = self.store.append(draft)
        self.metrics.append_latency.observe(time.perf_counter() - started)
        self.metrics.sends.labels(mtype.value).inc()
        return Sent(draft.message_id, tid, res.queue_offset, draft.topic, draft.queue_id)

    def dead_letter(self, dead: DeadLetter) -> None:
        """Append the DLQ copy, then count the original as consumed. Blocking."""
        topic = DLQ_PREFIX + dead.group
        self.topics.create(topic, 1, MessageType.NORMAL, exist_ok=True)
        rec = dead.record
        props = dict(rec.properties)
        props.update(
            {
                PROP_ORIGIN_MESSAGE_ID: rec.message_id,
                PROP_REAL_TOPIC: rec.topic,
                PROP_DELIVERY_ATTEMPT: str(dead.attempts),
            }
        )
        self.store.append(
            RecordDraft(
                topic=topic,
                queue_id=0,
                body=rec.body,
                message_id=rec.message_id,
                tag=rec.tag,
                keys=rec.keys,
                properties=props,
                born_timestamp_ms=rec.born_timestamp_ms,
                born_host=rec.born_host,
                reconsume_times=dead.attempts,
            )
        )
        self.deliveries.settle(dead)
        self.metrics.dlq.inc()


def _due_later(draft: RecordDraft) -> bool:
    at = int(draft.properties.get(PROP_DELIVERY_TIMESTAMP_MS, "0"))
    return at > wall_ms()


class DelaySchedule:
    """Delay messages wait in DELAY_TOPIC and are re-appended to their topic when due.

    Any precision (not RocketMQ's 18 levels): a heap ordered by delivery time, rebuilt at start
    from the delay queue past the persisted progress. Delivery is at-least-once: a crash between
    the re-append and saving progress delivers that message again.
    """

    def __init__(self, store: Store, path: Path, disk: Disk) -> None:
        self.store = store
        self.path = path
        self.disk = disk
        self._lock = threading.Lock()
        self.low = 0
        self.done: set[int] = set()
        if self.disk.exists(path):
            raw = json.loads(self.disk.read_all(path))
            self.low, self.done = int(raw["low"]), set(raw["done"])
        self.loaded = self.low
        self.heap: list[tuple[int, int]] = []

    def schedule(self, draft: RecordDraft) -> AppendResult:
        props = dict(draft.properties)
        props[PROP_REAL_TOPIC] = draft.topic
        props[PROP_REAL_QUEUE_ID] = str(draft.queue_id)
        held = RecordDraft(
            topic=DELAY_TOPIC,
            queue_id=0,
            body=draft.body,
            message_id=draft.message_id,
            tag=draft.tag,
            keys=draft.keys,
            properties=props,
            born_timestamp_ms=draft.born_timestamp_ms,
            born_host=draft.born_host,
        )
        return self.store.append(held)

    def release_due(self, now_ms: int, limit: int = 256) -> list[tuple[str, int]]:
        """Re-append due messages to their topics; returns (topic, queue) touched. Blocking."""
        with self._lock:
            hi = self.store.queue_offsets(DELAY_TOPIC, 0)[1]
            while self.loaded < hi:
                read = self.store.read_queue(DELAY_TOPIC, 0, self.loaded, 256)
                for rec in read.records:
                    if rec.queue_offset not in self.done:
                        at = int(rec.properties.get(PROP_DELIVERY_TIMESTAMP_MS, "0"))
                        heapq.heappush(self.heap, (at, rec.queue_offset))
                if read.next_offset == self.loaded:
                    break
                self.loaded = read.next_offset
            due: list[int] = []
            while self.heap and self.heap[0][0] <= now_ms and len(due) < limit:
                due.append(heapq.heappop(self.heap)[1])
        touched: list[tuple[str, int]] = []
        drafts: list[RecordDraft] = []
        for off in due:
            rec = self.store.read_queue(DELAY_TOPIC, 0, off, 1).records[0]
            props = {
                k: v
                for k, v in rec.properties.items()
                if k not in (PROP_REAL_TOPIC, PROP_REAL_QUEUE_ID)
            }
            topic = rec.properties[PROP_REAL_TOPIC]
            qid = int(rec.properties[PROP_REAL_QUEUE_ID])
            drafts.append(
                RecordDraft(
                    topic=topic,
                    queue_id=qid,
                    body=rec.body,
                    message_id=rec.message_id,
                    tag=rec.tag,
                    keys=rec.keys,
                    properties=props,
                    born_timestamp_ms=rec.born_timestamp_ms,
                    born_host=rec.born_host,
                )
            )
            touched.append((topic, qid))
        if drafts:
            self.store.append_many(drafts)
            with self._lock:
                self.done.update(due)
                while self.low in self.done:
                    self.done.remove(self.low)
                    self.low += 1
            self.save()
        return touched

    def save(self) -> None:
        with self._lock:
            data = json.dumps({"low": self.low, "done": sorted(self.done)}).encode()
        self.disk.write_atomic(self.path, data)
