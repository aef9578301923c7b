"""The Spark source across a topic's growth (``txmq topic update``): a streaming query keeps its
checkpointed offsets and picks up the new queues as new partitions.

Goal: rows written before and after the topic grew from 4 to 6 queues each reach the sink
exactly once, the new queues' rows among them, and a batch read plans one partition per queue.
Method: a real broker process, committed and rolled-back messages over the broker's own client,
a streaming query (Trigger.AvailableNow) into Parquet run before and after the growth with one
checkpoint, then a batch read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.conftest import BrokerProcess
from tests.spark.conftest import produce
from txmq.client.admin import call


def test_a_stream_reads_the_queues_a_topic_gained(
    spark: Any, spark_broker: BrokerProcess, tmp_path: Path, seed: int
) -> None:
    ep = spark_broker.endpoints
    made = [produce(ep, "growing", 30, seed, prefix="before")]  # auto-created: 4 queues
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def stream_once() -> None:
        q = (
            spark.readStream.format("txmq")
            .option("endpoints", ep)
            .option("topic", "growing")
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("string(body) AS b", "queue_id")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(180)
        assert q.exception() is None

    stream_once()
    assert call(ep, "TopicUpdate", {"name": "growing", "queues": 6})["result"] == "grown"
    made.append(produce(ep, "growing", 30, seed + 1, prefix="after"))
    stream_once()
    rows = spark.read.parquet(str(out)).collect()
    want = made[0].committed | made[1].committed
    assert sorted(r.b for r in rows) == sorted(want), "every committed row once"
    assert {r.queue_id for r in rows} == set(range(6))
    df = spark.read.format("txmq").option("endpoints", ep).option("topic", "growing").load()
    assert df.rdd.getNumPartitions() == 6
