"""Mapping between RocketMQ v2 protobuf messages and txmq model values. Pure: no I/O, no clock.

Owns: protobuf -> RecordDraft (with validation that raises typed errors), Record -> protobuf
Message (and straight to a ReceiveMessageResponse's bytes: ``received_message_wire``; an
AckMessageResponse's: ``ack_reply_wire``; a SendMessageResponse's: ``send_reply_wire``), Status
construction, Duration/Timestamp helpers.
Uses the official client's generated stubs (``rocketmq.grpc_protocol``) so both sides agree on
every field number.
Must not: touch the store, sockets or the event loop.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final

from rocketmq.grpc_protocol import definition_pb2 as pb

from txmq import limits
from txmq.errors import (
    CODE_OK,
    BadRequestError,
    IllegalConsumerGroupError,
    IllegalDeliveryTimeError,
    IllegalKeyError,
    IllegalMessageGroupError,
    IllegalMessageIdError,
    IllegalPropertyError,
    IllegalTagError,
    IllegalTopicError,
    MessageBodyTooLargeError,
    MessageTypeConflictError,
    TxmqError,
    UnsupportedError,
)
from txmq.model import (
    PROP_DELIVERY_TIMESTAMP_MS,
    PROP_MESSAGE_GROUP,
    RESERVED_PROPERTIES,
    DecisionSource,
    EndRequest,
    MessageType,
    Outgoing,
    Record,
    RecordDraft,
    is_internal_property,
    is_system_topic,
)
from txmq.protocol.wire import ONE_BYTE as _ONE_BYTE
from txmq.protocol.wire import nested as _nested
from txmq.protocol.wire import seconds_nanos as _seconds_nanos
from txmq.protocol.wire import text as _text
from txmq.protocol.wire import varint as _varint

# Names are matched whole (``fullmatch``): ``$`` would also match before a trailing newline.
_NAME_RE = re.compile(r"[%|a-zA-Z0-9_-]+")

WIRE_TYPES: Mapping[MessageType, int] = {
    MessageType.NORMAL: pb.NORMAL,
    MessageType.FIFO: pb.FIFO,
    MessageType.DELAY: pb.DELAY,
    MessageType.TRANSACTION: pb.TRANSACTION,
}
MODEL_TYPES: Mapping[int, MessageType] = {v: k for k, v in WIRE_TYPES.items()}
# Native copies (a Final dict and ints, not a Mapping's method call or a module's attribute per
# use).
_MODEL_TYPES: Final[dict[int, MessageType]] = {int(k): v for k, v in MODEL_TYPES.items()}
_GZIP: Final = int(pb.GZIP)
_COMMIT: Final = int(pb.COMMIT)
_ROLLBACK: Final = int(pb.ROLLBACK)
_SOURCE_SERVER_CHECK: Final = int(pb.SOURCE_SERVER_CHECK)
# ``is_internal_property`` of the property names delivered lately: a name's answer never
# changes, and a delivered message asks it for each of its properties; a dict's lookup, not a
# call per property.
_INTERNAL_SEEN: Final[dict[str, bool]] = {}


def _internal(name: str) -> bool:
    seen = _INTERNAL_SEEN.get(name)
    if seen is not None:
        return seen
    if len(_INTERNAL_SEEN) >= 1024:
        _INTERNAL_SEEN.clear()
    internal = is_internal_property(name)
    _INTERNAL_SEEN[name] = internal
    return internal


def status(code: int = CODE_OK, message: str = "OK") -> Any:
    return pb.Status(code=code, message=message)


def error_status(exc: TxmqError) -> Any:
    return status(exc.code, str(exc) or type(exc).__name__)


# A protobuf int field reads as an int: typed locals, no int() calls.
def duration_ms(d: Any) -> int:
    seconds: int = d.seconds
    nanos: int = d.nanos
    return seconds * 1000 + nanos // 1_000_000


def timestamp_ms(ts: Any) -> int:
    seconds: int = ts.seconds
    nanos: int = ts.nanos
    return seconds * 1000 + nanos // 1_000_000


def delivery_timestamp_ms(ts: Any) -> int:
    """A delivery timestamp in ms. Compatibility: rocketmq-python-client 5.1.2 puts the
    millisecond value it documents into ``Timestamp.seconds``; a value too large to be seconds
    is read as milliseconds, so that client's delay messages work unchanged."""
    seconds: int = ts.seconds
    if seconds > limits.TIMESTAMP_SECONDS_PLAUSIBLE_MAX:
        return seconds
    nanos: int = ts.nanos
    return seconds * 1000 + nanos // 1_000_000


