"""The error tree of txmq.

Owns: every exception type the project raises on purpose, and ``invariant``, the check of a
programmer invariant. Must not import anything from txmq, so every layer can raise these.

Rules (see ../docs/ARCHITECTURE.md): one root, ``TxmqError``. Operating errors (bad input, a full
disk, a corrupt record, a peer that breaks the protocol) are exceptions from this tree, each
carrying its data as attributes. Programmer errors are ``AssertionError`` via ``invariant()``.
Each error maps to exactly one RocketMQ wire status code (``code``) and says whether retrying
can help (``retriable``), the way aiokafka's error classes do.
"""

from __future__ import annotations

import errno
import functools


def invariant(condition: bool, message: str) -> None:
    """Check a programmer invariant even under ``python -O``.

    ``assert`` disappears with ``-O``; storage invariants must not. A failure here means the code
    is wrong, and the only safe reaction is to stop (TigerStyle): callers never catch it.
    """
    if not condition:
        raise AssertionError(message)


# RocketMQ v2 status codes (apache/rocketmq-apis definition.proto, enum Code). Only the ones we
# use are named; the protocol layer maps any TxmqError to its ``code``.
CODE_OK = 20000
CODE_MULTIPLE_RESULTS = 30000
CODE_BAD_REQUEST = 40000
CODE_ILLEGAL_ACCESS_POINT = 40001
CODE_ILLEGAL_TOPIC = 40002
CODE_ILLEGAL_CONSUMER_GROUP = 40003
CODE_ILLEGAL_MESSAGE_TAG = 40004
CODE_ILLEGAL_MESSAGE_KEY = 40005
CODE_ILLEGAL_MESSAGE_GROUP = 40006
CODE_ILLEGAL_MESSAGE_PROPERTY_KEY = 40007
CODE_INVALID_TRANSACTION_ID = 40008
CODE_ILLEGAL_MESSAGE_ID = 40009
CODE_ILLEGAL_FILTER_EXPRESSION = 40010
CODE_ILLEGAL_INVISIBLE_TIME = 40011
CODE_ILLEGAL_DELIVERY_TIME = 40012
CODE_INVALID_RECEIPT_HANDLE = 40013
CODE_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = 40014
CODE_UNRECOGNIZED_CLIENT_TYPE = 40015
CODE_MESSAGE_CORRUPTED = 40016
CODE_CLIENT_ID_REQUIRED = 40017
CODE_ILLEGAL_POLLING_TIME = 40018
CODE_ILLEGAL_OFFSET = 40019
CODE_UNAUTHORIZED = 40100
CODE_FORBIDDEN = 40300
CODE_NOT_FOUND = 40400
CODE_MESSAGE_NOT_FOUND = 40401
CODE_TOPIC_NOT_FOUND = 40402
CODE_CONSUMER_GROUP_NOT_FOUND = 40403
CODE_OFFSET_NOT_FOUND = 40404
CODE_PAYLOAD_TOO_LARGE = 41300
CODE_MESSAGE_BODY_TOO_LARGE = 41301
CODE_PRECONDITION_FAILED = 42800
CODE_TOO_MANY_REQUESTS = 42900
CODE_REQUEST_HEADER_FIELDS_TOO_LARGE = 43100
CODE_MESSAGE_PROPERTIES_TOO_LARGE = 43101
CODE_INTERNAL_ERROR = 50000
CODE_INTERNAL_SERVER_ERROR = 50001
CODE_HA_NOT_AVAILABLE = 50002
CODE_PROXY_TIMEOUT = 50400
CODE_MASTER_PERSISTENCE_TIMEOUT = 50401
CODE_SLAVE_PERSISTENCE_TIMEOUT = 50402
CODE_NOT_IMPLEMENTED = 50100
CODE_UNSUPPORTED = 50500
CODE_VERSION_UNSUPPORTED = 50501
CODE_VERIFY_FIFO_MESSAGE_UNSUPPORTED = 50502
CODE_FAILED_TO_CONSUME_MESSAGE = 60000


