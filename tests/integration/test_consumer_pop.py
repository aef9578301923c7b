"""Consumer side with the official client, unmodified, against the real broker process:
SimpleConsumer receive/ack/change_invisible_duration with an ``a||b`` tag filter and stale
handles; two consumers of one group never see each other's in-flight or acked messages;
PushConsumer FAILURE reaching the DLQ (broker-decided for normal topics, client-forwarded for
FIFO topics) with the DLQ topic readable by a consumer; positions surviving kill -9."""

from __future__ import annotations

import copy

import pytest
from rocketmq import ConsumeResult, FilterExpression, Message, MessageListener, PushConsumer
from rocketmq.v5.exception import BadRequestException

from tests.integration.clients import config, consumer, drain, group_settled, message, producer
from tests.integration.conftest import BrokerProcess, wait_until
from txmq.broker.consume.positions import FILE_NAME, OffsetFile

CODE_INVALID_RECEIPT_HANDLE = 40013


def _send(endpoints: str, topic: str, bodies: list[bytes], **kw: str) -> None:
    p = producer(endpoints, (topic,))
    try:
        for b in bodies:
            p.send(message(topic, b, **kw))
    finally:
        p.shutdown()


def test_tag_filter_ack_invisibility_and_stale_handles(broker: BrokerProcess) -> None:
    p = producer(broker.endpoints, ("pop1",))
    try:
        for i, tag in enumerate("ABCABC"):
            p.send(message("pop1", f"{tag}{i}".encode(), tag=tag))
    finally:
        p.shutdown()
    c = consumer(broker.endpoints, "g-pop1", "pop1", "A||B")
    try:
        got = drain(c, 4, 20, ack=False)
        assert sorted(m.body for m in got) == [b"A0", b"A3", b"B1", b"B4"]
        assert all(m.delivery_attempt == 1 for m in got)
        assert not any(m.corrupted for m in got), "the client checks the MD5 body digest"
        first, *rest = got
        for m in rest:
            c.ack(m)
        before = copy.copy(first)
        c.change_invisible_duration(first, 1)  # the client now holds the new handle
        with pytest.raises(BadRequestException) as info:
            c.ack(before)  # the handle from before the change is stale
        assert info.value.code == CODE_INVALID_RECEIPT_HANDLE
        again = drain(c, 1, 20, ack=False)
        assert [(m.body, m.delivery_attempt) for m in again] == [(first.body, 2)]
        with pytest.raises(BadRequestException):
            c.ack(first)  # redelivered: the first delivery's handle is stale too
        c.ack(again[0])
        assert (c.receive(32, 2) or []) == []
    finally:
        c.shutdown()


def test_two_consumers_never_share_in_flight_or_acked(broker: BrokerProcess) -> None:
    _send(broker.endpoints, "pop2", [f"{i}".encode() for i in range(30)])
    c1 = consumer(broker.endpoints, "g-pop2", "pop2")
    c2 = consumer(broker.endpoints, "g-pop2", "pop2")
    try:
        held = c1.receive(10, 60)  # in flight at c1 for 60 s
        held_bodies = {m.body for m in held}
        others = drain(c2, 20, 20)
        assert not held_bodies & {m.body for m in others}
        assert len(held_bodies) == 10 and len(others) == 20
        for m in held:
            c1.ack(m)
        assert (c2.receive(32, 2) or []) == []
        assert (c1.receive(32, 2) or []) == []
    finally:
        c1.shutdown()
        c2.shutdown()


class Failing(MessageListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.attempts: list[tuple[bytes, int]] = []

    def consume(self, message: Message) -> ConsumeResult:
        self.attempts.append((message.body, message.delivery_attempt))
        return ConsumeResult.FAILURE


def _dlq_bodies(endpoints: str, group: str, want: int) -> list[Message]:
    reader = consumer(endpoints, f"{group}-dlq-reader", f"%DLQ%{group}")
    try:
        return drain(reader, want, 30)
    finally:
        reader.shutdown()


@pytest.mark.parametrize("fifo", [False, True], ids=["broker-decides", "client-forwards"])
def test_push_consumer_failures_reach_the_dlq(broker: BrokerProcess, fifo: bool) -> None:
    topic, group = f"push-{fifo}", f"g-push-{fifo}"
    extra = {"group": "k1"} if fifo else {}
    _send(broker.endpoints, topic, [b"poison"], **extra)
    listener = Failing()
    pc = PushConsumer(config(broker.endpoints), group, listener, {topic: FilterExpression()})
    pc.startup()
    try:
        # The broker fixture runs with --delivery-attempts-max 3.
        wait_until(lambda: len(listener.attempts) >= 3, 60, "three consume attempts")
        dead = _dlq_bodies(broker.endpoints, group, 1)
        # No fourth attempt: once the group holds nothing unread and nothing in flight on the
        # topic, the broker has nothing left to deliver, so the three attempts are all.
        wait_until(lambda: group_settled(broker.endpoints, group, topic), 30, "nothing left")
    finally:
        pc.shutdown()
    assert [body for body, _ in listener.attempts] == [b"poison"] * 3
    if not fifo:
        assert [a for _, a in listener.attempts] == [1, 2, 3]
    assert [m.body for m in dead] == [b"poison"]


def _saved_consumed(broker: BrokerProcess, group: str) -> int:
    """Messages of ``group`` the broker's positions file records as consumed (below a queue's
    ack offset, or settled above it; the topics here start at offset 0)."""
    saved = OffsetFile(broker.data_dir / FILE_NAME).load()
    return sum(p.ack_offset + len(p.settled) for k, p in saved.items() if k.group == group)


def test_positions_survive_kill9_and_unacked_come_back(broker: BrokerProcess) -> None:
    _send(broker.endpoints, "pop3", [f"{i}".encode() for i in range(8)])
    c = consumer(broker.endpoints, "g-pop3", "pop3")
    got = drain(c, 8, 20, ack=False)
    assert len(got) == 8
    acked = {m.body for m in got[:5]}
    for m in got[:5]:
        c.ack(m)
    c.shutdown()
    # The observable event: the positions file on disk records the five acks (it is saved
    # every second), so the kill -9 below cannot lose them.
    wait_until(lambda: _saved_consumed(broker, "g-pop3") == 5, 20, "the positions save")
    broker.kill9()
    broker.start()
    c = consumer(broker.endpoints, "g-pop3", "pop3")
    try:
        again = drain(c, 3, 30)
        again += c.receive(32, 2) or []  # a 2 s long poll: nothing more may come
    finally:
        c.shutdown()
    assert sorted(m.body for m in again) == sorted({m.body for m in got} - acked)
    assert all(m.delivery_attempt == 2 for m in again)
