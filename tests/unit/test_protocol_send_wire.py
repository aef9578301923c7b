"""A send's wire mapping (``outgoing_from_wire``, ``draft_from_wire``, ``end_request_from_wire``)
reads each protobuf field once; it must map every message exactly as
the plain reading below does, field by field through protobuf's own API (``HasField`` for every
field with presence, every read repeated where the code needs it): the same model.Outgoing, or the
same error type and message, for generated SendMessage entries and EndTransaction requests,
valid and invalid (each field set or not, empty, too long, reserved, conflicting with the type),
parsed from their bytes as the server gets them."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv

from txmq import errors as e
from txmq import limits, model
from txmq.protocol import mapping

BODY_MAX = 24


# --- The plain reading: main 92ef5a4's mapping, every field read through protobuf's API. --------


def plain_type(msg: Any) -> model.MessageType:
    t = mapping.MODEL_TYPES.get(msg.system_properties.message_type)
    if t is not None:
        return t
    if msg.system_properties.message_group:
        return model.MessageType.FIFO
    if msg.system_properties.HasField("delivery_timestamp"):
        return model.MessageType.DELAY
    return model.MessageType.NORMAL


def plain_draft(msg: Any, born_host: str) -> model.RecordDraft:
    sp = msg.system_properties
    topic = mapping.validate_topic(msg.topic.name)
    if sp.body_encoding == pb.GZIP:
        raise e.UnsupportedError("body_encoding GZIP is not supported: send IDENTITY bodies")
    tag = sp.tag
    if tag and (len(tag) > limits.TAG_LENGTH_MAX or "||" in tag or tag.strip() != tag):
        raise e.IllegalTagError(f"illegal tag {tag!r}")
    keys = tuple(sp.keys)
    if keys and (
        len(keys) > limits.KEYS_PER_MESSAGE_MAX
        or any(not k.strip() or len(k) > limits.KEY_LENGTH_MAX for k in keys)
    ):
        raise e.IllegalKeyError("each key must be 1..255 non-blank characters, at most 32 keys")
    props = dict(msg.user_properties)
    for k in props:
        if not k or k in model.RESERVED_PROPERTIES or k.startswith(("TXMQ_", "REAL_", "TRAN_")):
            raise e.IllegalPropertyError(f"illegal or reserved property key {k!r}")
    mtype = plain_type(msg)
    if sp.HasField("message_group") and sp.message_group:
        if mtype is not model.MessageType.FIFO:
            raise e.MessageTypeConflictError("message_group is only allowed on FIFO messages")
        if len(sp.message_group) > limits.KEY_LENGTH_MAX:
            raise e.IllegalMessageGroupError("message group longer than 255 characters")
        props[model.PROP_MESSAGE_GROUP] = sp.message_group
    elif mtype is model.MessageType.FIFO:
        raise e.IllegalMessageGroupError("a FIFO message needs a message_group")
    if sp.HasField("delivery_timestamp"):
        if mtype is not model.MessageType.DELAY:
            raise e.MessageTypeConflictError("delivery_timestamp is only allowed on DELAY messages")
        at = mapping.delivery_timestamp_ms(sp.delivery_timestamp)
        if at < 0:
            raise e.IllegalDeliveryTimeError("delivery timestamp is negative")
        props[model.PROP_DELIVERY_TIMESTAMP_MS] = str(at)
    elif mtype is model.MessageType.DELAY:
        raise e.IllegalDeliveryTimeError("a DELAY message needs a delivery_timestamp")
    born = sp.born_timestamp
    return model.RecordDraft(
        topic=topic,
        queue_id=0,
        body=bytes(msg.body),
        message_id=sp.message_id,
        tag=tag,
        keys=keys,
        properties=props,
        born_timestamp_ms=born.seconds * 1000 + born.nanos // 1_000_000
        if sp.HasField("born_timestamp")
        else 0,
        born_host=sp.born_host if sp.born_host else born_host,
    )


def plain_outgoing(msg: Any, born_host: str) -> model.Outgoing:
    if len(msg.body) == 0:
        raise e.BadRequestError("message body is empty")
    if len(msg.body) > BODY_MAX:
        raise e.MessageBodyTooLargeError(len(msg.body), BODY_MAX)
    message_id = msg.system_properties.message_id
    if not message_id or len(message_id) > limits.MESSAGE_ID_LENGTH_MAX:
        raise e.IllegalMessageIdError(
            f"message_id must be 1..{limits.MESSAGE_ID_LENGTH_MAX} characters"
        )
    draft = plain_draft(msg, born_host)
    mtype = plain_type(msg)
    sp = msg.system_properties
    immunity = None
    if mtype is model.MessageType.TRANSACTION and sp.HasField(
        "orphaned_transaction_recovery_duration"
    ):
        d = sp.orphaned_transaction_recovery_duration
        immunity = d.seconds * 1000 + d.nanos // 1_000_000
    return model.Outgoing(draft, mtype, immunity)


def plain_end(request: Any) -> model.EndRequest:
    if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
        raise e.BadRequestError("resolution must be COMMIT or ROLLBACK")
    return model.EndRequest(
        topic=request.topic.name,
        transaction_id=request.transaction_id,
        message_id=request.message_id,
        commit=request.resolution == pb.COMMIT,
        source=model.DecisionSource.CHECK_BACK
        if request.source == pb.SOURCE_SERVER_CHECK
        else model.DecisionSource.PRODUCER,
    )


# --- Generated requests. ------------------------------------------------------------------------

# Each field valid nine times in ten: most generated messages map, the others cover each refusal.
_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Z", "Cc")), min_size=1, max_size=6)
_SECONDS = st.one_of(
    st.integers(min_value=-5, max_value=5), st.just(1_700_000_000), st.just(1_700_000_005_000)
)
_TIMES = st.tuples(_SECONDS, st.integers(min_value=0, max_value=999_999_999))
_TYPES = st.sampled_from([pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION, 0, 5, 6])


def _mostly(draw: Any, valid: Any, invalid: Any) -> Any:
    return draw(invalid if draw(st.integers(0, 9)) == 9 else valid)


def _maybe(draw: Any, strategy: Any) -> Any:
    return draw(strategy) if draw(st.booleans()) else None


@st.composite
def _messages(draw: Any) -> Any:
    """One SendMessage entry, every field of which may be unset; its message group and delivery
    time mostly as its type asks (as a client sets them), sometimes not."""
    m = pb.Message()
    m.topic.name = _mostly(
        draw,
        st.sampled_from(["orders", "Order-Events_2"]),
        st.sampled_from(["", "bad topic", "RMQ_SYS_TRANS_X"]),
    )
    m.body = _mostly(
        draw, st.binary(min_size=1, max_size=BODY_MAX), st.sampled_from([b"", b"x" * 25])
    )
    for _ in range(draw(st.integers(0, 3))):
        key = _mostly(
            draw, _TEXT, st.sampled_from(["", "TXMQ_X", "REAL_Y", model.PROP_MESSAGE_GROUP])
        )
        m.user_properties[key] = draw(_TEXT)
    sp = m.system_properties
    if draw(st.booleans()):
        sp.tag = _mostly(draw, _TEXT, st.sampled_from(["", "a||b", " padded", "t" * 256]))
    keys = draw(st.lists(_TEXT, max_size=3))
    sp.keys.extend(keys + _mostly(draw, st.just([]), st.sampled_from([[" "], ["k" * 256]])))
    sp.message_id = _mostly(
        draw, st.text("0123456789ABCDEF", min_size=1), st.sampled_from(["", "m" * 129])
    )
    sp.body_encoding = _mostly(draw, st.sampled_from([0, pb.IDENTITY]), st.just(pb.GZIP))
    sp.message_type = mtype = draw(_TYPES)
    if (born := _maybe(draw, _TIMES)) is not None:
        sp.born_timestamp.seconds, sp.born_timestamp.nanos = born
    sp.born_host = draw(st.sampled_from(["", "10.0.0.7"]))
    as_typed = _mostly(draw, st.just(True), st.just(False))
    group = _mostly(draw, _TEXT, st.sampled_from(["", "g" * 256])) if draw(st.booleans()) else None
    if group is not None and (not as_typed or mtype == pb.FIFO):
        sp.message_group = group
    at = _maybe(draw, _TIMES)
    if at is not None and (not as_typed or mtype == pb.DELAY):
        sp.delivery_timestamp.seconds, sp.delivery_timestamp.nanos = at
    if (immunity := _maybe(draw, _TIMES)) is not None:
        d = sp.orphaned_transaction_recovery_duration
        d.seconds, d.nanos = abs(immunity[0]), immunity[1]
    # As the server gets it: parsed from the request's bytes.
    raw = sv.SendMessageRequest(messages=[m]).SerializeToString()
    return sv.SendMessageRequest.FromString(raw).messages[0]


def _outcome(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        return type(exc), str(exc)


@settings(max_examples=400, deadline=None)
@given(msg=_messages())
def test_a_send_maps_as_reading_each_field_through_protobuf_does(msg: Any) -> None:
    got = _outcome(mapping.outgoing_from_wire, msg, born_host="peer", body_size_max=BODY_MAX)
    want = _outcome(plain_outgoing, msg, "peer")
    if isinstance(want, model.Outgoing):
        assert isinstance(got, model.Outgoing), got
        assert (got.draft, got.message_type, got.check_immunity_ms) == (
            want.draft,
            want.message_type,
            want.check_immunity_ms,
        )
        assert type(got.draft.body) is bytes
        draft = mapping.draft_from_wire(msg, queue_id=0, born_host="peer")
        assert draft == want.draft
        assert mapping.wire_message_type(msg) is want.message_type
    else:
        assert got == want


@settings(max_examples=200, deadline=None)
@given(
    topic=st.one_of(st.none(), st.sampled_from(["orders", "", "bad topic"])),
    ids=st.tuples(_TEXT, _TEXT),
    resolution=st.integers(min_value=0, max_value=3),
    source=st.integers(min_value=0, max_value=3),
)
def test_an_end_transaction_maps_as_reading_each_field_through_protobuf_does(
    topic: str | None, ids: tuple[str, str], resolution: int, source: int
) -> None:
    rq = sv.EndTransactionRequest(
        message_id=ids[0], transaction_id=ids[1], resolution=resolution, source=source
    )
    if topic is not None:
        rq.topic.name = topic
    rq = sv.EndTransactionRequest.FromString(rq.SerializeToString())
    assert _outcome(mapping.end_request_from_wire, rq) == _outcome(plain_end, rq)
