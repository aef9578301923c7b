"""Value types shared by every layer.

Owns: frozen dataclasses and enums that describe messages and records. No I/O, no clock, no
imports from other txmq modules except errors and limits.

Every value class in txmq is declared one way: ``@dataclass(frozen=True, slots=True)``
(read-only fields, equality and hashing over the fields, no per-instance dict); state that
changes is a plain ``@dataclass`` or class.

Vocabulary (house rule: one meaning per verb): a *draft* is what a writer hands the store; a
*record* is what the commit log holds, with the offsets the store assigned. "Commit" is used only
for transactions.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

# System topics. Names match RocketMQ's so operators recognise them.
HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
DEAD_TRANSACTION_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
DELAY_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
DLQ_PREFIX: Final = "%DLQ%"
# Where a DLQ re-drive records how far it got, in the same append as its copies: one record per
# re-drive, keyed by the consumer group (broker/admin/redrive.py).
REDRIVE_TOPIC: Final = "RMQ_SYS_TXMQ_REDRIVE"
SYSTEM_TOPIC_PREFIXES: Final = ("RMQ_SYS_", "TRANS_CHECK_", "SCHEDULE_TOPIC", "%")

# Property names carried inside a record's properties. The half message keeps its real
# destination here because its stored topic is HALF_TOPIC.
PROP_REAL_TOPIC: Final = "REAL_TOPIC"
PROP_REAL_QUEUE_ID: Final = "REAL_QID"
PROP_TRANSACTION_ID: Final = "TRAN_MSG_ID"  # not a typo: RocketMQ's name for it
PROP_PRODUCER_GROUP: Final = "PGROUP"
PROP_CHECK_IMMUNITY_MS: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROP_MESSAGE_GROUP: Final = "__SHARDINGKEY"
PROP_DELIVERY_TIMESTAMP_MS: Final = "TIMER_DELIVER_MS"
PROP_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
PROP_DELIVERY_ATTEMPT: Final = "TXMQ_DELIVERY_ATTEMPT"
# A message re-driven from a group's DLQ: how many times it was, and the one group that receives
# the copy (the topic's other groups skip it).
PROP_REDRIVE_COUNT: Final = "TXMQ_REDRIVE_COUNT"
PROP_REDRIVE_GROUP: Final = "TXMQ_REDRIVE_GROUP"


# Properties a sender may not set: the broker derives them from the message's type fields.
RESERVED_PROPERTIES: Final = frozenset({PROP_MESSAGE_GROUP, PROP_DELIVERY_TIMESTAMP_MS})


def is_internal_property(key: str) -> bool:
    """A property the broker keeps for itself (message group, delivery time, transaction and
    txmq bookkeeping), never shown to consumers as a user property."""
    return key in RESERVED_PROPERTIES or key.startswith(("TXMQ_", "REAL_", "TRAN_", "PGROUP"))


def is_system_topic(topic: str) -> bool:
    """True for topics txmq owns; users may not create or send to them."""
    return topic.startswith(SYSTEM_TOPIC_PREFIXES)


class TxnFlag(enum.IntEnum):
    """The transaction type stored in every record's flags field.

    Only NORMAL and COMMIT records enter a real topic's consume queue. PREPARED (half) records
    and ROLLBACK (op) records never do.
    """

    NORMAL = 0
    PREPARED = 1
    COMMIT = 2
    ROLLBACK = 3


class MessageType(enum.Enum):
    NORMAL = "normal"
    FIFO = "fifo"
    DELAY = "delay"
    TRANSACTION = "transaction"

    # Members are singletons compared by identity: hashed by identity too (C), not by Enum's
    # Python ``__hash__``, a frame per dict or set lookup on the send path.
    __hash__ = object.__hash__


class FlushMode(enum.Enum):
    """SYNC: a write is acknowledged only after an fsync covers it (the default).

    ASYNC: a write is acknowledged once in the page cache; a flusher fsyncs every interval.
    """

    SYNC = "sync"
    ASYNC = "async"


class Outcome(enum.Enum):
    """A transaction's final outcome."""

    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"

    # Members are singletons compared by identity: hashed by identity too (C), not by Enum's
    # Python ``__hash__``, a frame per dict or set lookup on the send path.
    __hash__ = object.__hash__


class DecisionSource(enum.Enum):
    """Who decided a transaction; counted in metrics."""

    PRODUCER = "producer"
    CHECK_BACK = "check_back"
    MAX_CHECKS = "max_checks"
    OPERATOR = "operator"

    # Members are singletons compared by identity: hashed by identity too (C), not by Enum's
    # Python ``__hash__``, a frame per dict or set lookup on the send path.
    __hash__ = object.__hash__


_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class RecordDraft:
    """What a writer hands the store: everything but the offsets and store time.

    The store assigns queue_offset, physical_offset and store_timestamp_ms.
    """

    topic: str
    queue_id: int
    body: bytes
    flag: TxnFlag = TxnFlag.NORMAL
    message_id: str = ""
    tag: str = ""
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    born_timestamp_ms: int = 0
    born_host: str = ""
    reconsume_times: int = 0
    # For COMMIT/ROLLBACK records: the physical offset of the half record they decide.
    prepared_offset: int = -1
    # ``properties`` as the record's properties block (format/properties.properties_json),
    # where the builder has it (a half and its commit, txn/records.py); empty: the encoder
    # encodes ``properties``. Never anything but the encoding of ``properties``.
    properties_block: bytes = b""

    def in_queue(self, queue_id: int) -> RecordDraft:
        """This draft for ``queue_id``: ``dataclasses.replace`` without its getattr per field."""
        return RecordDraft(
            self.topic,
            queue_id,
            self.body,
            self.flag,
            self.message_id,
            self.tag,
            self.keys,
            self.properties,
            self.born_timestamp_ms,
            self.born_host,
            self.reconsume_times,
            self.prepared_offset,
            self.properties_block,
        )


