"""The admin channel: a small gRPC service of our own, ``txmq.admin.v1.Admin``, with JSON bodies.

Why: the RocketMQ v2 protocol has no RPCs for topic management, transaction listing and
resolution, consumer-group lag or message lookup, which the ``txmq`` CLI needs. Generic handlers
with JSON bodies keep it free of generated code (no protoc). Each method takes a JSON object and
returns ``{"ok": true, ...}`` or ``{"ok": false, "code": <RocketMQ status code>, "error": str}``;
the client is txmq/cli/admin_client.py.

Methods: TopicList, TopicCreate {name, queues, type}, TopicDescribe {name}, TopicDelete {name},
GroupList, TxnList (the three listings are paged: {after?, limit?} -> rows and "next", see
broker/listing.py), TxnShow {id}, TxnResolve {id, action: commit|rollback}, MessageShow {id},
MessageFind {key, topic?, max?}; and the dashboard's read-only views (admin_views.py): Status,
GroupDetail, TxnMessage, TopicMessages.

Wiring: ``add_admin(server, parts, servicer)`` next to the MessagingService registration; it
calls ``server.add_generic_rpc_handlers``. Every method runs through ``servicer.run`` (the
executor), since the store, the coordinator and the positions are blocking and thread-safe.
Must not: change anything the RocketMQ protocol also changes by another path, except the
operator's transaction resolution, which goes through the coordinator like any decision.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from typing import Any

import grpc

from txmq.broker import listing
from txmq.broker.admin_views import view_methods
from txmq.broker.parts import Parts
from txmq.broker.topics import TopicInfo
from txmq.errors import (
    CODE_BAD_REQUEST,
    CODE_INTERNAL_ERROR,
    BadRequestError,
    MessageNotFoundError,
    TxmqError,
)
from txmq.model import MessageType, Record

SERVICE = "txmq.admin.v1.Admin"
log = logging.getLogger("txmq.broker")


def record_json(rec: Record) -> dict[str, Any]:
    return {
        "topic": rec.topic,
        "queue_id": rec.queue_id,
        "queue_offset": rec.queue_offset,
        "physical_offset": rec.physical_offset,
        "flag": rec.flag.name,
        "message_id": rec.message_id,
        "tag": rec.tag,
        "keys": list(rec.keys),
        "properties": dict(rec.properties),
        "born_timestamp_ms": rec.born_timestamp_ms,
        "store_timestamp_ms": rec.store_timestamp_ms,
        "body": rec.body.decode("utf-8", "replace"),
        # The exact bytes, for a hex view of a body that is not UTF-8 text.
        "body_base64": base64.b64encode(rec.body).decode("ascii"),
        "size": rec.size,
    }


def _methods(parts: Parts, service: Any) -> dict[str, Callable[[dict[str, Any]], Any]]:
    def topic_list(a: dict[str, Any]) -> Any:
        def row(t: TopicInfo) -> dict[str, Any]:
            counts = [parts.store.queue_offsets(t.name, q) for q in range(t.queue_count)]
            return {
                "name": t.name,
                "queues": t.queue_count,
                "type": t.message_type.value,
                "messages": sum(hi - lo for lo, hi in counts),
            }

        after = listing.page_args(a)[0]
        names = [t for t in parts.topics.list() if t.name > after]
        found, cursor = listing.named_page((row(t) for t in names), "name", a)
        return {"topics": found, "next": cursor}

    def topic_create(a: dict[str, Any]) -> Any:
        t = parts.topics.create(
            str(a["name"]), int(a.get("queues", 4)), MessageType(a.get("type", "normal"))
        )
        return {"name": t.name, "queues": t.queue_count, "type": t.message_type.value}

    def topic_describe(a: dict[str, Any]) -> Any:
        t = parts.topics.get(str(a["name"]))
        queues = [
            {"queue": q, "min": lo, "max": hi}
            for q in range(t.queue_count)
            for lo, hi in [parts.store.queue_offsets(t.name, q)]
        ]
        return {"name": t.name, "type": t.message_type.value, "queues": queues}

    def topic_delete(a: dict[str, Any]) -> Any:
        parts.topics.delete(str(a["name"]))
        return {}

    def group_list(a: dict[str, Any]) -> Any:
        found, cursor = listing.named_page((g.as_json() for g in parts.lag.lags()), "group", a)
        return {"groups": found, "next": cursor}

    def txn_list(a: dict[str, Any]) -> Any:
        return listing.txn_page(parts, a)

    def txn_show(a: dict[str, Any]) -> Any:
        return parts.tx.show(str(a["id"]))

    def txn_resolve(a: dict[str, Any]) -> Any:
        action = str(a.get("action", ""))
        if action not in ("commit", "rollback"):
            raise BadRequestError("action must be commit or rollback")
        outcome = parts.tx.resolve(str(a["id"]), commit=action == "commit")
        return {"outcome": outcome.value}

    def message_show(a: dict[str, Any]) -> Any:
        rec = parts.store.find_by_message_id(str(a["id"]))
        if rec is None:
            raise MessageNotFoundError(f"no message with id {a['id']!r}")
        return record_json(rec)

    def message_find(a: dict[str, Any]) -> Any:
        key, max_count = str(a["key"]), int(a.get("max", 32))
        if not 1 <= max_count <= 1000:
            raise BadRequestError("max must be 1..1000")
        # Without a topic, search every known topic (the index is keyed by topic and key).
        names = [str(a["topic"])] if a.get("topic") else [t.name for t in parts.topics.list()]
        recs: list[Record] = []
        for name in names:
            recs += parts.store.find_by_key(name, key, max_count - len(recs))
            if len(recs) >= max_count:
                break
        return {"messages": [record_json(r) for r in recs]}

    return {
        "TopicList": topic_list,
        "TopicCreate": topic_create,
        "TopicDescribe": topic_describe,
        "TopicDelete": topic_delete,
        "GroupList": group_list,
        "TxnList": txn_list,
        "TxnShow": txn_show,
        "TxnResolve": txn_resolve,
        "MessageShow": message_show,
        "MessageFind": message_find,
        **view_methods(parts, record_json),
    }


def refusal(exc: Exception, method: str) -> dict[str, Any]:
    """The ``{"ok": false, ...}`` answer of a txmq-service method that raised ``exc``."""
    if isinstance(exc, TxmqError):
        return {"ok": False, "code": exc.code, "error": str(exc)}
    if isinstance(exc, (KeyError, ValueError, TypeError)):
        return {"ok": False, "code": CODE_BAD_REQUEST, "error": f"bad request: {exc!r}"}
    # A bug, not a refusal: logged with its traceback here, and reported to the caller as an
    # internal error instead of a dropped call it would read as "broker unreachable".
    log.exception("%s failed", method)
    return {"ok": False, "code": CODE_INTERNAL_ERROR, "error": f"internal error: {exc!r}"}


def add_admin(server: Any, parts: Parts, service: Any) -> None:
    handlers = {}
    for name, fn in _methods(parts, service).items():

        async def call(
            body: bytes, context: Any, fn: Callable[[dict[str, Any]], Any] = fn
        ) -> bytes:
            try:
                args = json.loads(body or b"{}")
                if not isinstance(args, dict):
                    raise BadRequestError("request body must be a JSON object")
                result = await service.run(fn, args)
                return json.dumps({"ok": True, **result}).encode()
            except Exception as exc:
                return json.dumps(refusal(exc, fn.__name__)).encode()

        handlers[name] = grpc.unary_unary_rpc_method_handler(call)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
