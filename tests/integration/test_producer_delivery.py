"""What producers send arrives as promised, across crashes: delay messages keep their time and
are released once even when the broker is killed with SIGKILL between releases (the schedule is
rebuilt from the delay topic and its saved progress), and interleaved FIFO message groups each
arrive in order.

Method: the official Producer and SimpleConsumer against a real broker process; a fresh
consumer group after the restart reads every queue from the start, so a message released twice
would be seen twice."""

from __future__ import annotations

import time
from collections import defaultdict

from rocketmq import FilterExpression, SimpleConsumer

from tests.integration.clients import config, drain, message, producer
from tests.integration.conftest import BrokerProcess


def _consumer(endpoints: str, group: str, topic: str) -> SimpleConsumer:
    c = SimpleConsumer(config(endpoints), group, {topic: FilterExpression()}, await_duration=2)
    c.startup()
    return c


def _listen(c: SimpleConsumer, seconds: float) -> list[tuple[bytes, float]]:
    """Everything received (and acked) for ``seconds``, with the local receipt time in ms."""
    got: list[tuple[bytes, float]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for m in c.receive(32, 15) or []:
            got.append((m.body, time.time() * 1000))
            c.ack(m)
    return got


def test_delay_messages_keep_their_time_and_are_released_once_across_a_crash(
    broker: BrokerProcess,
) -> None:
    p = producer(broker.endpoints, ("dly",))
    now = int(time.time() * 1000)
    due = {b"soon": now + 1_000, b"later": now + 6_000, b"past": now - 1_000}
    try:
        for body, at in due.items():
            p.send(message("dly", body, deliver_at_ms=at))
    finally:
        p.shutdown()
    early = _consumer(broker.endpoints, "g-dly-1", "dly")
    first = _listen(early, 3.5)
    early.shutdown()
    assert sorted(b for b, _ in first) == [b"past", b"soon"]
    broker.kill9()  # "soon" was released and its progress saved; "later" is still held
    broker.start()
    fresh = _consumer(broker.endpoints, "g-dly-2", "dly")
    try:
        seen: list[tuple[bytes, float]] = []
        deadline = time.monotonic() + 30
        while len(seen) < 3 and time.monotonic() < deadline:
            seen += _listen(fresh, 1.0)
        seen += _listen(fresh, 2.0)  # anything released twice would show up here
    finally:
        fresh.shutdown()
    bodies = sorted(b for b, _ in seen)
    assert bodies == [b"later", b"past", b"soon"], "each delay message enters its topic once"
    for body, received_ms in first + seen:
        assert received_ms >= due[body], f"{body!r} arrived before its delivery time"


def test_interleaved_fifo_groups_each_arrive_in_order(broker: BrokerProcess) -> None:
    p = producer(broker.endpoints, ("fifo-many",))
    groups = ["order-1", "order-2", "order-3"]
    try:
        for i in range(8):
            for g in groups:
                p.send(message("fifo-many", f"{g}:{i}".encode(), group=g))
    finally:
        p.shutdown()
    c = _consumer(broker.endpoints, "g-fifo-many", "fifo-many")
    try:
        got = drain(c, 24, 60)
    finally:
        c.shutdown()
    by_group: dict[str, list[int]] = defaultdict(list)
    for m in got:
        g, i = m.body.decode().split(":")
        assert m.message_group == g
        by_group[g].append(int(i))
    assert {g: by_group[g] for g in groups} == {g: list(range(8)) for g in groups}
