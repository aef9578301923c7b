"""A peer certificate must name the member it calls as (mutual TLS between replicas).

Two SYNC replicas over etcd requiring client certificates (``--tls-client-ca``), each presenting
its own peer certificate (``--tls-peer-cert``) that names only its replica name (``r0``,
``r1``; CN and SAN DNS), all signed by one CA, which also signed the members' server
certificate (127.0.0.1) and a client certificate (``txmq client``). The follower replicates with
its own (a SYNC send is acknowledged); but the client's certificate, or the leader's peer
certificate, calling Replica/Fetch as the follower is refused FORBIDDEN with a message naming
what the certificate names, and so is a forwarded topic create from a client certificate. On
the code before, any certificate the CA signed was accepted as any member: the Fetch got the
leader's log, the forwarded create created the topic on this member alone.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID as Usage
from rocketmq.grpc_protocol import definition_pb2 as pb

from tests.integration.conftest import FAST, BrokerProcess
from tests.integration.security_fixtures import ACL, SECRETS, send_request, write_acl
from tests.integration.test_security_mtls import _roles, replica_status, v2_call, who
from txmq.broker.replication.leader import SERVICE
from txmq.broker.security.peer_names import PeerInterceptor, PeerNames
from txmq.client.admin import call
from txmq.demo.certs import Authority, Bundle
from txmq.errors import CODE_FORBIDDEN, ForbiddenError
from txmq.protocol import channels
from txmq.protocol.client_security import ClientSecurity, open_channel

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

REFUSED = "is for cluster members only"
MEMBER = (Usage.SERVER_AUTH, Usage.CLIENT_AUTH)


def as_cert(pki: Bundle, cert: tuple[Path, Path]) -> ClientSecurity:
    """The admin's keys over TLS trusting the test CA, presenting ``cert``."""
    return ClientSecurity(
        "ops", SECRETS["ops"], ca_file=pki.ca, cert_file=cert[0], key_file=cert[1]
    )