class TxmqError(Exception):
    """Root of every error txmq raises on purpose."""

    code: int = CODE_INTERNAL_ERROR
    retriable: bool = False


# --- Input errors: the caller sent something we refuse. Nothing was stored. ----------------------


class BadRequestError(TxmqError):
    """A request is malformed or names something illegal."""

    code = CODE_BAD_REQUEST


class IllegalTopicError(BadRequestError):
    code = CODE_ILLEGAL_TOPIC


class IllegalConsumerGroupError(BadRequestError):
    code = CODE_ILLEGAL_CONSUMER_GROUP


class GroupInUseError(BadRequestError):
    """A consumer group to delete still has a consumer on an open Telemetry stream: refused
    unless forced (a 40000 status: the request as given cannot succeed while it runs)."""


class IllegalTagError(BadRequestError):
    code = CODE_ILLEGAL_MESSAGE_TAG


class IllegalKeyError(BadRequestError):
    code = CODE_ILLEGAL_MESSAGE_KEY


class IllegalMessageGroupError(BadRequestError):
    code = CODE_ILLEGAL_MESSAGE_GROUP


class IllegalPropertyError(BadRequestError):
    code = CODE_ILLEGAL_MESSAGE_PROPERTY_KEY


class IllegalMessageIdError(BadRequestError):
    code = CODE_ILLEGAL_MESSAGE_ID


class IllegalFilterExpressionError(BadRequestError):
    code = CODE_ILLEGAL_FILTER_EXPRESSION


class IllegalInvisibleTimeError(BadRequestError):
    code = CODE_ILLEGAL_INVISIBLE_TIME


class IllegalDeliveryTimeError(BadRequestError):
    code = CODE_ILLEGAL_DELIVERY_TIME


class IllegalOffsetError(BadRequestError):
    code = CODE_ILLEGAL_OFFSET


class InvalidReceiptHandleError(BadRequestError):
    code = CODE_INVALID_RECEIPT_HANDLE


class MessageTypeConflictError(BadRequestError):
    """The message's properties do not fit its topic's or its own declared type."""

    code = CODE_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


class ClientIdRequiredError(BadRequestError):
    code = CODE_CLIENT_ID_REQUIRED


class MessageBodyTooLargeError(TxmqError):
    """A message body exceeds the configured maximum."""

    code = CODE_MESSAGE_BODY_TOO_LARGE

    def __init__(self, size: int, size_max: int) -> None:
        super().__init__(f"message body is {size} bytes; the maximum is {size_max} bytes")
        self.size = size
        self.size_max = size_max


class MessagePropertiesTooLargeError(TxmqError):
    code = CODE_MESSAGE_PROPERTIES_TOO_LARGE

    def __init__(self, size: int, size_max: int) -> None:
        super().__init__(f"message properties are {size} bytes; the maximum is {size_max} bytes")
        self.size = size
        self.size_max = size_max


# --- Not found. -------------------------------------------------------------------------------


class NotFoundError(TxmqError):
    code = CODE_NOT_FOUND


class TopicNotFoundError(NotFoundError):
    code = CODE_TOPIC_NOT_FOUND

    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} does not exist")
        self.topic = topic


class ConsumerGroupNotFoundError(NotFoundError):
    code = CODE_CONSUMER_GROUP_NOT_FOUND

    def __init__(self, group: str) -> None:
        super().__init__(f"consumer group {group!r} does not exist")
        self.group = group


class MessageNotFoundError(NotFoundError):
    code = CODE_MESSAGE_NOT_FOUND


class OffsetNotFoundError(NotFoundError):
    code = CODE_OFFSET_NOT_FOUND


# --- Transactions. ------------------------------------------------------------------------------


class TransactionError(TxmqError):
    """Root of transaction errors."""


class InvalidTransactionIdError(TransactionError, BadRequestError):
    """The transaction id is malformed, unknown, or its record has expired: bad input too (a
    400xx code), so a client treats it as one."""

    code = CODE_INVALID_TRANSACTION_ID

    def __init__(self, transaction_id: str, reason: str) -> None:
        super().__init__(f"transaction {transaction_id!r}: {reason}")
        self.transaction_id = transaction_id
        self.reason = reason


