"""PushConsumer failures reaching the DLQ after max attempts, and a kill -9 chaos test: the
broker is killed while official-client producers run transactions; after restart every
acknowledged + committed message is delivered, nothing rolled back or undecided leaks, and
undecided transactions are resolved by check-back."""

from __future__ import annotations

import random
import threading
import time

import pytest
from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer
from rocketmq import TransactionResolution as R

from tests.integration.clients import Checker, config, consumer, drain, message, producer
from tests.integration.conftest import BrokerProcess, wait_until


class Failing(MessageListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.attempts: list[int] = []

    def consume(self, message: object) -> ConsumeResult:
        self.attempts.append(message.delivery_attempt)  # type: ignore[attr-defined]
        return ConsumeResult.FAILURE


def test_push_consumer_failures_reach_the_dlq(broker: BrokerProcess) -> None:
    p = producer(broker.endpoints, ("push1",))
    p.send(message("push1", b"poison"))
    p.shutdown()
    listener = Failing()
    pc = PushConsumer(config(broker.endpoints), "g-push", listener, {"push1": FilterExpression()})
    pc.startup()
    try:
        wait_until(lambda: len(listener.attempts) >= 3, 60, "three delivery attempts")
    finally:
        pc.shutdown()
    assert listener.attempts[:3] == [1, 2, 3]
    dlq = consumer(broker.endpoints, "g-dlq-reader", "%DLQ%g-push")
    got = drain(dlq, 1, 30)
    dlq.shutdown()
    assert [m.body for m in got] == [b"poison"]


def _chaos(broker: BrokerProcess, seed: int, kills: int) -> None:
    rng = random.Random(seed)
    undecided_answer: dict[str, R] = {}
    lock = threading.Lock()
    committed: set[bytes] = set()
    rolled_back: set[bytes] = set()

    def decide(m: object) -> R:
        return undecided_answer.get(m.body.decode(), R.ROLLBACK)  # type: ignore[attr-defined]

    checker = Checker(decide)
    n = 0
    for _ in range(kills):
        p = producer(broker.endpoints, ("chaos",), checker)
        stop = time.monotonic() + rng.uniform(1.0, 2.5)
        while time.monotonic() < stop:
            n += 1
            body = f"tx-{n}".encode()
            choice = rng.choice(["commit", "rollback", "undecided"])
            try:
                tx = p.begin_transaction()
                p.send(message("chaos", body), tx)
                if choice == "commit":
                    tx.commit()
                    with lock:
                        committed.add(body)
                elif choice == "rollback":
                    tx.rollback()
                    rolled_back.add(body)
                else:
                    answer = rng.choice([R.COMMIT, R.ROLLBACK])
                    undecided_answer[body.decode()] = answer
                    (committed if answer == R.COMMIT else rolled_back).add(body)
            except Exception:  # the send or decision was not acknowledged: no promise made
                undecided_answer.pop(body.decode(), None)
                committed.discard(body)
        broker.kill9()
        broker.start()
        p.shutdown()
    p = producer(broker.endpoints, ("chaos",), checker)  # a live checker for the undecided
    c = consumer(broker.endpoints, "g-chaos", "chaos")
    got: set[bytes] = set()
    deadline = time.monotonic() + 60
    while not committed <= got and time.monotonic() < deadline:
        for m in c.receive(32, 5) or []:
            got.add(m.body)
            c.ack(m)
    time.sleep(3)
    for m in c.receive(32, 3) or []:
        got.add(m.body)
    c.shutdown()
    p.shutdown()
    assert committed <= got, f"lost committed messages: {sorted(committed - got)[:5]}"
    assert not (got & rolled_back), f"rolled-back messages leaked: {sorted(got & rolled_back)[:5]}"


def test_chaos_kill9_during_transactions(broker: BrokerProcess, seed: int) -> None:
    _chaos(broker, seed, kills=2)


@pytest.mark.slow
def test_chaos_kill9_long(broker: BrokerProcess, seed: int) -> None:
    _chaos(broker, seed, kills=10)
