"""Names, auto-creation and undecodable requests, against a real broker.

Goal: every malformed name or request gets a RocketMQ status, never gRPC UNKNOWN: a topic name
with a trailing newline is illegal, a 10,000-character group is refused, a string field that is
not UTF-8 is BAD_REQUEST; with auto-creation off (the default) unknown topics, ``%DLQ%`` names
included, are TOPIC_NOT_FOUND instead of being created; a garbled topics.json stops the start
with one line and no traceback. Method: raw gRPC calls with the official client's stubs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from tests.integration.conftest import ROOT, BrokerProcess
from txmq import errors, limits
from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.topics.registry import TopicRegistry
from txmq.model import MessageType
from txmq.store.files.disk import OsDisk

META = [("x-mq-client-id", "inputs-test")]


def route(stub: Any, topic: str) -> int:
    reply = stub.QueryRoute(
        sv.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=META, timeout=10
    )
    return int(reply.status.code)


def receive_status(stub: Any, topic: str, group: str) -> int:
    req = sv.ReceiveMessageRequest(batch_size=1)
    req.group.name = group
    req.message_queue.topic.name = topic
    req.filter_expression.type = pb.TAG
    req.filter_expression.expression = "*"
    req.invisible_duration.seconds = 10
    req.long_polling_timeout.FromMilliseconds(100)
    replies = list(stub.ReceiveMessage(req, metadata=META, timeout=10))
    return int(replies[0].status.code)


@pytest.fixture
def strict(tmp_path: Path) -> Any:
    b = BrokerProcess(tmp_path / "broker", ["--no-auto-create-topics"])
    b.start()
    channel = grpc.insecure_channel(b.endpoints)
    yield b, sg.MessagingServiceStub(channel), channel
    channel.close()
    assert b.stop() == 0


def test_names_are_validated_whole_and_bounded(strict: Any) -> None:
    b, stub, _ = strict
    assert route(stub, "orders\n") == errors.CODE_ILLEGAL_TOPIC
    assert route(stub, "x" * (limits.TOPIC_NAME_LENGTH_MAX + 1)) == errors.CODE_ILLEGAL_TOPIC
    subprocess.run(
        [sys.executable, "-m", "txmq.cli", "topic", "create", "t", "--endpoints", b.endpoints],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
        check=True,
        capture_output=True,
    )
    assert receive_status(stub, "t", "g" * 10_000) == errors.CODE_ILLEGAL_CONSUMER_GROUP
    assert receive_status(stub, "t", "g\n") == errors.CODE_ILLEGAL_CONSUMER_GROUP
    assert receive_status(stub, "t", "fine_group-1") == errors.CODE_MESSAGE_NOT_FOUND


def test_unknown_topics_are_not_created_by_default(strict: Any) -> None:
    b, stub, _ = strict
    assert BrokerConfig(data_dir=b.data_dir).auto_create_topics is False
    assert route(stub, "never-created") == errors.CODE_TOPIC_NOT_FOUND
    assert route(stub, "%DLQ%someone") == errors.CODE_TOPIC_NOT_FOUND
    assert receive_status(stub, "never-created", "g") == errors.CODE_TOPIC_NOT_FOUND
    registry = b.data_dir / "topics.json"
    assert not registry.exists() or json.loads(registry.read_text()) == []


def test_a_string_that_is_not_utf8_is_bad_request_not_unknown(strict: Any) -> None:
    _b, _stub, channel = strict
    name = b"\xff\xfebad"
    resource = bytes([0x12, len(name)]) + name  # Resource.name (field 2)
    raw = bytes([0x0A, len(resource)]) + resource  # QueryRouteRequest.topic (field 1)
    call = channel.unary_unary(
        "/apache.rocketmq.v2.MessagingService/QueryRoute",
        request_serializer=lambda b: b,
        response_deserializer=sv.QueryRouteResponse.FromString,
    )
    reply = call(raw, metadata=META, timeout=10)
    assert reply.status.code == errors.CODE_BAD_REQUEST and "UTF-8" in reply.status.message
    stream = channel.unary_stream(
        "/apache.rocketmq.v2.MessagingService/ReceiveMessage",
        request_serializer=lambda b: b,
        response_deserializer=sv.ReceiveMessageResponse.FromString,
    )
    group = bytes([0x0A, len(resource)]) + resource  # ReceiveMessageRequest.group (field 1)
    replies = list(stream(group, metadata=META, timeout=10))
    assert [r.status.code for r in replies] == [errors.CODE_BAD_REQUEST]


def test_a_garbled_topic_registry_stops_the_start_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "d"
    data.mkdir()
    (data / "topics.json").write_text('[{"name": "t", "queues": ')
    r = subprocess.run(
        [sys.executable, "-m", "txmq.broker", "--data-dir", str(data), "--port", "0"],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("txmq: ")]
    assert len(lines) == 1 and "topics.json is not a valid topic registry" in lines[0]
    assert "Traceback" not in r.stderr


def test_the_number_of_topics_is_bounded(tmp_path: Path) -> None:
    reg = TopicRegistry(
        tmp_path / "topics.json", OsDisk(), auto_create=True, default_queues=1, topics_max=3
    )
    for name in ("a", "b", "c"):
        reg.ensure(name)
    with pytest.raises(errors.TooManyRequestsError):
        reg.ensure("d")
    with pytest.raises(errors.TooManyRequestsError):
        reg.create("e", 1, MessageType.NORMAL)
