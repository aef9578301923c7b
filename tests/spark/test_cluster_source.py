"""The Spark source on a 2-broker cluster: one input partition per queue of every broker, only
committed messages, and a streaming query into Parquet that stays exactly-once when it runs
again after more messages arrived on both brokers.
Method: two real broker processes in one cluster file; messages are produced on each broker
directly (committed, rolled back and never-decided transactions), then read through one
member's endpoint or all of them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import wait_until
from tests.integration.etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)
from tests.integration.test_cluster import Cluster, definitions
from tests.integration.test_replica_groups import Groups
from tests.spark.conftest import produce


@pytest.fixture(scope="module")
def cluster2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("spark-cluster"), 2)
    c.start()
    yield c
    c.stop()


def test_reads_every_queue_of_every_broker_exactly_once(
    cluster2: Cluster, spark: Any, tmp_path: Path, seed: int
) -> None:
    b0, b1 = cluster2.brokers
    # Auto-created on b0 by its first message; b1 imports the definition at its next probe.
    made = [produce(b0.endpoints, "cs", 20, seed, prefix="b0")]
    wait_until(lambda: "cs" in definitions(b1), 15, "the topic on b1")
    made.append(produce(b1.endpoints, "cs", 20, seed, prefix="b1"))
    committed = made[0].committed | made[1].committed
    df = spark.read.format("txmq").option("endpoints", b1.endpoints).option("topic", "cs").load()
    assert df.rdd.getNumPartitions() == 8  # 4 queues (the default) on each of 2 brokers
    assert sorted(r.b for r in df.selectExpr("string(body) AS b").collect()) == sorted(committed)

    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def stream_once() -> None:
        q = (
            spark.readStream.format("txmq")
            .option("endpoints", cluster2.endpoints)
            .option("topic", "cs")
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("string(body) AS b")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(180)
        assert q.exception() is None

    stream_once()
    more = [
        produce(b.endpoints, "cs", 5, seed + 1, prefix=f"more-{b.data_dir.name}") for b in (b0, b1)
    ]
    stream_once()
    rows = [r.b for r in spark.read.parquet(str(out)).collect()]
    want = committed | more[0].committed | more[1].committed
    assert sorted(rows) == sorted(want)  # each once: no rolled-back, pending or repeated row


@pytest.fixture
def groups(tmp_path: Path, etcd_endpoint: str) -> Iterator[Groups]:  # noqa: F811
    c = Groups(tmp_path, etcd_endpoint, 2, 2)
    c.start()
    yield c
    c.stop()


def test_reads_every_queue_of_every_replica_group_through_the_leaders(
    groups: Groups, spark: Any, seed: int
) -> None:
    """Two groups of two replicas: the source, given one follower's endpoint, learns the
    cluster from it (ClusterInfo: each group at its leader) and reads one partition per queue
    of each group, committed messages only."""
    leaders = groups.leaders(preferred=True)  # not one about to hand the lead back
    made = [produce(leaders["group-0"].endpoints, "gs", 20, seed, prefix="g0")]
    wait_until(lambda: "gs" in definitions(leaders["group-1"]), 15, "the topic on group-1")
    made.append(produce(leaders["group-1"].endpoints, "gs", 20, seed, prefix="g1"))
    follower = next(b for b in groups.replicas.values() if b not in leaders.values())
    df = spark.read.format("txmq").option("endpoints", follower.endpoints).option("topic", "gs")
    loaded = df.load()
    assert loaded.rdd.getNumPartitions() == 8  # 4 queues (the default) on each of 2 groups
    rows = sorted(r.b for r in loaded.selectExpr("string(body) AS b").collect())
    assert rows == sorted(made[0].committed | made[1].committed)
