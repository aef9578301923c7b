"""``txmq audit`` throughput: rows/s auditing an SQLite table (Spark's JDBC source) against a
txmq topic (the txmq source), next to the same reckoning over the same rows read from Parquet
files, in the same run and Spark session.

Both runs go through ``txmq.audit.job.reckon_inputs``: the same persisted inputs, the same join
per key, the same counts, examples and series. Only where the two inputs come from differs:
the audit reads the table over JDBC (split into ``--db-partitions`` reads on its time column)
and the topic over gRPC; the baseline reads two Parquet directories Spark wrote from those very
inputs beforehand (untimed). The ratio (audit rows/s over Parquet rows/s) is the price of
reading live sources instead of files.

    .venv/bin/python benchmarks/bench_audit.py [--rows 1000000] [--body-bytes 64]

Bounded: at most 1,000,000 rows (the default) and as many messages; ``PLANTED`` rows lack their
message and as many messages lack their row, and both runs must count exactly those (the
benchmark fails otherwise). Each timed run is done once, after an untimed warm-up that starts
the session's Python workers. Needs Java 17+ and Debian's libxerial-sqlite-jdbc-java.

Measured here (2 cores shared by up to 8 sessions), 1,000,000 rows, one run each: audit / Parquet
rows/s 90 % at load ~5 (23.0 s vs 20.7 s), 30 % at load ~14 (69.8 s vs 20.9 s); docs/audit.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_spark import produce, start_broker

from txmq.audit.job import Topic, read_messages, reckon_inputs, run
from txmq.audit.result import AuditResult
from txmq.audit.session import open_session
from txmq.audit.spec import AuditSpec, Match, Window, jdbc
from txmq.client.admin import call

ROWS_MAX = 1_000_000
PLANTED = 10
TOPIC = "bench-audit"


def make_table(path: Path, n: int, now_ms: int) -> None:
    """Rows k{PLANTED}..k{n-1} (their messages exist) plus PLANTED rows with no message."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE orders (order_id TEXT PRIMARY KEY, created_ms BIGINT)")
        keys = [f"k{i}" for i in range(PLANTED, n)] + [f"lost{i}" for i in range(PLANTED)]
        db.executemany("INSERT INTO orders VALUES (?, ?)", ((k, now_ms) for k in keys))


def check(result: AuditResult, what: str) -> None:
    got = (result.counts["lost"], result.counts["phantom"], result.counts["duplicate"])
    if got != (PLANTED, PLANTED, 0):
        raise SystemExit(
            f"{what}: lost, phantom, duplicate = {got}; planted {PLANTED}, {PLANTED}, 0"
        )


def timed_audit(spark: Any, spec: AuditSpec, topic: Topic, now_ms: int) -> tuple[float, Any]:
    started = time.perf_counter()
    result, _ = run(spark, spec, topic, [], now_ms=now_ms)
    return time.perf_counter() - started, result


def timed_parquet(spark: Any, spec: AuditSpec, topic: Topic, work: Path, now_ms: int) -> float:
    """Copy both inputs to Parquet (untimed), then time the same reckoning over the copies."""
    from txmq.audit.table import read_rows

    rows_dir, messages_dir = work / "rows.parquet", work / "messages.parquet"
    read_rows(spark, spec, now_ms=now_ms).write.parquet(str(rows_dir))
    read_messages(spark, spec, topic).write.parquet(str(messages_dir))
    result = AuditResult(spec.window, {}, now_ms)
    started = time.perf_counter()
    rows, messages = spark.read.parquet(str(rows_dir)), spark.read.parquet(str(messages_dir))
    reckon_inputs(spark, rows, messages, result, [], examples=spec.examples)
    took = time.perf_counter() - started
    check(result, "parquet")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=ROWS_MAX)
    ap.add_argument("--body-bytes", type=int, default=64)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--db-partitions", type=int, default=4)
    args = ap.parse_args()
    n = max(PLANTED + 1, min(args.rows, ROWS_MAX))
    summary: dict[str, Any] = {"bench": "audit", "rows": n, "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TXMQ_BENCH_DIR")) as tmp:
        work = Path(tmp)
        proc, endpoints = start_broker(work / "broker")
        try:
            call(endpoints, "TopicCreate", {"name": TOPIC, "queues": args.queues})
            started = time.perf_counter()
            # Keys k0..k{n-1}; k0..k{PLANTED-1} get no row: the phantoms.
            produce(endpoints, n, args.body_bytes, TOPIC)
            print(f"produced {n:,} messages in {time.perf_counter() - started:.1f}s", flush=True)
            now_ms = int(time.time() * 1000)
            make_table(work / "orders.db", n, now_ms)
            spec = AuditSpec(
                jdbc(f"jdbc:sqlite:{work / 'orders.db'}", "orders"),
                "order_id",
                TOPIC,
                Match("key"),
                Window(now_ms - 3_600_000, None),
                time_column="created_ms",
                partitions=args.db_partitions,
            )
            topic = Topic(endpoints, TOPIC, {})
            spark = open_session("local[*]", "", spec.jdbc.jars)
            try:
                spark.read.format("txmq").option("endpoints", endpoints).option(
                    "topic", TOPIC
                ).load().limit(1).collect()  # untimed: starts the Python workers
                audit_s, result = timed_audit(spark, spec, topic, now_ms)
                check(result, "audit")
                parquet_s = timed_parquet(spark, spec, topic, work, now_ms)
            finally:
                spark.stop()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    summary.update(audit_s=audit_s, parquet_s=parquet_s, ratio=parquet_s / audit_s)
    summary["load_after"] = os.getloadavg()
    print(f"audit (JDBC + txmq)  {audit_s:7.1f}s  {n / audit_s:>10,.0f} rows/s")
    print(f"same join on Parquet {parquet_s:7.1f}s  {n / parquet_s:>10,.0f} rows/s")
    print(f"ratio audit / Parquet rows/s: {parquet_s / audit_s:.0%}")
    print(
        f"load average (1, 5, 15 min): before {summary['load_before']}, after "
        f"{summary['load_after']} on {os.cpu_count()} cores"
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    sys.exit(main())
