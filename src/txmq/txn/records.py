"""The transaction layer's log records and snapshot format: pure builders and readers.

Owns: how a transaction event becomes a RecordDraft (half, commit, rollback, check, dead copy),
how a log record replays into a ``TxnBook``, and the JSON snapshot of a book. Must not: touch the
store, the disk or a clock.

Records (every one carries the transaction id in PROP_TRANSACTION_ID):
- half: topic HALF_TOPIC, queue 0, flag PREPARED; real topic/queue in PROP_REAL_TOPIC and
  PROP_REAL_QUEUE_ID, PROP_PRODUCER_GROUP, PROP_CLIENT_ID, and PROP_CHECK_IMMUNITY_MS (in
  milliseconds, despite RocketMQ's property name) when the producer asked for one.
- commit: the real message in its real topic/queue (every message of a bundle half:
  txn/bundle.py), flag COMMIT, prepared_offset = half offset, same message id and user
  properties (so a delay property travels with it), the transaction id kept,
  PROP_DECISION_SOURCE added. One append is both the durable decision and the visibility.
- rollback: topic OP_TOPIC, flag ROLLBACK, prepared_offset = half offset, PROP_DECISION_SOURCE.
- check: topic OP_TOPIC, flag NORMAL, PROP_CHECK_NUMBER = n: "check n of this transaction was
  sent", so check counts survive a crash.
- dead copy: topic DEAD_TRANSACTION_TOPIC, flag NORMAL, the half message with its properties,
  appended together with the max-checks rollback so operators can find it by key or offset.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from txmq.model import (
    DEAD_TRANSACTION_TOPIC,
    HALF_TOPIC,
    OP_TOPIC,
    PROP_CHECK_IMMUNITY_MS,
    PROP_CHECK_NUMBER,
    PROP_CLIENT_ID,
    PROP_DECISION_SOURCE,
    PROP_PRODUCER_GROUP,
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PROP_TRANSACTION_ID,
    AppendResult,
    DecisionSource,
    Outcome,
    Record,
    RecordDraft,
    TxnFlag,
    message_draft,
    stored_record,
)
from txmq.txn import bundle
from txmq.txn.book import Decided, Txn, TxnBook, TxnState

SNAPSHOT_VERSION = 2
# Properties that describe the half message's storage, not the message: dropped on commit.
_HALF_ONLY_PROPS = frozenset(
    {PROP_REAL_TOPIC, PROP_REAL_QUEUE_ID, PROP_CHECK_IMMUNITY_MS, PROP_DECISION_SOURCE}
)


def half_draft(
    draft: RecordDraft,
    *,
    queue_id: int,
    transaction_id: str,
    producer_group: str,
    client_id: str,
    check_immunity_ms: int | None,
) -> RecordDraft:
    props = dict(draft.properties)
    props.pop(PROP_CHECK_IMMUNITY_MS, None)
    props.update(
        {
            PROP_REAL_TOPIC: draft.topic,
            PROP_REAL_QUEUE_ID: str(queue_id),
            PROP_TRANSACTION_ID: transaction_id,
            PROP_PRODUCER_GROUP: producer_group,
            PROP_CLIENT_ID: client_id,
        }
    )
    if check_immunity_ms is not None:
        props[PROP_CHECK_IMMUNITY_MS] = str(max(0, check_immunity_ms))
    return RecordDraft(
        topic=HALF_TOPIC,
        queue_id=0,
        body=draft.body,
        flag=TxnFlag.PREPARED,
        message_id=draft.message_id,
        tag=draft.tag,
        keys=draft.keys,
        properties=props,
        born_timestamp_ms=draft.born_timestamp_ms,
        born_host=draft.born_host,
        reconsume_times=draft.reconsume_times,
    )


def stored_half(draft: RecordDraft, result: AppendResult) -> Record:
    """The Record the store now holds for ``draft``, without reading it back."""
    return stored_record(draft, result)


def txn_of_half(half: Record, *, default_timeout_ms: int, claimed: bool) -> Txn:
    props = half.properties
    immunity = props.get(PROP_CHECK_IMMUNITY_MS)
    return Txn(
        transaction_id=props[PROP_TRANSACTION_ID],
        message_id=half.message_id,
        half_offset=half.physical_offset,
        producer_group=props.get(PROP_PRODUCER_GROUP, ""),
        client_id=props.get(PROP_CLIENT_ID, ""),
        topic=props.get(PROP_REAL_TOPIC, ""),
        prepared_at_ms=half.store_timestamp_ms,
        timeout_ms=default_timeout_ms if immunity is None else max(0, int(immunity)),
        claimed=claimed,
    )


def commit_draft(half: Record, source: DecisionSource) -> RecordDraft:
    props = {k: v for k, v in half.properties.items() if k not in _HALF_ONLY_PROPS}
    props[PROP_DECISION_SOURCE] = source.value
    return message_draft(
        half,
        topic=half.properties[PROP_REAL_TOPIC],
        queue_id=int(half.properties[PROP_REAL_QUEUE_ID]),
        properties=props,
        flag=TxnFlag.COMMIT,
        prepared_offset=half.physical_offset,
    )


def commit_drafts(half: Record, source: DecisionSource) -> list[RecordDraft]:
    """The records committing ``half``: its message, or every message of a bundle half
    (txn/bundle.py), appended together."""
    if bundle.PROP_BUNDLE not in half.properties:
        return [commit_draft(half, source)]
    props = {
        k: v
        for k, v in half.properties.items()
        if k not in _HALF_ONLY_PROPS and k != bundle.PROP_BUNDLE
    }
    props[PROP_DECISION_SOURCE] = source.value
    return bundle.commit_drafts(
        half,
        props,
        topic=half.properties[PROP_REAL_TOPIC],
        queue_id=int(half.properties[PROP_REAL_QUEUE_ID]),
    )


def rollback_drafts(txn: Txn, source: DecisionSource, half: Record | None) -> list[RecordDraft]:
    """The rollback record; with MAX_CHECKS also the dead copy, which needs ``half``."""
    drafts = [
        RecordDraft(
            topic=OP_TOPIC,
            queue_id=0,
            body=b"",
            flag=TxnFlag.ROLLBACK,
            message_id=txn.message_id,
            properties={
                PROP_TRANSACTION_ID: txn.transaction_id,
                PROP_DECISION_SOURCE: source.value,
            },
            prepared_offset=txn.half_offset,
        )
    ]
    if source is DecisionSource.MAX_CHECKS:
        if half is None:
            raise AssertionError("the dead copy is a copy of the half message")
        props = dict(half.properties)
        props[PROP_DECISION_SOURCE] = source.value
        drafts.append(
            message_draft(
                half,
                topic=DEAD_TRANSACTION_TOPIC,
                queue_id=0,
                properties=props,
                prepared_offset=half.physical_offset,
                reconsume_times=0,
            )
        )
    return drafts


def check_draft(txn: Txn, number: int) -> RecordDraft:
    return RecordDraft(
        topic=OP_TOPIC,
        queue_id=0,
        body=b"",
        properties={PROP_TRANSACTION_ID: txn.transaction_id, PROP_CHECK_NUMBER: str(number)},
        prepared_offset=txn.half_offset,
    )


def replay(book: TxnBook, rec: Record, *, default_timeout_ms: int, claimed: bool) -> None:
    """Apply one log record to the book (recovery). Records of other layers are ignored.

    ``claimed`` says whether a server-side resolver claims the record (used for half records).
    """
    tid = rec.properties.get(PROP_TRANSACTION_ID, "")
    if not tid:
        return
    if rec.flag is TxnFlag.PREPARED and rec.topic == HALF_TOPIC:
        book.replay_prepared(
            txn_of_half(rec, default_timeout_ms=default_timeout_ms, claimed=claimed)
        )
    elif rec.flag in (TxnFlag.COMMIT, TxnFlag.ROLLBACK) and rec.prepared_offset >= 0:
        source = DecisionSource(rec.properties.get(PROP_DECISION_SOURCE, "producer"))
        outcome = Outcome.COMMITTED if rec.flag is TxnFlag.COMMIT else Outcome.ROLLED_BACK
        book.replay_decision(tid, outcome, source, rec.store_timestamp_ms)
    elif rec.topic == OP_TOPIC and PROP_CHECK_NUMBER in rec.properties:
        book.replay_check(tid, int(rec.properties[PROP_CHECK_NUMBER]), rec.store_timestamp_ms)


# --- Snapshot. ----------------------------------------------------------------------------------


def encode_snapshot(book: TxnBook, offset: int, unrecorded_checks: Mapping[str, int]) -> bytes:
    """The book as of log offset ``offset``: every transaction record below it is applied (and
    some above it may be: replay is idempotent). ``unrecorded_checks`` (tid -> check number)
    are counted in the book but their record is not durable yet: saved as not sent."""
    pending = [_txn_json(t) for t in book.pending.values()]
    for item in pending:
        if unrecorded_checks.get(str(item["id"])) == item["checks"]:
            item["checks"] = int(str(item["checks"])) - 1
    data = {
        "version": SNAPSHOT_VERSION,
        "offset": offset,
        "pending": pending,
        "dead": [_txn_json(t) for t in book.dead.values()],
        "outcomes": [
            [tid, d.outcome.value, d.source.value, d.decided_at_ms]
            for tid, d in book.outcomes.items()
        ],
    }
    return json.dumps(data, separators=(",", ":")).encode()


def decode_snapshot(raw: bytes, book: TxnBook) -> int:
    """Load a snapshot into an empty book; returns the log offset it reflects."""
    data: dict[str, Any] = json.loads(raw)
    if data.get("version") != SNAPSHOT_VERSION:
        return -1  # an older format: the caller replays the whole log instead
    for item in data["pending"]:
        book.add(_txn_from_json(item))
    for item in data["dead"]:
        txn = _txn_from_json(item)
        txn.state = TxnState.DEAD
        book.dead[txn.transaction_id] = txn
    for tid, outcome, source, at in data["outcomes"]:
        book.outcomes[str(tid)] = Decided(Outcome(outcome), DecisionSource(source), int(at))
    return int(data["offset"])


def _txn_json(t: Txn) -> dict[str, object]:
    return {
        "id": t.transaction_id,
        "mid": t.message_id,
        "half": t.half_offset,
        "group": t.producer_group,
        "client": t.client_id,
        "topic": t.topic,
        "at": t.prepared_at_ms,
        "timeout": t.timeout_ms,
        "checks": t.checks,
        "next": t.next_check_ms,
        "claimed": t.claimed,
    }


def _txn_from_json(d: Mapping[str, Any]) -> Txn:
    checks = int(d["checks"])
    return Txn(
        transaction_id=str(d["id"]),
        message_id=str(d["mid"]),
        half_offset=int(d["half"]),
        producer_group=str(d["group"]),
        client_id=str(d["client"]),
        topic=str(d["topic"]),
        prepared_at_ms=int(d["at"]),
        timeout_ms=int(d["timeout"]),
        checks=checks,
        next_check_ms=int(d["next"]),
        state=TxnState.CHECKING if checks else TxnState.PREPARED,
        claimed=bool(d["claimed"]),
    )
