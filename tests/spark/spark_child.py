"""Child driver processes for the Spark tests (so the parent can kill -9 a real driver)."""

from __future__ import annotations

import sys

from txmq.spark.session import local_session


def stream(endpoints: str, topic: str, out: str, checkpoint: str) -> None:
    spark = local_session("txmq-test-stream")
    q = (
        spark.readStream.format("txmq")
        .option("endpoints", endpoints)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", "25")
        .load()
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    print("started", flush=True)
    q.awaitTermination()
    print("done", flush=True)


def sink(endpoints: str, topic: str, n: str, batch_id: str, fail: str) -> None:
    spark = local_session("txmq-test-sink")
    df = spark.range(int(n)).selectExpr("cast(id as string) as body", "'sunk' as tag")
    (
        df.repartition(3)
        .write.format("txmq")
        .option("endpoints", endpoints)
        .option("topic", topic)
        .option("sinkId", "test-sink")
        .option("batchId", batch_id)
        .option("failAfterLedger", fail)
        .mode("append")
        .save()
    )
    print("done", flush=True)


if __name__ == "__main__":
    {"stream": stream, "sink": sink}[sys.argv[1]](*sys.argv[2:])