def fetch_as(
    endpoint: str, pki: Bundle, cert: tuple[Path, Path], follower: str
) -> dict[str, object]:
    """One Replica/Fetch from the leader's end as ``follower``, presenting ``cert``; the
    reply's header."""
    security = as_cert(pki, cert)
    doc = replica_status(endpoint, pki)
    args = {"follower": follower, "from": doc["end"], "epoch": doc["epoch"], "last": None}
    with open_channel(endpoint, security) as channel:
        reply = channel.unary_unary("/txmq.replica.v1.Replica/Fetch")(
            json.dumps(args).encode(),
            metadata=security.metadata(time.time_ns() // 10**6),
            timeout=10,
        )
    header, _ = channels.split(reply, "Fetch")
    return dict(header)


def test_a_peer_only_call_needs_a_certificate_naming_that_member(
    tmp_path: Path,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    ca = Authority(tmp_path / "pki")
    server = ca.issue("server", "127.0.0.1", hosts=("127.0.0.1", "localhost"), usage=MEMBER)
    peer = {n: ca.issue(n, n, hosts=(n,)) for n in ("r0", "r1")}
    client = ca.issue("client", "txmq client")
    pki = Bundle(ca.ca, *server, *client)
    config = tmp_path / "broker.toml"
    config.write_text(f'[broker]\ncluster_access_key = "ops"\ncluster_ca_file = "{ca.ca}"\n')
    common = [*FAST, "--etcd", etcd_endpoint, "--replica-group", "pg", "--min-insync-replicas",
              "2", "--acl-file", str(write_acl(tmp_path / "acl.toml", ACL)), "--config",
              str(config), "--tls-cert", str(server[0]), "--tls-key", str(server[1]),
              "--tls-client-ca", str(ca.ca)]  # fmt: skip
    replicas = {
        n: BrokerProcess(tmp_path / n, [*common, "--broker-name", n, "--tls-peer-cert",
                                        str(peer[n][0]), "--tls-peer-key", str(peer[n][1])])
        for n in ("r0", "r1")
    }  # fmt: skip
    for b in replicas.values():
        b.start()
    try:
        leader, follower = _roles([b.endpoints for b in replicas.values()], pki)
        lead = str(replica_status(leader, pki)["name"])
        follows = str(replica_status(follower, pki)["name"])
        # The follower fetches with its own certificate: a SYNC send is acknowledged.
        reply = v2_call(leader, who(pki, "orders-app"), "SendMessage", send_request())
        assert reply.status.code == pb.OK, reply  # type: ignore[attr-defined]
        # A client's certificate, or another member's, fetching as the follower: refused.
        for cert in (client, peer[lead]):
            header = fetch_as(leader, pki, cert, follows)
            assert header.get("ok") is False and header.get("code") == CODE_FORBIDDEN, header
            assert REFUSED in str(header["error"]) and follows in str(header["error"]), header
        # A forwarded create (what only a peer sends) from a client certificate: refused.
        forwarded = {"name": "sneaked", "queues": 1, "type": "NORMAL", "forwarded": True}
        with pytest.raises(ForbiddenError, match=REFUSED):
            call(leader, "TopicCreate", forwarded, security=as_cert(pki, client))
        assert REFUSED in replicas[lead].log_tail(200)
        # The follower's own fetches go on: another send is acknowledged.
        reply = v2_call(leader, who(pki, "orders-app"), "SendMessage", send_request())
        assert reply.status.code == pb.OK, reply  # type: ignore[attr-defined]
    except grpc.RpcError as exc:
        raise AssertionError(f"{exc}\n{[b.log_tail() for b in replicas.values()]}") from exc
    finally:
        for b in replicas.values():
            if b.running:
                b.stop()


def test_every_request_of_a_replica_stream_is_checked(tmp_path: Path) -> None:
    """The check is the server's last interceptor, not a line in each handler: a stream of
    fetch rounds (a way to ship the log that main does not have yet) gets it per request. A
    real grpc.aio server with mutual TLS in this process; its handlers answer every request."""
    ca = Authority(tmp_path / "pki")
    server_cert = ca.issue("server", "127.0.0.1", hosts=("127.0.0.1",), usage=MEMBER)
    peer = {n: ca.issue(n, n, hosts=(n,)) for n in ("r0", "r1")}
    client = ca.issue("client", "txmq client")
    hosts = {"r0": "10.9.9.1", "r1": "10.9.9.2"}  # no certificate names these
    replies = asyncio.run(_stream_rounds(ca.ca, server_cert, peer, client, hosts))
    assert replies["r1 as r1, r1"] == [True, True]
    assert replies["r0 as r1"] == [False]  # refused, and the stream ends with it
    assert replies["r1 as r1, r0"] == [True, False]
    assert replies["client as r1"] == [False]
    assert replies["client: Status"] == [True]  # not peer-only


async def _stream_rounds(
    ca: Path,
    server_cert: tuple[Path, Path],
    peer: dict[str, tuple[Path, Path]],
    client: tuple[Path, Path],
    hosts: dict[str, str],
) -> dict[str, list[bool]]:
    edge = PeerInterceptor(PeerNames(lambda: hosts), PeerNames(lambda: hosts))
    server = grpc.aio.server(interceptors=[edge])

    async def rounds(requests: AsyncIterator[bytes], context: object) -> AsyncIterator[bytes]:
        async for body in requests:
            yield channels.frame({"ok": True, "asked": json.loads(body)})

    async def status(body: bytes, context: object) -> bytes:
        return channels.frame({"ok": True})

    handlers = {
        "Follow": grpc.stream_stream_rpc_method_handler(rounds),
        "Status": grpc.unary_unary_rpc_method_handler(status),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    key, cert = (p.read_bytes() for p in (server_cert[1], server_cert[0]))
    credentials = grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca.read_bytes(), require_client_auth=True
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    out: dict[str, list[bool]] = {}
    try:
        cases = [
            ("r1 as r1, r1", peer["r1"], ["r1", "r1"]),
            ("r0 as r1", peer["r0"], ["r1"]),
            ("r1 as r1, r0", peer["r1"], ["r1", "r0"]),
            ("client as r1", client, ["r1"]),
        ]
        for label, (cert_file, key_file), claims in cases:
            async with _channel(port, ca, cert_file, key_file) as channel:
                call = channel.stream_stream(f"/{SERVICE}/Follow")
                bodies = [json.dumps({"follower": c}).encode() for c in claims]
                got = [reply async for reply in call(_each(bodies), timeout=10)]
            out[label] = [bool(channels.split(r, "Follow")[0]["ok"]) for r in got]
        async with _channel(port, ca, *client) as channel:
            reply = await channel.unary_unary(f"/{SERVICE}/Status")(b"{}", timeout=10)
        out["client: Status"] = [bool(channels.split(reply, "Status")[0]["ok"])]
    finally:
        await server.stop(0)
    return out


async def _each(bodies: list[bytes]) -> AsyncIterator[bytes]:
    for body in bodies:
        yield body


def _channel(port: int, ca: Path, cert_file: Path, key_file: Path) -> grpc.aio.Channel:
    credentials = grpc.ssl_channel_credentials(
        ca.read_bytes(), key_file.read_bytes(), cert_file.read_bytes()
    )
    return grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials)