def set_timestamp(ts: Any, ms: int) -> None:
    # Two stores of native ints (no divmod tuple, no read back of ``nanos``): ~2k fewer
    # instructions, three times per delivered message.
    ts.seconds = ms // 1000
    ts.nanos = ms % 1000 * 1_000_000


def set_duration(d: Any, ms: int) -> None:
    d.seconds = ms // 1000
    d.nanos = ms % 1000 * 1_000_000


def validate_topic(name: str, *, allow_system: bool = False) -> str:
    """A topic name: 1..TOPIC_NAME_LENGTH_MAX of letters, digits, '_', '-', '%', '|'; a system
    topic (model.is_system_topic) only with ``allow_system``. The one topic check.

    Raises:
        IllegalTopicError: empty, too long, other characters, or a system topic not allowed.
    """
    return _checked_topic(name, allow_system)


# A name's answer never changes (a refused name raises, which is not cached), and the regular
# expression costs more than the cache's lookup on the paths that check a name per request.
@functools.lru_cache(maxsize=1024)
def _checked_topic(name: str, allow_system: bool) -> str:
    if not name or len(name) > limits.TOPIC_NAME_LENGTH_MAX or not _NAME_RE.fullmatch(name):
        raise IllegalTopicError(
            f"illegal topic name {name!r}: use 1..{limits.TOPIC_NAME_LENGTH_MAX} of "
            "letters, digits, '_', '-', '%', '|'"
        )
    if is_system_topic(name) and not allow_system:
        raise IllegalTopicError(f"topic {name!r} is reserved for the broker")
    return name


def validate_group(name: str) -> str:
    """A consumer group name: 1..GROUP_NAME_LENGTH_MAX of the characters topic names use.

    Raises:
        IllegalConsumerGroupError: empty, too long or with other characters.
    """
    if not name or len(name) > limits.GROUP_NAME_LENGTH_MAX or not _NAME_RE.fullmatch(name):
        raise IllegalConsumerGroupError(
            f"illegal consumer group {name[:64]!r}: use 1..{limits.GROUP_NAME_LENGTH_MAX} of "
            "letters, digits, '_', '-', '%', '|'"
        )
    return name


def body_digest(body: bytes) -> str:
    """The body digest consumers check: MD5 as 32 upper-case hex digits, as the RocketMQ proxy
    sends it. Every official client checks MD5 the same way; their CRC32 checks disagree (Node.js
    compares a decimal string, Java unpadded hex), so CRC32 would flag good bodies as corrupted."""
    return hashlib.md5(body, usedforsecurity=False).hexdigest().upper()


def wire_message_type(msg: Any) -> MessageType:
    return _message_type(msg.system_properties)


def _message_type(sp: Any) -> MessageType:
    """``wire_message_type`` of a message whose ``system_properties`` is ``sp``."""
    wire_type: int = sp.message_type
    t = _MODEL_TYPES.get(wire_type)
    if t is not None:
        return t
    if sp.message_group:
        return MessageType.FIFO
    if sp.HasField("delivery_timestamp"):
        return MessageType.DELAY
    return MessageType.NORMAL


def outgoing_from_wire(msg: Any, *, born_host: str, body_size_max: int) -> Outgoing:
    """A SendMessage entry as the send path takes it, checked in the order a producer sees its
    errors: body empty or too large, message id, then the fields (``draft_from_wire``).
    Raises typed input errors; nothing is stored then."""
    body: bytes = msg.body
    body_size = len(body)
    if body_size == 0:
        raise BadRequestError("message body is empty")
    if body_size > body_size_max:
        raise MessageBodyTooLargeError(body_size, body_size_max)
    sp = msg.system_properties
    message_id: str = sp.message_id
    if not message_id or len(message_id) > limits.MESSAGE_ID_LENGTH_MAX:
        raise IllegalMessageIdError(
            f"message_id must be 1..{limits.MESSAGE_ID_LENGTH_MAX} characters"
        )
    mtype = _message_type(sp)
    draft = _draft(msg, sp, body, message_id, 0, born_host, mtype)
    immunity = None
    if mtype is MessageType.TRANSACTION and sp.HasField("orphaned_transaction_recovery_duration"):
        immunity = duration_ms(sp.orphaned_transaction_recovery_duration)
    return Outgoing(draft, mtype, immunity)


