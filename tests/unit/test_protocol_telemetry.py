"""Telemetry payloads, pure: the Settings reply echoes the client's Settings with the server's
values filled in (what the official clients need before they send or consume), and the
check-back command carries the half message under its real topic.

Method: build Settings the way the official Producer/SimpleConsumer do, run the pure builders,
and hand the reply to the official Producer's own ``reset_setting`` logic where it matters."""

from __future__ import annotations

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from txmq import limits
from txmq.errors import invariant
from txmq.model import PROP_REAL_QUEUE_ID, PROP_REAL_TOPIC, PROP_TRANSACTION_ID, Record, TxnFlag
from txmq.protocol import mapping, telemetry

SERVER = telemetry.ServerSettings(
    body_size_max=4 * 1024 * 1024,
    long_polling_timeout_ms=20_000,
    receive_batch_size=32,
    delivery_attempts_max=5,
    retry_backoff_initial_ms=1_000,
    retry_backoff_max_ms=4_000,
)


def producer_settings() -> pb.Settings:
    s = pb.Settings(client_type=pb.PRODUCER)
    s.publishing.topics.add(name="orders")
    s.publishing.max_body_size = 128 * 1024 * 1024
    s.publishing.validate_message_type = True
    s.user_agent.language = pb.PYTHON
    s.user_agent.version = "5.1.2"
    mapping.set_duration(s.request_timeout, 3_000)
    return s


def consumer_settings() -> pb.Settings:
    s = pb.Settings(client_type=pb.SIMPLE_CONSUMER)
    s.subscription.group.name = "g1"
    e = s.subscription.subscriptions.add()
    e.topic.name = "orders"
    e.expression.expression = "*"
    return s


def test_producer_reply_echoes_the_settings_and_fills_the_body_limit() -> None:
    sent = producer_settings()
    before = sent.SerializeToString()
    reply = telemetry.settings_reply(sent, SERVER, fifo=False)
    assert sent.SerializeToString() == before, "the input is not modified"
    assert reply.client_type == pb.PRODUCER
    assert [t.name for t in reply.publishing.topics] == ["orders"]
    assert reply.user_agent.version == "5.1.2"
    assert reply.publishing.max_body_size == 4 * 1024 * 1024
    assert reply.publishing.validate_message_type is False
    bp = reply.backoff_policy
    assert bp.WhichOneof("strategy") == "exponential_backoff"
    assert bp.max_attempts == limits.PRODUCER_ATTEMPTS_MAX
    assert bp.exponential_backoff.multiplier == 2.0
    assert mapping.duration_ms(bp.exponential_backoff.max) == telemetry.PRODUCER_BACKOFF_MAX_MS


@pytest.mark.parametrize("fifo", [False, True])
def test_consumer_reply_fills_polling_batch_fifo_and_backoff(fifo: bool) -> None:
    reply = telemetry.settings_reply(consumer_settings(), SERVER, fifo=fifo)
    sub = reply.subscription
    assert sub.group.name == "g1" and sub.subscriptions[0].topic.name == "orders"
    assert mapping.duration_ms(sub.long_polling_timeout) == 20_000
    assert sub.receive_batch_size == 32
    assert sub.fifo is fifo
    bp = reply.backoff_policy
    assert bp.WhichOneof("strategy") == "customized_backoff"
    assert bp.max_attempts == 5
    steps = [mapping.duration_ms(d) for d in bp.customized_backoff.next]
    assert steps == [1_000, 2_000, 4_000, 4_000, 4_000]
    assert not reply.HasField("publishing")


def test_node_consumers_get_the_same_backoff_as_an_exponential_policy() -> None:
    """rocketmq-client-nodejs reads only exponential backoff (a customized one leaves its
    consumers without retries); the delays are the customized steps' delays."""
    sent = consumer_settings()
    sent.user_agent.language = pb.NODE_JS
    bp = telemetry.settings_reply(sent, SERVER, fifo=True).backoff_policy
    assert bp.WhichOneof("strategy") == "exponential_backoff"
    assert bp.max_attempts == 5
    exp = bp.exponential_backoff
    initial, most = mapping.duration_ms(exp.initial), mapping.duration_ms(exp.max)
    delays = [min(initial * exp.multiplier**n, most) for n in range(bp.max_attempts)]
    assert delays == telemetry.backoff_steps_ms(SERVER) == [1_000, 2_000, 4_000, 4_000, 4_000]


def test_backoff_steps_are_bounded() -> None:
    many = telemetry.ServerSettings(
        body_size_max=1,
        long_polling_timeout_ms=1,
        receive_batch_size=1,
        delivery_attempts_max=1000,
        retry_backoff_initial_ms=1,
        retry_backoff_max_ms=10,
    )
    steps = telemetry.backoff_steps_ms(many)
    assert len(steps) == limits.CONSUMER_BACKOFF_STEPS_MAX
    assert max(steps) == 10


def test_server_settings_refuse_nonsense() -> None:
    with pytest.raises(AssertionError):
        telemetry.ServerSettings(
            body_size_max=0,
            long_polling_timeout_ms=1,
            receive_batch_size=1,
            delivery_attempts_max=1,
            retry_backoff_initial_ms=1,
            retry_backoff_max_ms=1,
        )


def test_the_official_producer_accepts_the_reply() -> None:
    """The client's Producer.reset_setting reads max_body_size and the backoff policy; run its
    logic on our reply through an instance that never starts (no sockets)."""
    from rocketmq import ClientConfiguration, Credentials, Producer

    p = Producer(ClientConfiguration("127.0.0.1:1", Credentials()), ("orders",))
    p.reset_setting(telemetry.settings_reply(producer_settings(), SERVER, fifo=False))
    invariant(p._init_settings_event.is_set(), "settings applied")
    assert p._Producer__max_body_size == 4 * 1024 * 1024


def test_check_back_command_shows_the_half_under_its_real_topic() -> None:
    half = Record(
        topic="RMQ_SYS_TRANS_HALF_TOPIC",
        queue_id=0,
        queue_offset=-1,
        physical_offset=77,
        size=100,
        flag=TxnFlag.PREPARED,
        store_timestamp_ms=5_000,
        born_timestamp_ms=4_000,
        born_host="h",
        reconsume_times=0,
        prepared_offset=-1,
        message_id="M1",
        tag="t",
        keys=("k",),
        body=b"b",
        properties={
            PROP_REAL_TOPIC: "orders",
            PROP_REAL_QUEUE_ID: "3",
            PROP_TRANSACTION_ID: "T1",
            "user": "u",
        },
    )
    cmd = telemetry.recover_orphaned_command(half, "T1")
    rc = cmd.recover_orphaned_transaction_command
    assert rc.transaction_id == "T1"
    assert rc.message.topic.name == "orders"
    assert rc.message.system_properties.queue_id == 3
    assert rc.message.system_properties.message_type == pb.TRANSACTION
    assert rc.message.system_properties.message_id == "M1"
    assert dict(rc.message.user_properties) == {"user": "u"}
    with pytest.raises(AssertionError):
        telemetry.recover_orphaned_command(half, "")
