"""``txmq audit`` where the default suite does not take it (slow: each run is a Spark job, and
the first one a JVM of its own):

- local mode: the command starts its own ``local[*]`` session with Debian's SQLite driver on
  its classpath (no ``--remote``), as a user runs it;
- a cluster of two brokers: messages and open transactions on both, audited through one
  member's address (the source reads every queue of every member, and every member's
  transactions are listed; with no live producer the broker spends no check-back on them, so
  they stay undecided);
- a broker with TLS and an ACL: the audit passes the security options to the admin calls and
  to the Spark source; a key without the admin right cannot list transactions (exit 1).

Method: tests/audit/plant.py's plan in SQLite, the command in a child process, every count
checked.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from tests.audit.conftest import run_audit
from tests.audit.plant import ROWS, check_result, plant_messages
from tests.integration.conftest import BrokerProcess
from tests.integration.security_fixtures import pki, write_acl  # noqa: F401  (fixture)
from tests.integration.test_cluster import Cluster
from txmq.demo.certs import Bundle
from txmq.protocol.client_security import ClientSecurity
from txmq.spark.client import BrokerClient, build_message

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]


def _sqlite(path: Path, keys: list[str]) -> str:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE orders (order_id TEXT PRIMARY KEY, created_at TIMESTAMP)")
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        db.executemany("INSERT INTO orders VALUES (?, ?)", [(k, at) for k in keys])
    return f"jdbc:sqlite:{path}"


def test_local_mode(
    audit_broker: BrokerProcess, jdbc_jars: dict[str, Path], tmp_path: Path
) -> None:
    url = _sqlite(tmp_path / "orders.db", ROWS)
    plant_messages(audit_broker.endpoints, "audit-local")
    r = run_audit(
        "--jdbc-url", url, "--table", "orders", "--key", "order_id", "--topic", "audit-local",
        "--since", "30m", "--endpoints", audit_broker.endpoints, "--json",
    )  # fmt: skip
    assert r.code == 1, r.explain()
    check_result(r.json)


def test_cluster_of_two(spark_connect: str, tmp_path: Path) -> None:
    (tmp_path / "cluster").mkdir()
    cluster = Cluster(tmp_path / "cluster", 2)
    cluster.start()
    try:
        b0, b1 = cluster.brokers
        plant_messages(b0.endpoints, "audit-cluster")
        more = [f"b1-{i}" for i in range(5)]
        with BrokerClient(b1.endpoints) as broker:
            for key in [*more, "b1-pend"]:
                msg = build_message("audit-cluster", b"{}", keys=[key], transactional=True)
                [half] = broker.send([msg])
                if key != "b1-pend":
                    broker.end_transaction(half, commit=True)
        url = _sqlite(tmp_path / "orders.db", [*ROWS, *more, "b1-pend"])
        r = run_audit(
            "--jdbc-url", url, "--table", "orders", "--key", "order_id",
            "--topic", "audit-cluster", "--remote", spark_connect,
            "--endpoints", b1.endpoints, "--json",
        )  # fmt: skip
    finally:
        cluster.stop()
    assert r.code == 1, r.explain()
    got = r.json
    assert got["totals"]["db_rows"] == len(ROWS) + 6
    assert got["totals"]["messages"] == 15 + 5  # the plan's 15 on b0, 5 committed on b1
    assert got["counts"] == {
        "lost": 5,
        "phantom": 1,
        "duplicate": 2,
        "duplicate_copies": 3,
        "undecided": 2,
        "dead": 0,
        "lost_pending": 2,
    }
    undecided = {e["key"]: e["broker"] for e in got["examples"]["undecided"]}
    assert undecided == {"pend-1": "b0", "b1-pend": "b1"}


AUDITOR_SECRET = "auditor-secret-0123456789"
READER_SECRET = "reader-secret-0123456789"
AUDIT_ACL = f"""
[[users]]
access_key = "auditor"
secret_key = "{AUDITOR_SECRET}"
publish = ["audit-secure"]
subscribe = ["audit-secure"]
admin = true

[[users]]
access_key = "reader"
secret_key = "{READER_SECRET}"
subscribe = ["audit-secure"]
"""


def test_tls_and_acl(pki: Bundle, spark_connect: str, tmp_path: Path) -> None:  # noqa: F811
    acl = write_acl(tmp_path / "acl.toml", AUDIT_ACL)
    tls = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    broker = BrokerProcess(tmp_path / "broker", ["--acl-file", str(acl), *tls])
    broker.start()
    try:
        auditor = ClientSecurity(access_key="auditor", secret_key=AUDITOR_SECRET, ca_file=pki.ca)
        plant_messages(broker.endpoints, "audit-secure", auditor)
        url = _sqlite(tmp_path / "orders.db", ROWS)
        base = ["--jdbc-url", url, "--table", "orders", "--key", "order_id"]
        base += ["--topic", "audit-secure", "--remote", spark_connect]
        base += ["--endpoints", broker.endpoints, "--ca-file", str(pki.ca)]
        # Listing transactions needs the admin right: a reader is refused, in one line.
        reader = run_audit(*base, "--access-key", "reader", "--secret-key", READER_SECRET)
        r = run_audit(*base, "--access-key", "auditor", "--secret-key", AUDITOR_SECRET, "--json")
    finally:
        broker.stop()
    assert reader.code == 1 and reader.stderr.startswith("txmq: "), reader.explain()
    assert "admin" in reader.stderr, reader.explain()
    assert r.code == 1, r.explain()
    check_result(r.json)
