"""``txmq audit`` end to end: the command in a child process against a real broker, a real
SQLite file and a real PostgreSQL server, read by a real Spark (a Connect server the module's
runs share: tests/audit/conftest.py).

Goal: every planted discrepancy is counted and named (lost, phantom, duplicate, undecided),
rows outside the window are left out, the JSON has its fields, the report directory has its
Parquet files and HTML page, and the exit code is 0 when the two sides agree, 1 when they do
not, 2 on bad input (one ``txmq:`` line, before any Spark job for what can be checked first).
Method: tests/audit/plant.py's plan, once in SQLite (numeric epoch-ms time column, matched on
the message key) and once in PostgreSQL (a timestamptz column found by itself, matched on a
JSON field of the body).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.audit.conftest import Audited, run_audit
from tests.audit.plant import EXPECTED_COUNTS, ROWS, check_result, plant_messages
from tests.integration.conftest import BrokerProcess
from tests.postgres import postgres_server

# The first test also waits for the module's Spark Connect server (a JVM start): on a loaded
# 2-core machine that and one audit took 265 s, near the suite's 300 s default.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]
DAY_MS = 86_400_000


def _sqlite_orders(path: Path, keys: list[str], at_ms: int) -> None:
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE orders (order_id TEXT PRIMARY KEY, qty INTEGER, created_ms BIGINT)"
        )
        db.executemany("INSERT INTO orders VALUES (?, 1, ?)", [(k, at_ms) for k in keys])


def _one_line_error(r: Audited, code: int, words: str) -> None:
    assert r.code == code, r.explain()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("txmq: "), r.explain()
    assert words in lines[0], r.explain()


def test_bad_input_exits_2_before_spark(audit_broker: BrokerProcess, tmp_path: Path) -> None:
    db = tmp_path / "orders.db"
    _sqlite_orders(db, ["a"], 0)
    ok = ["--jdbc-url", f"jdbc:sqlite:{db}", "--table", "orders", "--key", "order_id"]
    ep = ["--endpoints", audit_broker.endpoints]
    missing = f"jdbc:sqlite:{tmp_path / 'no.db'}"
    cases = [
        ([*ok, "--topic", "t", "--match", "body", *ep], "--match must be"),
        ([*ok, "--topic", "t", "--since", "yesterday", *ep], "--since must be"),
        ([*ok, "--topic", "t", "--since", "2026-12-02", "--until", "2026-12-01", *ep], "before"),
        ([*ok, "--topic", "never-made", *ep], "never-made"),
        ([*ok, "--topic", "t", "--master", "local[1]", "--remote", "sc://h:1", *ep], "not both"),
        # Over Spark Connect the jars are uploaded from here: they must be here.
        ([*ok, "--topic", "t", "--remote", "sc://h:1", "--jars", "/no/x.jar", *ep], "--jars"),
        (
            ["--jdbc-url", missing, "--table", "t", "--key", "k", "--topic", "t", *ep],
            "no SQLite database",
        ),
        (["--jdbc-url", "postgres://h/db", "--table", "t", "--key", "k", "--topic", "t"], "jdbc"),
        ([*ok, *ep], "--topic"),  # a missing flag: click's usage error, as one line
    ]
    for args, words in cases:
        _one_line_error(run_audit(*args), 2, words)


@pytest.fixture(scope="module")
def planted_sqlite(
    audit_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    now_ms = int(time.time() * 1000)
    path = tmp_path_factory.mktemp("sqlite") / "orders.db"
    _sqlite_orders(path, ROWS, now_ms)
    with sqlite3.connect(path) as db:  # outside the window: never reported
        db.execute("INSERT INTO orders VALUES ('old-lost', 1, ?)", (now_ms - 2 * DAY_MS,))
    plant_messages(audit_broker.endpoints, "audit-sqlite")
    yield path


def test_sqlite_every_kind_counted_with_report(
    planted_sqlite: Path, audit_broker: BrokerProcess, spark_connect: str, tmp_path: Path
) -> None:
    report = tmp_path / "report"
    r = run_audit(
        "--jdbc-url", f"jdbc:sqlite:{planted_sqlite}", "--table", "orders",
        "--key", "order_id", "--topic", "audit-sqlite", "--since", "1h",
        "--time-column", "created_ms", "--remote", spark_connect,
        "--endpoints", audit_broker.endpoints, "--json", "--report", str(report),
    )  # fmt: skip
    assert r.code == 1, r.explain()
    got = r.json
    check_result(got)
    assert got["source"]["match"] == "key" and got["window"]["until"] is None
    assert got["report"] == str(report)
    assert json.loads((report / "audit.json").read_text()) == got
    for kind in ("lost", "phantom", "duplicate", "undecided"):
        table = pq.read_table(report / f"{kind}.parquet")
        assert table.num_rows == EXPECTED_COUNTS[kind], kind
    lost = pq.read_table(report / "lost.parquet").column("key").to_pylist()
    assert "old-lost" not in lost
    page = (report / "index.html").read_text()
    assert "INCONSISTENT" in page and page.count("<polyline") == 2
    assert "ghost-1" in page and "lost-rb" in page


def test_bad_table_and_column_exit_2(
    planted_sqlite: Path, audit_broker: BrokerProcess, spark_connect: str
) -> None:
    base = ["--jdbc-url", f"jdbc:sqlite:{planted_sqlite}", "--topic", "audit-sqlite"]
    base += ["--remote", spark_connect, "--endpoints", audit_broker.endpoints]
    r = run_audit(*base, "--table", "no_such_table", "--key", "order_id")
    _one_line_error(r, 2, "cannot open table 'no_such_table'")
    r = run_audit(*base, "--table", "orders", "--key", "id")
    _one_line_error(r, 2, "no column 'id'")
    r = run_audit(*base, "--table", "orders", "--key", "order_id", "--since", "1h")
    _one_line_error(r, 2, "--time-column")  # created_ms is a number: it must be named


def test_consistent_exits_0(
    audit_broker: BrokerProcess, spark_connect: str, tmp_path: Path
) -> None:
    from tests.audit.plant import AGREE
    from txmq.spark.client import BrokerClient, build_message

    path = tmp_path / "orders.db"
    _sqlite_orders(path, AGREE, int(time.time() * 1000))
    with BrokerClient(audit_broker.endpoints) as broker:
        for key in AGREE:
            body = json.dumps({"order_id": key}).encode()
            [half] = broker.send(
                [build_message("audit-ok", body, properties={"oid": key}, transactional=True)]
            )
            broker.end_transaction(half, commit=True)
    r = run_audit(
        "--jdbc-url", f"jdbc:sqlite:{path}", "--table", "orders", "--key", "order_id",
        "--topic", "audit-ok", "--match", "property:oid", "--remote", spark_connect,
        "--endpoints", audit_broker.endpoints,
    )  # fmt: skip
    assert r.code == 0, r.explain()
    assert "CONSISTENT" in r.stdout and "INCONSISTENT" not in r.stdout
    assert "rows in the database" in r.stdout and "discrepancies" in r.stdout


@pytest.fixture(scope="module")
def postgres(postgres_bin: Path) -> Iterator[tuple[str, int]]:
    with postgres_server(postgres_bin) as server:
        yield server


def test_postgresql_every_kind_counted(
    postgres: tuple[str, int], audit_broker: BrokerProcess, spark_connect: str
) -> None:
    import psycopg

    url, port = postgres
    now = datetime.now(UTC)
    with psycopg.connect(url) as conn:
        conn.execute(
            "CREATE TABLE orders (order_id text PRIMARY KEY, qty int, created_at timestamptz)"
        )
        for key in ROWS:
            conn.execute("INSERT INTO orders VALUES (%s, 1, %s)", (key, now))
        conn.execute("INSERT INTO orders VALUES ('old-lost', 1, %s)", (now - timedelta(days=2),))
    plant_messages(audit_broker.endpoints, "audit-pg")
    since = (now - timedelta(minutes=30)).isoformat()
    until = (now + timedelta(minutes=30)).isoformat()
    r = run_audit(
        "--jdbc-url", f"jdbc:postgresql://127.0.0.1:{port}/postgres?user=txmq",
        "--table", "orders", "--key", "order_id", "--topic", "audit-pg",
        "--match", "json:order_id", "--since", since, "--until", until,
        "--remote", spark_connect, "--endpoints", audit_broker.endpoints, "--json",
    )  # fmt: skip
    assert r.code == 1, r.explain()
    got: dict[str, Any] = r.json
    check_result(got)
    assert got["source"]["match"] == "json:order_id" and got["window"]["until"] is not None
    assert got["report"] is None
