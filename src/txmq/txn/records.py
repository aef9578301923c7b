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

from txmq.format.properties import properties_json
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
    copy_to_topic,
    stored_record,
)
from txmq.txn import bundle
from txmq.txn.book import Decided, Txn, TxnBook, TxnState

SNAPSHOT_VERSION = 2
# Properties that describe the half message's storage, not the message: dropped on commit.
_HALF_ONLY_PROPS = frozenset(
    {PROP_REAL_TOPIC, PROP_REAL_QUEUE_ID, PROP_CHECK_IMMUNITY_MS, PROP_DECISION_SOURCE}
)
_SOURCE_VALUE = {s: s.value for s in DecisionSource}
# Where pairs start in a half's properties block, and a commit's last pair with the closing
# brace (``_commit_block``): compact JSON as format/properties.py writes it.
_RT_FIRST = b'{"' + PROP_REAL_TOPIC.encode() + b'":'
_RT_AT = b',"' + PROP_REAL_TOPIC.encode() + b'":'
_TID_AT = b',"' + PROP_TRANSACTION_ID.encode() + b'":'
_IMMUNITY_AT = b',"' + PROP_CHECK_IMMUNITY_MS.encode() + b'":'
_SOURCE_PAIR = {
    s: b',"' + PROP_DECISION_SOURCE.encode() + b'":"' + s.value.encode() + b'"}'
    for s in DecisionSource
}


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
    before = len(props)
    props.update(
        {
            PROP_REAL_TOPIC: draft.topic,
            PROP_REAL_QUEUE_ID: str(queue_id),
            PROP_TRANSACTION_ID: transaction_id,
            PROP_PRODUCER_GROUP: producer_group,
            PROP_CLIENT_ID: client_id,
        }
    )
    # The commit cuts its properties block from this one (``_commit_block``) where it knows
    # the layout: the five pairs above appended in this order after the sender's properties,
    # then the immunity's, no decision source among the sender's, and every value a string
    # (a container a library caller put there would nest pairs). Otherwise the store encodes
    # both blocks, as it does any draft's.
    values: Any = props.values()  # not cast to str on the way: checked here
    cuttable = (
        len(props) == before + 5
        and PROP_DECISION_SOURCE not in props
        and all(type(v) is str for v in values)
    )
    if check_immunity_ms is not None:
        props[PROP_CHECK_IMMUNITY_MS] = str(max(0, check_immunity_ms))
    return copy_to_topic(
        draft,
        topic=HALF_TOPIC,
        queue_id=0,
        properties=props,
        flag=TxnFlag.PREPARED,
        properties_block=properties_json(props) if cuttable else b"",
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


def commit_draft(half: Record, source: DecisionSource, half_block: bytes = b"") -> RecordDraft:
    """The commit of ``half``; ``half_block``: the half's properties block as written if
    ``half_draft`` made it (its draft's ``properties_block``), or empty."""
    props = {k: v for k, v in half.properties.items() if k not in _HALF_ONLY_PROPS}
    props[PROP_DECISION_SOURCE] = _SOURCE_VALUE[source]
    return copy_to_topic(
        half,
        topic=half.properties[PROP_REAL_TOPIC],
        queue_id=int(half.properties[PROP_REAL_QUEUE_ID]),
        properties=props,
        flag=TxnFlag.COMMIT,
        prepared_offset=half.physical_offset,
        properties_block=_commit_block(half_block, source) if half_block else b"",
    )


def _commit_block(half: bytes, source: DecisionSource) -> bytes:
    """The commit's properties block cut from its half's, as ``half_draft`` laid it out:
    ``{<sender's pairs>,RT,RQ,TID,PG,CID[,IMMUNITY]}`` becomes ``{<sender's>,TID,PG,CID,DS}``,
    byte for byte ``properties_json`` of the commit's properties (~3k instructions
    against ~13k to encode them).

    Why a search finds the right place: in compact JSON every ``"`` inside a string is
    ``\\"``, so ``,"K":`` occurs only where the pair with key K starts (``,"`` then a letter
    cannot be a string's end), and keys are unique.
    """
    tid = half.find(_TID_AT)
    immunity = half.find(_IMMUNITY_AT, tid)
    end = len(half) - 1 if immunity < 0 else immunity
    if half.startswith(_RT_FIRST):  # no sender's properties
        return b"{" + half[tid + 1 : end] + _SOURCE_PAIR[source]
    rt = half.find(_RT_AT)
    return half[:rt] + half[tid:end] + _SOURCE_PAIR[source]


def commit_drafts(
    half: Record, source: DecisionSource, half_block: bytes = b""
) -> list[RecordDraft]:
    """The records committing ``half``: its message, or every message of a bundle half
    (txn/bundle.py), appended together. ``half_block`` as for ``commit_draft``."""
    if bundle.PROP_BUNDLE not in half.properties:
        return [commit_draft(half, source, half_block)]
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
            copy_to_topic(
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
