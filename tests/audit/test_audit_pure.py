"""The audit's pure pieces, without Spark or a broker: parsing every flag (each bad value is an
AuditInputError naming its flag), the join value of a message, the window, the driver lookup,
the buckets of the series, the JSON document, the terminal summary and the HTML page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from txmq.audit.page import chart, page
from txmq.audit.render import summary
from txmq.audit.result import KINDS, AuditResult, Bucket, bucket_minutes, merge_buckets
from txmq.audit.spec import (
    AuditInputError,
    AuditSpec,
    Match,
    Window,
    iso_ms,
    jdbc,
    parse_duration_ms,
    parse_time_ms,
)
from txmq.exits import EXIT_USAGE, exit_code_for

NOW = 1_796_000_000_000  # 2026-11-30T...


def test_match_forms_and_values() -> None:
    assert Match.parse("key") == Match("key")
    assert Match.parse("property:order-id") == Match("property", "order-id")
    assert Match.parse(" json:order.id ") == Match("json", "order.id")
    for bad in ("", "keys", "json:", "json:a..b", "property:", "body:x", "json:$.a"):
        with pytest.raises(AuditInputError, match="--match"):
            Match.parse(bad)
    keys, props = ["k1", "k2"], {"oid": "p1"}
    body = json.dumps({"order": {"id": 42, "ok": True, "tags": ["a"]}, "s": "x"}).encode()
    assert Match("key").value_of(keys, props, body) == "k1"
    assert Match("key").value_of([], props, body) is None
    assert Match("property", "oid").value_of(keys, props, body) == "p1"
    assert Match("property", "no").value_of(keys, props, body) is None
    # As Spark's get_json_object gives them: strings bare, other values as JSON text.
    assert Match("json", "s").value_of(keys, props, body) == "x"
    assert Match("json", "order.id").value_of(keys, props, body) == "42"
    assert Match("json", "order.ok").value_of(keys, props, body) == "true"
    assert Match("json", "order.tags").value_of(keys, props, body) == '["a"]'
    assert Match("json", "order.none").value_of(keys, props, body) is None
    assert Match("json", "s").value_of(keys, props, b"not json") is None


def test_times_and_durations() -> None:
    assert parse_duration_ms("90s", "--grace") == 90_000
    assert parse_duration_ms("2h", "--grace") == 7_200_000
    with pytest.raises(AuditInputError, match="--grace"):
        parse_duration_ms("2 hours", "--grace")
    assert parse_time_ms("now", "--until", now_ms=NOW) == NOW
    assert parse_time_ms("10m", "--since", now_ms=NOW) == NOW - 600_000
    assert parse_time_ms("1796000000123", "--since", now_ms=NOW) == 1_796_000_000_123
    at = parse_time_ms("2026-12-01", "--since", now_ms=NOW)
    assert iso_ms(at) == "2026-12-01T00:00:00.000Z"  # a date without a zone is UTC
    assert parse_time_ms("2026-12-01T10:30+01:00", "--since", now_ms=NOW) == at + 34_200_000
    assert parse_time_ms("2026-12-01T09:30:00Z", "--since", now_ms=NOW) == at + 34_200_000
    with pytest.raises(AuditInputError, match="--since"):
        parse_time_ms("yesterday", "--since", now_ms=NOW)


def test_window() -> None:
    w = Window(1_000_000, 2_000_000, grace_ms=100)
    assert w.bounded and (w.wide_since_ms, w.wide_until_ms) == (999_900, 2_000_100)
    assert w.holds(1_000_000) and w.holds(1_999_999)
    assert not w.holds(2_000_000) and not w.holds(999_999)
    open_ended = Window(None, None)
    assert not open_ended.bounded and open_ended.holds(0) and open_ended.wide_since_ms is None
    assert Window(50, None, grace_ms=100).wide_since_ms == 1  # a read starts after the epoch
    with pytest.raises(AuditInputError, match="before --until"):
        Window(5, 5)
    with pytest.raises(AuditInputError, match="--grace"):
        Window(None, None, grace_ms=-1)


def test_jdbc_drivers_and_jars(tmp_path: Path) -> None:
    (tmp_path / "postgresql.jar").write_bytes(b"jar")
    got = jdbc("jdbc:postgresql://h/db", "orders", system_jars=tmp_path)
    assert got.driver == "org.postgresql.Driver" and got.jars == (tmp_path / "postgresql.jar",)
    own = tmp_path / "own.jar"
    own.write_bytes(b"jar")
    got = jdbc("jdbc:postgresql://h/db", "t", jars=str(own), system_jars=tmp_path)
    assert got.jars == (own, tmp_path / "postgresql.jar")
    with pytest.raises(AuditInputError, match="libxerial-sqlite-jdbc-java"):
        jdbc("jdbc:sqlite:/x.db", "t", system_jars=tmp_path / "none")
    with pytest.raises(AuditInputError, match="--jars: no file"):
        jdbc("jdbc:postgresql://h/db", "t", jars="/no/such.jar", system_jars=tmp_path)
    with pytest.raises(AuditInputError, match="--driver"):
        jdbc("jdbc:oracle:thin:@h:1521:x", "t", system_jars=tmp_path)
    odd = jdbc("jdbc:oracle:thin:@h", "t", driver="oracle.jdbc.OracleDriver", jars=str(own))
    assert odd.driver == "oracle.jdbc.OracleDriver" and odd.jars == (own,)
    # Spark Connect: the server has the files (and may have the drivers): only --jars, which
    # are uploaded from here, must be here.
    remote = jdbc("jdbc:sqlite:/nowhere.db", "t", local_files=False, system_jars=tmp_path)
    assert remote.jars == () and remote.driver == "org.sqlite.JDBC"
    with pytest.raises(AuditInputError, match="--jars: no file /no/such"):  # uploaded from here
        jdbc("jdbc:mysql://h/db", "t", jars="/no/such.jar", local_files=False)
    with pytest.raises(AuditInputError, match="no SQLite database at /nowhere"):
        jdbc("jdbc:sqlite:/nowhere.db", "t", jars=str(own), system_jars=tmp_path)
    secret = jdbc("jdbc:postgresql://u:pw@h/db?password=pw&x=1", "t", system_jars=tmp_path)
    assert "pw" not in secret.shown_url and "x=1" in secret.shown_url
    with pytest.raises(AuditInputError) as bad:
        jdbc("postgres://h/db", "t", system_jars=tmp_path)
    assert exit_code_for(bad.value) == EXIT_USAGE


def test_mysql_family_connections_set_utc_and_quoting(tmp_path: Path) -> None:
    """Each connection of a MariaDB or MySQL URL asks for UTC (TIMESTAMP columns come in the
    session's zone); Spark has no dialect for jdbc:mariadb and quotes columns "so": such a
    connection turns on ANSI_QUOTES (tests/audit/test_audit_mariadb.py: against a server)."""
    (tmp_path / "mariadb-java-client.jar").write_bytes(b"jar")
    maria = jdbc("jdbc:mariadb://h:3306/db?user=u", "orders", system_jars=tmp_path)
    assert maria.driver == "org.mariadb.jdbc.Driver"
    assert maria.jars == (tmp_path / "mariadb-java-client.jar",)
    assert "ANSI_QUOTES" in maria.session_init and "@@SESSION.sql_mode" in maria.session_init
    assert "time_zone = '+00:00'" in maria.session_init  # TIMESTAMP columns arrive in UTC
    # jdbc:mysql has Spark's MySQL dialect (backticks): only the zone is set.
    mysql = jdbc(
        "jdbc:mysql://h/db", "t", driver="org.mariadb.jdbc.Driver",
        jars=str(tmp_path / "mariadb-java-client.jar"), system_jars=tmp_path,
    )  # fmt: skip
    assert mysql.driver == "org.mariadb.jdbc.Driver"
    assert mysql.session_init == "SET SESSION time_zone = '+00:00'"
    for url in ("jdbc:postgresql://h/db", "jdbc:sqlite:/x.db"):
        assert jdbc(url, "t", local_files=False, system_jars=tmp_path).session_init == ""


def test_spec_bounds(tmp_path: Path) -> None:
    (tmp_path / "postgresql.jar").write_bytes(b"jar")
    where = jdbc("jdbc:postgresql://h/db", "t", system_jars=tmp_path)
    AuditSpec(where, "id", "orders", Match("key"), Window(None, None))
    for kwargs, flag in (
        ({"examples": 0}, "--examples"),
        ({"partitions": 0}, "--db-partitions"),
        ({"epoch_unit_ms": 7}, "--epoch-unit"),
    ):
        with pytest.raises(AuditInputError, match=flag):
            AuditSpec(where, "id", "orders", Match("key"), Window(None, None), **kwargs)


def test_buckets() -> None:
    assert bucket_minutes(None, None, 1440) == 1
    assert bucket_minutes(0, 59_999, 1440) == 1
    assert bucket_minutes(0, 1439 * 60_000, 1440) == 1
    assert bucket_minutes(0, 1440 * 60_000, 1440) == 2
    assert bucket_minutes(0, 7 * 86_400_000, 1440) == 8
    got = merge_buckets({0: 2, 120_000: 1}, {60_000: 5}, 1)
    assert got == [Bucket(0, 2, 0), Bucket(60_000, 0, 5), Bucket(120_000, 1, 0)]
    assert merge_buckets({}, {}, 1) == []


def _result() -> AuditResult:
    r = AuditResult(
        Window(NOW - 3_600_000, None),
        {
            "jdbc_url": "jdbc:sqlite:/x",
            "table": "orders",
            "key": "id",
            "topic": "t",
            "match": "key",
        },
        NOW,
        db_rows=3,
        messages=3,
    )
    r.buckets = [Bucket(NOW - 60_000, 1, 2), Bucket(NOW, 2, 1)]
    return r


def test_json_document_and_exit_code() -> None:
    r = _result()
    assert r.consistent and r.exit_code == 0
    doc = r.as_json()
    assert set(doc) >= {"consistent", "counts", "examples", "totals", "window", "per_minute"}
    assert set(doc["examples"]) == set(KINDS) and doc["window"]["until"] is None
    assert doc["per_minute"][0] == {"minute": iso_ms(NOW - 60_000), "db_rows": 1, "messages": 2}
    r.counts["undecided"] = 1
    assert not r.consistent and r.exit_code == 1 and r.as_json()["consistent"] is False


def test_summary_and_page_show_each_kind_escaped() -> None:
    r = _result()
    r.counts["phantom"] = 1
    r.examples["phantom"] = [{"key": "<script>", "message_id": "M1", "at": None, "copies": 1}]
    console = Console(record=True, width=160)
    console.print(summary(r))
    text = console.export_text()
    assert "INCONSISTENT: 1 discrepancies" in text and "<script>" in text and "phantom" in text
    html = page(r, {"phantom": "phantom.parquet"})
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert html.count("<polyline") == 2 and "phantom.parquet" in html
    assert "nothing in the window" in chart([], 1)
