"""The ``txmq`` PySpark data source (Python Data Source API, pyspark >= 4.2).

Reading (batch and streaming) pulls committed messages by queue offset over the broker's
PullMessage RPC: one input partition per queue offset range, offsets as JSON ``{"queue": n}``,
so a micro-batch's range is deterministic and a restart from a checkpoint re-reads exactly it.
Writing is transactional: tasks send half messages; the driver's commit records the batch in
the sink ledger and then commits them; abort rolls them back; a batch already in the ledger is
rolled back instead (replays never duplicate). See txmq.txn.ledger for check-back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from txmq.errors import BadRequestError
from txmq.spark.client import Broker

SCHEMA = (
    "topic string, queue_id int, queue_offset long, message_id string, keys array<string>, "
    "tag string, properties map<string,string>, body binary, born_timestamp timestamp, "
    "store_timestamp timestamp"
)
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("message_id", pa.string()),
        ("keys", pa.list_(pa.string())),
        ("tag", pa.string()),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("body", pa.binary()),
        ("born_timestamp", pa.timestamp("us", tz="UTC")),
        ("store_timestamp", pa.timestamp("us", tz="UTC")),
    ]
)


class TxmqOptionError(BadRequestError):
    """A missing or malformed option of the txmq data source."""


def _lower(options: Any) -> dict[str, str]:
    """Spark passes options case-insensitively (often lower-cased): normalise to lower case."""
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def _require(options: dict[str, str], key: str) -> str:
    value = options.get(key)
    if not value:
        raise TxmqOptionError(f"option {key!r} is required for format('txmq')")
    return value


def _int_option(options: dict[str, str], key: str, default: int | None) -> int | None:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise TxmqOptionError(f"option {key!r} must be an integer, got {raw!r}") from exc
    if value <= 0:
        raise TxmqOptionError(f"option {key!r} must be positive, got {value}")
    return value


@contextmanager
def _connect(endpoints: str) -> Iterator[Broker]:
    broker = Broker(endpoints)
    try:
        yield broker
    finally:
        broker.close()


@dataclass(frozen=True)
class QueueRange(InputPartition):
    endpoints: str
    topic: str
    queue_id: int
    start: int
    end: int


def _resolve(broker: Broker, topic: str, spec: str, queues: int, default: str) -> dict[str, int]:
    spec = spec or default
    if spec in ("earliest", "latest"):
        return {str(q): broker.query_offset(topic, q, spec) for q in range(queues)}
    try:
        raw = json.loads(spec)
        out = {
            str(q): int(raw[str(q)]) if str(q) in raw else broker.query_offset(topic, q, "earliest")
            for q in range(queues)
        }
    except (ValueError, TypeError, AttributeError) as exc:
        raise TxmqOptionError(
            f"offsets must be 'earliest', 'latest' or JSON like {{\"0\": 12}}, got {spec!r}"
        ) from exc
    return out


def read_partition(p: QueueRange) -> Iterator[pa.RecordBatch]:
    """Runs in executor tasks: everything needed is in the partition object."""
    broker = Broker(p.endpoints)
    try:
        rows: dict[str, list[Any]] = {name: [] for name in ARROW_SCHEMA.names}
        for m in broker.read_range(p.topic, p.queue_id, p.start, p.end):
            sp = m.system_properties
            rows["topic"].append(m.topic.name)
            rows["queue_id"].append(p.queue_id)
            rows["queue_offset"].append(sp.queue_offset)
            rows["message_id"].append(sp.message_id)
            rows["keys"].append(list(sp.keys))
            rows["tag"].append(sp.tag)
            rows["properties"].append(list(m.user_properties.items()))
            rows["body"].append(bytes(m.body))
            rows["born_timestamp"].append(
                sp.born_timestamp.seconds * 1_000_000 + sp.born_timestamp.nanos // 1000
            )
            rows["store_timestamp"].append(
                sp.store_timestamp.seconds * 1_000_000 + sp.store_timestamp.nanos // 1000
            )
            if len(rows["topic"]) >= 4096:
                yield pa.RecordBatch.from_pydict(rows, schema=ARROW_SCHEMA)
                rows = {name: [] for name in ARROW_SCHEMA.names}
        if rows["topic"]:
            yield pa.RecordBatch.from_pydict(rows, schema=ARROW_SCHEMA)
    finally:
        broker.close()


class TxmqBatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.endpoints = _require(options, "endpoints")
        self.topic = _require(options, "topic")
        broker = Broker(self.endpoints)
        try:
            queues = broker.queue_count(self.topic)
            if "startingtimestamp" in options or "endingtimestamp" in options:
                start_ts = _int_option(options, "startingtimestamp", 1) or 1
                self.start = {
                    str(q): broker.query_offset(self.topic, q, "timestamp", start_ts)
                    for q in range(queues)
                }
                end_ts = _int_option(options, "endingtimestamp", None)
                self.end = (
                    _resolve(broker, self.topic, "latest", queues, "latest")
                    if end_ts is None
                    else {
                        str(q): broker.query_offset(self.topic, q, "timestamp", end_ts)
                        for q in range(queues)
                    }
                )
            else:
                self.start = _resolve(
                    broker, self.topic, options.get("startingoffsets", ""), queues, "earliest"
                )
                self.end = _resolve(
                    broker, self.topic, options.get("endingoffsets", ""), queues, "latest"
                )
        finally:
            broker.close()

    def partitions(self) -> Sequence[InputPartition]:
        return [
            QueueRange(self.endpoints, self.topic, int(q), s, self.end[q])
            for q, s in self.start.items()
            if self.end[q] > s
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueRange)
        return read_partition(partition)


class TxmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.endpoints = _require(options, "endpoints")
        self.topic = _require(options, "topic")
        self.starting = options.get("startingoffsets", "latest")
        self.max_rows = _int_option(options, "maxrecordspertrigger", None)
        self.cap: dict[str, int] | None = None
        # No channel is kept on the reader: Spark pickles it to run read() on executors.
        with _connect(self.endpoints) as broker:
            self.queues = broker.queue_count(self.topic)

    def initialOffset(self) -> dict[str, int]:
        with _connect(self.endpoints) as broker:
            return _resolve(broker, self.topic, self.starting, self.queues, "latest")

    def prepareForTriggerAvailableNow(self) -> None:
        # Trigger.AvailableNow: read what exists now, in as many batches as the limit needs,
        # and nothing that arrives later.
        with _connect(self.endpoints) as broker:
            self.cap = _resolve(broker, self.topic, "latest", self.queues, "latest")

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        latest = self.cap
        if latest is None:
            with _connect(self.endpoints) as broker:
                latest = _resolve(broker, self.topic, "latest", self.queues, "latest")
        if not isinstance(limit, ReadMaxRows):
            return latest
        budget = int(limit.max_rows)
        end = dict(start)
        # Deterministic split of the budget: queue by queue, in queue order.
        for q in sorted(latest, key=int):
            take = min(budget, max(0, latest[q] - start.get(q, 0)))
            end[q] = start.get(q, 0) + take
            budget -= take
        return end

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        return [
            QueueRange(self.endpoints, self.topic, int(q), start.get(q, 0), e)
            for q, e in end.items()
            if e > start.get(q, 0)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueRange)
        return read_partition(partition)

    def commit(self, end: dict[str, int]) -> None:
        return None  # offsets live in Spark's checkpoint; nothing to release on the broker

    def stop(self) -> None:
        return None


class TxmqDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("txmq")``."""

    @classmethod
    def name(cls) -> str:
        return "txmq"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return TxmqBatchReader(_lower(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TxmqStreamReader(_lower(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from txmq.spark.sink import TxmqBatchWriter

        return TxmqBatchWriter(_lower(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from txmq.spark.sink import TxmqStreamWriter

        return TxmqStreamWriter(_lower(self.options), schema)


__all__ = ["TxmqDataSource", "WriterCommitMessage"]
