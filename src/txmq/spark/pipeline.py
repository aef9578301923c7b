"""The example pipeline: the committed order stream, exactly-once into Parquet, aggregated per
SKU per minute. Used by ``txmq demo`` and examples/pipeline/.

Step 1 streams the topic into a raw Parquet table with Trigger.AvailableNow and a checkpoint
(the file sink plus deterministic offset ranges make it exactly-once across restarts). Step 2
aggregates that table per SKU and minute into a second Parquet table.
"""

from __future__ import annotations

from pathlib import Path

from txmq.demo.orders import TOPIC
from txmq.spark.session import local_session


def stream_to_parquet(
    spark: object, endpoints: str, topic: str, out: Path, checkpoint: Path
) -> None:
    q = (
        spark.readStream.format("txmq")  # type: ignore[attr-defined]
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
    q.awaitTermination()


def aggregate_orders(endpoints: str, out: Path, checkpoint: Path, topic: str = TOPIC) -> int:
    """Returns the number of (sku, minute) rows written."""
    from pyspark.sql import functions as F

    spark = local_session("txmq-orders")
    raw = out.with_name(out.name + ".raw")
    stream_to_parquet(spark, endpoints, topic, raw, checkpoint)
    orders = (
        spark.read.parquet(str(raw))
        .select(
            F.from_json(
                F.col("body").cast("string"), "order_id string, sku string, qty int, ts long"
            ).alias("o")
        )
        .select("o.*")
    )
    agg = (
        orders.withColumn("minute", F.date_trunc("minute", F.timestamp_millis("ts")))
        .groupBy("sku", "minute")
        .agg(F.sum("qty").alias("qty"), F.count("*").alias("orders"))
    )
    agg.write.mode("overwrite").parquet(str(out))
    return int(spark.read.parquet(str(out)).count())
