"""Shared pieces of the security tests (test_security.py, test_security_clients.py): a
session-scoped broker with an ACL file and TLS (throwaway CA from txmq.demo.certs), the users'
secrets, raw v2 calls over TLS with the official client's own header code, and the admin view of
what is stored. Import the fixtures ``pki`` and ``secure`` into a test module to use them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg
from rocketmq.v5.util.signature import Signature

from tests.integration.conftest import FAST, BrokerProcess
from txmq.demo.certs import Bundle, make_bundle
from txmq.protocol import channels
from txmq.protocol.auth import signed_metadata

TOPIC = "sec-orders"
SECRETS = {
    "orders-app": "orders-secret-0123456789",
    "inventory-app": "inventory-secret-0123456789",
    "ops": "ops-secret-0123456789abcdef",
    "witness-app": "witness-secret-0123456789",
}
WITNESS_TOPIC = "sec-witness"  # a transaction there shows passes of the check loop
ACL = f"""
[[users]]
access_key = "orders-app"
secret_key = "{SECRETS["orders-app"]}"
publish = ["{TOPIC}"]

[[users]]
access_key = "inventory-app"
secret_key = "{SECRETS["inventory-app"]}"
subscribe = ["{TOPIC}"]
groups = ["inventory"]

[[users]]
access_key = "witness-app"
secret_key = "{SECRETS["witness-app"]}"
publish = ["{WITNESS_TOPIC}"]

[[users]]
access_key = "ops"
secret_key = "{SECRETS["ops"]}"
admin = true
"""


def write_acl(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


# Session-wide: gRPC core reads GRPC_DEFAULT_SSL_ROOTS_FILE_PATH once per process, so every
# official client of the test session trusts the first CA it was given.
@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    bundle = make_bundle(tmp_path_factory.mktemp("pki"))
    # Read by gRPC core when the official client makes its first secure channel.
    os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(bundle.ca)
    return bundle


@pytest.fixture(scope="session")
def secure(tmp_path_factory: pytest.TempPathFactory, pki: Bundle) -> Iterator[BrokerProcess]:
    d = tmp_path_factory.mktemp("secure")
    acl = write_acl(d / "acl.toml", ACL)
    tls = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    b = BrokerProcess(d / "broker", [*FAST, "--acl-file", str(acl), *tls])
    b.start()
    yield b
    b.stop()


def official(access_key: str, secret: str) -> list[tuple[str, str]]:
    cfg = SimpleNamespace(credentials=SimpleNamespace(ak=access_key, sk=secret), namespace="")
    return list(Signature.metadata(cfg, f"test-{access_key}"))


def tls_channel(b: BrokerProcess, pki: Bundle) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
    return grpc.secure_channel(b.endpoints, creds)


def v2(b: BrokerProcess, pki: Bundle, method: str, request: Any, meta: list[Any]) -> Any:
    with tls_channel(b, pki) as channel:
        return getattr(sg.MessagingServiceStub(channel), method)(request, metadata=meta, timeout=15)


def admin(b: BrokerProcess, pki: Bundle, method: str, args: dict[str, Any], who: str) -> Any:
    import time

    meta = signed_metadata(who, SECRETS[who], time.time_ns() // 1_000_000)
    with tls_channel(b, pki) as channel:
        raw = channel.unary_unary(f"/txmq.admin.v1.Admin/{method}")(
            json.dumps(args).encode(), metadata=meta, timeout=15
        )
    header, payload = channels.split(raw, method)
    assert not payload, "an admin reply is a frame without payload"
    return header


def stored(b: BrokerProcess, pki: Bundle) -> int:
    reply = admin(b, pki, "TopicList", {}, "ops")
    assert reply["ok"], reply
    return sum(t["messages"] for t in reply["topics"] if t["name"] == TOPIC)


def send_request(topic: str = TOPIC) -> Any:
    m = pb.Message(topic=pb.Resource(name=topic), body=b"x")
    m.system_properties.message_id = "0102FC00000001AAAA0000000000000001"
    m.system_properties.message_type = pb.NORMAL
    m.system_properties.body_encoding = pb.IDENTITY
    return sv.SendMessageRequest(messages=[m])
