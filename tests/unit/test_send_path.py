"""The send path on model values: no protobuf below the edge.

Goal: ``SendPath`` stores normal, FIFO and transactional messages and decides transactions from
``Outgoing``/``EndRequest`` values alone, and an error mapped at the edge keeps its place in the
answers. Method: a real broker's parts (store, coordinator, topics) on a temporary directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.produce.send_path import Sent
from txmq.broker.state.parts import Parts
from txmq.errors import BadRequestError, InvalidTransactionIdError, MessageTypeConflictError
from txmq.model import (
    PROP_MESSAGE_GROUP,
    DecisionSource,
    EndRequest,
    MessageType,
    Outcome,
    Outgoing,
    RecordDraft,
)


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[Parts]:
    p = Parts(
        BrokerConfig(data_dir=tmp_path, port=0, auto_create_topics=True),
        now_ms=lambda: 1_700_000_000_000,
    )
    yield p
    p.close()


def _out(topic: str, body: bytes, mtype: MessageType, **props: str) -> Outgoing:
    draft = RecordDraft(topic=topic, queue_id=0, body=body, message_id=body.hex(), properties=props)
    return Outgoing(draft, mtype)


def test_normal_fifo_and_an_edge_error_keep_their_places(parts: Parts) -> None:
    refused = BadRequestError("refused at the edge")
    got = parts.sends.send(
        [
            _out("plain", b"a", MessageType.NORMAL),
            refused,
            _out("fifo", b"b", MessageType.FIFO, **{PROP_MESSAGE_GROUP: "g"}),
        ],
        client_id="c1",
    )
    assert got[1] is refused
    first, third = got[0], got[2]
    assert isinstance(first, Sent) and first.deliverable and first.topic == "plain"
    assert isinstance(third, Sent) and third.deliverable and third.topic == "fifo"
    assert parts.store.queue_offsets("plain", first.queue_id) == (0, 1)


def test_type_conflict_is_refused_per_message(parts: Parts) -> None:
    parts.topics.create("typed", 2, MessageType.TRANSACTION)
    ok = _out("typed", b"t", MessageType.TRANSACTION)
    got = parts.sends.send([_out("typed", b"n", MessageType.NORMAL), ok], client_id="c1")
    assert isinstance(got[0], MessageTypeConflictError)
    assert isinstance(got[1], Sent)


def test_transaction_decided_from_model_values(parts: Parts) -> None:
    (half,) = parts.sends.send([_out("tx", b"h", MessageType.TRANSACTION)], client_id="c1")
    assert isinstance(half, Sent) and half.transaction_id and not half.deliverable
    end = EndRequest("tx", half.transaction_id, half.message_id, True, DecisionSource.PRODUCER)
    decided = parts.sends.end(end)
    assert decided.outcome is Outcome.COMMITTED and decided.topic == "tx"
    assert parts.sends.end(end).outcome is Outcome.COMMITTED  # idempotent
    with pytest.raises(InvalidTransactionIdError):
        parts.sends.end(EndRequest("tx", "", "", True, DecisionSource.PRODUCER))
