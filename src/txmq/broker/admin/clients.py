"""ClientList: the clients connected to this broker, as an operator reads them (what RocketMQ's
mqadmin shows as producerConnection and consumerConnection).

Owns: one JSON entry per session (rpc/sessions.py) and the filters by topic and group.
Runs on the event loop, not in the executor as the other admin methods do: the sessions belong
to the loop, and reading them is a walk over memory bounded by limits.CLIENTS_MAX sessions,
which add_admin (service.py) awaits nowhere, so no session changes while it is read.
Must not: change a session, or block.

Entry: client_id, type (the RocketMQ ClientType by name: producer, push_consumer,
simple_consumer, ...), topics (published), group and groups (the consumer groups it named),
subscriptions [{group, topic}], connected (an open Telemetry stream), streams (how many),
settings (Settings messages received), last_seen (ISO-8601 UTC), last_seen_ms, idle_ms (ms
since), language, version, hostname, address (of its newest Telemetry stream) and access_key
(the key its client id is bound to under an ACL; null without one or when not bound).
Request: {topic?, group?}: only clients publishing or subscribing to the topic, only clients
of the group. Reply: {clients: [...] by client id, time_ms}.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb

from txmq.broker.rpc.sessions import Clients, Session

# The access key a client id is bound to (security/client_ids.py ``ClientIds.owner``).
OwnerOf = Callable[[str], str | None]


def enum_name(enum: Any, number: int) -> str:
    """A protobuf enum value as a lower-case name (``PUSH_CONSUMER`` -> ``push_consumer``):
    ``unspecified`` for 0, ``unknown_<n>`` for a number the enum does not know."""
    if number == 0:
        return "unspecified"
    try:
        return str(enum.Name(number)).lower()
    except ValueError:
        return f"unknown_{number}"


def _entry(s: Session, now_ms: int, owner_of: OwnerOf | None) -> dict[str, Any]:
    groups = sorted(s.groups | {g for g, _t in s.subscriptions})
    seen = dt.datetime.fromtimestamp(s.last_seen_ms / 1000, dt.UTC)
    return {
        "client_id": s.client_id,
        "type": enum_name(pb.ClientType, s.client_type),
        "topics": sorted(s.topics),
        "group": groups[0] if len(groups) == 1 else ",".join(groups),
        "groups": groups,
        "subscriptions": [{"group": g, "topic": t} for g, t in sorted(s.subscriptions)],
        "connected": s.connected,
        "streams": len(s.streams),
        "settings": s.settings,
        "last_seen": seen.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "last_seen_ms": s.last_seen_ms,
        "idle_ms": max(0, now_ms - s.last_seen_ms),
        "language": enum_name(pb.Language, s.language),
        "version": s.version,
        "hostname": s.hostname,
        "address": s.address,
        "access_key": owner_of(s.client_id) if owner_of is not None else None,
    }


def _matches(s: Session, topic: str, group: str) -> bool:
    if topic and topic not in s.topics and all(t != topic for _g, t in s.subscriptions):
        return False
    return not group or group in s.groups or any(g == group for g, _t in s.subscriptions)


def client_list(
    clients: Clients, now_ms: int, owner_of: OwnerOf | None, a: dict[str, Any]
) -> dict[str, Any]:
    """The ClientList answer (the module docstring); call it on the event loop."""
    topic, group = str(a.get("topic") or ""), str(a.get("group") or "")
    found = [
        _entry(s, now_ms, owner_of)
        for s in clients.sessions.values()  # at most limits.CLIENTS_MAX
        if _matches(s, topic, group)
    ]
    found.sort(key=lambda e: str(e["client_id"]))
    return {"clients": found, "time_ms": now_ms}
