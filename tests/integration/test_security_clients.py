"""Our own clients, the demo and the Node.js client against a secured broker: the txmq CLI, the
Spark connector's broker client, check-back routing by publish right, ``txmq demo --secure``,
and rocketmq-client-nodejs with ``sslEnabled`` and session credentials (its signature is
upper-case hex, its date UTC).

Method: the session-scoped ACL + TLS broker of security_fixtures.py; the CLI as a subprocess;
the connector's client in process (the calls its tasks make, no Spark session); the demo as a
subprocess with a small order count and no Spark step.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, Producer, TransactionResolution

from tests.integration.clients import Checker, check_loop_witness, message
from tests.integration.conftest import ROOT, BrokerProcess, wait_until
from tests.integration.security_fixtures import SECRETS, TOPIC, WITNESS_TOPIC, send_request
from txmq.demo.certs import Bundle


def test_the_cli_over_tls_with_credentials(secure: BrokerProcess, pki: Bundle) -> None:
    from tests.cli.test_cli import txmq

    ep = ["--endpoints", secure.endpoints, "--ca-file", str(pki.ca)]
    orders = ["--access-key", "orders-app", "--secret-key", SECRETS["orders-app"]]
    # In a zone 9 hours east of UTC: the CLI makes the official client sign UTC, which the
    # broker's 15-minute window expects (docs/security.md).
    sent = txmq("send", TOPIC, "from-cli", *ep, *orders, env={"TZ": "JST-9"})
    assert sent.returncode == 0, sent.stderr
    # Without admin rights: refused, one line, exit 1, the topic still there.
    for args in (("topic", "delete", TOPIC), ("txn", "resolve", "some-id", "commit")):
        r = txmq(*args, *ep, *orders)
        assert r.returncode == 1, r
        assert r.stderr.strip() == "txmq: access key 'orders-app' is not an admin", r.stderr
    wrong = txmq("topic", "list", *ep, "--access-key", "ops", "--secret-key", "not-it-0123456789")
    assert wrong.returncode == 1 and wrong.stderr.startswith("txmq: wrong signature"), wrong
    half = txmq("topic", "list", *ep, "--access-key", "ops")
    assert half.returncode == 2 and half.stderr.count("\n") == 1, half
    assert "txmq: --access-key and --secret-key go together" in half.stderr
    env = {"TXMQ_ACCESS_KEY": "ops", "TXMQ_SECRET_KEY": SECRETS["ops"]}
    listed = txmq("topic", "list", "--json", *ep, env=env)
    assert listed.returncode == 0, listed.stderr
    assert TOPIC in {t["name"] for t in json.loads(listed.stdout)["topics"]}
    plain = txmq("topic", "list", "--endpoints", secure.endpoints, env=env)
    assert plain.returncode == 3, plain  # plaintext to a TLS port: nothing answers


def test_the_spark_connector_client_with_credentials_over_tls(
    secure: BrokerProcess, pki: Bundle
) -> None:
    # The source's and sink's broker client with the options a job sets (no Spark session: the
    # calls are the ones its tasks make).
    from txmq.errors import ForbiddenError, UnauthorizedError
    from txmq.spark.client import BrokerClient
    from txmq.spark.members import UNNAMED, SinkCluster
    from txmq.spark.options import TxmqOptionError, security
    from txmq.spark.source import TxmqPartition, read_partition
    from txmq.txn.bundle import encode_message

    def options(who: str, secret: str | None = None) -> dict[str, str]:
        return {"accesskey": who, "secretkey": secret or SECRETS[who], "cafile": str(pki.ca)}

    writer = security(options("orders-app"))
    reader = security(options("inventory-app"))
    assert writer.tls and "secret" not in repr(writer)
    with BrokerClient(secure.endpoints, security=writer) as sink:
        sink.send(list(send_request().messages))  # what a sink task sends
        # The sink's batched transactions: PrepareBundle needs publish, and so does deciding.
        bundled = [
            encode_message(
                TOPIC, b"bundled", message_id="0102FC0000000100BB01", born_timestamp_ms=1
            )
        ]
        half = sink.prepare_bundle(TOPIC, bundled, {})
        sink.end_transaction(half, commit=False)
        with pytest.raises(ForbiddenError, match="may not subscribe to topic"):
            sink.queue_ranges(TOPIC)  # a publisher does not read
    # Without the admin right the sink may not ask for the cluster's members: it writes to the
    # endpoints given, as to one broker, and names no ledger home (the broker reads its own).
    assert SinkCluster.discover(secure.endpoints, writer).members == (
        (UNNAMED, secure.endpoints, True),
    )
    with BrokerClient(secure.endpoints, security=reader) as source:
        with pytest.raises(ForbiddenError, match="may not publish"):
            source.prepare_bundle(TOPIC, bundled, {})
        ranges = source.queue_ranges(TOPIC)
    parts = [
        TxmqPartition(secure.endpoints, TOPIC, q, lo, hi, True, reader)
        for q, (lo, hi) in enumerate(ranges)
    ]
    assert pickle.loads(pickle.dumps(parts[0])) == parts[0]  # shipped to executors so
    rows = sum(batch.num_rows for p in parts for batch in read_partition(p))
    assert rows == sum(hi - lo for lo, hi in ranges) and rows >= 1
    wrong = security(options("inventory-app", "not-the-secret-0123"))
    with (
        BrokerClient(secure.endpoints, security=wrong) as source,
        pytest.raises(UnauthorizedError, match="wrong signature"),
    ):
        source.queue_ranges(TOPIC)
    with pytest.raises(TxmqOptionError, match="accessKey and secretKey go together"):
        security({"accesskey": "inventory-app"})


def test_check_backs_go_only_to_users_who_may_publish_the_topic(
    secure: BrokerProcess, pki: Bundle
) -> None:
    R = TransactionResolution
    writer = ClientConfiguration(secure.endpoints, Credentials("orders-app", SECRETS["orders-app"]))
    first = Producer(
        writer, (TOPIC,), Checker(lambda m: R.TRANSACTION_RESOLUTION_UNSPECIFIED), tls_enable=True
    )
    first.startup()
    try:
        half = first.send(message(TOPIC, b"orphan"), first.begin_transaction())
    finally:
        first.shutdown()  # leaves undecided
    # inventory-app may route TOPIC (it subscribes) and declares it as a publisher: the broker
    # drops that declaration, so the half message it must not decide is never shown to it.
    reader = ClientConfiguration(
        secure.endpoints, Credentials("inventory-app", SECRETS["inventory-app"])
    )
    nosy = Checker(lambda m: R.COMMIT)
    intruder = Producer(reader, (TOPIC,), nosy, tls_enable=True)
    intruder.startup()
    try:
        wait_until(lambda: "not a publisher of ['sec-orders']" in secure.log_tail(200), 15, "drop")
        # The check loop passes the orphan by, again and again (a witness transaction, due
        # after it, is checked three times meanwhile), and never asks the intruder.
        witness_app = ClientConfiguration(
            secure.endpoints, Credentials("witness-app", SECRETS["witness-app"])
        )
        with check_loop_witness(
            secure.endpoints, WITNESS_TOPIC, witness_app, tls_enable=True
        ) as witness:
            wait_until(lambda: len(witness.calls) >= 3, 30, "three passes of the check loop")
        assert half.message_id not in nosy.calls
        legit = Checker(lambda m: R.ROLLBACK)
        second = Producer(writer, (TOPIC,), legit, tls_enable=True)
        second.startup()
        try:
            wait_until(lambda: half.message_id in legit.calls, 30, "the check-back to a publisher")
        finally:
            second.shutdown()
        assert half.message_id not in nosy.calls
    finally:
        intruder.shutdown()


def test_demo_secure_runs_the_story_over_tls_with_an_acl(tmp_path: Path) -> None:
    # TZ: outside UTC too (the demo's official clients sign local time; it runs them in UTC).
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200", TZ="JST-9")
    env.pop("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", None)  # the demo sets its own
    args = ["demo", "--secure", "--orders", "12", "--seed", "3", "--no-spark"]
    args += ["--work-dir", str(tmp_path / "work")]
    done = subprocess.run(
        [sys.executable, "-m", "txmq.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "CONSISTENT" in out and "INCONSISTENT" not in out
    assert "wrong secret -> UNAUTHORIZED" in out
    assert "(subscribe only) -> FORBIDDEN" in out
    assert "plaintext to the TLS port -> connection refused" in out
    acl = tmp_path / "work" / "acl.toml"
    assert acl.stat().st_mode & 0o077 == 0
    log = (tmp_path / "work" / "broker.log").read_text()
    assert "this broker is open" not in log


def test_the_nodejs_client_over_tls_with_credentials(
    secure: BrokerProcess, pki: Bundle, node_client: Path, tmp_path: Path
) -> None:
    credentials = {
        "producer": ["orders-app", SECRETS["orders-app"]],
        "consumer": ["inventory-app", SECRETS["inventory-app"]],
        "wrong": ["orders-app", "not-the-secret-0123456789"],
    }
    script = Path(__file__).with_name("node") / "secure.js"
    env = dict(
        os.environ,
        NODE_PATH=str(node_client),
        HOME=str(tmp_path),
        GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=str(pki.ca),
    )
    args = [secure.endpoints, TOPIC, "inventory", json.dumps(credentials)]
    r = subprocess.run(
        ["node", str(script), *args], env=env, capture_output=True, text=True, timeout=180
    )
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["sent"] and "from-node" in got["received"], got
    # The client reports only that routes could not be fetched; the broker says why.
    assert "Failed to fetch topic routes" in got["wrongSecret"], got
    assert "QueryRoute from" in secure.log_tail(400)
    assert "wrong signature for access key 'orders-app'" in secure.log_tail(400)