def end_request_from_wire(request: Any) -> EndRequest:
    """An EndTransactionRequest as the send path takes it.

    Raises:
        BadRequestError: the resolution is neither COMMIT nor ROLLBACK.
    """
    resolution: int = request.resolution
    source: int = request.source
    if resolution != _COMMIT and resolution != _ROLLBACK:
        raise BadRequestError("resolution must be COMMIT or ROLLBACK")
    return EndRequest(
        topic=request.topic.name,
        transaction_id=request.transaction_id,
        message_id=request.message_id,
        commit=resolution == _COMMIT,
        source=DecisionSource.CHECK_BACK
        if source == _SOURCE_SERVER_CHECK
        else DecisionSource.PRODUCER,
    )


def draft_from_wire(
    msg: Any, *, queue_id: int, born_host: str, mtype: MessageType | None = None
) -> RecordDraft:
    """Validate a wire message and turn it into a draft for ``queue_id``; ``mtype`` is its
    ``wire_message_type`` when the caller has it already.

    Raises typed input errors (tag, keys, properties, type conflicts); nothing is stored then.
    """
    sp = msg.system_properties
    if mtype is None:
        mtype = _message_type(sp)
    return _draft(msg, sp, msg.body, sp.message_id, queue_id, born_host, mtype)


def _draft(
    msg: Any,
    sp: Any,
    body: bytes,
    message_id: str,
    queue_id: int,
    born_host: str,
    mtype: MessageType,
) -> RecordDraft:
    """``draft_from_wire`` with what its caller read already: ``sp`` is ``msg``'s system
    properties, ``body`` and ``message_id`` its fields. Each protobuf field is read once here:
    a read is a call into upb that builds a new object."""
    topic = validate_topic(msg.topic.name)
    if sp.body_encoding == _GZIP:
        # Bodies are stored and delivered as sent, marked IDENTITY: a compressed one would reach
        # consumers still compressed. No official client compresses on send.
        raise UnsupportedError("body_encoding GZIP is not supported: send IDENTITY bodies")
    tag: str = sp.tag
    if tag and (len(tag) > limits.TAG_LENGTH_MAX or "||" in tag or tag.strip() != tag):
        raise IllegalTagError(f"illegal tag {tag!r}")
    # tuple() of an empty repeated field costs a failed length hint: skipped when empty.
    wire_keys = sp.keys
    keys: tuple[str, ...] = tuple(wire_keys) if wire_keys else ()
    if keys and (
        len(keys) > limits.KEYS_PER_MESSAGE_MAX
        or any(not k.strip() or len(k) > limits.KEY_LENGTH_MAX for k in keys)
    ):
        raise IllegalKeyError("each key must be 1..255 non-blank characters, at most 32 keys")
    # dict() of a protobuf map runs the Mapping mixin's keys() in Python: skipped when empty.
    wire_props = msg.user_properties
    props = dict(wire_props) if len(wire_props) else {}
    for k in props:
        if not k or k in RESERVED_PROPERTIES or k.startswith(("TXMQ_", "REAL_", "TRAN_")):
            raise IllegalPropertyError(f"illegal or reserved property key {k!r}")
    group: str = sp.message_group
    if group:
        if mtype is not MessageType.FIFO:
            raise MessageTypeConflictError("message_group is only allowed on FIFO messages")
        if len(group) > limits.KEY_LENGTH_MAX:
            raise IllegalMessageGroupError("message group longer than 255 characters")
        props[PROP_MESSAGE_GROUP] = group
    elif mtype is MessageType.FIFO:
        raise IllegalMessageGroupError("a FIFO message needs a message_group")
    if sp.HasField("delivery_timestamp"):
        if mtype is not MessageType.DELAY:
            raise MessageTypeConflictError("delivery_timestamp is only allowed on DELAY messages")
        at = delivery_timestamp_ms(sp.delivery_timestamp)
        if at < 0:
            raise IllegalDeliveryTimeError("delivery timestamp is negative")
        props[PROP_DELIVERY_TIMESTAMP_MS] = str(at)
    elif mtype is MessageType.DELAY:
        raise IllegalDeliveryTimeError("a DELAY message needs a delivery_timestamp")
    return RecordDraft(
        topic=topic,
        queue_id=queue_id,
        body=body,
        message_id=message_id,
        tag=tag,
        keys=keys,
        properties=props,
        # An unset Timestamp reads as zero seconds and nanos: 0, what an unset one means.
        born_timestamp_ms=timestamp_ms(sp.born_timestamp),
        born_host=sp.born_host or born_host,
    )


