"""SQL92 subscriptions with the official Python client, unmodified, against a real broker
process: ``FilterExpression(expr, FilterType.SQL)`` on a SimpleConsumer and on a PushConsumer.

Goal: each consumer receives exactly the messages its filter matches (user properties, TAGS, a
missing property never matching a comparison), what the filter passes over counts as consumed
(``txmq group describe --json`` shows lag 0 once the matches are acked, as RocketMQ counts it),
and a malformed expression is refused as RocketMQ's proxy refuses it: a SimpleConsumer's receive
raises BadRequestException with ILLEGAL_FILTER_EXPRESSION (40010) and a message naming the
column; a PushConsumer's Settings are refused, so its start fails (the client waits 10 s for
Settings, then raises), and the broker's log says why. (RocketMQ's proxy answers an empty SQL92
expression this way; docs/filters.md lists how its broker treats a malformed one.)
Method: a Producer sends 24 messages with properties and tags; consumers in their own groups.
"""

from __future__ import annotations

import json
import threading

import pytest
from rocketmq import ConsumeResult, FilterExpression, Message, MessageListener, PushConsumer
from rocketmq.grpc_protocol import FilterType
from rocketmq.v5.exception import BadRequestException, IllegalStateException

from tests.cli.test_cli import ok
from tests.integration.clients import config, consumer, drain, message, producer
from tests.integration.conftest import BrokerProcess, wait_until
from txmq.errors import CODE_ILLEGAL_FILTER_EXPRESSION

SENT = 24
FILTER = "(region = 'eu' AND amount > 100) OR TAGS IN ('urgent')"


def _matches(i: int) -> bool:
    """Whether message i (as ``_send`` builds it) passes FILTER."""
    region = "eu" if i % 2 else "us"
    has_amount = i % 5 != 0  # every fifth message has no amount: never above 100
    return (region == "eu" and has_amount and i * 10 > 100) or i % 7 == 0


def _send(endpoints: str, topic: str) -> set[bytes]:
    """SENT messages; returns the bodies FILTER matches."""
    p = producer(endpoints, (topic,))
    try:
        for i in range(SENT):
            props = {"region": "eu" if i % 2 else "us"}
            if i % 5 != 0:
                props["amount"] = str(i * 10)
            tag = "urgent" if i % 7 == 0 else "normal"
            p.send(message(topic, f"m{i}".encode(), tag=tag, properties=props))
    finally:
        p.shutdown()
    return {f"m{i}".encode() for i in range(SENT) if _matches(i)}


def _lag(endpoints: str, group: str) -> int:
    shown = json.loads(ok("group", "describe", group, "--json", "--endpoints", endpoints))
    return int(shown["lag"])


def test_simple_consumer_receives_only_matches_and_lag_counts_the_rest(
    broker: BrokerProcess,
) -> None:
    want = _send(broker.endpoints, "sql1")
    assert 0 < len(want) < SENT
    c = consumer(broker.endpoints, "g-sql1", "sql1", FILTER, sql=True)
    try:
        # Subscribed, nothing received yet: the group lags by every message.
        wait_until(lambda: _lag(broker.endpoints, "g-sql1") == SENT, 20, "lag of every message")
        got = drain(c, len(want), 30)
        got += c.receive(32, 2) or []  # a 2 s long poll: nothing more may come
        assert sorted(m.body for m in got) == sorted(want)
        assert all(m.properties.get("region") == "eu" or m.tag == "urgent" for m in got)
        # Only the matches were acked; what the filter passed over counts as consumed too.
        wait_until(lambda: _lag(broker.endpoints, "g-sql1") == 0, 20, "lag 0")
    finally:
        c.shutdown()


def test_simple_consumer_with_a_malformed_filter_gets_illegal_filter_expression(
    broker: BrokerProcess,
) -> None:
    _send(broker.endpoints, "sql2")
    c = consumer(broker.endpoints, "g-sql2", "sql2", "amount > 100 AND", sql=True)
    try:
        with pytest.raises(BadRequestException) as info:
            c.receive(32, 2)
        assert info.value.code == CODE_ILLEGAL_FILTER_EXPRESSION
        assert "column 17 (at the end)" in str(info.value)
    finally:
        c.shutdown()


class Collecting(MessageListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.lock = threading.Lock()

    def consume(self, message: Message) -> ConsumeResult:
        with self.lock:
            self.bodies.append(message.body)
        return ConsumeResult.SUCCESS


def test_push_consumer_receives_only_matches(broker: BrokerProcess) -> None:
    want = _send(broker.endpoints, "sql3")
    listener = Collecting()
    subscription = {"sql3": FilterExpression(FILTER, FilterType.SQL)}
    pc = PushConsumer(config(broker.endpoints), "g-sql3", listener, subscription)
    pc.startup()
    try:
        wait_until(lambda: len(listener.bodies) >= len(want), 60, "the matching messages")
        # Lag 0 means every message was acked or passed over: a non-matching one handed to the
        # listener would have been recorded before its ack, so the list is complete now.
        wait_until(lambda: _lag(broker.endpoints, "g-sql3") == 0, 30, "lag 0")
        with listener.lock:
            got = sorted(listener.bodies)
    finally:
        pc.shutdown()
    assert got == sorted(want)


def test_push_consumer_with_a_malformed_filter_fails_to_start(broker: BrokerProcess) -> None:
    listener = Collecting()
    subscription = {"sql4": FilterExpression("region = 'eu' AND AND", FilterType.SQL)}
    pc = PushConsumer(config(broker.endpoints), "g-sql4", listener, subscription)
    with pytest.raises(Exception) as info:  # the client's own types: see below
        pc.startup()
    # The client raises IllegalStateException (no Settings within 10 s); its cleanup after a
    # failed start then fails too (client 5.1.2: AttributeError on its consumption pool),
    # which is what reaches the application, with the IllegalStateException as its context.
    failure = info.value
    if not isinstance(failure, IllegalStateException):
        failure = failure.__context__  # type: ignore[assignment]
    assert isinstance(failure, IllegalStateException) and "settings" in str(failure)
    wait_until(
        lambda: "illegal SQL92 filter at column 19" in broker.log_tail(200), 10, "the log line"
    )
    assert listener.bodies == []
