"""Mutual TLS between cluster members and replicas: brokers started
with ``--tls-client-ca`` (and an ACL file) present their own certificate to each other, so a
secured cluster or replica group can require client certificates. Real processes, a real etcd;
on the cluster and on the replica group (``txmq cluster up --replicas 2``), the official Python
client presenting a client certificate (txmq.client.official_tls), and raw calls with one.

Before, such a member or replica was refused at start ("mutual TLS between peer brokers is not
supported"): both tests fail before any call."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from tests.cli.test_cli import txmq
from tests.cli.test_cluster_cli import _lines, _two_free_ports
from tests.integration.clients import drain, message
from tests.integration.conftest import FAST, ROOT, BrokerProcess, wait_until
from tests.integration.security_fixtures import (
    ACL,
    SECRETS,
    TOPIC,
    official,
    send_request,
    write_acl,
)
from txmq.client import official_tls
from txmq.client.admin import call
from txmq.demo.certs import Bundle, make_bundle
from txmq.errors import BrokerUnavailableError
from txmq.protocol.client_security import ClientSecurity, open_channel

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)


def who(pki: Bundle, user: str = "ops", *, certificate: bool = True) -> ClientSecurity:
    """``user``'s keys over TLS trusting the test CA, with the test client certificate."""
    cert = (pki.client_cert, pki.client_key) if certificate else (None, None)
    return ClientSecurity(user, SECRETS[user], ca_file=pki.ca, cert_file=cert[0], key_file=cert[1])


def cli_security(pki: Bundle, user: str = "ops", *, certificate: bool = True) -> list[str]:
    out = ["--ca-file", str(pki.ca), "--access-key", user, "--secret-key", SECRETS[user]]
    if certificate:
        out += ["--cert-file", str(pki.client_cert), "--key-file", str(pki.client_key)]
    return out


def secured_args(tmp_path: Path, pki: Bundle) -> list[str]:
    """ACL, TLS requiring client certificates, and the peers' keys and CA (config file)."""
    acl = write_acl(tmp_path / "acl.toml", ACL)
    config = tmp_path / "broker.toml"
    config.write_text(f'[broker]\ncluster_access_key = "ops"\ncluster_ca_file = "{pki.ca}"\n')
    return [
        "--acl-file", str(acl), "--config", str(config),
        "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
        "--tls-client-ca", str(pki.ca),
    ]  # fmt: skip


@pytest.fixture
def official_with_certificate(pki: Bundle) -> Iterator[None]:
    """The official client's channels present the test client certificate, for this test."""
    official_tls.present(who(pki))
    yield
    official_tls.present(ClientSecurity())


def v2_call(endpoint: str, security: ClientSecurity, method: str, request: object) -> object:
    with open_channel(endpoint, security) as channel:
        stub = sg.MessagingServiceStub(channel)
        meta = official(security.access_key, security.secret_key)
        return getattr(stub, method)(request, metadata=meta, timeout=15)


