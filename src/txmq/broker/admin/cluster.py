"""Admin methods for a cluster of brokers, served on every member's admin channel.

Owns: ClusterInfo (the cluster's name, this member, every member with its liveness as this
member sees it), TopicDefinitions (what peers import, also their probe) and BrokerStatus (this
member's disk and queues, for ``txmq cluster status``), TopicUpdate (growing a topic's queues on
every member), and the forwarding halves of TopicCreate, TopicUpdate and TopicDelete (what a
peer does with a create, growth or delete another member forwarded).
Must not: decide the agreement rule (membership.py; docs/adr/0004-cluster-topic-definitions.md).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

from txmq.broker.cluster.membership import Membership, define, definition
from txmq.broker.state.parts import Parts
from txmq.broker.topics.registry import TopicInfo
from txmq.errors import BadRequestError, TopicNotFoundError
from txmq.model import MessageType


def _dir_bytes(path: Any) -> int:
    """Bytes of the regular files under ``path`` (the data dir: segments dominate)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                continue  # a segment deleted by retention while we walked: not ours to count
    return total


def cluster_methods(
    parts: Parts, membership: Membership
) -> dict[str, Callable[[dict[str, Any]], Any]]:
    def cluster_info(_: dict[str, Any]) -> Any:
        return membership.info()

    def topic_definitions(_: dict[str, Any]) -> Any:
        return {"topics": [definition(t) for t in parts.topics.list()]}

    def broker_status(_: dict[str, Any]) -> Any:
        usage = shutil.disk_usage(parts.config.data_dir)
        topics = parts.topics.list()
        messages = 0
        for t in topics:
            for q in range(t.queue_count):
                lo, hi = parts.store.queue_offsets(t.name, q)
                messages += hi - lo
        return {
            "name": membership.me.name,
            "endpoint": membership.me.endpoint,
            "data_dir": str(parts.config.data_dir),
            "data_bytes": _dir_bytes(parts.config.data_dir),
            "disk_free_bytes": usage.free,
            "disk_total_bytes": usage.total,
            "topics": len(topics),
            "queues": sum(t.queue_count for t in topics),
            "messages": messages,
            "pending_transactions": len(parts.tx.pending()),
        }

    return {
        "ClusterInfo": cluster_info,
        "TopicDefinitions": topic_definitions,
        "BrokerStatus": broker_status,
    }


def create_topic(parts: Parts, membership: Membership, a: dict[str, Any]) -> dict[str, Any]:
    """TopicCreate: from an operator, create here and forward; from a peer, create idempotently."""
    d: dict[str, Any] = {
        "name": str(a["name"]),
        "queues": int(a.get("queues", parts.config.default_queue_count)),
        "type": MessageType(a.get("type", "normal")).value,
        "all": bool(a.get("all", False)),
    }
    if a.get("forwarded"):
        return {**d, "result": define(parts.topics, d)}
    # An auto-created topic nothing was written to yet (a client's route query came first)
    # gives way to the operator's definition, here as on every peer (ADR 0004).
    t = TopicInfo(d["name"], d["queues"], MessageType(d["type"]))
    here = "replaced" if parts.topics.replace_unwritten(t) else "created"
    if here == "created":
        t = parts.topics.create(d["name"], d["queues"], MessageType(d["type"]))
    members = membership.spread_create(t, here) if membership.peers else {}
    return {
        "name": t.name,
        "queues": t.queue_count,
        "type": t.message_type.value,
        "result": here,
        "members": members,
    }


def delete_topic(parts: Parts, membership: Membership, a: dict[str, Any]) -> dict[str, Any]:
    """TopicDelete: from an operator, every member must answer first; from a peer, delete here
    (already gone is fine: the operator's member asked every peer)."""
    name = str(a["name"])
    if a.get("forwarded"):
        membership.tombstone(name)
        try:
            parts.topics.delete(name)
        except TopicNotFoundError:
            return {"result": "absent"}
        return {"result": "deleted"}
    parts.topics.get(name)  # unknown here: refused before anything is forwarded
    members = membership.spread_delete(name) if membership.peers else {}
    membership.tombstone(name)
    parts.topics.delete(name)
    return {"members": members}


def update_topic(parts: Parts, membership: Membership, a: dict[str, Any]) -> dict[str, Any]:
    """TopicUpdate {name, queues, dry_run?}: grow a topic to ``queues`` queues per member.

    From an operator: checked here and on every peer first (each must answer and accept, or
    nothing changes anywhere), then grown here and forwarded. A peer that fails between its
    check and the growth is named in ``members``; it takes the larger definition from this
    member at its next probe (membership.grown), so the cluster converges either way.
    From a peer (``forwarded``): checked or grown here only.
    """
    name = str(a["name"])
    queues = _queue_count(a.get("queues"))
    dry_run = bool(a.get("dry_run", False))
    info = parts.topics.get(name)
    was = parts.topics.grow(name, queues, dry_run=True)[0]
    if a.get("forwarded"):
        parts.topics.grow(name, queues, dry_run=dry_run)
        return {"name": name, "was": was, "queues": queues}
    if membership.peers:
        membership.on_every_peer(
            "TopicUpdate", {"name": name, "queues": queues, "forwarded": True, "dry_run": True}
        )
    members: dict[str, str] = {}
    if not dry_run:
        parts.topics.grow(name, queues)
        members[membership.group.name] = "grown" if queues > was else "unchanged"
        forwarded = {"name": name, "queues": queues, "forwarded": True}
        for peer, got in membership.on_peers("TopicUpdate", forwarded).items():
            if isinstance(got, str):
                members[peer] = f"{got} (it takes the new count at its next probe)"
            else:
                members[peer] = "grown" if int(got["was"]) < queues else "unchanged"
    return {
        "name": name,
        "type": info.message_type.value,
        "was": was,
        "queues": queues,
        "result": "unchanged" if queues == was else "planned" if dry_run else "grown",
        "members": members,
    }


def _queue_count(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise BadRequestError(f"queues must be an integer, got {raw!r}")
    return raw
