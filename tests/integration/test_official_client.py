"""The official RocketMQ Python client, unmodified, against a real txmq broker process:
normal/FIFO/delay sends, transactions (commit, rollback, check-back COMMIT and ROLLBACK),
SimpleConsumer receive/ack/change_invisible_duration with tag filters, shared groups."""

from __future__ import annotations

import time

import pytest
from rocketmq import TransactionResolution

from tests.integration.clients import Checker, consumer, drain, message, producer
from tests.integration.conftest import BrokerProcess, wait_until


def test_send_with_keys_and_tags_then_filtered_receive(broker: BrokerProcess) -> None:
    p = producer(broker.endpoints, ("t1",))
    try:
        for i in range(6):
            r = p.send(message("t1", f"m{i}".encode(), tag="A" if i % 2 else "B", keys=f"k{i}"))
            assert r.message_id
        c = consumer(broker.endpoints, "g-tags", "t1", "A")
        got = drain(c, 3, 20)
        assert sorted(m.body for m in got) == [b"m1", b"m3", b"m5"]
        assert all(m.tag == "A" for m in got)
        assert set().union(*(set(m.keys) for m in got)) == {"k1", "k3", "k5"}
        c.shutdown()
    finally:
        p.shutdown()


def test_fifo_messages_of_a_group_arrive_in_order(broker: BrokerProcess) -> None:
    p = producer(broker.endpoints, ("fifo1",))
    try:
        for i in range(10):
            p.send(message("fifo1", f"{i}".encode(), group="order-7"))
        c = consumer(broker.endpoints, "g-fifo", "fifo1")
        got = drain(c, 10, 30)
        assert [int(m.body) for m in got] == list(range(10))
        c.shutdown()
    finally:
        p.shutdown()


def test_delay_message_is_held_until_its_time(broker: BrokerProcess) -> None:
    p = producer(broker.endpoints, ("delay1",))
    try:
        c = consumer(broker.endpoints, "g-delay", "delay1")
        at = int(time.time() * 1000) + 3000
        p.send(message("delay1", b"later", deliver_at_ms=at))
        got = drain(c, 1, 20)
        received_ms = time.time() * 1000
        assert [m.body for m in got] == [b"later"]
        assert received_ms >= at, "a delay message must not arrive before its time"
        c.shutdown()
    finally:
        p.shutdown()


@pytest.mark.parametrize("answer", [TransactionResolution.COMMIT, TransactionResolution.ROLLBACK])
def test_transactions_commit_rollback_and_check_back(
    broker: BrokerProcess, answer: TransactionResolution
) -> None:
    checker = Checker(lambda m: answer)
    p = producer(broker.endpoints, ("tx1",), checker)
    try:
        tx = p.begin_transaction()
        p.send(message("tx1", b"committed"), tx)
        tx.commit()
        tx = p.begin_transaction()
        p.send(message("tx1", b"rolled-back"), tx)
        tx.rollback()
        tx = p.begin_transaction()
        undecided = p.send(message("tx1", b"undecided"), tx)
        c = consumer(broker.endpoints, "g-tx", "tx1")
        want = 2 if answer == TransactionResolution.COMMIT else 1
        got = drain(c, want, 25)
        # Under load the check-back can come after the drain: wait for it before the last look.
        wait_until(lambda: undecided.message_id in checker.calls, 30, "the check-back")
        got += c.receive(32, 2) or []  # a 2 s long poll, woken by a commit
        bodies = sorted(m.body for m in got)
        expected = [b"committed"] + ([b"undecided"] if want == 2 else [])
        assert bodies == sorted(expected)
        assert undecided.message_id in checker.calls
        c.shutdown()
    finally:
        p.shutdown()


def test_change_invisible_duration_and_redelivery(broker: BrokerProcess) -> None:
    p = producer(broker.endpoints, ("inv1",))
    try:
        p.send(message("inv1", b"x"))
        c = consumer(broker.endpoints, "g-inv", "inv1")
        first = drain(c, 1, 20, ack=False)
        assert len(first) == 1 and first[0].delivery_attempt == 1
        c.change_invisible_duration(first[0], 1)
        again = drain(c, 1, 20, ack=False)
        assert [m.body for m in again] == [b"x"]
        assert again[0].delivery_attempt == 2
        c.ack(again[0])
        assert (c.receive(32, 2) or []) == []
        c.shutdown()
    finally:
        p.shutdown()


def test_two_consumers_in_one_group_share_without_double_delivery(broker: BrokerProcess) -> None:
    p = producer(broker.endpoints, ("share1",))
    try:
        for i in range(40):
            p.send(message("share1", f"{i}".encode()))
        c1 = consumer(broker.endpoints, "g-share", "share1")
        c2 = consumer(broker.endpoints, "g-share", "share1")
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 40 and time.monotonic() < deadline:
            for c in (c1, c2):
                for m in c.receive(8, 2) or []:
                    got.append(m.body)
                    c.ack(m)
        assert sorted(int(b) for b in got) == list(range(40))
        c1.shutdown()
        c2.shutdown()
    finally:
        p.shutdown()


def test_positions_survive_a_broker_restart(broker: BrokerProcess) -> None:
    p = producer(broker.endpoints, ("pos1",))
    for i in range(10):
        p.send(message("pos1", f"{i}".encode()))
    p.shutdown()
    c = consumer(broker.endpoints, "g-pos", "pos1")
    assert len(drain(c, 10, 20)) == 10
    c.shutdown()
    broker.stop()  # a clean stop saves the positions (ConsumeRpcs.close)
    broker.start()
    p = producer(broker.endpoints, ("pos1",))
    p.send(message("pos1", b"after"))
    p.shutdown()
    c = consumer(broker.endpoints, "g-pos", "pos1")
    got = drain(c, 1, 20)
    got += c.receive(32, 2) or []  # a 2 s long poll: nothing more may come
    assert [m.body for m in got] == [b"after"]
    c.shutdown()
