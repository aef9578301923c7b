"""The example pipelines over the order stream: per-SKU-per-minute aggregation, reconciliation.

Owns: two jobs the ``txmq demo`` command runs (spark_job.py), also runnable by hand as
``python -m txmq.demo.pipeline aggregate|reconcile ...``:

- ``aggregate_orders``: stream the topic's committed orders into a raw Parquet table with
  Trigger.AvailableNow and a checkpoint (exactly-once: deterministic offset ranges plus the file
  sink's own log), then aggregate that table per SKU and minute into a second Parquet table.
  Each run adds only the orders that arrived since the last one, and rewrites the aggregate.
- ``reconcile``: join the order service's orders (SQLite ``orders``), the topic's committed
  messages and the inventory service's deductions (SQLite ``processed``) and list every
  mismatch: an order without its message, a message without its order (a leaked rollback), a
  duplicate, a quantity that differs, a deduction without an order, an order never deducted.

Order messages are JSON bodies ``{"order_id", "sku", "qty", "ts"}`` (ts in ms since the epoch).
Must not: write to the broker or to the services' databases (read-only jobs).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from txmq import limits
from txmq.audit import reckon
from txmq.audit.spec import Match, Window
from txmq.protocol.client_security import ClientSecurity
from txmq.spark.session import local_session

ORDER_TOPIC_DEFAULT: Final = "deduct-stock"
ORDER_JSON_SCHEMA: Final = "order_id string, sku string, qty int, ts long"
# An order message's key for the audit's reckoning: the order id in its JSON body.
ORDER_MATCH: Final = Match("json", "order_id")


def _spark(spark: Any, app: str) -> Any:
    return spark if spark is not None else local_session(app)


def _security() -> dict[str, str]:
    """Credentials and TLS from TXMQ_ACCESS_KEY/TXMQ_SECRET_KEY/TXMQ_TLS/TXMQ_CA_FILE."""
    return ClientSecurity.from_env(os.environ).spark_options()


def orders_from(messages: Any) -> Any:
    """Parse a txmq DataFrame's bodies into order columns (plus where each message sits)."""
    from pyspark.sql import functions as F

    return messages.select(
        F.from_json(F.col("body").cast("string"), ORDER_JSON_SCHEMA).alias("o"),
        "queue_id",
        "queue_offset",
        "message_id",
    ).select("o.*", "queue_id", "queue_offset", "message_id")


def stream_to_parquet(spark: Any, endpoints: str, topic: str, out: Path, checkpoint: Path) -> None:
    """Every committed message not yet copied, into Parquet, exactly once; then returns."""
    query = (
        spark.readStream.format("txmq")
        .options(**_security())
        .option("endpoints", endpoints)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def aggregate_orders(
    endpoints: str,
    out: Path,
    checkpoint: Path,
    topic: str = ORDER_TOPIC_DEFAULT,
    *,
    spark: Any = None,
) -> int:
    """Orders per SKU per minute (columns sku, minute, qty, orders) into Parquet at ``out``;
    the raw committed messages are kept next to it (``<out>.raw``). Returns the number of
    (sku, minute) rows written."""
    from pyspark.sql import functions as F

    spark = _spark(spark, "txmq-orders-per-sku")
    raw = out.with_name(out.name + ".raw")
    stream_to_parquet(spark, endpoints, topic, raw, checkpoint)
    if not raw.exists():  # an empty topic: the file sink wrote nothing
        return 0
    orders = orders_from(spark.read.parquet(str(raw))).where("order_id IS NOT NULL")
    per_minute = (
        orders.withColumn("minute", F.date_trunc("minute", F.timestamp_millis("ts")))
        .groupBy("sku", "minute")
        .agg(F.sum("qty").alias("qty"), F.count("*").alias("orders"))
        .orderBy("minute", "sku")
    )
    per_minute.write.mode("overwrite").parquet(str(out))
    return int(spark.read.parquet(str(out)).count())


@dataclass
class Reconciliation:
    """Mismatches between the order DB, the topic and the inventory DB, by kind."""

    orders: int = 0
    messages: int = 0
    deductions: int = 0
    mismatches: dict[str, list[str]] = field(default_factory=dict)

    @property
    def consistent(self) -> bool:
        return not any(self.mismatches.values())

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "consistent": self.consistent}, indent=2)


