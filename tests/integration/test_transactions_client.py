"""Transactions with the official Python client against a real broker, beyond the basic
commit / rollback / check-back cases (test_official_client.py has those):

- a transaction whose producer left is not rolled back for lack of an answer: it waits, and the
  next live producer of the topic answers the check-back;
- a decision is idempotent (the same decision again answers OK and delivers once) and the
  opposite decision is refused with a clear status;
- an undecided transaction survives a broker restart and is resolved by check-back after it;
- a commit that a check-back overtook (the checker answered ROLLBACK first) fails at the
  producer, and nothing is delivered.

Method: official Producer/SimpleConsumer, plus a raw EndTransaction stub for the repeat
decisions the client itself never sends."""

from __future__ import annotations

import time

import grpc
import pytest
from rocketmq import FilterExpression, SimpleConsumer
from rocketmq import TransactionResolution as R
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg
from rocketmq.v5.exception import ClientException

from tests.integration.clients import (
    Checker,
    check_loop_witness,
    config,
    drain,
    message,
    producer,
)
from tests.integration.conftest import BrokerProcess, wait_until
from txmq.client.admin import call


def _receive_all(endpoints: str, group: str, topic: str, want: int, settle_s: float) -> list[bytes]:
    """Drain ``want`` messages, then keep listening ``settle_s`` for unwanted extras."""
    # A short long-poll, so listening for extras ends close to ``settle_s``.
    c = SimpleConsumer(config(endpoints), group, {topic: FilterExpression()}, await_duration=2)
    c.startup()
    try:
        got = [m.body for m in drain(c, want, 30)]
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            for m in c.receive(32, 2) or []:
                got.append(m.body)
                c.ack(m)
        return got
    finally:
        c.shutdown()


def test_a_left_producers_transaction_waits_for_the_next_live_producer(
    broker: BrokerProcess,
) -> None:
    first = Checker(lambda m: R.ROLLBACK)
    a = producer(broker.endpoints, ("txw",), first)
    tx = a.begin_transaction()
    half = a.send(message("txw", b"orphan"), tx)
    a.shutdown()  # leaves without deciding
    # With nobody to ask, check-backs are not spent: the check loop passes it by, again and
    # again (a witness transaction, due after it, is checked three times meanwhile), and the
    # transaction is neither checked nor given up.
    with check_loop_witness(broker.endpoints, "txw-witness") as witness:
        wait_until(lambda: len(witness.calls) >= 3, 30, "three passes of the check loop")
    assert first.calls == []
    shown = call(broker.endpoints, "TxnShow", {"id": half.transaction_id})
    assert shown["checks"] == 0 and not shown["dead"], shown
    second = Checker(lambda m: R.COMMIT)
    b = producer(broker.endpoints, ("txw",), second)
    try:
        wait_until(lambda: half.message_id in second.calls, 30, "a check-back to the new producer")
        assert _receive_all(broker.endpoints, "g-txw", "txw", 1, 2) == [b"orphan"]
    finally:
        b.shutdown()


def _end(broker: BrokerProcess, topic: str, message_id: str, tid: str, resolution: int) -> object:
    channel = grpc.insecure_channel(broker.endpoints)
    try:
        return (
            sg.MessagingServiceStub(channel)
            .EndTransaction(
                sv.EndTransactionRequest(
                    topic=pb.Resource(name=topic),
                    message_id=message_id,
                    transaction_id=tid,
                    resolution=resolution,
                    source=pb.SOURCE_CLIENT,
                ),
                metadata=[("x-mq-client-id", "repeat-decider")],
                timeout=15,
            )
            .status
        )
    finally:
        channel.close()


