"""GroupRedrive: send a consumer group's dead letters back to the topics they died in, each at
most once however often the re-drive is repeated or interrupted.

Owns: reading the group's DLQ (``%DLQ%<group>``) from where the last re-drive stopped, the copy
of each dead letter (its id, keys, tag, body and the properties its producer gave it, plus
TXMQ_REDRIVE_COUNT, one more than the dead letter had, and TXMQ_REDRIVE_GROUP, which keeps the
copy from the topic's other groups: broker/consume/positions.py), and that progress.
The request: ``{group, topic?, max?, dry_run?}``; the reply lists what was (or would be) sent
back, whether more is waiting (``more``), and why it stopped early (``stopped``: a dead letter
of a topic that no longer exists).
Must not: append a copy without the progress that covers it, or the progress without its copies.

Why at most once: progress lives in the commit log, as a record of REDRIVE_TOPIC keyed by the
group (the newest one counts), appended in the same ``append_many`` as the copies it covers.
A batch is one write and one fsync; recovery keeps a batch whole or cuts it whole; replicas are
shipped whole batches. So no crash, on this broker or across a failover, leaves copies without
their progress (re-driven twice) or progress without its copies (lost). One re-drive at a time
per broker (a lock), and a re-drive reads its starting point after taking it.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Final

from txmq import limits
from txmq.broker.state.parts import Parts
from txmq.errors import BadRequestError, RemoteProtocolError
from txmq.model import (
    DLQ_PREFIX,
    PROP_DELIVERY_ATTEMPT,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_REAL_TOPIC,
    PROP_REDRIVE_COUNT,
    PROP_REDRIVE_GROUP,
    REDRIVE_TOPIC,
    Record,
    RecordDraft,
    copy_to_topic,
)
from txmq.protocol.mapping import validate_group

# What the DLQ copy added to the message (rpcs.dead_letter): the copy sent back goes without.
_DLQ_ONLY: Final = frozenset({PROP_REAL_TOPIC, PROP_ORIGIN_MESSAGE_ID, PROP_DELIVERY_ATTEMPT})


@dataclass
class Progress:
    """How far re-drives got in one DLQ queue: every dead letter below ``all`` is done, and
    below ``topics[t]`` every one of topic ``t`` (a re-drive of one topic, ``--topic``)."""

    all: int = 0
    topics: dict[str, int] = field(default_factory=dict)

    def start(self, topic: str | None) -> int:
        return max(self.all, self.topics.get(topic, 0)) if topic else self.all

    def done(self, offset: int, topic: str) -> bool:
        return offset < max(self.all, self.topics.get(topic, 0))

    def past(self, offset: int, topic: str | None) -> Progress:
        """This progress once everything below ``offset`` (of ``topic``, or of all) is done."""
        if topic:
            return Progress(self.all, {**self.topics, topic: max(offset, self.start(topic))})
        top = max(offset, self.all)
        return Progress(top, {t: o for t, o in self.topics.items() if o > top})


def load_progress(parts: Parts, group: str) -> dict[int, Progress]:
    """The group's progress per DLQ queue, from its newest progress record ({} if none).

    Raises:
        RemoteProtocolError: the record is not one this broker writes (damage).
    """
    found = parts.store.find_by_key(REDRIVE_TOPIC, group, 1)
    if not found:
        return {}
    try:
        doc = json.loads(found[0].body)
        return {
            int(q): Progress(int(p["all"]), {str(t): int(o) for t, o in p["topics"].items()})
            for q, p in doc["queues"].items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RemoteProtocolError(f"re-drive progress of group {group!r} is unreadable") from exc


def _progress_draft(group: str, progress: dict[int, Progress]) -> RecordDraft:
    doc = {
        "group": group,
        "queues": {str(q): {"all": p.all, "topics": p.topics} for q, p in progress.items()},
    }
    body = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    return RecordDraft(topic=REDRIVE_TOPIC, queue_id=0, body=body, keys=(group,))


@dataclass
class Plan:
    """One call's dead letters to send back (DLQ queue, record), the progress before and after
    them, whether the DLQ holds more past it, and why it stopped short if it did."""

    letters: list[tuple[int, Record]]
    before: dict[int, Progress]
    progress: dict[int, Progress]
    more: bool = False
    stopped: str = ""

    @property
    def moved(self) -> bool:
        """Whether the progress changed (a queue without a record is at the start)."""
        return any(p != self.before.get(q, Progress()) for q, p in self.progress.items())


def _scan_queue(
    parts: Parts, dlq: str, q: int, before: Progress, want: tuple[str | None, int], plan: Plan
) -> None:
    """Collect queue ``q``'s dead letters past ``before`` into ``plan`` (``want``: the topic
    asked for, None for all, and how many in all), within the call's bounds."""
    topic, room = want
    lo, hi = parts.store.queue_offsets(dlq, q)
    at = max(before.start(topic), lo)
    size_left = min(limits.REDRIVE_BATCH_BYTES_MAX, parts.config.store.segment_size_bytes // 2)
    scan_left = limits.READ_SCAN_ENTRIES_MAX
    while at < hi and scan_left > 0 and not plan.stopped:
        read = parts.store.read_queue(dlq, q, at, min(limits.READ_BATCH_MAX, scan_left))
        scan_left -= max(1, read.next_offset - at)
        for rec in read.records:
            real = rec.properties.get(PROP_REAL_TOPIC, "")
            wanted = (topic is None or real == topic) and not before.done(rec.queue_offset, real)
            if wanted and (len(plan.letters) >= room or (plan.letters and rec.size > size_left)):
                break
            if wanted and not parts.topics.exists(real):
                plan.stopped = (
                    f"the dead letter at offset {rec.queue_offset} of {dlq} came from topic "
                    f"{real!r}, which does not exist now: create it again, or re-drive the "
                    "other topics with --topic"
                )
                break
            if wanted:
                plan.letters.append((q, rec))
                size_left -= rec.size
            at = rec.queue_offset + 1
        else:
            at = max(at, read.next_offset)
            continue
        break
    plan.progress[q] = before.past(at, topic)
    plan.more = plan.more or at < hi


def plan(parts: Parts, group: str, topic: str | None, max_count: int) -> Plan:
    """What one call sends back: the DLQ's queues in order, from the group's progress."""
    dlq = DLQ_PREFIX + group
    progress = load_progress(parts, group)
    out = Plan([], progress, dict(progress))
    if not parts.topics.exists(dlq):
        return out
    room = min(max_count, limits.REDRIVE_BATCH_MAX)
    for q in range(parts.topics.get(dlq).queue_count):
        if len(out.letters) >= room or out.stopped:
            out.more = True
            break
        _scan_queue(parts, dlq, q, progress.get(q, Progress()), (topic, room), out)
    return out


def _copy(parts: Parts, group: str, rec: Record) -> RecordDraft:
    """The dead letter as its producer sent it, marked re-driven for ``group``, in a queue its
    topic picks as it would for a send (a FIFO message group's own queue)."""
    props = {k: v for k, v in rec.properties.items() if k not in _DLQ_ONLY}
    before = rec.properties.get(PROP_REDRIVE_COUNT, "0")
    props[PROP_REDRIVE_COUNT] = str((int(before) if before.isdigit() else 0) + 1)
    props[PROP_REDRIVE_GROUP] = group
    topic = rec.properties[PROP_REAL_TOPIC]
    draft = copy_to_topic(rec, topic=topic, queue_id=0, properties=props, reconsume_times=0)
    return draft.in_queue(parts.sends.pick_queue(parts.topics.get(topic), draft))


class Redrive:
    """GroupRedrive over one broker's parts (blocking: the admin channel runs it in its
    executor)."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self._lock = threading.Lock()

    def __call__(self, a: dict[str, Any]) -> dict[str, Any]:
        group = validate_group(str(a.get("group", "")))
        topic = str(a["topic"]) if a.get("topic") else None
        if topic is not None:
            self.parts.topics.get(topic)  # unknown: refused
        max_count = a.get("max", limits.REDRIVE_BATCH_MAX)
        if isinstance(max_count, bool) or not isinstance(max_count, int) or max_count < 1:
            raise BadRequestError(f"max must be an integer >= 1, got {max_count!r}")
        dry_run = bool(a.get("dry_run", False))
        with self._lock:
            p = plan(self.parts, group, topic, max_count)
            drafts = [_copy(self.parts, group, rec) for _q, rec in p.letters]
            rows = [_row(q, rec, d) for (q, rec), d in zip(p.letters, drafts, strict=True)]
            if not dry_run and p.moved:
                results = self.parts.store.append_many(
                    [*drafts, _progress_draft(group, p.progress)]
                )
                for row, got in zip(rows, results, strict=False):
                    row["offset"] = got.queue_offset
        return {
            "group": group,
            "topic": topic,
            "dlq": DLQ_PREFIX + group,
            "dry_run": dry_run,
            "redriven": rows,
            "more": p.more,
            "stopped": p.stopped,
            "_wake": [] if dry_run else sorted({d.topic for d in drafts}),
        }


def _row(q: int, rec: Record, draft: RecordDraft) -> dict[str, Any]:
    return {
        "dlq_queue": q,
        "dlq_offset": rec.queue_offset,
        "message_id": rec.message_id,
        "topic": draft.topic,
        "queue": draft.queue_id,
        "offset": None,
        "redrives": int(draft.properties[PROP_REDRIVE_COUNT]),
        "keys": list(rec.keys),
        "tag": rec.tag,
    }
