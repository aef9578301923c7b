"""``txmq demo --secure``: the same story with TLS and an ACL on the embedded broker.

Owns: a throwaway CA and server certificate (``txmq.demo.certs``, the ``cryptography``
package), an ACL file (mode 600) with an operator who runs the story and a reader who may only
consume, the environment contract every client of the story reads (``TXMQ_ACCESS_KEY``,
``TXMQ_SECRET_KEY``, ``TXMQ_CA_FILE``, and ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` for the
official client), and three probes showing what the broker refuses.
Must not: leave the environment changed after the demo, or print a secret.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from txmq.errors import ConfigError
from txmq.protocol.client_security import ClientSecurity, open_channel

OPERATOR = "demo-operator"
READER = "demo-reader"
ENV_NAMES = (
    "TXMQ_ACCESS_KEY",
    "TXMQ_SECRET_KEY",
    "TXMQ_CA_FILE",
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
    # The demo's services run the official client, which signs its local time as UTC: in UTC
    # it is what the broker's date window expects (docs/security.md).
    "TZ",
)


def _acl_text(operator_secret: str, reader_secret: str) -> str:
    return f"""# txmq demo --secure: throwaway users (docs/security.md)
[[users]]
access_key = "{OPERATOR}"
secret_key = "{operator_secret}"
publish = ["*"]
subscribe = ["*"]
groups = ["*"]
admin = true

[[users]]
access_key = "{READER}"
secret_key = "{reader_secret}"
subscribe = ["*"]
groups = ["*"]
"""


@contextmanager
def secure_setup(work: Path) -> Iterator[tuple[list[str], dict[str, ClientSecurity]]]:
    """Write the PKI and the ACL under ``work``, point this process's clients at them, and
    yield (the broker's extra flags, the users' client settings by name).

    Raises:
        ConfigError: the ``cryptography`` package is missing.
    """
    try:
        from txmq.demo.certs import make_bundle
    except ImportError as exc:
        raise ConfigError(
            "txmq demo --secure needs the 'cryptography' package (pip install 'txmq[dev]')"
        ) from exc
    bundle = make_bundle(work / "pki")
    users = {
        OPERATOR: ClientSecurity(OPERATOR, secrets.token_urlsafe(24), ca_file=bundle.ca),
        READER: ClientSecurity(READER, secrets.token_urlsafe(24), ca_file=bundle.ca),
    }
    acl = work / "acl.toml"
    fd = os.open(acl, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(_acl_text(users[OPERATOR].secret_key, users[READER].secret_key))
    saved = {name: os.environ.get(name) for name in ENV_NAMES}
    operator = users[OPERATOR]
    os.environ.update(
        TXMQ_ACCESS_KEY=operator.access_key,
        TXMQ_SECRET_KEY=operator.secret_key,
        TXMQ_CA_FILE=str(bundle.ca),
        GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=str(bundle.ca),
        TZ="UTC",
    )
    time.tzset()
    flags = ["--acl-file", str(acl), "--tls-cert", str(bundle.server_cert)]
    flags += ["--tls-key", str(bundle.server_key)]
    try:
        yield flags, users
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        time.tzset()


def _send_status(endpoints: str, security: ClientSecurity, topic: str) -> str:
    message = pb.Message(topic=pb.Resource(name=topic), body=b"probe")
    message.system_properties.message_id = "0102FC0000000100DE0000000000000001"
    message.system_properties.message_type = pb.NORMAL
    message.system_properties.body_encoding = pb.IDENTITY
    with open_channel(endpoints, security) as channel:
        try:
            reply = sg.MessagingServiceStub(channel).SendMessage(
                sv.SendMessageRequest(messages=[message]),
                metadata=security.metadata(time.time_ns() // 1_000_000),
                timeout=10,
            )
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            return f"connection refused ({code})"
    name = pb.Code.Name(reply.status.code)
    return f"{name} ({reply.status.message})"


def probes(endpoints: str, users: dict[str, ClientSecurity], topic: str) -> list[tuple[str, str]]:
    """(what was tried, what the broker answered) for three callers it must refuse."""
    reader = users[READER]
    wrong = ClientSecurity(OPERATOR, secrets.token_urlsafe(24), ca_file=reader.ca_file)
    plaintext = ClientSecurity(reader.access_key, reader.secret_key)
    return [
        ("send with a wrong secret", _send_status(endpoints, wrong, topic)),
        (f"send as {READER} (subscribe only)", _send_status(endpoints, reader, topic)),
        ("send in plaintext to the TLS port", _send_status(endpoints, plaintext, topic)),
    ]
