"""Batch reads and writes of the txmq data source, and its errors, against a real broker
subprocess and the shared local Spark session.

Goal: offset and time ranges read exactly the committed messages they name; a batch write is
applied once per (sinkId, batchId); every misuse fails with one clear, typed message (missing
topic, unreachable broker, bad options, wrong column types). Method: produce with raw gRPC,
read and write through ``format("txmq")``, match error text with pytest.raises.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from tests.integration.conftest import BrokerProcess
from tests.ports import free_port
from tests.spark.conftest import produce
from txmq.spark.client import BrokerClient, build_message
from txmq.spark.source import TxmqDataSource

pytestmark = pytest.mark.spark


def _read(spark: Any, ep: str, topic: str, **options: str) -> Any:
    reader = spark.read.format("txmq").option("endpoints", ep).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_schema_is_exact_and_registration_is_explicit_too(
    spark_broker: BrokerProcess, spark: Any
) -> None:
    spark.dataSource.register(TxmqDataSource)  # twice is fine
    produce(spark_broker.endpoints, "schema", 3, 1)
    df = _read(spark, spark_broker.endpoints, "schema")
    assert df.schema.simpleString() == (
        "struct<topic:string,queue_id:int,queue_offset:bigint,message_id:string,"
        "keys:array<string>,tag:string,properties:map<string,string>,body:binary,"
        "born_timestamp:timestamp,store_timestamp:timestamp>"
    )
    rows = df.collect()
    assert len(rows) == 3 and all(r.topic == "schema" and r.store_timestamp for r in rows)
    # Arrow carries UTC instants: another session time zone reads the same instants.
    millis = "sort_array(collect_list(unix_millis(store_timestamp)))"
    in_utc = df.selectExpr(millis).first()[0]
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        assert df.selectExpr(millis).first()[0] == in_utc
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    with BrokerClient(spark_broker.endpoints) as broker:
        stored = [
            m.store_timestamp_ms
            for q in range(4)
            for m in broker.read_range("schema", q, 0, broker.query_offset("schema", q, "latest"))
        ]
    assert in_utc == sorted(stored)


def test_batch_read_by_offset_range(spark_broker: BrokerProcess, spark: Any, seed: int) -> None:
    ep = spark_broker.endpoints
    made = produce(ep, "ranges", 40, seed)
    everything = _read(spark, ep, "ranges").selectExpr("string(body) AS b").collect()
    assert sorted(r.b for r in everything) == sorted(made.committed)
    df = _read(
        spark,
        ep,
        "ranges",
        startingOffsets='{"0": 2, "1": -2}',
        endingOffsets='{"0": 5, "1": 0, "2": 0, "3": 0}',
    )
    got = sorted(
        (r.queue_id, r.queue_offset) for r in df.select("queue_id", "queue_offset").collect()
    )
    assert got == [(0, 2), (0, 3), (0, 4)]


def test_batch_read_by_time_range(spark_broker: BrokerProcess, spark: Any) -> None:
    ep = spark_broker.endpoints
    with BrokerClient(ep) as broker:
        broker.send([build_message("times", b"before")])
        time.sleep(0.05)  # sleep: the window's edges need store times in distinct milliseconds
        start_ms = int(time.time() * 1000)
        for i in range(5):
            broker.send([build_message("times", f"inside{i}".encode())])
        time.sleep(0.05)  # sleep: as above, for the window's end
        end_ms = int(time.time() * 1000)
        broker.send([build_message("times", b"after")])
    df = _read(spark, ep, "times", startingTimestamp=str(start_ms), endingTimestamp=str(end_ms))
    assert sorted(r.b for r in df.selectExpr("string(body) AS b").collect()) == [
        f"inside{i}" for i in range(5)
    ]
    since = _read(spark, ep, "times", startingTimestamp=str(start_ms))
    assert since.count() == 6


def test_batch_write_is_applied_once_per_batch_id(spark_broker: BrokerProcess, spark: Any) -> None:
    ep = spark_broker.endpoints
    df = (
        spark.range(50)
        .selectExpr(
            "string(id) AS body",
            "array(concat('k', string(id))) AS keys",
            "'t' AS tag",
            "map('n', string(id)) AS properties",
        )
        .repartition(3)
    )
    for _ in range(2):  # the second run of the same job is rolled back, not duplicated
        (
            df.write.format("txmq")
            .option("endpoints", ep)
            .option("topic", "written")
            .option("sinkId", "job")
            .option("batchId", "2026-11-22")
            .mode("append")
            .save()
        )
    df.write.format("txmq").option("endpoints", ep).option("topic", "written").mode("append").save()
    rows = _read(spark, ep, "written").selectExpr("string(body) AS b", "keys", "tag", "properties")
    got = rows.collect()
    assert len(got) == 100
    assert sorted(r.b for r in got) == sorted([str(i) for i in range(50)] * 2)
    r0 = next(r for r in got if r.b == "7")
    assert r0.keys == ["k7"] and r0.tag == "t" and r0.properties["n"] == "7"
    queries = sorted(r.properties["SPARK_SINK_QUERY"] for r in got if r.b == "7")
    assert queries == ["job", "spark-batch"], "each row names the sink and batch that wrote it"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"endpoints": None}, "option 'endpoints' is required"),
        ({"endpoints": "nohostport", "topic": "ranges"}, "must be HOST:PORT"),
        ({"topic": None}, "option 'topic' is required"),
        ({"topic": "no-such-topic"}, "topic 'no-such-topic' does not exist"),
        ({"startingOffsets": "{bad"}, "must be 'earliest', 'latest' or JSON"),
        ({"startingOffsets": '{"9": 0}'}, "names queue '9'; the topic's queues are 0-3"),
        ({"endingOffsets": '{"0": 100000}'}, "must lie within the queue"),
        ({"startingTimestamp": "soon"}, "must be an integer"),
        ({"startingOffset": "earliest"}, "unknown option(s) 'startingoffset'"),
    ],
)
def test_read_option_errors(
    spark_broker: BrokerProcess, spark: Any, options: dict[str, str | None], message: str
) -> None:
    from pyspark.errors import PySparkException

    produce(spark_broker.endpoints, "ranges", 1, 2)
    merged: dict[str, str | None] = {"endpoints": spark_broker.endpoints, "topic": "ranges"}
    merged.update(options)
    reader = spark.read.format("txmq")
    for k, v in merged.items():
        if v is not None:
            reader = reader.option(k, v)
    with pytest.raises(PySparkException, match=re.escape(message)):
        reader.load().count()


def test_unreachable_broker_is_a_clear_error(spark: Any) -> None:
    from pyspark.errors import PySparkException

    ep = f"127.0.0.1:{free_port()}"
    with pytest.raises(PySparkException, match=f"broker at {ep} is unreachable"):
        spark.read.format("txmq").option("endpoints", ep).option("topic", "x").load().count()


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        (["id AS value"], "needs a 'body' column"),
        (["id AS body"], "column 'body' of the txmq sink must be binary or string, not bigint"),
        (["string(id) AS body", "5 AS tag"], "column 'tag' of the txmq sink must be string"),
        (["string(id) AS body", "map('a', 1) AS properties"], "must be map<string,string>"),
    ],
)
def test_sink_column_errors(
    spark_broker: BrokerProcess, spark: Any, columns: list[str], message: str
) -> None:
    from pyspark.errors import PySparkException

    df = spark.range(3).selectExpr(*columns)
    writer = df.write.format("txmq").option("endpoints", spark_broker.endpoints)
    with pytest.raises(PySparkException, match=re.escape(message)):
        writer.option("topic", "never").mode("append").save()
