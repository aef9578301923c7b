"""Authentication, authorization and TLS against a real broker, with the official Python client.

Goal: with --acl-file and --tls-cert/--tls-key, the unmodified rocketmq-python-client 5.1.2
(``tls_enable=True``, the CA given by gRPC's GRPC_DEFAULT_SSL_ROOTS_FILE_PATH) sends, commits,
rolls back, is checked back and consumes; every kind of bad caller is refused with the RocketMQ
status the issue names, in the RPC's own response, and nothing is stored.
Method: one broker for the session (ACL + TLS, throwaway CA from txmq.demo.certs), raw v2 stubs
over TLS for exact statuses (metadata built by the official client's own Signature code), the
txmq admin channel as an admin to see what is stored. SIGHUP reload, start-up refusals and
mutual TLS each get their own broker.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Producer,
    SimpleConsumer,
    TransactionResolution,
)
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from tests.integration.clients import Checker, message
from tests.integration.conftest import ROOT, BrokerProcess, wait_until
from tests.integration.security_fixtures import (
    ACL,
    SECRETS,
    TOPIC,
    admin,
    official,
    send_request,
    stored,
    tls_channel,
    v2,
    write_acl,
)
from txmq.demo.certs import Bundle
from txmq.protocol import channels


def test_official_client_over_tls_sends_commits_rolls_back_checks_back_and_consumes(
    secure: BrokerProcess, pki: Bundle
) -> None:
    R = TransactionResolution
    checker = Checker(lambda m: R.COMMIT)
    cfg = ClientConfiguration(secure.endpoints, Credentials("orders-app", SECRETS["orders-app"]))
    p = Producer(cfg, (TOPIC,), checker, tls_enable=True)
    p.startup()
    try:
        p.send(message(TOPIC, b"plain"))
        tx = p.begin_transaction()
        p.send(message(TOPIC, b"committed"), tx)
        tx.commit()
        tx = p.begin_transaction()
        p.send(message(TOPIC, b"rolled-back"), tx)
        tx.rollback()
        tx = p.begin_transaction()
        undecided = p.send(message(TOPIC, b"checked-back"), tx)  # decided by the checker
        wait_until(lambda: undecided.message_id in checker.calls, 30, "a check-back over TLS")
    finally:
        p.shutdown()
    ccfg = ClientConfiguration(
        secure.endpoints, Credentials("inventory-app", SECRETS["inventory-app"])
    )
    c = SimpleConsumer(
        ccfg, "inventory", {TOPIC: FilterExpression("*")}, tls_enable=True, await_duration=2
    )
    c.startup()
    got: list[bytes] = []
    try:
        wait_until(lambda: got.extend(m.body for m in _take(c)) or len(got) >= 3, 30, "3 msgs")
    finally:
        c.shutdown()
    assert sorted(got) == [b"checked-back", b"committed", b"plain"]


def _take(c: SimpleConsumer) -> list[Any]:
    messages = c.receive(16, 15)
    for m in messages:
        c.ack(m)
    return list(messages)


def _without(meta: list[tuple[str, str]], name: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in meta if k != name]


def _replace_signature(meta: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out = []
    for k, v in meta:
        if k == "authorization":
            v = v.rsplit("Signature=", 1)[0] + "Signature="
        out.append((k, v))
    return out


@pytest.mark.parametrize(
    ("case", "meta", "says"),
    [
        ("wrong secret", official("orders-app", "not-the-secret-at-all"), "wrong signature"),
        ("missing signature", _replace_signature(official("orders-app", "x")), "no signature"),
        ("unknown access key", official("mallory", "mallory-secret-01234"), "unknown access key"),
        ("no header", _without(official("orders-app", "x"), "authorization"), "no authorization"),
        (
            "no date",
            _without(official("orders-app", SECRETS["orders-app"]), "x-mq-date-time"),
            "x-mq-date-time",
        ),
    ],
)
def test_bad_credentials_are_unauthorized_and_nothing_is_stored(
    secure: BrokerProcess, pki: Bundle, case: str, meta: list[Any], says: str
) -> None:
    before = stored(secure, pki)
    reply = v2(secure, pki, "SendMessage", send_request(), meta)
    assert reply.status.code == pb.UNAUTHORIZED, (case, reply)
    assert says in reply.status.message
    assert not any(v in reply.status.message for v in SECRETS.values())
    assert not reply.entries
    route = v2(secure, pki, "QueryRoute", sv.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), meta)
    assert route.status.code == pb.UNAUTHORIZED
    assert stored(secure, pki) == before


def test_telemetry_with_a_wrong_secret_is_refused_at_open(
    secure: BrokerProcess, pki: Bundle
) -> None:
    settings = sv.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER))
    with tls_channel(secure, pki) as channel:
        stream = sg.MessagingServiceStub(channel).Telemetry(
            iter([settings]), metadata=official("orders-app", "wrong-secret-0123456"), timeout=15
        )
        first = next(stream)
    assert first.status.code == pb.UNAUTHORIZED and not first.HasField("settings")


def test_plaintext_to_the_tls_port_is_refused(secure: BrokerProcess, pki: Bundle) -> None:
    before = stored(secure, pki)
    meta = official("orders-app", SECRETS["orders-app"])
    with grpc.insecure_channel(secure.endpoints) as channel, pytest.raises(grpc.RpcError) as info:
        sg.MessagingServiceStub(channel).SendMessage(send_request(), metadata=meta, timeout=5)
    assert info.value.code() is grpc.StatusCode.UNAVAILABLE
    assert stored(secure, pki) == before


def test_a_user_without_publish_is_forbidden_and_nothing_is_stored(
    secure: BrokerProcess, pki: Bundle
) -> None:
    before = stored(secure, pki)
    meta = official("inventory-app", SECRETS["inventory-app"])
    reply = v2(secure, pki, "SendMessage", send_request(), meta)
    assert reply.status.code == pb.FORBIDDEN, reply
    assert f"may not publish to topic '{TOPIC}'" in reply.status.message
    assert stored(secure, pki) == before


def test_a_subscriber_cannot_receive_or_ack_with_a_group_it_has_no_right_to(
    secure: BrokerProcess, pki: Bundle
) -> None:
    meta = official("inventory-app", SECRETS["inventory-app"])
    ack = sv.AckMessageRequest(
        group=pb.Resource(name="billing"),
        topic=pb.Resource(name=TOPIC),
        entries=[sv.AckMessageEntry(message_id="x", receipt_handle="y")],
    )
    reply = v2(secure, pki, "AckMessage", ack, meta)
    assert reply.status.code == pb.FORBIDDEN and "group 'billing'" in reply.status.message
    receive = sv.ReceiveMessageRequest(
        group=pb.Resource(name="billing"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=0),
    )
    with tls_channel(secure, pki) as channel:
        stub = sg.MessagingServiceStub(channel)
        first = next(iter(stub.ReceiveMessage(receive, metadata=meta, timeout=15)))
    assert first.status.code == pb.FORBIDDEN and "group 'billing'" in first.status.message


def test_a_publisher_cannot_decide_a_transaction_of_another_topic(
    secure: BrokerProcess, pki: Bundle
) -> None:
    cfg = ClientConfiguration(secure.endpoints, Credentials("orders-app", SECRETS["orders-app"]))
    p = Producer(cfg, (TOPIC,), Checker(lambda m: TransactionResolution.ROLLBACK), tls_enable=True)
    p.startup()
    try:
        tx = p.begin_transaction()
        half = p.send(message(TOPIC, b"theirs"), tx)
        # inventory-app may not publish anywhere; naming a topic it could publish would not help
        # either: the broker checks the topic it recorded for the transaction.
        end = sv.EndTransactionRequest(
            topic=pb.Resource(name=TOPIC),
            message_id=half.message_id,
            transaction_id=half.transaction_id,
            resolution=pb.COMMIT,
            source=pb.SOURCE_CLIENT,
        )
        meta = official("inventory-app", SECRETS["inventory-app"])
        reply = v2(secure, pki, "EndTransaction", end, meta)
        assert reply.status.code == pb.FORBIDDEN, reply
        shown = admin(secure, pki, "TxnShow", {"id": half.transaction_id}, "ops")
        assert shown["ok"] and shown.get("state") != "committed", shown
        tx.rollback()
    finally:
        p.shutdown()


def test_the_admin_channel_needs_admin(secure: BrokerProcess, pki: Bundle) -> None:
    refused = admin(secure, pki, "TopicDelete", {"name": TOPIC}, "orders-app")
    assert refused == {
        "ok": False,
        "code": pb.FORBIDDEN,
        "error": "access key 'orders-app' is not an admin",
    }
    refused = admin(secure, pki, "TxnResolve", {"id": "x", "action": "commit"}, "inventory-app")
    assert refused["code"] == pb.FORBIDDEN
    assert admin(secure, pki, "TopicDescribe", {"name": TOPIC}, "ops")["ok"]
    # A lookup by key within one topic reads what a subscriber of it may read, no more.
    find = {"topic": TOPIC, "key": "k"}
    assert admin(secure, pki, "MessageFind", find, "inventory-app")["ok"]
    assert admin(secure, pki, "MessageFind", find, "orders-app")["code"] == pb.FORBIDDEN
    assert admin(secure, pki, "MessageFind", {"key": "k"}, "inventory-app")["code"] == pb.FORBIDDEN


def test_mutual_tls_needs_a_client_certificate(tmp_path: Path, pki: Bundle) -> None:
    b = BrokerProcess(
        tmp_path / "broker",
        [
            "--tls-cert",
            str(pki.server_cert),
            "--tls-key",
            str(pki.server_key),
            "--tls-client-ca",
            str(pki.ca),
        ],
    )
    b.start()
    try:
        request = sv.QueryRouteRequest(topic=pb.Resource(name=TOPIC))
        with tls_channel(b, pki) as channel, pytest.raises(grpc.RpcError):
            sg.MessagingServiceStub(channel).QueryRoute(request, timeout=5)
        creds = grpc.ssl_channel_credentials(
            root_certificates=pki.ca.read_bytes(),
            private_key=pki.client_key.read_bytes(),
            certificate_chain=pki.client_cert.read_bytes(),
        )
        with grpc.secure_channel(b.endpoints, creds) as channel:
            reply = sg.MessagingServiceStub(channel).QueryRoute(request, timeout=15)
        assert reply.status.code == pb.OK
        assert b.log_tail().count("this broker is open") == 1  # no --acl-file: said once
    finally:
        b.stop()


def test_sighup_reloads_the_acl_and_a_bad_file_keeps_the_old_rules(tmp_path: Path) -> None:
    from tests.integration.test_cluster import free_ports

    acl = write_acl(tmp_path / "acl.toml", ACL)
    (metrics_port,) = free_ports(1)
    b = BrokerProcess(
        tmp_path / "broker", ["--acl-file", str(acl), "--metrics-port", str(metrics_port)]
    )
    b.start()
    late = ("late-app", "late-secret-0123456789")
    request = sv.QueryRouteRequest(topic=pb.Resource(name=TOPIC))

    def route_code() -> int:
        with grpc.insecure_channel(b.endpoints) as channel:
            stub = sg.MessagingServiceStub(channel)
            return int(stub.QueryRoute(request, metadata=official(*late), timeout=15).status.code)

    try:
        assert route_code() == pb.UNAUTHORIZED
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        with urllib.request.urlopen(metrics_url, timeout=10) as page:
            scraped = page.read().decode()
        assert 'txmq_calls_refused_total{status="unauthorized"} 1.0' in scraped
        extra = f'\n[[users]]\naccess_key = "{late[0]}"\nsecret_key = "{late[1]}"\n'
        write_acl(acl, ACL + extra + f'publish = ["{TOPIC}"]\n')
        assert b.proc is not None
        b.proc.send_signal(1)  # SIGHUP
        wait_until(lambda: route_code() == pb.OK, 15, "the reloaded ACL to admit late-app")
        write_acl(acl, ACL + extra + "publish = ['bad pattern']\n")
        b.proc.send_signal(1)
        wait_until(lambda: "ACL reload refused" in b.log_tail(), 15, "the refused reload logged")
        assert "bad pattern" in b.log_tail()
        assert route_code() == pb.OK  # the previous rules still hold
    finally:
        b.stop()


# What the official Python client's own header code signs in a zone 9 hours east of UTC.
OFFICIAL_IN_TOKYO = """
import json, sys
from types import SimpleNamespace
from rocketmq.v5.util.signature import Signature
cfg = SimpleNamespace(credentials=SimpleNamespace(ak=sys.argv[1], sk=sys.argv[2]), namespace="")
print(json.dumps(list(Signature.metadata(cfg, "tokyo-client"))))
"""


def test_the_signature_date_window_is_15_minutes_unless_widened(tmp_path: Path) -> None:
    import json
    import time

    from txmq.protocol.auth import signed_metadata

    acl = write_acl(tmp_path / "acl.toml", ACL)
    key = ("orders-app", SECRETS["orders-app"])
    tokyo = subprocess.run(
        [sys.executable, "-c", OFFICIAL_IN_TOKYO, *key],
        capture_output=True,
        text=True,
        env=dict(os.environ, TZ="JST-9"),
        timeout=60,
        check=True,
    )
    tokyo_meta = [tuple(pair) for pair in json.loads(tokyo.stdout)]
    request = sv.QueryRouteRequest(topic=pb.Resource(name=TOPIC))

    def route(b: BrokerProcess, meta: list[Any]) -> Any:
        with grpc.insecure_channel(b.endpoints) as channel:
            return sg.MessagingServiceStub(channel).QueryRoute(request, metadata=meta, timeout=15)

    def off_by(minutes: int) -> list[tuple[str, str]]:
        return signed_metadata(*key, time.time_ns() // 1_000_000 + minutes * 60_000)

    default = BrokerProcess(tmp_path / "default", ["--acl-file", str(acl)])
    # 9 h 15 min: a Tokyo client's local time as UTC, and 15 minutes of clock skew.
    wide = BrokerProcess(
        tmp_path / "wide", ["--acl-file", str(acl), "--auth-date-skew-s", str(9 * 3600 + 900)]
    )
    default.start()
    wide.start()
    try:
        assert route(default, off_by(-5)).status.code == pb.OK
        for minutes in (-20, 20):
            reply = route(default, off_by(minutes))
            assert reply.status.code == pb.UNAUTHORIZED, reply
            assert "away from the broker's clock (UTC; accepted: 900 s" in reply.status.message
            assert route(wide, off_by(minutes)).status.code == pb.OK
        reply = route(default, tokyo_meta)
        assert reply.status.code == pb.UNAUTHORIZED, reply
        assert "must run with TZ=UTC" in reply.status.message
        assert route(wide, tokyo_meta).status.code == pb.OK
    finally:
        default.stop()
        wide.stop()


def test_a_reload_that_would_leave_no_admin_is_refused_and_the_old_rules_kept(
    tmp_path: Path,
) -> None:
    acl = write_acl(tmp_path / "acl.toml", ACL)
    b = BrokerProcess(tmp_path / "broker", ["--acl-file", str(acl)])
    b.start()

    def topic_list_ok() -> bool:
        meta = official("ops", SECRETS["ops"])
        with grpc.insecure_channel(b.endpoints) as channel:
            raw = channel.unary_unary("/txmq.admin.v1.Admin/TopicList")(
                b"{}", metadata=meta, timeout=15
            )
        return bool(channels.split(raw, "TopicList")[0]["ok"])

    def refused_lines() -> list[str]:
        return [ln for ln in b.log_tail(200).splitlines() if "ACL reload refused" in ln]

    def reload_refused(text: str, count: int) -> None:
        write_acl(acl, text)
        assert b.proc is not None
        b.proc.send_signal(1)  # SIGHUP
        wait_until(lambda: len(refused_lines()) == count, 15, f"refused reload {count} logged")
        line = refused_lines()[-1]
        assert " ERROR " in line and "no user has admin = true" in line, line
        assert topic_list_ok()  # the admin of the previous rules still administers

    try:
        assert topic_list_ok()
        reload_refused("", 1)  # an empty file
        reload_refused(ACL.replace("admin = true", "admin = false"), 2)
        assert "ACL reloaded" not in b.log_tail(200)
    finally:
        b.stop()


@pytest.mark.parametrize(
    "text", ["", ACL.replace("admin = true", "admin = false")], ids=["empty", "no-admin"]
)
def test_rules_without_an_admin_are_refused_at_start_with_exit_2(tmp_path: Path, text: str) -> None:
    acl = write_acl(tmp_path / "acl.toml", text)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "txmq.broker", "--data-dir", str(tmp_path / "d")]
    cmd += ["--port", "0", "--acl-file", str(acl)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"txmq: {acl}: no user has admin = true"), line
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    ("text", "mode", "says"),
    [
        (ACL, 0o644, "lets group or others read"),
        (
            ACL + "\n[[users]]\naccess_key='x'\nsecret_key='0123456789abcdef'\nrole='a'\n",
            0o600,
            f"users[{ACL.count('[[users]]')}].role: unknown key",  # the user after ACL's
        ),
        (ACL.replace('"sec-orders"]', '"sec orders"]', 1), 0o600, "malformed pattern"),
    ],
)
def test_a_bad_acl_file_is_refused_at_start_in_one_line(
    tmp_path: Path, text: str, mode: int, says: str
) -> None:
    acl = write_acl(tmp_path / "acl.toml", text, mode)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [
        sys.executable,
        "-m",
        "txmq.broker",
        "--data-dir",
        str(tmp_path / "d"),
        "--port",
        "0",
        "--acl-file",
        str(acl),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode in (1, 2), done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(acl) in lines[0] and says in lines[0]
    assert not any(v in lines[0] for v in [*SECRETS.values(), "0123456789abcdef"])
    assert not (tmp_path / "d").exists()  # refused before the data directory is touched


def test_a_secured_cluster_members_sign_and_encrypt_their_calls_to_each_other(
    tmp_path: Path, pki: Bundle
) -> None:
    from tests.integration.test_cluster import free_ports
    from txmq.coordination.cluster_file import ClusterFile, Member, write

    members = tuple(Member(f"b{i}", "127.0.0.1", p) for i, p in enumerate(free_ports(2)))
    cluster = tmp_path / "cluster.toml"
    write(cluster, ClusterFile("secure", members))
    acl = write_acl(tmp_path / "acl.toml", ACL)
    config = tmp_path / "broker.toml"
    config.write_text(f'[broker]\ncluster_access_key = "ops"\ncluster_ca_file = "{pki.ca}"\n')
    common = ["--acl-file", str(acl), "--tls-cert", str(pki.server_cert)]
    common += ["--tls-key", str(pki.server_key), "--cluster", str(cluster)]
    brokers = [
        BrokerProcess(
            tmp_path / m.name,
            [*common, "--broker-name", m.name, "--config", str(config)],
            port=m.port,
        )
        for m in members
    ]
    for b in brokers:
        b.start()
    try:
        created = admin(brokers[0], pki, "TopicCreate", {"name": "sec-spread"}, "ops")
        assert created["ok"], created
        # The peer got the definition over TLS, signed as ops (or imports it at its next probe).
        wait_until(
            lambda: admin(brokers[1], pki, "TopicDescribe", {"name": "sec-spread"}, "ops")["ok"],
            20,
            "the topic on the peer",
        )
        assert "refused" not in brokers[0].log_tail(200) + brokers[1].log_tail(200)
    finally:
        for b in brokers:
            b.stop()
    # Without cluster_access_key a secured member is refused at start, in one line.
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "txmq.broker", "--data-dir", str(tmp_path / "d"), *common]
    done = subprocess.run(
        [*cmd, "--broker-name", "b0"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode in (1, 2) and "cluster_access_key" in done.stderr, done
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
