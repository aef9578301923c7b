"""The ``txmq audit`` Spark job: a table (table.py) against a topic (the txmq source), reckoned
by reckon.py, brought back to the driver as bounded values (result.py).

Owns: the order of the Spark jobs and what each brings back: totals and first/last times per
side (two aggregations), the counts (one aggregation over the keys), the first N examples of
each kind (``limit``), the series (at most AUDIT_BUCKETS_MAX buckets per side) and, for the
bounded list of open transactions, whether their keys have rows. The report's Parquet files
are written by the executors. Nothing else crosses to the driver: memory stays bounded however
large the table and the topic are.
Must not: print (the command does), or judge beyond result.py's rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txmq import limits
from txmq.audit import reckon
from txmq.audit.result import AuditResult, OpenTransaction, bucket_minutes, merge_buckets
from txmq.audit.spec import AuditSpec, iso_ms
from txmq.audit.table import read_rows

PARQUET_NAMES = {
    "lost": "lost.parquet",
    "phantom": "phantom.parquet",
    "duplicate": "duplicate.parquet",
    "undecided": "undecided.parquet",
}


@dataclass(frozen=True, slots=True)
class Topic:
    """Where the messages are: the broker (any member of a cluster) and the source options
    that carry the security choice."""

    endpoints: str
    name: str
    security_options: dict[str, str]


def read_messages(spark: Any, spec: AuditSpec, topic: Topic) -> Any:
    """The messages input of the window plus grace (by store time), or of the whole topic."""
    reader = (
        spark.read.format("txmq")
        .options(**topic.security_options)
        .option("endpoints", topic.endpoints)
        .option("topic", topic.name)
    )
    window = spec.window
    if window.wide_since_ms is not None:
        reader = reader.option("startingTimestamp", str(window.wide_since_ms))
    if window.wide_until_ms is not None:
        reader = reader.option("endingTimestamp", str(window.wide_until_ms))
    return reckon.keyed_messages(reader.load(), spec.match, window)


def run(
    spark: Any,
    spec: AuditSpec,
    topic: Topic,
    open_txns: list[OpenTransaction],
    *,
    now_ms: int,
    report_dir: Path | None = None,
) -> tuple[AuditResult, list[OpenTransaction]]:
    """Audit the table against the topic. Returns the result and ``open_txns`` with each
    looked-up key's ``db_row`` filled in."""
    result = AuditResult(
        spec.window,
        {
            "jdbc_url": spec.jdbc.shown_url,
            "table": spec.jdbc.table,
            "key": spec.key_column,
            "topic": topic.name,
            "match": str(spec.match),
        },
        now_ms,
    )
    rows = read_rows(spark, spec, now_ms=now_ms)
    messages = read_messages(spark, spec, topic)
    open_txns = reckon_inputs(
        spark, rows, messages, result, open_txns, examples=spec.examples, report_dir=report_dir
    )
    return result, open_txns


