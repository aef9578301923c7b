"""The admin channel: a small gRPC service of our own, ``txmq.admin.v1.Admin``, with JSON bodies.

Why: the RocketMQ v2 protocol has no RPCs for topic management, transaction listing and
resolution, consumer-group lag or message lookup, which the ``txmq`` CLI needs. Generic handlers
with JSON bodies keep it free of generated code (no protoc). Each method takes a JSON object and
returns ``{"ok": true, ...}`` or ``{"ok": false, "code": <RocketMQ status code>, "error": str}``;
the client is txmq/client/admin.py.

Methods: TopicList, TopicCreate {name, queues, type}, TopicDescribe {name}, TopicDelete {name},
TopicUpdate {name, queues, dry_run?} (grows a topic on every member: admin/cluster.py),
GroupList, TxnList (the three listings are paged: {after?, limit?} -> rows and "next", see
broker/admin/listing.py), TxnShow {id}, TxnResolve {id, action: commit|rollback},
MessageShow {id}, MessageFind {key, topic?, max?}, ClientList {topic?, group?} (the connected
clients: admin/clients.py, answered on the event loop, which owns the sessions), GroupReset
{group, topic, to, ...} (moves a consumer group's position on every member: admin/reset.py),
GroupRedrive {group, topic?, max?, dry_run?} (sends this member's dead letters of a group
back: admin/redrive.py), GroupDelete {group, force?, dry_run?} (forgets a group's positions on
every member, keeps its DLQ: admin/delete.py); the dashboard's read-only views
(admin/views.py): Status, GroupDetail, TxnMessage, TopicMessages; for clusters
(admin/cluster.py) ClusterInfo,
TopicDefinitions, BrokerStatus; TopicCreate, TopicUpdate, TopicDelete, GroupReset and
GroupDelete take ``forwarded: true`` when a peer forwards them. On a SYNC replica group's
leader GroupReset and GroupDelete answer OK only once every in-sync follower wrote the change
(``Replication.confirm_positions``), else SLAVE_PERSISTENCE_TIMEOUT naming the others.

Wiring: ``add_admin(server, parts, servicer, owner_of)`` next to the MessagingService
registration; it calls ``server.add_generic_rpc_handlers``. Every method runs through
``servicer.run`` (the executor), since the store, the coordinator and the positions are
blocking and thread-safe; except ClientList, which reads the event loop's sessions on the loop.
Must not: change anything the RocketMQ protocol also changes by another path, except the
operator's transaction resolution, which goes through the coordinator like any decision, and a
group's reset and delete, which go through the consumer positions as UpdateOffset does.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from typing import Any, Final

import grpc

from txmq import limits
from txmq.broker.admin import listing
from txmq.broker.admin.clients import OwnerOf, client_list
from txmq.broker.admin.cluster import cluster_methods, create_topic, delete_topic, update_topic
from txmq.broker.admin.delete import delete_group
from txmq.broker.admin.redrive import Redrive
from txmq.broker.admin.reset import reset_group
from txmq.broker.admin.views import view_methods
from txmq.broker.cluster.membership import Membership
from txmq.broker.rpc.json_channel import refusal
from txmq.broker.state.parts import Parts
from txmq.broker.topics.registry import TopicInfo
from txmq.errors import (
    BadRequestError,
    MessageNotFoundError,
)
from txmq.model import Record
from txmq.protocol import channels

SERVICE = channels.ADMIN_SERVICE
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


class AdminMethods:
    """The admin methods over one broker's parts, one method each (blocking: run in the
    executor). ``table`` names them as the wire does."""

    def __init__(self, parts: Parts, membership: Membership) -> None:
        self.parts = parts
        self.membership = membership
        self.redrive = Redrive(parts)

    def table(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return {
            "TopicList": self.topic_list,
            "TopicCreate": self.topic_create,
            "TopicDescribe": self.topic_describe,
            "TopicDelete": self.topic_delete,
            "TopicUpdate": self.topic_update,
            "GroupList": self.group_list,
            "GroupReset": self.group_reset,
            "GroupRedrive": self.group_redrive,
            "GroupDelete": self.group_delete,
            "TxnList": self.txn_list,
            "TxnShow": self.txn_show,
            "TxnResolve": self.txn_resolve,
            "MessageShow": self.message_show,
            "MessageFind": self.message_find,
            **view_methods(self.parts, record_json),
            **cluster_methods(self.parts, self.membership),
        }

    def _topic_row(self, t: TopicInfo) -> dict[str, Any]:
        counts = [self.parts.store.queue_offsets(t.name, q) for q in range(t.queue_count)]
        return {
            "name": t.name,
            "queues": t.queue_count,
            "type": t.message_type.value,
            "messages": sum(hi - lo for lo, hi in counts),
        }

    def topic_list(self, a: dict[str, Any]) -> Any:
        after = listing.page_args(a)[0]
        names = [t for t in self.parts.topics.list() if t.name > after]
        found, cursor = listing.named_page((self._topic_row(t) for t in names), "name", a)
        return {"topics": found, "next": cursor}

    def topic_create(self, a: dict[str, Any]) -> Any:
        return create_topic(self.parts, self.membership, a)

    def topic_describe(self, a: dict[str, Any]) -> Any:
        t = self.parts.topics.get(str(a["name"]))
        queues = [
            {"queue": q, "min": lo, "max": hi}
            for q in range(t.queue_count)
            for lo, hi in [self.parts.store.queue_offsets(t.name, q)]
        ]
        return {"name": t.name, "type": t.message_type.value, "queues": queues}

    def topic_delete(self, a: dict[str, Any]) -> Any:
        return delete_topic(self.parts, self.membership, a)

    def topic_update(self, a: dict[str, Any]) -> Any:
        return update_topic(self.parts, self.membership, a)

    def group_list(self, a: dict[str, Any]) -> Any:
        lags = (g.as_json() for g in self.parts.lag.lags())
        found, cursor = listing.named_page(lags, "group", a)
        return {"groups": found, "next": cursor}

    def group_reset(self, a: dict[str, Any]) -> Any:
        return reset_group(self.parts, self.membership, a)

    def group_redrive(self, a: dict[str, Any]) -> Any:
        return self.redrive(a)

    def group_delete(self, a: dict[str, Any]) -> Any:
        return delete_group(self.parts, self.membership, a)

    def txn_list(self, a: dict[str, Any]) -> Any:
        return listing.txn_page(self.parts, a)

    def txn_show(self, a: dict[str, Any]) -> Any:
        return self.parts.tx.show(str(a["id"]))

    def txn_resolve(self, a: dict[str, Any]) -> Any:
        action = str(a.get("action", ""))
        if action not in ("commit", "rollback"):
            raise BadRequestError("action must be commit or rollback")
        outcome = self.parts.tx.resolve(str(a["id"]), commit=action == "commit")
        return {"outcome": outcome.value}

    def message_show(self, a: dict[str, Any]) -> Any:
        rec = self.parts.store.find_by_message_id(str(a["id"]))
        if rec is None:
            raise MessageNotFoundError(f"no message with id {a['id']!r}")
        return record_json(rec)

    def message_find(self, a: dict[str, Any]) -> Any:
        key = str(a["key"])
        max_count = int(a.get("max", limits.MESSAGE_FIND_RESULTS_DEFAULT))
        if not 1 <= max_count <= limits.MESSAGE_FIND_RESULTS_MAX:
            raise BadRequestError(f"max must be 1..{limits.MESSAGE_FIND_RESULTS_MAX}")
        # Without a topic, search every known topic (the index is keyed by topic and key).
        topics = self.parts.topics.list()
        names = [str(a["topic"])] if a.get("topic") else [t.name for t in topics]
        recs: list[Record] = []
        for name in names:
            recs += self.parts.store.find_by_key(name, key, max_count - len(recs))
            if len(recs) >= max_count:
                break
        # Bounded in bytes too (bodies may be MiBs each): the newest first, at least one.
        out: list[dict[str, Any]] = []
        size = 0
        for r in recs:
            if out and size + r.size > limits.ADMIN_PAGE_BYTES_MAX:
                return {"messages": out, "truncated": True}
            out.append(record_json(r))
            size += r.size
        return {"messages": out, "truncated": False}


# Admin methods that write to the commit log: acknowledged as a v2 write is (ack_gate).
_WRITES_LOG: Final = frozenset({"TxnResolve", "GroupRedrive"})
# Admin methods that change consumer positions: with SYNC replication answered once every
# in-sync follower wrote the change (positions_gate), else refused within the deadline.
_MOVES_POSITIONS: Final = frozenset({"GroupReset", "GroupDelete"})


def add_admin(server: Any, parts: Parts, service: Any, owner_of: OwnerOf | None = None) -> None:
    """Register the admin methods; ``owner_of`` names the access key a client id is bound to
    (None: no ACL)."""

    def client_list_now(a: dict[str, Any]) -> Any:
        return client_list(parts.clients, parts.now_ms(), owner_of, a)

    # Methods that read what belongs to the event loop: run there, not in the executor.
    on_loop: dict[str, Callable[[dict[str, Any]], Any]] = {"ClientList": client_list_now}
    handlers = {}
    for name, fn in {**AdminMethods(parts, service.membership).table(), **on_loop}.items():

        async def call(
            body: bytes,
            context: Any,
            fn: Callable[[dict[str, Any]], Any] = fn,
            name: str = name,
        ) -> bytes:
            try:
                args = json.loads(body or b"{}")
                if not isinstance(args, dict):
                    raise BadRequestError("request body must be a JSON object")
                result = fn(args) if name in on_loop else await service.run(fn, args)
                if name in _WRITES_LOG and service.ack_gate is not None:
                    # A replica group's leader: SYNC, and fenced; refused within the deadline.
                    await service.ack_gate(context.time_remaining())
                for topic in result.pop("_wake", ()):
                    service.notify_appended(topic)  # long polls look again now
                moved = name in _MOVES_POSITIONS and not args.get("dry_run")
                if moved and service.positions_gate is not None:
                    # Applied here; a replica group's followers must write it too.
                    await service.positions_gate(context.time_remaining())
                return channels.frame({"ok": True, **result})
            except Exception as exc:
                return channels.frame(refusal(exc, fn.__name__))

        handlers[name] = grpc.unary_unary_rpc_method_handler(call)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
