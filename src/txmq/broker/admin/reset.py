"""GroupReset: move a consumer group's position on a topic's queues, on every cluster member.

Owns: the plan (each named queue's old and new offset, from ``to``: earliest, latest, the first
message stored at or after a time, or an explicit offset) and carrying it out on this member and
every peer. The request: ``{group, topic, to: earliest|latest|time|offset, at_ms?, offset?,
queue?, dry_run?}``; the reply lists each member's queues with ``old`` (the group's ack offset,
null where it had no position), ``new``, the queue's ``min``/``max`` and the messages the group
had ``inflight`` there (dropped by the move).
Must not: move anything before every member has answered the plan: a bad offset, an unknown
topic or a member that does not answer refuses the whole reset. (A member that fails after its
plan, between two members' moves, is named in ``failed``: the same reset again finishes it.)
In-flight messages and why: docs/operations.md.
"""

from __future__ import annotations

from typing import Any, Final

from txmq.broker.cluster.membership import Membership
from txmq.broker.state.parts import Parts
from txmq.errors import BadRequestError, IllegalOffsetError
from txmq.protocol.mapping import validate_group

TARGETS: Final = ("earliest", "latest", "time", "offset")


def _int(a: dict[str, Any], key: str) -> int:
    raw = a.get(key)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise BadRequestError(f"{key} must be an integer >= 0, got {raw!r}")
    return raw


def plan(parts: Parts, a: dict[str, Any]) -> list[dict[str, Any]]:
    """This member's rows for the reset ``a`` asks for; nothing changes.

    Raises:
        IllegalConsumerGroupError, TopicNotFoundError, BadRequestError: bad input.
        IllegalOffsetError: an explicit offset outside a named queue's [min, max].
    """
    group = validate_group(str(a.get("group", "")))
    topic = str(a.get("topic", ""))
    info = parts.topics.get(topic)
    to = str(a.get("to", ""))
    if to not in TARGETS:
        raise BadRequestError(f"to must be one of {', '.join(TARGETS)}, got {to!r}")
    queues = list(range(info.queue_count))
    if a.get("queue") is not None:
        queue = _int(a, "queue")
        if queue >= info.queue_count:
            raise BadRequestError(f"topic {topic!r} has queues 0..{info.queue_count - 1}")
        queues = [queue]
    held = {
        q: (ack, inflight)
        for g, t, q, ack, inflight in parts.deliveries.positions()
        if g == group and t == topic
    }
    rows = []
    for q in queues:
        lo, hi = parts.store.queue_offsets(topic, q)
        old, inflight = held.get(q, (None, 0))
        if to == "earliest":
            new = lo
        elif to == "latest":
            new = hi
        elif to == "time":
            new = parts.store.offset_for_timestamp(topic, q, _int(a, "at_ms"))
        else:
            new = _int(a, "offset")
            if not lo <= new <= hi:
                raise IllegalOffsetError(
                    f"offset {new} is outside queue {q} of topic {topic!r} on this broker "
                    f"({lo}..{hi}); a time in ms since the epoch has 13 digits or more"
                )
        rows.append({"queue": q, "old": old, "new": new, "min": lo, "max": hi,
                     "inflight": inflight})  # fmt: skip
    return rows


def apply(parts: Parts, a: dict[str, Any]) -> list[dict[str, Any]]:
    """Plan the reset here and make it (durable when this returns); the rows."""
    rows = plan(parts, a)
    offsets = {int(r["queue"]): int(r["new"]) for r in rows}
    parts.deliveries.reset_group(str(a["group"]), str(a["topic"]), offsets)
    return rows


def reset_group(parts: Parts, membership: Membership, a: dict[str, Any]) -> dict[str, Any]:
    """GroupReset. From an operator: every member plans first (each must answer, or nothing
    moves anywhere), then this member moves and forwards the move; from a peer
    (``forwarded``): plan or move here only."""
    dry_run = bool(a.get("dry_run", False))
    if a.get("forwarded"):
        return {"queues": plan(parts, a) if dry_run else apply(parts, a)}
    me = membership.group.name
    peers: dict[str, Any] = {}
    if membership.peers:
        asked = {**a, "forwarded": True, "dry_run": True}
        peers = {n: r["queues"] for n, r in membership.on_every_peer("GroupReset", asked).items()}
    failed: dict[str, str] = {}
    if dry_run:
        mine = plan(parts, a)
    else:
        mine = apply(parts, a)
        for name, got in membership.on_peers("GroupReset", {**a, "forwarded": True}).items():
            if isinstance(got, str):
                failed[name] = got
                peers.pop(name, None)
            else:
                peers[name] = got["queues"]
    brokers = [{"broker": me, "queues": mine}] + [
        {"broker": n, "queues": peers[n]} for n in sorted(peers)
    ]
    return {
        "group": str(a["group"]),
        "topic": str(a["topic"]),
        "to": str(a["to"]),
        "dry_run": dry_run,
        "brokers": brokers,
        "failed": failed,
        "_wake": [] if dry_run else [str(a["topic"])],
    }