def replica_status(endpoint: str, pki: Bundle) -> dict[str, object]:
    """Replica.Status over mutual TLS as the admin ({} when it does not answer)."""
    security = who(pki)
    with open_channel(endpoint, security) as channel:
        try:
            reply = channel.unary_unary("/txmq.replica.v1.Replica/Status")(
                b"{}", metadata=security.metadata(time.time_ns() // 1_000_000), timeout=2
            )
        except grpc.RpcError:
            return {}
    (n,) = struct.unpack_from(">I", reply, 0)
    doc: dict[str, object] = json.loads(reply[4 : 4 + n])
    return doc


def _refuses_a_client_without_certificate(endpoint: str, pki: Bundle) -> None:
    """Signed, over TLS, trusting the right CA, but without a certificate: the handshake fails
    before any handler; the CLI says what is likely missing."""
    with pytest.raises(grpc.RpcError) as raised:
        v2_call(endpoint, who(pki, certificate=False), "QueryRoute",
                sv.QueryRouteRequest(topic=pb.Resource(name=TOPIC)))  # fmt: skip
    assert raised.value.code() is grpc.StatusCode.UNAVAILABLE
    with pytest.raises(BrokerUnavailableError, match="--cert-file"):
        call(endpoint, "TopicList", {}, security=who(pki, certificate=False))
    r = txmq("topic", "list", "--endpoints", endpoint, *cli_security(pki, certificate=False))
    assert r.returncode == 3, r
    assert "--cert-file" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_cluster_requiring_client_certificates_serves_across_members(
    tmp_path: Path,
    pki: Bundle,
    official_with_certificate: None,
) -> None:
    from tests.integration.test_cluster import free_ports
    from txmq.coordination.cluster_file import ClusterFile, Member, write

    members = tuple(Member(f"b{i}", "127.0.0.1", p) for i, p in enumerate(free_ports(2)))
    cluster = tmp_path / "cluster.toml"
    write(cluster, ClusterFile("mtls", members))
    common = [*FAST, *secured_args(tmp_path, pki), "--cluster", str(cluster)]
    brokers = [
        BrokerProcess(tmp_path / m.name, [*common, "--broker-name", m.name], port=m.port)
        for m in members
    ]
    for b in brokers:
        b.start()
    try:
        # An operator's create on b0 is forwarded to b1 over mutual TLS, signed as ops, and b1
        # answers (it may have imported the topic already, probing b0 over mutual TLS too).
        created = call(brokers[0].endpoints, "TopicCreate", {"name": TOPIC}, security=who(pki))
        assert created["members"]["b1"] in ("created", "exists"), created
        _official_client_across_members(brokers, pki)
        # Every member answers `txmq cluster status`; each row asked of the member itself.
        ep = ";".join(b.endpoints for b in brokers)
        r = txmq("cluster", "status", "--json", "--endpoints", ep, *cli_security(pki))
        assert r.returncode == 0, r.stderr
        assert [m["up"] for m in json.loads(r.stdout)["members"]] == [True, True], r.stdout
        _refuses_a_client_without_certificate(brokers[1].endpoints, pki)
        _refuses_a_member_with_a_foreign_peer_certificate(tmp_path, brokers, pki)
    finally:
        for b in brokers:
            if b.running:
                b.stop()


def _official_client_across_members(brokers: list[BrokerProcess], pki: Bundle) -> None:
    """Given b0 only, the official client learns b1's queues from b0's route (b0 probes b1
    over mutual TLS: a member that does not answer is left out of routes) and sends to, and
    receives from, both members with its client certificate; so does the CLI."""
    _send_over_tls(brokers[0].endpoints, [f"m-{i}" for i in range(16)])
    for b in brokers:  # the route's queues on both members got messages
        topics = call(b.endpoints, "TopicList", {}, security=who(pki))["topics"]
        assert [t["messages"] for t in topics if t["name"] == TOPIC] != [0], (b.port, topics)
    sent = txmq("send", TOPIC, "from-cli", "--endpoints", brokers[1].endpoints,
                *cli_security(pki, "orders-app"))  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    bodies = _receive_over_tls(brokers[1].endpoints, 17)
    assert bodies == sorted([*(f"m-{i}" for i in range(16)), "from-cli"]), bodies


def _send_over_tls(endpoint: str, bodies: list[str]) -> None:
    """The official client, given ``endpoint`` only, sends ``bodies`` to TOPIC over TLS as
    orders-app (presenting the test client certificate: official_with_certificate)."""
    config = ClientConfiguration(endpoint, Credentials("orders-app", SECRETS["orders-app"]))
    p = Producer(config, (TOPIC,), tls_enable=True)
    p.startup()
    try:
        for body in bodies:
            assert p.send(message(TOPIC, body.encode())).message_id
    finally:
        p.shutdown()


def _receive_over_tls(endpoint: str, want: int) -> list[str]:
    """Up to ``want`` bodies of TOPIC (sorted), received and acked over TLS by the official
    client as inventory-app, given ``endpoint`` only."""
    reader = ClientConfiguration(endpoint, Credentials("inventory-app", SECRETS["inventory-app"]))
    c = SimpleConsumer(
        reader, "inventory", {TOPIC: FilterExpression("*")}, await_duration=2, tls_enable=True
    )
    c.startup()
    try:
        got = drain(c, want, 60)
    finally:
        c.shutdown()
    return sorted(m.body.decode() for m in got)


def _refuses_a_member_with_a_foreign_peer_certificate(
    tmp_path: Path,
    brokers: list[BrokerProcess],
    pki: Bundle,
) -> None:
    """b1 restarted presenting a peer certificate another CA signed: b0 ends its handshakes,
    so b1's create reaches no peer."""
    rogue = make_bundle(tmp_path / "rogue")
    b1 = brokers[1]
    b1.stop()
    b1.args += ["--tls-peer-cert", str(rogue.client_cert), "--tls-peer-key", str(rogue.client_key)]
    b1.start()
    created = call(b1.endpoints, "TopicCreate", {"name": "from-rogue"}, security=who(pki))
    assert created["members"]["b1"] == "created", created
    assert created["members"]["b0"].startswith("unreachable"), created

    def b0_out_of_b1s_view() -> bool:
        view = call(b1.endpoints, "ClusterInfo", {}, security=who(pki))["members"]
        return [m["live"] for m in view if m["name"] == "b0"] == [False]

    # b1's probes of b0 fail the same way: b0 leaves b1's routes. (b0 still reaches b1: its
    # own peer certificate is the CA's.)
    wait_until(b0_out_of_b1s_view, 30, "b1 to see b0 as down")


def test_cluster_up_gives_its_replicas_the_mutual_tls_flags(
    tmp_path: Path,
    pki: Bundle,
    etcd_endpoint: str,  # noqa: F811
    official_with_certificate: None,
) -> None:
    """``txmq cluster up --replicas 2 --etcd E -- <security flags>``: every flag after ``--``
    reaches both replicas, --tls-client-ca included; they replicate (SYNC) and forward over
    mutual TLS, refuse a client without a certificate, and serve the official Python client
    given the follower's endpoint (the route names the leader alone: over TLS a multi-address
    route fails the official client's hostname check, docs/security.md)."""
    port = _two_free_ports(2)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "txmq.cli", "cluster", "up", "--replicas", "2",
           "--etcd", etcd_endpoint, "--data-dir", str(tmp_path / "c"), "--port", str(port),
           "--", *FAST, *secured_args(tmp_path, pki)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = _lines(proc, 2, 60)
        assert len(lines) == 2 and all("listening on" in line for line in lines), lines
        leader, follower = _roles([f"127.0.0.1:{port + k}" for k in range(2)], pki)
        call(leader, "TopicCreate", {"name": TOPIC}, security=who(pki))  # no auto-create here
        _forwards_and_replicates(leader, follower, pki)
        _official_client_on_the_group(leader, follower)
        _refuses_a_client_without_certificate(follower, pki)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, proc.stderr.read() if proc.stderr else ""


def _roles(endpoints: list[str], pki: Bundle) -> tuple[str, str]:
    """(leader, follower) once one leads and the other follows, asked over mutual TLS."""
    found: list[str] = []

    def settled() -> bool:
        roles = {e: replica_status(e, pki).get("role") for e in endpoints}
        found[:] = sorted(endpoints, key=lambda e: roles[e] != "leader")
        return sorted(map(str, roles.values())) == ["follower", "leader"]

    wait_until(settled, 30, "one replica to lead and the other to follow")
    return found[0], found[1]


def _forwards_and_replicates(leader: str, follower: str, pki: Bundle) -> None:
    """A route and sends asked of the follower are forwarded to its leader over mutual TLS; a
    send is acknowledged once the follower fetched it (SYNC: its Fetch works over mutual TLS
    too); both replicas in sync; `txmq cluster status` shows both up."""
    forwarded = replica_status(follower, pki)["forwarded"]
    assert isinstance(forwarded, int)
    route = sv.QueryRouteRequest(topic=pb.Resource(name=TOPIC))
    routed = v2_call(follower, who(pki, "orders-app"), "QueryRoute", route)
    assert routed.status.code == pb.OK and routed.message_queues, routed  # type: ignore[attr-defined]
    for _ in range(3):
        reply = v2_call(follower, who(pki, "orders-app"), "SendMessage", send_request())
        assert reply.status.code == pb.OK, reply  # type: ignore[attr-defined]
    assert replica_status(follower, pki)["forwarded"] == forwarded + 4
    st = replica_status(leader, pki)
    assert len(st["in_sync"]) == 2, st  # type: ignore[arg-type]
    r = txmq("cluster", "status", "--json", "--endpoints", f"{leader};{follower}",
             *cli_security(pki))  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["replicas"]
    assert sorted(row["up"] for row in rows) == [True, True], rows
    assert sorted(row["role"] for row in rows) == ["follower", "leader"], rows


def _official_client_on_the_group(leader: str, follower: str) -> None:
    """Given the follower only, the official client gets a route naming the leader alone and
    sends and receives over TLS with its certificate (before: every replica's address, one
    target ``ipv4:H:P1,H:P2`` whose hostname check failed: no send got through)."""
    _send_over_tls(follower, [f"g-{i}" for i in range(5)])
    bodies = _receive_over_tls(follower, 8)
    assert bodies == sorted(["x", "x", "x", *(f"g-{i}" for i in range(5))]), (bodies, leader)
