"""The broker's parts, opened together from one data directory, and the blocking operations
the gRPC layer runs in the executor.

Owns: opening and closing store, transactions, topics, deliveries and the delay schedule in the
right order; send (normal / FIFO / delay / transactional), dead-lettering, and the delay
schedule. Must not: speak gRPC (service.py does) or run the event loop (app.py does).
"""

from __future__ import annotations

import itertools
import time
import zlib
from dataclasses import dataclass

from txmq.broker.clients import Clients
from txmq.broker.config import BrokerConfig
from txmq.broker.delay import DelaySchedule, due_later
from txmq.broker.delivery import DeadLetter, Deliveries
from txmq.broker.metrics import Metrics
from txmq.broker.topics import TopicInfo, TopicRegistry
from txmq.errors import MessageTypeConflictError
from txmq.model import (
    DLQ_PREFIX,
    PROP_DELIVERY_ATTEMPT,
    PROP_MESSAGE_GROUP,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_REAL_TOPIC,
    MessageType,
    RecordDraft,
)
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
        elif mtype is MessageType.DELAY and due_later(draft, wall_ms()):
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
