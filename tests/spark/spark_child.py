"""Child Spark drivers for the crash tests: the parent kills them (SIGKILL of the process
group) or a failpoint in the sink does (TXMQ_SPARK_FAILPOINT), then runs them again from the
same checkpoint.

    python spark_child.py to-parquet ENDPOINTS TOPIC OUT CHECKPOINT MAX_ROWS
    python spark_child.py to-topic ENDPOINTS IN_TOPIC OUT_TOPIC CHECKPOINT MAX_ROWS
"""

from __future__ import annotations

import sys

from txmq.spark.session import local_session


def _stream(endpoints: str, topic: str, max_rows: str) -> object:
    spark = local_session("txmq-test-child")
    return (
        spark.readStream.format("txmq")
        .option("endpoints", endpoints)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", max_rows)
        .load()
    )


def to_parquet(endpoints: str, topic: str, out: str, checkpoint: str, max_rows: str) -> None:
    query = (
        _stream(endpoints, topic, max_rows)
        .writeStream.format("parquet")  # type: ignore[attr-defined]
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    print("started", flush=True)
    query.awaitTermination()
    print("done", flush=True)


def to_topic(endpoints: str, topic: str, out: str, checkpoint: str, max_rows: str) -> None:
    query = (
        _stream(endpoints, topic, max_rows)
        .selectExpr("body", "keys", "tag")  # type: ignore[attr-defined]
        .writeStream.format("txmq")
        .option("endpoints", endpoints)
        .option("topic", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    print("started", flush=True)
    query.awaitTermination()
    print("done", flush=True)


if __name__ == "__main__":
    {"to-parquet": to_parquet, "to-topic": to_topic}[sys.argv[1]](*sys.argv[2:])