def message_from_record(
    rec: Record,
    *,
    topic: str | None = None,
    queue_id: int | None = None,
    receipt_handle: str = "",
    delivery_attempt: int = 0,
    invisible_ms: int = 0,
    message_type: MessageType = MessageType.NORMAL,
    extra_props: Mapping[str, str] | None = None,
    into: Any = None,
) -> Any:
    """Build the wire Message a consumer (or a transaction checker) receives; ``into``: fill
    this empty Message (a reply's field) instead of a new one, and return it."""
    msg = pb.Message() if into is None else into
    msg.topic.name = topic or rec.topic
    user = {k: v for k, v in rec.properties.items() if not _internal(k)}
    if extra_props:
        user.update(extra_props)
    for k, v in user.items():
        msg.user_properties[k] = v
    sp = msg.system_properties
    sp.tag = rec.tag
    sp.keys.extend(rec.keys)
    sp.message_id = rec.message_id
    digest = sp.body_digest
    digest.type = pb.MD5
    digest.checksum = body_digest(rec.body)
    sp.body_encoding = pb.IDENTITY
    sp.message_type = WIRE_TYPES[message_type]
    set_timestamp(sp.born_timestamp, rec.born_timestamp_ms or rec.store_timestamp_ms)
    sp.born_host = rec.born_host
    set_timestamp(sp.store_timestamp, rec.store_timestamp_ms)
    sp.store_host = "txmq"
    sp.queue_id = rec.queue_id if queue_id is None else queue_id
    sp.queue_offset = rec.queue_offset
    group = rec.properties.get(PROP_MESSAGE_GROUP)
    if group:
        sp.message_group = group
    deliver_at = rec.properties.get(PROP_DELIVERY_TIMESTAMP_MS)
    if deliver_at:
        set_timestamp(sp.delivery_timestamp, int(deliver_at))
    if receipt_handle:
        sp.receipt_handle = receipt_handle
        sp.delivery_attempt = delivery_attempt
        set_duration(sp.invisible_duration, invisible_ms)
    msg.body = rec.body
    return msg


# --- A delivered message straight to its reply's bytes. -------------
# ReceiveMessageResponse.message (2); in Message: topic (1), user_properties (2),
# system_properties (3), body (4); Resource.name (2); a map entry's key (1) and value (2);
# Digest.type (1), checksum (2); Timestamp/Duration seconds (1), nanos (2). SystemProperties'
# fields by number in ``received_message_wire``. Length-delimited keys are (number << 3) | 2,
# varints (number << 3) | 0.
_WIRE_TYPES: Final = {t: int(v) for t, v in WIRE_TYPES.items()}
_DIGEST_MD5: Final = b"\x08" + _ONE_BYTE[int(pb.MD5)]  # Digest.type
_IDENTITY: Final = b"\x28" + _ONE_BYTE[int(pb.IDENTITY)]  # SystemProperties.body_encoding
_STORE_HOST: Final = b"\x52\x04txmq"  # SystemProperties.store_host


def delivery_timestamp_wire(ms: int) -> bytes:
    """The bytes of a ReceiveMessageResponse holding only ``delivery_timestamp`` (3) = ``ms``:
    a receive's second reply, as protobuf writes it."""
    return _seconds_nanos(0x1A, ms)


