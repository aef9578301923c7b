"""Memory per ReceiveMessage stream is bounded.

Goal: clients that open receive streams and never read them cost the broker a bounded amount of
memory, and the broker keeps serving others meanwhile: 12 never-read streams, each asking for a
batch of 32 messages of 4 MiB (12 consumer groups, so each stream would get its own copy of all
32), keep the broker's peak RSS under 512 MiB; before the fix they pinned ~1.5 GiB.
Method: a real broker process; 32 records of 4 MiB written with the store itself between runs;
raw gRPC streams with the official client's stubs, started and never read; peak RSS (VmHWM)
from /proc; a 13th consumer and a send must still work.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from tests.cli.test_cli import ok
from tests.integration.conftest import BrokerProcess, wait_until
from txmq import errors, limits
from txmq.client.admin import call
from txmq.model import RecordDraft
from txmq.store.store import Store

BODY = 4 * limits.MiB
MESSAGES = 32
STREAMS = 12
RSS_MAX_KIB = 512 * 1024
META = [("x-mq-client-id", "memory-test")]


def proc_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


def receive_request(group: str, batch: int = 32) -> Any:
    req = sv.ReceiveMessageRequest(batch_size=batch)
    req.group.name = group
    req.message_queue.topic.name = "big"
    req.filter_expression.type = pb.TAG
    req.filter_expression.expression = "*"
    req.invisible_duration.seconds = 60
    req.long_polling_timeout.FromMilliseconds(1000)
    return req


def received(endpoints: str) -> float:
    for line in call(endpoints, "Status", {})["metrics"].splitlines():
        if line.startswith("txmq_messages_received_total "):
            return float(line.split()[1])
    return 0.0


def test_never_read_streams_keep_rss_bounded_and_the_broker_serving(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "broker")
    b.start()
    ok("topic", "create", "big", "--queues", "1", "--endpoints", b.endpoints)
    assert b.stop() == 0
    store = Store.open(b.data_dir / "store", now_ms=lambda: time.time_ns() // 1_000_000)
    for i in range(MESSAGES):
        body = bytes([i]) * BODY
        store.append(RecordDraft(topic="big", queue_id=0, body=body, message_id=f"m{i}"))
    store.close()
    b.start()
    assert b.proc is not None
    channel = grpc.insecure_channel(
        b.endpoints, options=[("grpc.max_receive_message_length", limits.GRPC_MESSAGE_SIZE_MAX)]
    )
    stub = sg.MessagingServiceStub(channel)
    streams = [
        stub.ReceiveMessage(receive_request(f"g{n}"), metadata=META, timeout=120)
        for n in range(STREAMS)
    ]
    try:
        for s in streams:
            s.initial_metadata()  # the call is under way; its messages are never read
        # Each stream has been given its first messages once the counter reaches one batch
        # per stream (at least one message each); by then every record is read.
        wait_until(lambda: received(b.endpoints) >= STREAMS, 60, "every stream served")
        peak = proc_kib(b.proc.pid, "VmHWM")
        print(
            f"broker peak RSS {peak / 1024:.0f} MiB, now {proc_kib(b.proc.pid, 'VmRSS') / 1024:.0f}"
        )
        assert peak < RSS_MAX_KIB, f"peak RSS {peak / 1024:.0f} MiB"
        # Still serving: another consumer gets a message, a send is accepted.
        replies = list(
            stub.ReceiveMessage(receive_request("healthy", 1), metadata=META, timeout=60)
        )
        assert [r.WhichOneof("content") for r in replies] == [
            "status",
            "delivery_timestamp",
            "message",
        ]
        assert replies[2].message.body == bytes([0]) * BODY
        msg = pb.Message(body=b"still writable")
        msg.topic.name = "big"
        msg.system_properties.message_id = "after"
        msg.system_properties.message_type = pb.NORMAL
        sent = stub.SendMessage(sv.SendMessageRequest(messages=[msg]), metadata=META, timeout=30)
        assert sent.status.code == errors.CODE_OK, sent.status.message
    finally:
        for s in streams:
            s.cancel()
        channel.close()
        assert b.stop() == 0, b.log_tail()
    assert os.path.exists(b.data_dir)


@pytest.mark.slow
def test_rss_stays_flat_over_rounds_of_abandoned_streams(tmp_path: Path) -> None:
    """Soak: 8 rounds of 12 never-read streams, each round cancelled; RSS after each round
    stays under the bound and does not grow round over round (nothing leaks per stream)."""
    b = BrokerProcess(tmp_path / "broker")
    b.start()
    ok("topic", "create", "big", "--queues", "1", "--endpoints", b.endpoints)
    assert b.stop() == 0
    store = Store.open(b.data_dir / "store", now_ms=lambda: time.time_ns() // 1_000_000)
    for i in range(MESSAGES):
        store.append(
            RecordDraft(topic="big", queue_id=0, body=bytes([i]) * BODY, message_id=f"m{i}")
        )
    store.close()
    b.start()
    assert b.proc is not None
    channel = grpc.insecure_channel(
        b.endpoints, options=[("grpc.max_receive_message_length", limits.GRPC_MESSAGE_SIZE_MAX)]
    )
    stub = sg.MessagingServiceStub(channel)
    after_round: list[int] = []
    try:
        for round_ in range(8):
            before = received(b.endpoints)
            streams = [
                stub.ReceiveMessage(receive_request(f"r{round_}g{n}"), metadata=META, timeout=120)
                for n in range(STREAMS)
            ]
            for s in streams:
                s.initial_metadata()
            target = before + STREAMS
            wait_until(lambda t=target: received(b.endpoints) >= t, 60, "streams served")
            for s in streams:
                s.cancel()
            after_round.append(proc_kib(b.proc.pid, "VmRSS"))
        print("RSS after each round (MiB):", [kib // 1024 for kib in after_round])
        assert max(after_round) < RSS_MAX_KIB
        # malloc returns memory unevenly, so single rounds dip; a leak would lift the second
        # half above the first.
        first, second = after_round[:4], after_round[4:]
        assert max(second) < max(first) + 64 * 1024, "RSS grows round over round"
    finally:
        channel.close()
        assert b.stop() == 0, b.log_tail()
