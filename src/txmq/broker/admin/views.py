"""Admin methods for the dashboard: the broker's status with its metrics, one group in detail,
a transaction's half message, a topic's newest messages.

Owns: ``view_methods(parts)``, merged into the admin channel's method table (admin.py).
Each method takes and returns JSON-ready dicts and runs in the executor (blocking reads).
Must not: change anything; every method here only reads.

Methods: Status {} -> {metrics: Prometheus text, disk_used_ratio, disk_watermark, time_ms, store};
StoreStatus {} -> the store's health (damaged records, rebuilt queues, scrub, fenced, disk);
GroupDetail {group, max?} -> the group's lag rows, retries, DLQ size and newest DLQ messages;
TxnMessage {id} -> the transaction's half message; TopicMessages {topic, max?} -> newest
messages of a topic, newest first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import generate_latest

from txmq import limits
from txmq.broker.state.parts import Parts
from txmq.errors import BadRequestError, ConsumerGroupNotFoundError, invariant
from txmq.model import DLQ_PREFIX, Record
from txmq.store.store import Store

RecordJson = Callable[[Record], dict[str, Any]]


def _max_count(a: dict[str, Any]) -> int:
    n = int(a.get("max", 20))
    if not 1 <= n <= limits.ADMIN_VIEW_MESSAGES_MAX:
        raise BadRequestError(f"max must be 1..{limits.ADMIN_VIEW_MESSAGES_MAX}")
    return n


def newest_messages(store: Store, topic: str, queue_count: int, max_count: int) -> list[Record]:
    """Up to ``max_count`` of a topic's newest retained messages, newest first."""
    invariant(max_count >= 1, "ask for at least one message")
    out: list[Record] = []
    for q in range(queue_count):
        lo, hi = store.queue_offsets(topic, q)
        start = max(lo, hi - max_count)
        if start < hi:
            out += store.read_queue(topic, q, start, hi - start).records
    out.sort(key=lambda r: (r.store_timestamp_ms, r.physical_offset), reverse=True)
    return out[:max_count]


def store_status(parts: Parts) -> dict[str, Any]:
    """The store's health: damaged records found by reads and the scrub, queues rebuilt, scrub
    progress, and whether writes are refused (fenced, or a full disk)."""
    store = parts.store
    return {
        **store.health.report(),
        "fenced": store.fenced,
        "disk_used_ratio": store.disk.used_ratio(store.data_dir),
        "disk_watermark": store.config.disk_watermark,
        "log_start_offset": store.log_start_offset,
        "log_end_offset": store.log_end_offset,
    }


def view_methods(parts: Parts, record_json: RecordJson) -> dict[str, Callable[..., Any]]:
    def status(_: dict[str, Any]) -> Any:
        store = parts.store
        return {
            "metrics": generate_latest(parts.metrics.registry).decode(),
            "disk_used_ratio": store.disk.used_ratio(store.data_dir),
            "disk_watermark": store.config.disk_watermark,
            "time_ms": parts.now_ms(),
            "store": store_status(parts),
        }

    def topic_messages(a: dict[str, Any]) -> Any:
        t = parts.topics.get(str(a["topic"]))
        recs = newest_messages(parts.store, t.name, t.queue_count, _max_count(a))
        return {"topic": t.name, "messages": [record_json(r) for r in recs]}

    def group_detail(a: dict[str, Any]) -> Any:
        name = str(a["group"])
        found = [g for g in parts.lag.lags() if g.group == name]
        if not found:
            raise ConsumerGroupNotFoundError(name)
        dlq = DLQ_PREFIX + name
        dlq_size, dlq_messages = 0, []
        if parts.topics.exists(dlq):
            t = parts.topics.get(dlq)
            ranges = [parts.store.queue_offsets(dlq, q) for q in range(t.queue_count)]
            dlq_size = sum(hi - lo for lo, hi in ranges)
            recs = newest_messages(parts.store, dlq, t.queue_count, _max_count(a))
            dlq_messages = [record_json(r) for r in recs]
        return {
            **found[0].as_json(),
            "retrying": parts.deliveries.retrying(name),
            "dlq_topic": dlq,
            "dlq_size": dlq_size,
            "dlq_messages": dlq_messages,
        }

    def txn_message(a: dict[str, Any]) -> Any:
        shown = parts.tx.show(str(a["id"]))
        offset = shown.get("half_offset")
        if not isinstance(offset, int) or offset < 0:
            raise BadRequestError(f"transaction {a['id']!r} has no half message to show")
        return {"transaction": shown, "message": record_json(parts.store.read_at(offset))}

    return {
        "Status": status,
        "StoreStatus": lambda _a: store_status(parts),
        "TopicMessages": topic_messages,
        "GroupDetail": group_detail,
        "TxnMessage": txn_message,
    }