def reckon_inputs(
    spark: Any,
    rows: Any,
    messages: Any,
    result: AuditResult,
    open_txns: list[OpenTransaction],
    *,
    examples: int,
    report_dir: Path | None = None,
) -> list[OpenTransaction]:
    """Fill ``result`` from the two inputs (reckon.py's shapes, wherever they were read from)
    with the Spark jobs described above; returns ``open_txns`` with ``db_row`` filled in."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
    messages = messages.persist(StorageLevel.MEMORY_AND_DISK)
    keys = reckon.per_key(rows, messages).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        _totals(rows, messages, result)
        _counts(keys, result)
        found = reckon.discrepancies(keys)
        for kind, frame in found.by_kind().items():
            ordered = frame.orderBy(F.col(reckon.ORDER[kind]).asc_nulls_last(), "key")
            result.examples[kind] = _examples(ordered, examples)
        open_txns = _mark_rows(keys, open_txns, result)
        if report_dir is not None:
            write_parquet(spark, found, open_txns, report_dir, result.now_ms)
            result.report_dir = str(report_dir)
        return open_txns
    finally:
        for frame in (keys, messages, rows):
            frame.unpersist()


def _sides(rows: Any, messages: Any) -> Any:
    """Both inputs in one frame (``side`` 0: rows, 1: messages), so that a total or a series
    over both is one Spark job."""
    from pyspark.sql import functions as F

    def side(frame: Any, n: int) -> Any:
        return frame.select(F.lit(n).alias("side"), "at", "in_window", "key")

    return side(rows, 0).unionByName(side(messages, 1))


def _totals(rows: Any, messages: Any, result: AuditResult) -> None:
    """Row and message totals in the window, and the per-minute series of both."""
    from pyspark.sql import functions as F

    inside = F.col("in_window")
    millis = F.unix_millis(F.col("at"))
    got = {
        int(r["side"]): r
        for r in _sides(rows, messages)
        .groupBy("side")
        .agg(
            F.sum(inside.cast("long")).alias("n"),
            F.sum((inside & F.col("key").isNull()).cast("long")).alias("bare"),
            F.min(F.when(inside, millis)).alias("first"),
            F.max(F.when(inside, millis)).alias("last"),
        )
        .collect()
    }
    db, topic = got.get(0), got.get(1)
    result.db_rows = int(db["n"] or 0) if db else 0
    result.messages = int(topic["n"] or 0) if topic else 0
    result.unkeyed_messages = int(topic["bare"] or 0) if topic else 0
    found = [r for r in (db, topic) if r is not None]
    firsts = [r["first"] for r in found if r["first"] is not None]
    lasts = [r["last"] for r in found if r["last"] is not None]
    width = bucket_minutes(
        min(firsts, default=None), max(lasts, default=None), limits.AUDIT_BUCKETS_MAX
    )
    result.bucket_minutes = width
    series = _series(_sides(rows, messages), width * 60_000)
    result.buckets = merge_buckets(series[0], series[1], width)


def _series(sides: Any, step_ms: int) -> tuple[dict[int, int], dict[int, int]]:
    """Rows and messages in the window per bucket of ``step_ms`` (bucket start -> count)."""
    from pyspark.sql import functions as F

    start = (F.floor(F.unix_millis(F.col("at")) / step_ms) * step_ms).cast("long")
    got = (
        sides.where(F.col("in_window") & F.col("at").isNotNull())
        .groupBy("side", start.alias("start"))
        .count()
        .limit(2 * limits.AUDIT_BUCKETS_MAX + 2)
        .collect()
    )
    out: tuple[dict[int, int], dict[int, int]] = ({}, {})
    for r in got:
        out[int(r["side"])][int(r["start"])] = int(r["count"])
    return out


def _counts(keys: Any, result: AuditResult) -> None:
    [got] = keys.agg(*reckon.count_columns()).collect()
    for kind in ("lost", "phantom", "duplicate"):
        result.counts[kind] = int(got[kind])
    result.duplicate_copies = int(got["duplicate_copies"])
    result.db_duplicate_keys = int(got["db_duplicate_keys"])


def _examples(frame: Any, n: int) -> list[dict[str, Any]]:
    """The first ``n`` rows of a discrepancy frame, times as ISO text (UTC)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    times = [f.name for f in frame.schema.fields if isinstance(f.dataType, TimestampType)]
    shown = frame.select(
        *[F.unix_millis(F.col(c)).alias(c) if c in times else F.col(c) for c in frame.columns]
    )
    out = []
    for row in shown.limit(n).collect():
        item = row.asDict()
        for c in times:
            item[c] = iso_ms(item[c])
        out.append(item)
    return out


def _mark_rows(
    keys: Any, open_txns: list[OpenTransaction], result: AuditResult
) -> list[OpenTransaction]:
    """Whether each looked-up open transaction's key has a row, and how many lost rows are
    only waiting for their transaction (still undecided, not dead)."""
    import dataclasses

    from pyspark.sql import functions as F

    wanted = sorted({t.key for t in open_txns if t.key is not None})
    if not wanted:
        return open_txns
    got = (
        keys.where(F.col("key").isin(wanted))
        .select(
            "key", F.col("rows").isNotNull().alias("has_row"), reckon.lost_condition().alias("lost")
        )
        .collect()
    )
    has_row = {str(r["key"]): bool(r["has_row"]) for r in got}
    lost = {str(r["key"]) for r in got if r["lost"]}
    pending = {t.key for t in open_txns if not t.dead and t.key is not None}
    result.lost_pending = len(lost & pending)
    return [
        dataclasses.replace(t, db_row=has_row.get(t.key, False)) if t.key is not None else t
        for t in open_txns
    ]


def write_parquet(
    spark: Any,
    found: reckon.Discrepancies,
    open_txns: list[OpenTransaction],
    out: Path,
    now_ms: int,
) -> None:
    """Every discrepancy into ``out``: one Parquet directory per kind (written by the
    executors: on a cluster, ``out`` must be a path they share)."""
    target = out.resolve()
    for kind, frame in found.by_kind().items():
        frame.write.mode("overwrite").parquet(str(target / PARQUET_NAMES[kind]))
    schema = (
        "key string, transaction_id string, message_id string, broker string, state string, "
        "dead boolean, checks long, prepared_at string, age_ms long, db_row boolean"
    )
    rows = [t.as_json(now_ms) for t in open_txns]
    spark.createDataFrame(rows, schema).write.mode("overwrite").parquet(
        str(target / PARQUET_NAMES["undecided"])
    )