class TransactionConflictError(TransactionError):
    """A decision contradicts the transaction's final outcome (commit after rollback, ...)."""

    code = CODE_PRECONDITION_FAILED

    def __init__(self, transaction_id: str, existing: str, requested: str) -> None:
        # ``existing`` and ``requested`` are outcome values ("rolled_back"): said as words.
        super().__init__(
            f"transaction {transaction_id!r} is already {existing.replace('_', ' ')}; it"
            f" cannot be {requested.replace('_', ' ')} too"
        )
        self.transaction_id = transaction_id
        self.existing = existing
        self.requested = requested


# --- Storage. ----------------------------------------------------------------------------------


class StoreError(TxmqError):
    """Root of storage errors."""

    code = CODE_INTERNAL_SERVER_ERROR


class CorruptRecordError(StoreError):
    """A record failed its checks on read or during recovery.

    Raised with the physical offset so an operator can find it; a corrupt record in the middle of
    the log is reported, never skipped.
    """

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"corrupt record at commit-log offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class StoreFencedError(StoreError):
    """The store refuses writes after a failed fsync; only a restart with recovery clears it.

    Why: after fsync fails, the kernel may have dropped the dirty pages, so retrying fsync can
    report success for data that is gone (PostgreSQL "fsyncgate", 2018).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"store refuses writes until restarted: {reason}")
        self.reason = reason


class DiskFullError(StoreError):
    """The store has no room to write: the disk is full (ENOSPC) or usage would pass the
    write watermark. Nothing was written; reads keep working; retry once space is freed.

    Why MASTER_PERSISTENCE_TIMEOUT: it is RocketMQ's status for "the broker could not persist
    this message", which clients treat as a failed, retriable send; INTERNAL_SERVER_ERROR would
    hide that the cause is an operating condition an operator can fix.
    """

    code = CODE_MASTER_PERSISTENCE_TIMEOUT
    retriable = True

    # Which limit refused, named in the message (both share the wire code: RocketMQ's Code
    # enum has no status for either): the disk itself is out of space (ENOSPC, EDQUOT), or
    # usage would pass the store's ``disk_watermark`` while the disk still has room.
    OUT_OF_SPACE = "out of space"
    WATERMARK = "past the write watermark"

    def __init__(
        self,
        reason: str,
        *,
        used_ratio: float = 1.0,
        watermark: float = 1.0,
        kind: str = OUT_OF_SPACE,
    ) -> None:
        super().__init__(f"disk full ({kind}), writes refused: {reason}")
        self.reason = reason
        self.used_ratio = used_ratio
        self.watermark = watermark
        self.kind = kind

    @classmethod
    def above_watermark(
        cls, used_ratio: float, watermark: float, room: bool = True
    ) -> DiskFullError:
        """Usage would reach ``used_ratio``; ``room`` False: past the disk's free space too,
        so it is reported as out of space (with a 100% watermark, only that can happen)."""
        return cls(
            f"disk usage {used_ratio:.1%} would pass the write watermark {watermark:.0%}"
            if room
            else f"the write needs more than the disk's free space (usage {used_ratio:.1%})",
            used_ratio=used_ratio,
            watermark=watermark,
            kind=cls.WATERMARK if room else cls.OUT_OF_SPACE,
        )


def is_disk_full(exc: OSError) -> bool:
    """ENOSPC or EDQUOT: the write did not fit, a condition freeing space clears."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


class StoreClosedError(StoreError):
    def __init__(self) -> None:
        super().__init__("store is closed")


# --- Authentication and authorization (txmq/protocol/auth.py, txmq/broker/security/auth.py).
# ---------------


class UnauthorizedError(TxmqError):
    """Missing, malformed or wrong credentials: the caller is not known to be who it says."""

    code = CODE_UNAUTHORIZED


class ForbiddenError(TxmqError):
    """A known caller asked for something its ACL entry does not grant."""

    code = CODE_FORBIDDEN


# --- Flow control and server state. -------------------------------------------------------------