@dataclass(frozen=True, slots=True)
class Record:
    """A record as stored in the commit log, with its assigned positions."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    flag: TxnFlag
    store_timestamp_ms: int
    born_timestamp_ms: int
    born_host: str
    reconsume_times: int
    prepared_offset: int
    message_id: str
    tag: str
    keys: tuple[str, ...]
    properties: Mapping[str, str]
    body: bytes

    @property
    def next_physical_offset(self) -> int:
        return self.physical_offset + self.size


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A message a producer sent, as the send path takes it (mapped from the wire at the edge,
    txmq.protocol.mapping): its draft (queue 0 until the send path picks one), its type, and
    for a transactional message the check immunity it asked for."""

    draft: RecordDraft
    message_type: MessageType
    check_immunity_ms: int | None = None


@dataclass(frozen=True, slots=True)
class EndRequest:
    """A transaction decision (EndTransaction) as the send path takes it."""

    topic: str
    transaction_id: str
    message_id: str
    commit: bool
    source: DecisionSource


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where the store put a record. Returned only once the record is as durable as the flush
    mode promises."""

    physical_offset: int
    size: int
    queue_offset: int
    store_timestamp_ms: int
    message_id: str


@dataclass(init=False, unsafe_hash=True)
class Entry:
    """What dispatch needs of a record: consume-queue and index fields, no body.

    Produced by the writer (from the draft) and by recovery (``decode_entry``), so both paths
    feed consume queues and the index the same values (format/record.py)."""

    physical_offset: Final[int]
    size: Final[int]
    flag: Final[TxnFlag]
    batch_left: Final[int]
    topic: Final[str]
    queue_id: Final[int]
    queue_offset: Final[int]
    store_timestamp_ms: Final[int]
    tag: Final[str]
    message_id: Final[str]
    keys: Final[tuple[str, ...]]

    def __init__(
        self, physical_offset: int, size: int, flag: TxnFlag, batch_left: int, topic: str,
        queue_id: int, queue_offset: int, store_timestamp_ms: int, tag: str, message_id: str,
        keys: tuple[str, ...],
    ) -> None:  # fmt: skip
        self.physical_offset, self.size, self.flag, self.batch_left = (
            physical_offset, size, flag, batch_left
        )  # fmt: skip
        self.topic, self.queue_id, self.queue_offset = topic, queue_id, queue_offset
        self.store_timestamp_ms, self.tag, self.message_id, self.keys = (
            store_timestamp_ms, tag, message_id, keys
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class QueueRead:
    """The answer to a consume-queue read.

    next_offset is where the next read should start; it moves past entries skipped by a tag
    filter, so a filtered reader still makes progress.
    """

    records: tuple[Record, ...]
    next_offset: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class QueueBytes:
    """A consume-queue read whose records are their verified commit-log bytes
    (docs/formats.md), for bulk readers that decode on their side."""

    records: list[bytes | memoryview]
    next_offset: int
    min_offset: int
    max_offset: int


# Added for the transaction layer.
PROP_CLIENT_ID: Final = "TXMQ_CLIENT_ID"
PROP_DECISION_SOURCE: Final = "TXMQ_DECISION_SOURCE"
PROP_CHECK_NUMBER: Final = "TXMQ_CHECK_NUMBER"


def copy_to_topic(
    rec: Record | RecordDraft,
    *,
    topic: str,
    queue_id: int,
    properties: Mapping[str, str],
    flag: TxnFlag = TxnFlag.NORMAL,
    prepared_offset: int = -1,
    reconsume_times: int | None = None,
    properties_block: bytes = b"",
) -> RecordDraft:
    """The same message (id, body, tag, keys, born time and host) as a new draft in another
    topic: a half, a commit into its real topic, a delay hold and its release, a dead copy, a
    DLQ copy. The one place a message is copied; ``properties`` replace the source's, and
    ``properties_block``: ``properties`` encoded, where the caller has it (RecordDraft)."""
    return RecordDraft(
        topic=topic,
        queue_id=queue_id,
        body=rec.body,
        flag=flag,
        message_id=rec.message_id,
        tag=rec.tag,
        keys=rec.keys,
        properties=properties,
        born_timestamp_ms=rec.born_timestamp_ms,
        born_host=rec.born_host,
        reconsume_times=rec.reconsume_times if reconsume_times is None else reconsume_times,
        prepared_offset=prepared_offset,
        properties_block=properties_block,
    )


def stored_record(
    draft: RecordDraft, result: AppendResult, properties: Mapping[str, str] | None = None
) -> Record:
    """The Record the store holds for ``draft``, written as ``result`` says, without reading it
    back; ``properties``: the draft's as the record holds them, where the caller has them."""
    return Record(
        topic=draft.topic,
        queue_id=draft.queue_id,
        queue_offset=result.queue_offset,
        physical_offset=result.physical_offset,
        size=result.size,
        flag=draft.flag,
        store_timestamp_ms=result.store_timestamp_ms,
        born_timestamp_ms=draft.born_timestamp_ms,
        born_host=draft.born_host,
        reconsume_times=draft.reconsume_times,
        prepared_offset=draft.prepared_offset,
        message_id=draft.message_id,
        tag=draft.tag,
        keys=draft.keys,
        properties=draft.properties if properties is None else properties,
        body=draft.body,
    )
