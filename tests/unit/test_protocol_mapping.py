"""Protocol mapping, pure: wire messages in (shaped as the official client builds them), model
values out, and records back to wire messages that the official client's own decoder
(``rocketmq.Message.fromProtobuf``) accepts. No sockets, no clock.

Method: build protobufs by hand, map them, assert on fields; a hypothesis round trip checks
that what a producer sends is what a consumer gets (body, tag, keys, user properties)."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rocketmq import Message as ClientMessage
from rocketmq.grpc_protocol import definition_pb2 as pb

from txmq import errors
from txmq.model import (
    PROP_DELIVERY_TIMESTAMP_MS,
    PROP_MESSAGE_GROUP,
    MessageType,
    Record,
    TxnFlag,
    is_internal_property,
)
from txmq.protocol import mapping


def wire(
    topic: str = "orders",
    body: bytes = b"payload",
    *,
    tag: str = "",
    keys: tuple[str, ...] = (),
    props: dict[str, str] | None = None,
    mtype: int = pb.NORMAL,
    group: str = "",
    deliver_at_seconds_field: int = 0,
    encoding: int = pb.IDENTITY,
) -> Any:
    """A wire message the way rocketmq-python-client 5.1.2 fills one (Producer.__send_req)."""
    m = pb.Message()
    m.topic.name = topic
    m.body = body
    sp = m.system_properties
    if tag:
        sp.tag = tag
    sp.keys.extend(keys)
    m.user_properties.update(props or {})
    sp.message_id = "01ABCDEF"
    sp.message_type = mtype
    sp.born_timestamp.seconds = 1_700_000_000
    sp.born_host = "10.0.0.7"
    sp.body_encoding = encoding
    if group:
        sp.message_group = group
    if deliver_at_seconds_field:
        sp.delivery_timestamp.seconds = deliver_at_seconds_field
    return m


def record(**over: Any) -> Record:
    base: dict[str, Any] = dict(
        topic="orders",
        queue_id=2,
        queue_offset=41,
        physical_offset=9000,
        size=120,
        flag=TxnFlag.NORMAL,
        store_timestamp_ms=1_700_000_000_250,
        born_timestamp_ms=1_700_000_000_125,
        born_host="10.0.0.7",
        reconsume_times=0,
        prepared_offset=-1,
        message_id="01ABCDEF",
        tag="paid",
        keys=("order-1", "user-9"),
        properties={"region": "eu"},
        body=b"hello",
    )
    base.update(over)
    return Record(**base)


# --- Status codes. -------------------------------------------------------------------------------


def test_every_error_code_is_the_v2_protocol_code_of_the_same_name() -> None:
    for name in dir(errors):
        if name.startswith("CODE_"):
            assert getattr(errors, name) == pb.Code.Value(name[len("CODE_") :]), name


def test_unsupported_uses_the_number_the_official_client_maps_to_unsupported() -> None:
    st_ = mapping.error_status(errors.UnsupportedError("RecallMessage is not supported"))
    assert st_.code == pb.UNSUPPORTED
    assert st_.message == "RecallMessage is not supported"


def test_error_status_carries_code_and_message() -> None:
    st_ = mapping.error_status(errors.IllegalTopicError("bad name"))
    assert (st_.code, st_.message) == (pb.ILLEGAL_TOPIC, "bad name")
    assert mapping.status().code == pb.OK
    empty = mapping.error_status(errors.BadRequestError())
    assert empty.code == pb.BAD_REQUEST and empty.message == "BadRequestError"


# --- Times. --------------------------------------------------------------------------------------


@given(st.integers(min_value=0, max_value=10**15))
def test_timestamp_and_duration_round_trip_in_ms(ms: int) -> None:
    ts, d = pb.Message().system_properties.born_timestamp, pb.Settings().request_timeout
    mapping.set_timestamp(ts, ms)
    mapping.set_duration(d, ms)
    assert mapping.timestamp_ms(ts) == ms
    assert mapping.duration_ms(d) == ms
    assert 0 <= ts.nanos < 1_000_000_000


def test_delivery_timestamp_reads_the_python_clients_milliseconds_in_seconds() -> None:
    ts = pb.Message().system_properties.delivery_timestamp
    ts.seconds = 1_700_000_123_456  # what rocketmq-python-client 5.1.2 writes for a ms value
    assert mapping.delivery_timestamp_ms(ts) == 1_700_000_123_456
    ts.seconds, ts.nanos = 1_700_000_123, 456_000_000  # a correct Timestamp
    assert mapping.delivery_timestamp_ms(ts) == 1_700_000_123_456


# --- Validation and wire -> draft. ---------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "orders_v2", "Order-Events", "x" * 127])
def test_topic_names_accepted(name: str) -> None:
    assert mapping.validate_topic(name) == name


@pytest.mark.parametrize("name", ["", "x" * 128, "has space", "dot.ted", "ü", "RMQ_SYS_TRANS_X"])
def test_topic_names_refused(name: str) -> None:
    with pytest.raises(errors.IllegalTopicError):
        mapping.validate_topic(name)


def test_system_topics_only_when_allowed() -> None:
    assert mapping.validate_topic("%DLQ%g1", allow_system=True) == "%DLQ%g1"
    with pytest.raises(errors.IllegalTopicError):
        mapping.validate_topic("%DLQ%g1")


def test_normal_message_to_draft_keeps_everything_the_producer_set() -> None:
    d = mapping.draft_from_wire(
        wire(tag="paid", keys=("k1", "k2"), props={"a": "1"}), queue_id=3, born_host="peer"
    )
    assert (d.topic, d.queue_id, d.body, d.tag, d.keys) == (
        "orders",
        3,
        b"payload",
        "paid",
        ("k1", "k2"),
    )
    assert dict(d.properties) == {"a": "1"}
    assert d.message_id == "01ABCDEF"
    assert d.born_timestamp_ms == 1_700_000_000_000
    assert d.born_host == "10.0.0.7"
    assert mapping.wire_message_type(wire()) is MessageType.NORMAL


def test_fifo_group_becomes_a_property() -> None:
    m = wire(mtype=pb.FIFO, group="order-7")
    d = mapping.draft_from_wire(m, queue_id=0, born_host="")
    assert d.properties[PROP_MESSAGE_GROUP] == "order-7"
    assert mapping.wire_message_type(m) is MessageType.FIFO


def test_delay_time_becomes_a_property_in_ms() -> None:
    m = wire(mtype=pb.DELAY, deliver_at_seconds_field=1_700_000_005_000)
    d = mapping.draft_from_wire(m, queue_id=0, born_host="")
    assert d.properties[PROP_DELIVERY_TIMESTAMP_MS] == "1700000005000"


def test_type_inferred_when_the_client_leaves_it_unspecified() -> None:
    assert mapping.wire_message_type(wire(mtype=0, group="g")) is MessageType.FIFO
    inferred = mapping.wire_message_type(wire(mtype=0, deliver_at_seconds_field=5))
    assert inferred is MessageType.DELAY


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (wire(tag="a||b"), errors.IllegalTagError),
        (wire(tag=" padded"), errors.IllegalTagError),
        (wire(tag="t" * 256), errors.IllegalTagError),
        (wire(keys=(" ",)), errors.IllegalKeyError),
        (wire(keys=tuple(f"k{i}" for i in range(33))), errors.IllegalKeyError),
        (wire(props={"": "v"}), errors.IllegalPropertyError),
        (wire(props={PROP_MESSAGE_GROUP: "g"}), errors.IllegalPropertyError),
        (wire(props={"TXMQ_X": "v"}), errors.IllegalPropertyError),
        (wire(mtype=pb.NORMAL, group="g"), errors.MessageTypeConflictError),
        (wire(mtype=pb.FIFO), errors.IllegalMessageGroupError),
        (wire(mtype=pb.FIFO, group="g" * 256), errors.IllegalMessageGroupError),
        (wire(mtype=pb.NORMAL, deliver_at_seconds_field=5), errors.MessageTypeConflictError),
        (wire(mtype=pb.DELAY), errors.IllegalDeliveryTimeError),
        (wire(topic="bad topic"), errors.IllegalTopicError),
        (wire(topic="RMQ_SYS_TRANS_HALF_TOPIC"), errors.IllegalTopicError),
        (wire(encoding=pb.GZIP), errors.UnsupportedError),
    ],
)
def test_invalid_wire_messages_raise_typed_errors(message: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        mapping.draft_from_wire(message, queue_id=0, born_host="")


# --- Record -> wire message. ----------------------------------------------------------------------


def test_body_digest_is_md5_as_32_upper_case_hex_like_the_proxy() -> None:
    assert mapping.body_digest(b"") == "D41D8CD98F00B204E9800998ECF8427E"
    assert mapping.body_digest(b"hello") == "5D41402ABC4B2A76B9719D911017C592"
    body = bytes(range(256))
    assert mapping.body_digest(body) == hashlib.md5(body).hexdigest().upper()


def test_record_to_wire_message_has_the_system_properties_consumers_need() -> None:
    rec = record(properties={"region": "eu", PROP_MESSAGE_GROUP: "g7", "TXMQ_INTERNAL": "x"})
    m = mapping.message_from_record(
        rec,
        receipt_handle="rh-1",
        delivery_attempt=3,
        invisible_ms=30_000,
        message_type=MessageType.FIFO,
    )
    sp = m.system_properties
    assert m.topic.name == "orders" and m.body == b"hello"
    assert dict(m.user_properties) == {"region": "eu"}, "internal properties stay inside"
    assert (sp.tag, list(sp.keys), sp.message_id) == ("paid", ["order-1", "user-9"], "01ABCDEF")
    assert sp.body_digest.type == pb.MD5
    assert sp.body_digest.checksum == "5D41402ABC4B2A76B9719D911017C592"
    assert (sp.receipt_handle, sp.delivery_attempt) == ("rh-1", 3)
    assert mapping.duration_ms(sp.invisible_duration) == 30_000
    assert (sp.queue_id, sp.queue_offset) == (2, 41)
    assert mapping.timestamp_ms(sp.born_timestamp) == 1_700_000_000_125
    assert mapping.timestamp_ms(sp.store_timestamp) == 1_700_000_000_250
    assert sp.message_group == "g7" and sp.message_type == pb.FIFO


def test_the_official_client_decodes_our_message_without_finding_it_corrupted() -> None:
    rec = record(properties={"region": "eu", PROP_DELIVERY_TIMESTAMP_MS: "1700000009000"})
    m = mapping.message_from_record(rec, receipt_handle="rh", delivery_attempt=1)
    got = ClientMessage().fromProtobuf(m)
    assert not got.corrupted
    assert got.body == b"hello" and got.tag == "paid"
    assert set(got.keys) == {"order-1", "user-9"}
    assert got.properties == {"region": "eu"}
    assert (got.receipt_handle, got.delivery_attempt) == ("rh", 1)
    assert got.delivery_timestamp == 1_700_000_009_000


def test_a_tampered_body_is_seen_as_corrupted_by_the_client() -> None:
    m = mapping.message_from_record(record())
    m.body = b"hellO"
    assert ClientMessage().fromProtobuf(m).corrupted


def test_in_queue_changes_only_the_queue() -> None:
    d = mapping.draft_from_wire(wire(tag="t", keys=("k",)), queue_id=0, born_host="")
    d = dataclasses.replace(d, reconsume_times=2, prepared_offset=7)
    moved = d.in_queue(5)
    assert moved.queue_id == 5
    assert moved == dataclasses.replace(d, queue_id=5)
    assert moved.in_queue(0) == d


# Letters, digits, punctuation and symbols from any script: no whitespace or control characters,
# which tags refuse at the edges.
_text = st.text(alphabet=st.characters(categories=("L", "N", "P", "S")), min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(
    body=st.binary(min_size=1, max_size=512),
    tag=st.one_of(st.just(""), _text.filter(lambda t: "||" not in t)),
    keys=st.lists(_text, max_size=4).map(tuple),
    props=st.dictionaries(
        _text.filter(lambda k: not is_internal_property(k) and not k.startswith("__")),
        _text,
        max_size=4,
    ),
)
def test_what_a_producer_sends_is_what_a_consumer_gets(
    body: bytes, tag: str, keys: tuple[str, ...], props: dict[str, str]
) -> None:
    d = mapping.draft_from_wire(
        wire(body=body, tag=tag, keys=keys, props=props), queue_id=1, born_host=""
    )
    rec = record(body=d.body, tag=d.tag, keys=d.keys, properties=d.properties, queue_id=d.queue_id)
    got = ClientMessage().fromProtobuf(mapping.message_from_record(rec, receipt_handle="r"))
    assert not got.corrupted
    assert (got.body, got.tag or "", got.properties) == (body, tag, props)
    assert set(got.keys) == set(keys)
