"""Thin helpers around the official RocketMQ Python client (unmodified)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import FilterType


def config(endpoints: str) -> ClientConfiguration:
    return ClientConfiguration(endpoints, Credentials())


def message(
    topic: str,
    body: bytes,
    *,
    tag: str = "",
    keys: str = "",
    group: str = "",
    deliver_at_ms: int = 0,
    properties: dict[str, str] | None = None,
) -> Message:
    m = Message()
    m.topic = topic
    m.body = body
    if tag:
        m.tag = tag
    if keys:
        m.keys = keys
    if group:
        m.message_group = group
    if deliver_at_ms:
        m.delivery_timestamp = deliver_at_ms
    for k, v in (properties or {}).items():
        m.add_property(k, v)
    return m


class Checker(TransactionChecker):  # type: ignore[misc]
    def __init__(self, decide: Callable[[Message], TransactionResolution]) -> None:
        self.decide = decide
        self.calls: list[str] = []

    def check(self, message: Message) -> TransactionResolution:
        self.calls.append(message.message_id)
        return self.decide(message)


def producer(endpoints: str, topics: tuple[str, ...], checker: Checker | None = None) -> Producer:
    p = Producer(config(endpoints), topics, checker)
    p.startup()
    return p


@contextmanager
def check_loop_witness(
    endpoints: str, topic: str, configuration: ClientConfiguration | None = None, **kw: Any
) -> Iterator[Checker]:
    """A transaction on ``topic`` left undecided by a live producer that answers every
    check-back "unknown". Check-backs are routed by topic, so give it one of its own; each
    check-back its checker records shows that the broker's check loop ran once more, and a test
    that must see "nothing happens while the loop runs" waits for those instead of sleeping
    through check intervals. Rolled back on exit."""
    witness = Checker(lambda m: TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
    p = Producer(configuration or config(endpoints), (topic,), witness, **kw)
    p.startup()
    try:
        tx = p.begin_transaction()
        p.send(message(topic, b"witness"), tx)
        yield witness
        tx.rollback()
    finally:
        p.shutdown()


def group_settled(endpoints: str, group: str, topic: str) -> bool:
    """Whether ``group`` holds nothing unread and nothing in flight on ``topic`` (GroupList):
    from then on the broker has nothing of it to deliver to that group, so a test that must
    see "no further delivery" waits for this instead of sleeping."""
    from txmq.client.admin import call

    rows = [g for g in call(endpoints, "GroupList", {})["groups"] if g["group"] == group]
    queues = [q for g in rows for q in g["queues"] if q["topic"] == topic]
    return bool(queues) and all(q["lag"] == 0 and q["inflight"] == 0 for q in queues)


def consumer(
    endpoints: str, group: str, topic: str, expr: str = "*", *, sql: bool = False
) -> SimpleConsumer:
    """A started SimpleConsumer of ``topic``; ``expr`` a tag expression, or SQL92 if ``sql``."""
    filter_type = FilterType.SQL if sql else FilterType.TAG
    subscription = {topic: FilterExpression(expr, filter_type)}
    # A 2 s long poll instead of the client's 20 s default: an empty receive returns sooner.
    c = SimpleConsumer(config(endpoints), group, subscription, await_duration=2)
    c.startup()
    return c


def drain(c: SimpleConsumer, want: int, timeout_s: float, *, ack: bool = True) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        for m in c.receive(32, 15):
            got.append(m)
            if ack:
                c.ack(m)
    return got


def transaction_load(
    endpoints: str,
    topic: str,
    stop: threading.Event,
    *,
    rollback_every: int,
    committed: Callable[[bytes], None],
    rolled: set[bytes],
    failures: list[str],
    backoff_s: float,
) -> None:
    """Begin, send and decide transactions on ``topic`` until ``stop`` (at most 100,000): every
    ``rollback_every``-th is rolled back (noted in ``rolled`` before the decision: never to be
    delivered), the others committed (``committed`` called once the commit is acknowledged). A
    call that fails is not acknowledged: noted in ``failures``, then the load backs off
    ``backoff_s`` and goes on, as an application riding out a failover would."""
    p = producer(endpoints, (topic,), Checker(lambda m: TransactionResolution.ROLLBACK))
    try:
        for n in range(100_000):
            if stop.is_set():
                return
            body = f"tx-{n}".encode()
            try:
                tx = p.begin_transaction()
                p.send(message(topic, body), tx)
                if n % rollback_every == rollback_every - 1:
                    rolled.add(body)
                    tx.rollback()
                else:
                    tx.commit()
                    committed(body)
            except Exception as exc:  # not acknowledged: noted, the load goes on
                failures.append(repr(exc)[:160])
                stop.wait(backoff_s)
    finally:
        p.shutdown()
