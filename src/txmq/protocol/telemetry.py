"""Telemetry stream payloads: the Settings handshake reply and the check-back command. Pure.

Owns: what the broker says on a client's Telemetry stream. The official clients need the
client's own Settings echoed back with the server's values filled in: an empty reply makes
every later send fail with "max size=0 bytes", and a PushConsumer waits for this reply before
it consumes. Must not: read configuration files, the clock, or any session state; the broker
passes the values in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv

from txmq import limits
from txmq.errors import invariant
from txmq.model import PROP_REAL_QUEUE_ID, PROP_REAL_TOPIC, MessageType, Record
from txmq.protocol import mapping

PRODUCER_BACKOFF_INITIAL_MS = 10
PRODUCER_BACKOFF_MAX_MS = 1_000
# Consumers' redelivery delays double from the initial backoff up to the maximum.
CONSUMER_BACKOFF_MULTIPLIER = 2.0
# Clients whose consumers read only an exponential backoff policy: the Node.js client
# (rocketmq-client-nodejs 1.0.8) ignores a customized one and then never retries, so a failed
# FIFO message goes straight to the DLQ. The Python client reads only a customized one; Java
# reads both. Both shapes describe the same delays.
EXPONENTIAL_ONLY_LANGUAGES = frozenset({pb.NODE_JS})


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """The broker's values that a Settings reply fills in."""

    body_size_max: int
    long_polling_timeout_ms: int
    receive_batch_size: int
    delivery_attempts_max: int
    retry_backoff_initial_ms: int
    retry_backoff_max_ms: int

    def __post_init__(self) -> None:
        invariant(self.body_size_max > 0, "body_size_max must be positive")
        invariant(self.receive_batch_size > 0, "receive_batch_size must be positive")
        invariant(self.delivery_attempts_max > 0, "delivery_attempts_max must be positive")
        invariant(
            0 < self.retry_backoff_initial_ms <= self.retry_backoff_max_ms,
            "need 0 < retry_backoff_initial_ms <= retry_backoff_max_ms",
        )


def is_publisher(settings: Any) -> bool:
    return bool(settings.HasField("publishing") or settings.client_type == pb.PRODUCER)


def settings_reply(settings: Any, server: ServerSettings, *, fifo: bool) -> Any:
    """The client's ``settings`` echoed back with the server's values filled in.

    Args:
        settings: the client's ``apache.rocketmq.v2.Settings``.
        server: the broker's limits.
        fifo: whether the subscribed topics are FIFO (consumers only; ignored for producers).

    Returns:
        A new Settings; the input is not modified.
    """
    out = pb.Settings()
    out.CopyFrom(settings)
    bp = out.backoff_policy
    if is_publisher(settings):
        out.publishing.max_body_size = server.body_size_max
        # The broker checks types against the topic itself (and auto-created topics take any
        # type), so the client must not refuse a send on its own.
        out.publishing.validate_message_type = False
        bp.ClearField("customized_backoff")
        bp.max_attempts = limits.PRODUCER_ATTEMPTS_MAX
        mapping.set_duration(bp.exponential_backoff.initial, PRODUCER_BACKOFF_INITIAL_MS)
        mapping.set_duration(bp.exponential_backoff.max, PRODUCER_BACKOFF_MAX_MS)
        bp.exponential_backoff.multiplier = 2.0
        return out
    sub = out.subscription
    sub.receive_batch_size = server.receive_batch_size
    mapping.set_duration(sub.long_polling_timeout, server.long_polling_timeout_ms)
    sub.fifo = fifo
    bp.ClearField("exponential_backoff")
    bp.ClearField("customized_backoff")
    bp.max_attempts = server.delivery_attempts_max
    if settings.user_agent.language in EXPONENTIAL_ONLY_LANGUAGES:
        mapping.set_duration(bp.exponential_backoff.initial, server.retry_backoff_initial_ms)
        mapping.set_duration(bp.exponential_backoff.max, server.retry_backoff_max_ms)
        bp.exponential_backoff.multiplier = CONSUMER_BACKOFF_MULTIPLIER
        return out
    for delay_ms in backoff_steps_ms(server):
        mapping.set_duration(bp.customized_backoff.next.add(), delay_ms)
    return out


def backoff_steps_ms(server: ServerSettings) -> list[int]:
    """Redelivery delays: the initial backoff doubling per attempt up to the maximum."""
    steps: list[int] = []
    delay = server.retry_backoff_initial_ms
    for _ in range(min(server.delivery_attempts_max, limits.CONSUMER_BACKOFF_STEPS_MAX)):
        steps.append(delay)
        delay = min(delay * 2, server.retry_backoff_max_ms)
    return steps


def recover_orphaned_command(half: Record, transaction_id: str) -> Any:
    """The check-back question for one half message, as the producer's TransactionChecker
    sees it: the message under its real topic and queue, typed TRANSACTION."""
    invariant(bool(transaction_id), "a check-back needs the transaction id")
    msg = mapping.message_from_record(
        half,
        topic=half.properties.get(PROP_REAL_TOPIC, half.topic),
        queue_id=int(half.properties.get(PROP_REAL_QUEUE_ID, "0")),
        message_type=MessageType.TRANSACTION,
    )
    return sv.TelemetryCommand(
        recover_orphaned_transaction_command=sv.RecoverOrphanedTransactionCommand(
            message=msg, transaction_id=transaction_id
        )
    )
