"""GroupDelete: forget a consumer group on every cluster member (RocketMQ's deleteSubGroup).

Owns: what a group is made of here and what deleting it removes: its positions on every topic's
queues (ack offsets, settled offsets, delivery attempts: the retry state, since txmq redelivers
from the group's book and keeps no ``%RETRY%`` topic) and its messages in flight (their receipt
handles go stale). The request: ``{group, force?, dry_run?}``; the reply lists each member's
queues the group held (``ack``, ``inflight``), the client ids of its live consumers there
(``live``) and how many dead letters its DLQ holds there (``dead_letters``).
Must not: delete dead letters. The group's DLQ topic (``%DLQ%<group>``) and its re-drive
progress stay: dead letters are often the only copy of what a consumer failed on, so removing
them takes its own explicit ``txmq topic delete %DLQ%<group>``. Nor delete anything before every
member has answered the plan: a member that does not answer refuses the whole delete (a member
that fails after its plan is named in ``failed``: the same delete again finishes it).

Refusals: a group no member knows (no position, no consumer) is NOT_FOUND; a group with a
consumer on an open Telemetry stream on any member is refused (GroupInUseError) unless
``force``: a consumer that goes on receiving after a forced delete starts as a new group does,
at each queue's earliest retained message. Durable when it returns (the positions file is
rewritten first, broker/consume/positions.py); on a SYNC replica group the OK waits until every
in-sync follower wrote it too (admin/service.py, broker/replication/positions_version.py).
"""

from __future__ import annotations

from typing import Any

from txmq.broker.cluster.membership import Membership
from txmq.broker.state.parts import Parts
from txmq.errors import ConsumerGroupNotFoundError, GroupInUseError
from txmq.model import DLQ_PREFIX
from txmq.protocol.mapping import validate_group


def _dead_letters(parts: Parts, group: str) -> int:
    dlq = DLQ_PREFIX + group
    if not parts.topics.exists(dlq):
        return 0
    counts = (parts.store.queue_offsets(dlq, q) for q in range(parts.topics.get(dlq).queue_count))
    return sum(hi - lo for lo, hi in counts)


def look(parts: Parts, group: str) -> dict[str, Any]:
    """This member's share of ``group``: its queues, live consumers and dead letters, and
    whether it knows the group at all (a position, or a consumer that subscribed)."""
    queues = [
        {"topic": t, "queue": q, "ack": ack, "inflight": inflight}
        for g, t, q, ack, inflight in parts.deliveries.positions()
        if g == group
    ]
    subscribed = any(g == group for g, _topic in parts.clients.subscribed)
    return {
        "queues": queues,
        "live": list(parts.clients.live_subscribers.get(group, ())),
        "dead_letters": _dead_letters(parts, group),
        "known": bool(queues) or subscribed,
    }


def apply(parts: Parts, group: str, force: bool) -> dict[str, Any]:
    """Delete ``group`` here (durable when this returns); this member's share as it was.

    Raises:
        GroupInUseError: a live consumer of the group is connected here and not ``force``.
    """
    here = look(parts, group)
    if here["live"] and not force:
        raise _in_use(group, {"this broker": here["live"]})
    rows = parts.deliveries.delete_group(group)
    here["queues"] = [
        {"topic": t, "queue": q, "ack": ack, "inflight": inflight} for t, q, ack, inflight in rows
    ]
    return here


def _in_use(group: str, live: dict[str, list[str]]) -> GroupInUseError:
    where = "; ".join(f"{b}: {', '.join(ids)}" for b, ids in sorted(live.items()))
    return GroupInUseError(
        f"consumer group {group!r} has live consumers ({where}): stop them first, or delete "
        "with force (a consumer that goes on receiving starts again at the earliest message)"
    )


def delete_group(parts: Parts, membership: Membership, a: dict[str, Any]) -> dict[str, Any]:
    """GroupDelete. From an operator: every member looks first (each must answer, or nothing
    is deleted anywhere), then this member deletes and forwards the delete; from a peer
    (``forwarded``): look or delete here only."""
    group = validate_group(str(a.get("group", "")))
    force = bool(a.get("force", False))
    dry_run = bool(a.get("dry_run", False))
    if a.get("forwarded"):
        return look(parts, group) if dry_run else apply(parts, group, force)
    me = membership.group.name
    asked = {"group": group, "force": force, "forwarded": True}
    seen = {me: look(parts, group)}
    if membership.peers:
        seen.update(membership.on_every_peer("GroupDelete", {**asked, "dry_run": True}))
    if not any(s["known"] for s in seen.values()):
        raise ConsumerGroupNotFoundError(group)
    live = {b: list(s["live"]) for b, s in seen.items() if s["live"]}
    if live and not force:
        raise _in_use(group, live)
    failed: dict[str, str] = {}
    if not dry_run:
        seen[me] = apply(parts, group, force)
        for name, got in membership.on_peers("GroupDelete", asked).items():
            if isinstance(got, str):
                failed[name] = got
                seen.pop(name, None)
            else:
                seen[name] = got
    brokers = [{"broker": b, **{k: v for k, v in seen[b].items() if k != "known"}}
               for b in [me, *sorted(n for n in seen if n != me)]]  # fmt: skip
    return {
        "group": group,
        "force": force,
        "dry_run": dry_run,
        "dlq": DLQ_PREFIX + group,
        "dlq_kept": True,
        "brokers": brokers,
        "failed": failed,
    }