class TooManyRequestsError(TxmqError):
    code = CODE_TOO_MANY_REQUESTS
    retriable = True


class UnsupportedError(TxmqError):
    code = CODE_UNSUPPORTED


class ConfigError(TxmqError):
    """A configuration file, environment variable or flag has an invalid value."""

    code = CODE_BAD_REQUEST


# --- Protocol peers (h11 style: Local vs Remote). ------------------------------------------------


class ProtocolError(TxmqError):
    """Abstract: a protocol rule was broken."""

    code = CODE_BAD_REQUEST


class LocalProtocolError(ProtocolError):
    """We were about to break the protocol (a bug or a bad local argument)."""


class RemoteProtocolError(ProtocolError):
    """The peer broke the protocol; raised at the one entry point where peer data comes in."""


class BrokerUnavailableError(TxmqError):
    """A client-side command could not reach the broker."""

    code = CODE_INTERNAL_ERROR
    retriable = True

    def __init__(self, endpoints: str, reason: str) -> None:
        super().__init__(f"broker at {endpoints} is unreachable: {reason}")
        self.endpoints = endpoints
        self.reason = reason


class CoordinationError(TxmqError):
    """etcd (leadership and fencing of replica groups) is unreachable, refused a call or is
    missing; the broker cannot lead or follow until it answers."""

    retriable = True


class NotLeaderError(TxmqError):
    """This replica does not lead its group (a follower, or a leader whose lease lapsed): it
    refuses writes; the message names the leader when one is known."""

    code = CODE_HA_NOT_AVAILABLE
    retriable = True


class ReplicationTimeoutError(TxmqError):
    """A write is durable on the leader but fewer than min_insync_replicas replicas confirmed
    it in time: not acknowledged (a retry may store it twice, as any unanswered send)."""

    code = CODE_SLAVE_PERSISTENCE_TIMEOUT
    retriable = True


class ReplicaLostRecordsError(TxmqError):
    """A follower fetched from below what it had confirmed holding under the same incarnation
    (its data directory was restored from a backup or lost its tail): refused until it takes
    a new incarnation and catches up again (ADR 0005). A replica-channel refusal: the wire code
    is HA_NOT_AVAILABLE, as for NotLeaderError (which ``from_code`` gives for it)."""

    code = CODE_HA_NOT_AVAILABLE


class BrokerRefusedError(TxmqError):
    """The broker refused a request with a status code no class of this tree names (``code``
    is that wire code); ``from_code`` builds it."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@functools.cache
def _classes_by_code() -> dict[int, type[TxmqError]]:
    """Each wire code -> the one class that declares it: this module's tree walked breadth
    first from the root, a code taken by the first (most general) class whose body sets it.
    Subclasses that only inherit a code (TransactionError, CorruptRecordError, ...) are never
    chosen, nor classes of other modules (their import order must not change the answer)."""
    out: dict[int, type[TxmqError]] = {}
    todo: list[type[TxmqError]] = [TxmqError]
    while todo:
        cls = todo.pop(0)
        if "code" in vars(cls) and cls.__module__ == __name__ and cls is not BrokerRefusedError:
            out.setdefault(cls.code, cls)
        todo.extend(cls.__subclasses__())
    return out


def from_code(code: int, message: str) -> TxmqError:
    """The typed error for a RocketMQ status ``code`` a broker answered with ``message``.

    The class is the one declaring ``code``; for a code no class declares, the class of its
    family (40001 -> 40000 BadRequestError, 40499 -> 40400 NotFoundError); otherwise
    BrokerRefusedError. The error carries ``code`` as sent and ``message`` as its text; data
    attributes that only a local raise knows (say TopicNotFoundError.topic) are not set.
    Why not call the constructor: several classes take their data, not a message.

    Precondition: ``code`` is not CODE_OK (an OK status is not an error).
    """
    invariant(code != CODE_OK, "from_code called with an OK status")
    classes = _classes_by_code()
    cls = classes.get(code) or classes.get(code // 100 * 100)
    if cls is None or cls is TxmqError:
        return BrokerRefusedError(code, message)
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    exc.code = code
    return exc
