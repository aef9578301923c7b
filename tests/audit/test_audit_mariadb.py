"""``txmq audit`` against MariaDB, read by a Spark Connect server that has no JDBC driver of its
own: the driver reaches it only through the command's ``--jars``, uploaded as session
artifacts (slow: a Connect server's JVM start, then one Spark job per audit).

Goal: tests/audit/plant.py's plan in a MariaDB table (a ``DATETIME(3)`` time column found by
itself, a row outside the window) is counted exactly, kind by kind, under both URL schemes the
MariaDB driver takes: ``jdbc:mariadb://`` (Spark has no dialect for it and quotes columns
"so": the audit turns on ANSI_QUOTES) and ``jdbc:mysql://`` with ``--driver
org.mariadb.jdbc.Driver`` (Spark's MySQL dialect, backticks). And a ``TIMESTAMP`` column on a
server whose zone is not UTC (it sends TIMESTAMPs in the session's zone: the audit sets the
session to UTC) windows the same as the ``DATETIME`` one, under both schemes. Without either
setting the counts are wrong, not an error: every key read as the text 'order_id', or every
TIMESTAMP row 5 hours off and out of the window. Once more in the command's own ``local[*]``
session, with Debian's driver found by itself.
Method: a throwaway MariaDB (tests/mariadb.py) with a password user over TCP, the command in a
child process, every count checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.audit.conftest import connect_server, run_audit
from tests.audit.plant import ROWS, check_result, plant_messages
from tests.integration.conftest import BrokerProcess
from tests.mariadb import PASSWORD, MariaDB, mariadb_server

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def bare_connect(java_runtime: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server with no JDBC jar on its classpath."""
    with connect_server([], tmp_path_factory.mktemp("bare-connect")) as url:
        yield url


@pytest.fixture(scope="module")
def mariadb(mariadb_bin: dict[str, Path]) -> Iterator[MariaDB]:
    with mariadb_server(mariadb_bin) as server:
        yield server


def _plant_table(db: MariaDB, table: str, time_type: str, now: datetime) -> None:
    at = now.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    old = (now - timedelta(days=2)).strftime("%Y-%m-%d %H:%M:%S")
    values = ", ".join(f"('{key}', 1, '{at}')" for key in ROWS)
    db.sql(
        "SET time_zone = '+00:00';"
        f" CREATE TABLE {table} (order_id VARCHAR(64) PRIMARY KEY, qty INT,"
        f" created_at {time_type}(3));"
        f" INSERT INTO {table} VALUES {values}, ('old-lost', 1, '{old}');"
    )


def test_mariadb_every_kind_counted_with_jars_uploaded(
    mariadb: MariaDB,
    audit_broker: BrokerProcess,
    bare_connect: str,
    jdbc_jars: dict[str, Path],
) -> None:
    now = datetime.now(UTC)
    _plant_table(mariadb, "orders", "DATETIME", now)
    _plant_table(mariadb, "orders_ts", "TIMESTAMP", now)
    plant_messages(audit_broker.endpoints, "audit-maria")
    window = ["--since", (now - timedelta(minutes=30)).isoformat()]
    window += ["--until", (now + timedelta(minutes=30)).isoformat()]
    common = ["--key", "order_id", "--topic", "audit-maria", *window, "--json"]
    common += ["--remote", bare_connect, "--jars", str(jdbc_jars["mariadb"])]
    common += ["--endpoints", audit_broker.endpoints]
    mysql = ["--jdbc-url", mariadb.jdbc_url("mysql"), "--driver", "org.mariadb.jdbc.Driver"]
    runs = {
        "mariadb": run_audit("--jdbc-url", mariadb.jdbc_url(), "--table", "orders", *common),
        "mysql": run_audit(*mysql, "--table", "orders", *common),
        "timestamp": run_audit("--jdbc-url", mariadb.jdbc_url(), "--table", "orders_ts", *common),
        "mysql timestamp": run_audit(*mysql, "--table", "orders_ts", *common),
    }
    # The control: the server has no driver of its own. A jdbc:mysql URL finds no Debian jar
    # to add (Debian has no MySQL Connector/J), so without --jars nothing is uploaded.
    bare = [a for a in common if a != str(jdbc_jars["mariadb"]) and a != "--jars"]
    r = run_audit(*mysql, "--table", "orders", *bare)
    assert r.code == 2 and r.stderr.startswith("txmq: cannot open table"), r.explain()
    assert "org.mariadb.jdbc.Driver" in r.stderr and PASSWORD not in r.stderr, r.explain()
    for scheme, r in runs.items():
        assert r.code == 1, f"{scheme}: {r.explain()}"
        got = r.json
        check_result(got)  # 'old-lost' is outside the window: never counted
        assert PASSWORD not in r.stdout, scheme
        assert "password=***" in got["source"]["jdbc_url"], scheme


def test_mariadb_local_mode(
    mariadb: MariaDB, audit_broker: BrokerProcess, jdbc_jars: dict[str, Path]
) -> None:
    """The command's own ``local[*]`` session, Debian's driver found by itself (``spark.jars``)."""
    now = datetime.now(UTC)
    _plant_table(mariadb, "orders_local", "TIMESTAMP", now)
    plant_messages(audit_broker.endpoints, "audit-maria-local")
    r = run_audit(
        "--jdbc-url", mariadb.jdbc_url(), "--table", "orders_local", "--key", "order_id",
        "--topic", "audit-maria-local", "--since", "30m", "--endpoints", audit_broker.endpoints,
        "--json",
    )  # fmt: skip
    assert r.code == 1, r.explain()
    check_result(r.json)