def test_decisions_are_idempotent_and_a_contradiction_is_refused(broker: BrokerProcess) -> None:
    p = producer(broker.endpoints, ("txi",), Checker(lambda m: R.ROLLBACK))
    try:
        tx = p.begin_transaction()
        committed = p.send(message("txi", b"once"), tx)
        tx.commit()
        tx = p.begin_transaction()
        rolled = p.send(message("txi", b"never"), tx)
        tx.rollback()
    finally:
        p.shutdown()
    assert committed.transaction_id and rolled.transaction_id
    again = _end(broker, "txi", committed.message_id, committed.transaction_id, pb.COMMIT)
    assert again.code == pb.OK, again  # type: ignore[attr-defined]
    flip = _end(broker, "txi", committed.message_id, committed.transaction_id, pb.ROLLBACK)
    assert flip.code == pb.PRECONDITION_FAILED and "committed" in flip.message  # type: ignore[attr-defined]
    flip = _end(broker, "txi", rolled.message_id, rolled.transaction_id, pb.COMMIT)
    assert flip.code == pb.PRECONDITION_FAILED  # type: ignore[attr-defined]
    assert _receive_all(broker.endpoints, "g-txi", "txi", 1, 3) == [b"once"]


def test_an_undecided_transaction_survives_a_restart_and_is_resolved(
    broker: BrokerProcess,
) -> None:
    a = producer(broker.endpoints, ("txr",), Checker(lambda m: R.ROLLBACK))
    tx = a.begin_transaction()
    half = a.send(message("txr", b"across the restart"), tx)
    a.shutdown()
    broker.stop()
    broker.start()
    checker = Checker(lambda m: R.COMMIT)
    b = producer(broker.endpoints, ("txr",), checker)
    try:
        wait_until(lambda: half.message_id in checker.calls, 30, "check-back after restart")
        assert _receive_all(broker.endpoints, "g-txr", "txr", 1, 2) == [b"across the restart"]
    finally:
        b.shutdown()


def test_check_back_reaches_a_producer_that_did_not_declare_the_topic(
    broker: BrokerProcess,
) -> None:
    """The official client sends its topics in Settings at start, once more a second later,
    then every 5 minutes; a transaction on another topic must still be checked with that
    producer in between."""
    checker = Checker(lambda m: R.COMMIT)
    p = producer(broker.endpoints, ("txd-declared",), checker)
    try:
        # Past the official client's settings re-sync (a timer inside the client): the
        # broker's ClientList counts the Settings messages each session received.
        def settings_received() -> int:
            listed = call(broker.endpoints, "ClientList", {"topic": "txd-declared"})["clients"]
            return max((c["settings"] for c in listed if c["client_id"] == p.client_id), default=0)

        wait_until(lambda: settings_received() >= 2, 15, "the producer's second Settings")
        tx = p.begin_transaction()
        half = p.send(message("txd-other", b"undeclared topic"), tx)
        wait_until(lambda: half.message_id in checker.calls, 30, "a check-back")
        assert _receive_all(broker.endpoints, "g-txd", "txd-other", 1, 2) == [b"undeclared topic"]
    finally:
        p.shutdown()


def test_a_commit_a_check_back_overtook_fails_at_the_producer(broker: BrokerProcess) -> None:
    """A commit slower than the transaction timeout (800 ms here: a loaded machine, a long
    pause between send and commit) reaches the broker after the check-back it raced, which the
    checker answered ROLLBACK: the producer's commit must fail, not answer OK for a message
    that is never delivered."""
    checker = Checker(lambda m: R.ROLLBACK)
    p = producer(broker.endpoints, ("txlate",), checker)
    try:
        tx = p.begin_transaction()
        half = p.send(message("txlate", b"too late"), tx)

        def outcome() -> object:
            return call(broker.endpoints, "TxnShow", {"id": half.transaction_id}).get("outcome")

        wait_until(lambda: outcome() == "rolled_back", 30, "the check-back's rollback")
        with pytest.raises(ClientException) as refused:
            tx.commit()
    finally:
        p.shutdown()
    assert refused.value.code == pb.PRECONDITION_FAILED, refused.value
    assert half.message_id in checker.calls
    assert _receive_all(broker.endpoints, "g-txlate", "txlate", 0, 3) == []