def _sqlite_frame(spark: Any, db: Path, sql: str, schema: str) -> Any:
    """A small SQLite query as a Spark DataFrame (read on the driver: a demo-sized table)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(sql).fetchall()
    return spark.createDataFrame(rows, schema)


def reconcile(
    endpoints: str,
    orders_db: Path,
    inventory_db: Path,
    topic: str = ORDER_TOPIC_DEFAULT,
    *,
    spark: Any = None,
) -> Reconciliation:
    """Join orders, committed messages and deductions; see the module docstring."""
    from pyspark.sql import functions as F

    spark = _spark(spark, "txmq-reconcile")
    raw = (
        spark.read.format("txmq")
        .options(**_security())
        .option("endpoints", endpoints)
        .option("topic", topic)
        .load()
    )
    messages = orders_from(raw)
    orders = _sqlite_frame(spark, orders_db, "SELECT id, qty FROM orders", "id string, qty int")
    deducted = _sqlite_frame(
        spark,
        inventory_db,
        "SELECT order_id, message_id FROM processed",
        "order_id string, m string",
    )
    # Lost, phantom and duplicate orders are the audit's own reckoning (txmq audit).
    found = reckon.discrepancies(
        reckon.per_key(
            reckon.untimed_rows(orders, "id"),
            reckon.keyed_messages(raw, ORDER_MATCH, Window(None, None)),
        )
    )
    per_order = messages.groupBy("order_id").agg(F.max("qty").alias("msg_qty"))
    joined = orders.join(per_order, orders.id == per_order.order_id, "inner")
    ded = deducted.groupBy("order_id").count().withColumnRenamed("order_id", "d_order")
    checks = {
        "ordered but no message": found.lost.select("key"),
        "message without an order (leaked rollback)": found.phantom.select("key"),
        "duplicate messages for one order": found.duplicate.select("key"),
        "quantity differs from the order": joined.where("qty != msg_qty").select("id"),
        "deducted without an order": ded.join(orders, ded.d_order == orders.id, "left_anti"),
        "ordered but not deducted": orders.join(ded, orders.id == ded.d_order, "left_anti"),
        "deducted more than once": ded.where("count > 1").select("d_order"),
    }
    report = Reconciliation(orders.count(), messages.count(), deducted.count())
    for kind, frame in checks.items():
        ids = [str(r[0]) for r in frame.limit(limits.DEMO_REPORT_IDS_MAX).collect()]
        report.mismatches[kind] = sorted(ids)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m txmq.demo.pipeline", description=__doc__)
    ap.add_argument("--endpoints", default="127.0.0.1:8081")
    ap.add_argument("--topic", default=ORDER_TOPIC_DEFAULT)
    sub = ap.add_subparsers(dest="job", required=True)
    agg = sub.add_parser("aggregate", help="orders per SKU per minute into Parquet")
    agg.add_argument("--out", type=Path, default=Path("/tmp/txmq-orders"))
    rec = sub.add_parser("reconcile", help="orders vs topic vs deductions")
    rec.add_argument("--orders-db", type=Path, required=True)
    rec.add_argument("--inventory-db", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.job == "aggregate":
        out = args.out / "per-sku-minute.parquet"
        rows = aggregate_orders(args.endpoints, out, args.out / "checkpoint", args.topic)
        print(json.dumps({"rows": rows, "out": str(out)}))
        return 0
    report = reconcile(args.endpoints, args.orders_db, args.inventory_db, args.topic)
    print(report.to_json())
    return 0 if report.consistent else 1


if __name__ == "__main__":
    raise SystemExit(main())
