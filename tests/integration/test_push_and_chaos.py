"""PushConsumer failures reaching the DLQ after max attempts (the kill -9 chaos test lives in
test_chaos.py)."""

from __future__ import annotations

from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer

from tests.integration.clients import config, consumer, drain, message, producer
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
