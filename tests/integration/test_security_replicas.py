"""A secured replica group: two replicas with an ACL file and TLS, a
real etcd, SYNC replication. The follower serves TLS and checks credentials like the leader,
and fetches the leader's log over TLS signed as ``cluster_access_key``; with
``--min-insync-replicas 2`` a send succeeds only once the follower has it, so the official
client's sends prove the follower's signed fetches.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import grpc
from rocketmq import ClientConfiguration, Credentials, Producer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from tests.integration.clients import message
from tests.integration.conftest import FAST, BrokerProcess, wait_until
from tests.integration.security_fixtures import (
    ACL,
    SECRETS,
    TOPIC,
    official,
    send_request,
    v2,
    write_acl,
)
from txmq.demo.certs import Bundle
from txmq.protocol.auth import signed_metadata

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)


def status(b: BrokerProcess, pki: Bundle) -> dict[str, object]:
    """Replica.Status over TLS as the admin ({} when it does not answer)."""
    creds = grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
    meta = signed_metadata("ops", SECRETS["ops"], time.time_ns() // 1_000_000)
    with grpc.secure_channel(b.endpoints, creds) as ch:
        try:
            reply = ch.unary_unary("/txmq.replica.v1.Replica/Status")(
                b"{}", metadata=meta, timeout=2
            )
        except grpc.RpcError:
            return {}
    (n,) = struct.unpack_from(">I", reply, 0)
    doc: dict[str, object] = json.loads(reply[4 : 4 + n])
    return doc


def test_a_secured_replica_group_replicates_over_tls_signed(
    tmp_path: Path,
    pki: Bundle,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    acl = write_acl(tmp_path / "acl.toml", ACL)
    config = tmp_path / "broker.toml"
    config.write_text(f'[broker]\ncluster_access_key = "ops"\ncluster_ca_file = "{pki.ca}"\n')
    secured = ["--acl-file", str(acl), "--tls-cert", str(pki.server_cert)]
    secured += ["--tls-key", str(pki.server_key), "--config", str(config)]
    group = []
    for name in ("r0", "r1"):
        b = BrokerProcess(
            tmp_path / name,
            [*FAST, "--etcd", etcd_endpoint, "--replica-group", "sec", "--broker-name", name,
             "--min-insync-replicas", "2", *secured],
        )  # fmt: skip
        b.start()
        group.append(b)
    try:
        found: list[BrokerProcess] = []

        def one_leads() -> bool:
            found[:] = [b for b in group if status(b, pki).get("role") == "leader"]
            return len(found) == 1

        wait_until(one_leads, 30, "one replica to lead")
        leader = found[0]
        follower = next(b for b in group if b is not leader)
        wait_until(lambda: status(follower, pki).get("role") == "follower", 20, "a follower")
        # The follower's port is TLS only, like the leader's.
        with grpc.insecure_channel(follower.endpoints) as ch:
            try:
                sg.MessagingServiceStub(ch).SendMessage(send_request(), timeout=3)
                plaintext = "answered"
            except grpc.RpcError as exc:
                plaintext = str(exc.code())
        assert plaintext == "StatusCode.UNAVAILABLE"
        cfg = ClientConfiguration(
            leader.endpoints, Credentials("orders-app", SECRETS["orders-app"])
        )
        p = Producer(cfg, (TOPIC,), tls_enable=True)
        p.startup()
        try:
            for i in range(3):  # each acknowledged only once the follower fetched it
                assert p.send(message(TOPIC, f"replicated-{i}".encode())).message_id
        finally:
            p.shutdown()
        st = status(leader, pki)
        assert "r0" in st["in_sync"] and "r1" in st["in_sync"], st  # type: ignore[operator]
        # No plain TCP wire beside a TLS port (replica_wire.py): the rounds stay on Follow.
        assert st["wire_port"] is None and status(follower, pki)["fetching_on"] == "stream"
        forwarded = status(follower, pki)["forwarded"]
        assert isinstance(forwarded, int)
        # A call to the follower is forwarded to the leader (ADR 0006) only once the follower's
        # own interceptor let it through, and the leader checks it again: no bypass.
        ok = v2(
            follower,
            pki,
            "SendMessage",
            send_request(),
            official("orders-app", SECRETS["orders-app"]),
        )
        assert ok.status.code == pb.OK, ok.status
        no_right = v2(follower, pki, "SendMessage", send_request(),
                      official("inventory-app", SECRETS["inventory-app"]))  # fmt: skip
        assert no_right.status.code == pb.FORBIDDEN, no_right.status
        wrong = v2(follower, pki, "SendMessage", send_request(), official("orders-app", "x" * 24))
        assert wrong.status.code == pb.UNAUTHORIZED, wrong.status
        after = status(follower, pki)["forwarded"]
        assert after == forwarded + 1, f"only the allowed call was forwarded: {after}"
        _cluster_status_over_tls_signed(group, pki)
    finally:
        for b in group:
            if b.running:
                b.stop()


def _cluster_status_over_tls_signed(group: list[BrokerProcess], pki: Bundle) -> None:
    """``txmq cluster status`` asks every replica's Replica.Status with the command's TLS and
    keys: both rows up, one leader. Before, it dialled them in plaintext unsigned, and a
    secured group's replicas all showed as down."""
    from tests.cli.test_cli import txmq

    ep = ["--endpoints", ";".join(b.endpoints for b in group), "--ca-file", str(pki.ca)]
    keys = ["--access-key", "ops", "--secret-key", SECRETS["ops"]]
    r = txmq("cluster", "status", "--json", *ep, *keys)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["replicas"]
    assert sorted(row["up"] for row in rows) == [True, True], rows
    assert sorted(row["role"] for row in rows) == ["follower", "leader"], rows
