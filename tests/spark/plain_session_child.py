"""A Spark driver as a user writes it after ``pip install 'txmq[spark]'``: a plain
``SparkSession.builder``, no ``spark.dataSource.register`` and no txmq import. PySpark finds
``format("txmq")`` through the top-level ``pyspark_txmq`` module. Run by test_plain_session.py in
a fresh process (a SparkSession is a per-process singleton: the shared test session registers the
source explicitly and would hide a missing auto-registration).

    python plain_session_child.py ENDPOINTS IN_TOPIC BATCH_TOPIC STREAM_TOPIC CHECKPOINT

Prints one JSON line: the bodies the batch read saw.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession


def main(endpoints: str, topic_in: str, topic_batch: str, topic_stream: str, ckpt: str) -> None:
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("txmq-plain-session")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    read = spark.read.format("txmq").option("endpoints", endpoints).option("topic", topic_in)
    bodies = sorted(r.b for r in read.load().selectExpr("string(body) AS b").collect())
    rows = spark.createDataFrame([(f"batch-{i}",) for i in range(3)], "body string")
    rows.write.format("txmq").option("endpoints", endpoints).option("topic", topic_batch).mode(
        "append"
    ).save()
    query = (
        spark.readStream.format("txmq")
        .option("endpoints", endpoints)
        .option("topic", topic_in)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("body", "keys", "tag", "properties")
        .writeStream.format("txmq")
        .option("endpoints", endpoints)
        .option("topic", topic_stream)
        .option("checkpointLocation", ckpt)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print(json.dumps({"read": bodies}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