def received_message_wire(
    rec: Record,
    *,
    receipt_handle: str,
    delivery_attempt: int,
    invisible_ms: int,
    message_type: MessageType,
) -> bytes:
    """The bytes of a ReceiveMessageResponse carrying ``rec`` as ``message_from_record`` builds
    it with these arguments (the same message when parsed; tests/unit/test_protocol_wire.py),
    written directly: each protobuf field set from Python costs a call into upb, ~35k
    instructions per message, and the reply is serialized once more after."""
    props = rec.properties
    sp = [_text(b"\x0a", rec.tag)]
    for key in rec.keys:
        sp.append(_text(b"\x12", key))
    if rec.message_id:
        sp.append(_text(b"\x1a", rec.message_id))
    sp.append(_nested(b"\x22", _DIGEST_MD5 + _text(b"\x12", body_digest(rec.body))))
    sp.append(_IDENTITY)
    wire_type = _WIRE_TYPES[message_type]
    if wire_type:
        sp.append(b"\x30" + _varint(wire_type))
    sp.append(_seconds_nanos(0x3A, rec.born_timestamp_ms or rec.store_timestamp_ms))
    if rec.born_host:
        sp.append(_text(b"\x42", rec.born_host))
    sp.append(_seconds_nanos(0x4A, rec.store_timestamp_ms))
    sp.append(_STORE_HOST)
    deliver_at = props.get(PROP_DELIVERY_TIMESTAMP_MS)
    if deliver_at:
        sp.append(_seconds_nanos(0x5A, int(deliver_at)))
    if receipt_handle:
        sp.append(_text(b"\x62", receipt_handle))
    if rec.queue_id:
        sp.append(b"\x68" + _varint(rec.queue_id))
    sp.append(b"\x70" + _varint(rec.queue_offset))
    if receipt_handle:
        sp.append(_seconds_nanos(0x7A, invisible_ms))
        sp.append(b"\x80\x01" + _varint(delivery_attempt))
    group = props.get(PROP_MESSAGE_GROUP)
    if group:
        sp.append(_text(b"\x8a\x01", group))
    msg = [_nested(b"\x0a", _text(b"\x12", rec.topic))]
    for k, v in props.items():
        if not _internal(k):
            msg.append(_nested(b"\x12", _text(b"\x0a", k) + _text(b"\x12", v)))
    msg.append(_nested(b"\x1a", b"".join(sp)))
    if rec.body:
        msg.append(_nested(b"\x22", rec.body))
    return _nested(b"\x12", b"".join(msg))


def ack_reply_wire(entries: list[tuple[str, str, bytes]], status: bytes) -> bytes:
    """The bytes of an AckMessageResponse: ``status`` (a Status's bytes) and per entry its
    message id, receipt handle and Status's bytes, as protobuf writes them (status (1), then
    entries (2): message_id (1), receipt_handle (2), status (3)); empty texts left out."""
    out = [_nested(b"\x0a", status)]
    for message_id, handle, entry_status in entries:
        entry = (_text(b"\x0a", message_id) if message_id else b"") + (
            _text(b"\x12", handle) if handle else b""
        )
        out.append(_nested(b"\x12", entry + _nested(b"\x1a", entry_status)))
    return b"".join(out)


def send_reply_wire(entries: list[tuple[bytes, str, str, int]], status: bytes) -> bytes:
    """The bytes of a SendMessageResponse: ``status`` (a Status's bytes) and per entry its
    Status's bytes, message id, transaction id and queue offset, as protobuf writes them
    (status (1), then entries (2): status (1), message_id (2), transaction_id (3), offset (4));
    empty texts and a zero offset left out. Its fields set one by one from Python and then
    serialized cost ~18k instructions per send."""
    out = [_nested(b"\x0a", status)]
    for entry_status, message_id, transaction_id, offset in entries:
        entry = (
            _nested(b"\x0a", entry_status)
            + (_text(b"\x12", message_id) if message_id else b"")
            + (_text(b"\x1a", transaction_id) if transaction_id else b"")
            + (b"\x20" + _varint(offset) if offset else b"")
        )
        out.append(_nested(b"\x12", entry))
    return b"".join(out)
