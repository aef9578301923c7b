"""Bundles: many messages in one transaction, prepared with one half record, decided together.

Owns: the bundle's byte format (its messages back to back in the commit-log record format,
docs/formats.md), encoding one message for a bundle (the sender's side), checking a bundle a
sender handed the broker, and the commit records of a bundle half. Pure: no I/O, no clock.
Must not: know about gRPC or Spark.

Why: the official clients allow one message per transaction, so a Spark sink batch of a million
rows used to be a million transactions: a million half records each waiting for its own fsync,
a million decisions, a million entries in the transaction book and in check-back. The Spark
sink is ours, so it sends each task's rows as bundles of up to SINK_BUNDLE_BYTES_MAX: one half
record per bundle (one durable write), one decision per bundle.

How a bundle is stored: one half record (topic HALF_TOPIC, flag PREPARED, as any half) whose
body is the bundle and whose PROP_BUNDLE property counts its messages. Nothing else in the
transaction layer changes: the book tracks one transaction, check-back and its resolvers see
one half. Its commit appends every message of the bundle to the real topic and queue in ONE
``append_many`` (all or nothing after a crash), each a COMMIT record whose prepared_offset is
the half's, carrying the half's properties (transaction id, the sender's properties such as
the sink's tags) under its own; replaying any of them decides the transaction, and replaying
all of them is idempotent. A rollback is one record, as for any half.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from txmq import limits
from txmq.errors import (
    BadRequestError,
    IllegalMessageIdError,
    IllegalPropertyError,
    invariant,
)
from txmq.format import record
from txmq.model import Record, RecordDraft, TxnFlag, is_internal_property

# On a bundle half: how many messages its body holds. Internal (TXMQ_): no sender may set it.
PROP_BUNDLE: Final = "TXMQ_BUNDLE"


def encode_message(
    topic: str,
    body: bytes,
    *,
    message_id: str,
    keys: Sequence[str] = (),
    tag: str = "",
    properties: Mapping[str, str] | None = None,
    born_timestamp_ms: int,
) -> bytes:
    """One message of a bundle, in the record format (position 0, no queue offset).

    Raises the store's input errors (MessagePropertiesTooLargeError, BadRequestError)."""
    draft = RecordDraft(
        topic=topic,
        queue_id=0,
        body=body,
        message_id=message_id,
        tag=tag,
        keys=tuple(keys),
        properties=properties or {},
        born_timestamp_ms=born_timestamp_ms,
    )
    return record.place(record.encode(draft, queue_offset=-1, store_timestamp_ms=0), 0)


def check(blob: bytes | memoryview, *, topic: str, count: int, body_size_max: int) -> int:
    """Verify a bundle a sender handed over: ``count`` well-formed records (CRC included) of
    ``topic``, each a message the send path would accept. Returns the bundle's size.

    Raises:
        CorruptRecordError: a record fails verification or the blob ends inside one.
        BadRequestError (and its subclasses): a message the broker must refuse.
    """
    if not 1 <= count <= limits.SINK_BUNDLE_MESSAGES_MAX:
        raise BadRequestError(
            f"a bundle holds 1..{limits.SINK_BUNDLE_MESSAGES_MAX} messages, not {count}"
        )
    n = 0
    for rec in record.split(blob):
        n += 1
        _check_message(rec, topic, body_size_max)
    if n != count:
        raise BadRequestError(f"the bundle announced {count} messages and holds {n}")
    return len(blob)


def _check_message(rec: Record, topic: str, body_size_max: int) -> None:
    if rec.topic != topic:
        raise BadRequestError(f"a bundle for topic {topic!r} holds a message for {rec.topic!r}")
    if rec.flag is not TxnFlag.NORMAL or rec.queue_offset != -1 or rec.prepared_offset != -1:
        raise BadRequestError("a bundle holds plain messages only")
    if not 0 < len(rec.body) <= body_size_max:
        raise BadRequestError(f"a message body must be 1..{body_size_max} bytes")
    if not rec.message_id or len(rec.message_id) > limits.MESSAGE_ID_LENGTH_MAX:
        raise IllegalMessageIdError(
            f"message_id must be 1..{limits.MESSAGE_ID_LENGTH_MAX} characters"
        )
    for key in rec.properties:
        if not key or is_internal_property(key):
            raise IllegalPropertyError(f"illegal or reserved property key {key!r}")
    record.validate_draft(
        RecordDraft(topic=rec.topic, queue_id=0, body=b"", tag=rec.tag, keys=rec.keys),
        body_size_max=body_size_max,
    )


def commit_drafts(
    half: Record, base: Mapping[str, str], *, topic: str, queue_id: int
) -> list[RecordDraft]:
    """The COMMIT records of a bundle half: each message into ``topic``/``queue_id`` with the
    properties ``base`` (the half's, already stripped of its storage properties) under its own."""
    count = int(half.properties[PROP_BUNDLE])
    # The half's body was checked record by record when prepared (``check``) and the half's
    # CRC on every read, so the commit skips the per-record CRCs (record.split_verified).
    drafts = [
        RecordDraft(
            topic=topic,
            queue_id=queue_id,
            body=body,
            flag=TxnFlag.COMMIT,
            message_id=message_id,
            tag=tag,
            keys=keys,
            properties={**props, **base},
            born_timestamp_ms=born,
            born_host=half.born_host,
            prepared_offset=half.physical_offset,
        )
        for born, message_id, tag, keys, props, body in record.split_verified(half.body)
    ]
    invariant(len(drafts) == count, "a bundle half holds the messages it was checked with")
    return drafts
