"""A delivered message written straight to its reply's bytes (``received_message_wire``) is the
reply ``message_from_record`` builds: the same message once parsed, for any record (names,
keys, tags, properties, internal ones included, timestamps, queue ids and offsets, bodies), and
the same bytes where protobuf's own order is fixed (at most one user property); an ack's reply
written as bytes (``ack_reply_wire``) is the AckMessageResponse protobuf builds, a send's
reply (``send_reply_wire``) the SendMessageResponse."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv

from tests.unit.test_protocol_mapping import record
from txmq.model import (
    PROP_DELIVERY_TIMESTAMP_MS,
    PROP_MESSAGE_GROUP,
    PROP_TRANSACTION_ID,
    MessageType,
    Record,
    TxnFlag,
)
from txmq.protocol import mapping, wire

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_MS = st.integers(min_value=0, max_value=2**45)


@st.composite
def _records(draw: Any) -> Record:
    props = draw(st.dictionaries(_TEXT.filter(bool), _TEXT, max_size=4))
    if draw(st.booleans()):
        props[PROP_MESSAGE_GROUP] = draw(_TEXT)
    if draw(st.booleans()):
        props[PROP_DELIVERY_TIMESTAMP_MS] = str(draw(_MS))
    if draw(st.booleans()):
        props[PROP_TRANSACTION_ID] = draw(_TEXT)  # internal: never shown to consumers
    return Record(
        topic=draw(_TEXT.filter(bool)),
        queue_id=draw(st.integers(min_value=0, max_value=2**31 - 1)),
        queue_offset=draw(st.integers(min_value=0, max_value=2**63 - 1)),
        physical_offset=draw(st.integers(min_value=0, max_value=2**40)),
        size=draw(st.integers(min_value=1, max_value=2**20)),
        flag=TxnFlag.NORMAL,
        store_timestamp_ms=draw(_MS),
        born_timestamp_ms=draw(_MS),
        born_host=draw(_TEXT),
        reconsume_times=0,
        prepared_offset=-1,
        message_id=draw(_TEXT),
        tag=draw(_TEXT),
        keys=tuple(draw(st.lists(_TEXT, max_size=3))),
        properties=MappingProxyType(props),
        body=draw(st.binary(max_size=300)),
    )


def _both(rec: Record, handle: str, attempt: int, invisible: int, mtype: MessageType) -> Any:
    wire = mapping.received_message_wire(
        rec,
        receipt_handle=handle,
        delivery_attempt=attempt,
        invisible_ms=invisible,
        message_type=mtype,
    )
    built = sv.ReceiveMessageResponse()
    mapping.message_from_record(
        rec,
        receipt_handle=handle,
        delivery_attempt=attempt,
        invisible_ms=invisible,
        message_type=mtype,
        into=built.message,
    )
    return wire, built


@settings(max_examples=300, deadline=None)
@given(
    _records(),
    _TEXT,
    st.integers(min_value=0, max_value=2**31 - 1),
    st.integers(min_value=0, max_value=2**40),
    st.sampled_from(list(MessageType)),
)
def test_the_bytes_are_the_reply_message_from_record_builds(
    rec: Record, handle: str, attempt: int, invisible: int, mtype: MessageType
) -> None:
    wire, built = _both(rec, handle, attempt, invisible, mtype)
    assert sv.ReceiveMessageResponse.FromString(wire) == built
    users = [k for k in rec.properties if not mapping.is_internal_property(k)]
    if len(users) <= 1:
        assert wire == built.SerializeToString()


def test_a_transactional_message_as_delivered() -> None:
    rec = record(
        queue_id=3,
        queue_offset=0,
        flag=TxnFlag.COMMIT,
        born_timestamp_ms=0,
        born_host="",
        tag="",
        keys=(),
        properties=MappingProxyType({PROP_TRANSACTION_ID: "tx-1", "region": "eu"}),
        body=b"x" * 1024,
    )
    wire, built = _both(rec, "handle-1", 1, 30_000, MessageType.TRANSACTION)
    parsed = sv.ReceiveMessageResponse.FromString(wire)
    assert parsed == built and wire == built.SerializeToString()
    sp = parsed.message.system_properties
    assert sp.HasField("tag") and sp.tag == "" and sp.queue_offset == 0
    assert sp.born_timestamp.seconds == 1_700_000_000 and sp.born_timestamp.nanos == 250_000_000
    assert dict(parsed.message.user_properties) == {"region": "eu"}


# Where a varint gains a byte, and the five-byte seconds ``_seconds_nanos`` writes as one int.
_VARINT_EDGES = [0, 1, 127, 128, 16383, 16384, 2**21, 2**28 - 1, 2**28, 2**34, 2**35 - 1, 2**35]
_VARINT_EDGES += [2**42, 2**49, 2**56, 2**63 - 1, -1, -(2**63)]
_MS_EDGES = [0, 1, 999, 1000, 30_000, 2**28 * 1000 - 1, 2**28 * 1000, 2**34 * 1000 - 1]
_MS_EDGES += [2**34 * 1000, 2**35 * 1000 - 1, 2**35 * 1000, 1_764_300_000_123, -1, -1000, -(2**40)]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.sampled_from(_VARINT_EDGES), st.integers(min_value=-(2**63), max_value=2**63 - 1))
)
def test_a_varint_is_the_one_protobuf_writes(n: int) -> None:
    written = pb.SystemProperties(queue_offset=n).SerializeToString()  # int64, field 14
    assert b"\x70" + wire.varint(n) == (written or b"\x70\x00")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.sampled_from(_MS_EDGES), st.integers(min_value=-(2**45), max_value=2**50)))
def test_a_delivery_timestamp_reply_is_the_one_protobuf_writes(ms: int) -> None:
    """A receive's second reply (also every timestamp and duration of a delivered message:
    ``_seconds_nanos``), on both sides of the seconds written as one int."""
    built = sv.ReceiveMessageResponse()
    mapping.set_timestamp(built.delivery_timestamp, ms)
    assert mapping.delivery_timestamp_wire(ms) == built.SerializeToString()


_STATUSES = st.sampled_from(
    [mapping.status(), mapping.status(40000, "bad"), mapping.status(40012, "é" * 200)]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_TEXT, _TEXT, _STATUSES), max_size=5), _STATUSES)
def test_an_ack_reply_is_the_response_protobuf_builds(entries: list[Any], top: Any) -> None:
    built = sv.AckMessageResponse()
    built.status.CopyFrom(top)
    for message_id, handle, status in entries:
        entry = built.entries.add()
        entry.message_id, entry.receipt_handle = message_id, handle
        entry.status.CopyFrom(status)
    wire = mapping.ack_reply_wire(
        [(m, h, s.SerializeToString()) for m, h, s in entries], top.SerializeToString()
    )
    assert sv.AckMessageResponse.FromString(wire) == built
    assert wire == built.SerializeToString()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(_STATUSES, _TEXT, _TEXT, st.integers(min_value=-(2**63), max_value=2**63 - 1)),
        max_size=5,
    ),
    _STATUSES,
)
def test_a_send_reply_is_the_response_protobuf_builds(entries: list[Any], top: Any) -> None:
    built = sv.SendMessageResponse()
    built.status.CopyFrom(top)
    for status, message_id, transaction_id, offset in entries:
        entry = built.entries.add()
        entry.status.CopyFrom(status)
        entry.message_id, entry.transaction_id, entry.offset = message_id, transaction_id, offset
    wire = mapping.send_reply_wire(
        [(s.SerializeToString(), m, t, o) for s, m, t, o in entries], top.SerializeToString()
    )
    assert sv.SendMessageResponse.FromString(wire) == built
    assert wire == built.SerializeToString()
