"""The ``txmq`` PySpark data source (Python Data Source API, pyspark >= 4.2).

Owns: ``TxmqDataSource`` (short name "txmq"; found by PySpark through the top-level
``pyspark_txmq`` module, or ``spark.dataSource.register(TxmqDataSource)``), the batch reader and the
streaming reader. The sink lives in txmq.spark.sink.

Reads return only committed messages: they pull a topic's consume queues by queue offset with
the broker's record pull (txmq.data.v1, docs/formats.md), and half or rolled-back messages never
enter a consume queue. One input partition reads one queue's offset range; on a cluster, every
queue of every broker (``Source``), a topic's queues added while a stream runs included.
Offsets are JSON dicts ``{"<queue number>": next offset}`` (spark/numbering.py); Spark
writes each micro-batch's end offsets to its checkpoint before running it, and
``partitions(start, end)`` is a pure function of them, so a batch re-run after a crash reads
exactly the same messages, and a file sink with a checkpoint gets exactly-once output.

Must not: keep a connection on a reader (Spark pickles readers and partitions to executors; each
``read`` opens its own), or read past the end offsets it was given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from txmq import limits, malloc
from txmq.errors import IllegalOffsetError, RemoteProtocolError, invariant
from txmq.protocol.client_security import PLAINTEXT, ClientSecurity
from txmq.spark import numbering
from txmq.spark import options as opt
from txmq.spark.arrow import SCHEMA_DDL
from txmq.spark.client import BrokerClient, Pulled
from txmq.spark.members import cluster_view
from txmq.spark.options import EARLIEST, LATEST, DataLossError, TxmqOptionError

if TYPE_CHECKING:
    # Why not at run time: numpy and pyarrow are needed only where rows are read (a task), not
    # in the planner process Spark starts for every streaming query.
    import pyarrow as pa


@dataclass(frozen=True, slots=True)
class TxmqPartition(InputPartition):
    """One queue's offset range; everything ``read`` needs, since it runs on an executor."""

    endpoints: str
    topic: str
    queue_id: int
    start: int
    end: int
    fail_on_data_loss: bool = True
    # Credentials travel with the task to its executor, as the endpoints do.
    security: ClientSecurity = PLAINTEXT


def read_partition(p: TxmqPartition) -> Iterator[pa.RecordBatch]:
    """The committed messages ``p.start <= queue_offset < p.end`` of one queue as Arrow.

    Pulls are decoded a batch at a time (``columnar.to_batch``), up to SPARK_ROWS_PER_BATCH_MAX rows
    or SPARK_BATCH_BYTES_MAX bytes per batch.
    """
    malloc.keep_large_blocks()  # each pull is a ~1-8 MiB reply: see txmq.malloc
    with BrokerClient(p.endpoints, security=p.security) as broker:
        blobs: list[memoryview] = []
        rows = size = 0
        for got in _committed(broker, p):
            blobs.append(got.blob)
            rows += got.count
            size += len(got.blob)
            if rows >= limits.SPARK_ROWS_PER_BATCH_MAX or size >= limits.SPARK_BATCH_BYTES_MAX:
                yield _decode(blobs, rows, p.end)
                blobs, rows, size = [], 0, 0
        if blobs:
            yield _decode(blobs, rows, p.end)


def _decode(blobs: list[memoryview], count: int, end: int) -> pa.RecordBatch:
    import numpy as np

    from txmq.spark.columnar import to_batch

    batch = to_batch(blobs[0] if len(blobs) == 1 else b"".join(blobs))
    if batch.num_rows != count:
        raise RemoteProtocolError(f"PullRecords announced {count} records, sent {batch.num_rows}")
    # A pull never asks past ``end``; this guard keeps the range exact whatever the broker does.
    offsets = batch.column("queue_offset").to_numpy()
    keep = int(np.searchsorted(offsets, end))
    return batch if keep == batch.num_rows else batch.slice(0, keep)


def _committed(broker: BrokerClient, p: TxmqPartition) -> Iterator[Pulled]:
    offset = p.start
    for _ in range(limits.SPARK_DATA_LOSS_SKIPS_MAX + 1):
        try:
            for got in broker.pulls(p.topic, p.queue_id, offset, p.end):
                offset = got.next_offset
                yield got
            return
        except IllegalOffsetError as exc:
            if p.fail_on_data_loss:
                raise DataLossError(p.topic, p.queue_id, offset, str(exc)) from exc
            # failOnDataLoss=false: skip what retention deleted, read the rest of the range.
            earliest = broker.queue_ranges(p.topic)[p.queue_id][0]
            if earliest <= offset:
                raise DataLossError(p.topic, p.queue_id, offset, str(exc)) from exc
            offset = min(earliest, p.end)
    raise DataLossError(p.topic, p.queue_id, offset, "retention keeps deleting ahead of the read")


@dataclass(frozen=True, slots=True)
class Source:
    """The parsed read options, shared by the batch and the streaming reader.

    On a cluster the topic has queues on each of ``members`` (in cluster-file order),
    ``counts[m]`` on member ``m``, numbered as spark/numbering.py says: a number keeps its
    meaning when the topic grows, and on one broker it is the queue id. A cluster's numbering
    is stable as long as its cluster file keeps its members and their order. A member that is
    a replica group is addressed by all its replicas (``client.group_address``): a read follows
    the group's failover, from the offset it reached, on the new leader (which holds every
    offset the old one let a reader see when ``min_insync_replicas`` > 1: ADR 0005's high
    watermark).
    """

    endpoints: str
    topic: str
    fail_on_data_loss: bool
    security: ClientSecurity = PLAINTEXT
    members: tuple[str, ...] = ()
    counts: tuple[int, ...] = ()

    @classmethod
    def open(cls, options: Mapping[str, str], schema: StructType | None) -> Source:
        opts = opt.lower_keys(options)
        opt.check_known(opts, opt.SOURCE_OPTIONS, "source")
        if schema is not None and schema.simpleString() != _schema().simpleString():
            raise TxmqOptionError(
                f"format('txmq') has a fixed schema ({SCHEMA_DDL}); do not set another"
            )
        endpoints, topic = opt.endpoints(opts), opt.require(opts, "topic")
        security = opt.security(opts)
        members = [address for _, address, _ in cluster_view(endpoints, security)]
        counts = []
        for m in members:
            with BrokerClient(m, security=security) as member:
                counts.append(member.queue_count(topic))
        fail_on_loss = opt.boolean(opts, "failondataloss", True)
        return cls(endpoints, topic, fail_on_loss, security, tuple(members), tuple(counts))

    @property
    def queues(self) -> list[int]:
        """The read's queue numbers, member after member."""
        return numbering.numbers(self.counts)

    def client(self, endpoint: str) -> BrokerClient:
        return BrokerClient(endpoint, security=self.security)

    def locate(self, queue: int) -> tuple[str, int]:
        """(member endpoint, that member's queue id) of the read's queue number ``queue``."""
        member, queue_id = numbering.locate(queue)
        invariant(0 <= member < len(self.members), "a queue of the read")
        return self.members[member], queue_id

    def decode(self, offsets: Mapping[str, Any]) -> dict[int, int]:
        return numbering.decode(offsets, len(self.members))

    def encode(self, values: Mapping[int, int]) -> dict[str, int]:
        return numbering.encode(values, len(self.members))

    def ranges(self) -> tuple[Source, dict[int, tuple[int, int]]]:
        """Every queue's (first retained, next to be written) offsets, by number, with this
        source as the members answered: a topic grown since (``txmq topic update``) has its
        new queues in both. Fewer queues than planned (the topic was deleted and created
        again) fail the read."""
        out: dict[int, tuple[int, int]] = {}
        counts = []
        for m, endpoint in enumerate(self.members):
            with self.client(endpoint) as broker:
                got = broker.queue_ranges(self.topic)
            if len(got) < self.counts[m]:
                raise RemoteProtocolError(
                    f"topic {self.topic!r} now has {len(got)} queues on {endpoint}; "
                    f"the read planned {self.counts[m]}"
                )
            counts.append(len(got))
            out.update((numbering.number(m, q), r) for q, r in enumerate(got))
        return dataclasses.replace(self, counts=tuple(counts)), out

    def offsets_at(self, timestamp_ms: int) -> dict[int, int]:
        """Each queue's first offset stored at or after ``timestamp_ms``, by number."""
        out: dict[int, int] = {}
        for m, endpoint in enumerate(self.members):
            with self.client(endpoint) as broker:
                got = broker.offsets(
                    self.topic, self.counts[m], "timestamp", timestamp_ms=timestamp_ms
                )
            out.update((numbering.number(m, q), v) for q, v in enumerate(got))
        return out

    def resolve(self, values: Mapping[int, int]) -> dict[int, int]:
        """Replace EARLIEST/LATEST markers by the queues' current offsets."""
        if EARLIEST not in values.values() and LATEST not in values.values():
            return dict(values)
        ranges = self.ranges()[1]
        return {
            q: ranges[q][0] if v == EARLIEST else ranges[q][1] if v == LATEST else v
            for q, v in values.items()
        }

    def partitions(self, start: Mapping[int, int], end: Mapping[int, int]) -> list[TxmqPartition]:
        """One partition per queue with messages in range, on the member that owns it."""
        out = []
        for r in opt.ranges(start, end):
            endpoint, queue_id = self.locate(r.queue_id)
            out.append(
                TxmqPartition(
                    endpoint,
                    self.topic,
                    queue_id,
                    r.start,
                    r.end,
                    self.fail_on_data_loss,
                    self.security,
                )
            )
        return out


def _schema() -> StructType:
    """SCHEMA_DDL as a StructType, built without a SparkContext (readers run in workers)."""
    return StructType(
        [
            StructField("topic", StringType()),
            StructField("queue_id", IntegerType()),
            StructField("queue_offset", LongType()),
            StructField("message_id", StringType()),
            StructField("keys", ArrayType(StringType())),
            StructField("tag", StringType()),
            StructField("properties", MapType(StringType(), StringType())),
            StructField("body", BinaryType()),
            StructField("born_timestamp", TimestampType()),
            StructField("store_timestamp", TimestampType()),
        ]
    )


class TxmqBatchReader(DataSourceReader):
    """``spark.read.format("txmq")``: one offset range per queue, fixed when the read is planned.

    Range by offsets (``startingOffsets`` default earliest, ``endingOffsets`` default latest)
    or by store time (``startingTimestamp``/``endingTimestamp`` in ms since the epoch: from the
    first message stored at or after the start to the first stored at or after the end).
    """

    def __init__(self, options: Mapping[str, str], schema: StructType | None = None) -> None:
        self.source = Source.open(options, schema)
        opts = opt.lower_keys(options)
        by_time = "startingtimestamp" in opts or "endingtimestamp" in opts
        if by_time and ("startingoffsets" in opts or "endingoffsets" in opts):
            raise TxmqOptionError("set offsets or timestamps for a txmq read, not both")
        src, numbers = self.source, self.source.queues
        if by_time:
            start = self._at(opt.positive_int(opts, "startingtimestamp"), EARLIEST)
            end = self._at(opt.positive_int(opts, "endingtimestamp"), LATEST)
        else:
            raw_start = opts.get("startingoffsets", "earliest")
            raw_end = opts.get("endingoffsets", "latest")
            start = src.resolve(opt.parse_spec(raw_start, "startingOffsets", numbers, -2))
            end = src.resolve(opt.parse_spec(raw_end, "endingOffsets", numbers, -1))
        latest = src.resolve(dict.fromkeys(numbers, LATEST))
        for q in numbers:
            if not start[q] <= end[q] <= latest[q]:
                raise TxmqOptionError(
                    f"queue {q} of topic {src.topic!r}: the range [{start[q]}, {end[q]}) must "
                    f"lie within the queue, which ends at {latest[q]}"
                )
        self.start, self.end = start, end

    def _at(self, timestamp_ms: int | None, default: int) -> dict[int, int]:
        src = self.source
        if timestamp_ms is None:
            return src.resolve(dict.fromkeys(src.queues, default))
        return src.offsets_at(timestamp_ms)

    def partitions(self) -> Sequence[InputPartition]:
        return self.source.partitions(self.start, self.end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        invariant(isinstance(partition, TxmqPartition), "txmq reads only its own partitions")
        return read_partition(partition)  # type: ignore[arg-type]


class TxmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("txmq")``.

    ``startingOffsets`` (default latest) applies to a new query only; a restarted one resumes
    from its checkpoint. ``maxRecordsPerTrigger`` bounds a micro-batch (shared fairly between
    queues). Trigger.AvailableNow reads what exists when the query starts, then stops.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType | None = None) -> None:
        self.source = Source.open(options, schema)
        opts = opt.lower_keys(options)
        if "endingoffsets" in opts or "startingtimestamp" in opts or "endingtimestamp" in opts:
            raise TxmqOptionError(
                "endingOffsets and timestamps are for batch reads; a stream starts at "
                "startingOffsets and never ends"
            )
        self.starting = opt.parse_spec(
            opts.get("startingoffsets", "latest"), "startingOffsets", self.source.queues, -2
        )
        self.max_rows = opt.positive_int(opts, "maxrecordspertrigger")
        self.cap: dict[int, int] | None = None  # the AvailableNow target

    def _latest(self) -> dict[int, int]:
        """Each queue's end; a queue the topic gained since the last look (``txmq topic
        update``) is in it, and reads from its start (the offsets Spark has lack it)."""
        if self.cap is not None:
            return dict(self.cap)
        self.source, ranges = self.source.ranges()
        return {q: hi for q, (_lo, hi) in ranges.items()}

    def initialOffset(self) -> dict[str, int]:
        return self.source.encode(self.source.resolve(self.starting))

    def prepareForTriggerAvailableNow(self) -> None:
        self.cap = None
        self.cap = self._latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_rows is None:
            return super().getDefaultReadLimit()
        return ReadMaxRows(self.max_rows)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        begin = self.source.decode(start)
        latest = {q: max(v, begin.get(q, 0)) for q, v in self._latest().items()}
        if isinstance(limit, ReadMaxRows):
            end = opt.admit(begin, latest, int(limit.max_rows))
        elif isinstance(limit, ReadMinRows):
            backlog = sum(v - begin.get(q, 0) for q, v in latest.items())
            end = latest if backlog >= int(limit.min_rows) else {**latest, **begin}
        else:  # ReadAllAvailable; byte and file limits do not apply to a message queue
            end = latest
        return self.source.encode(end)

    def reportLatestOffset(self) -> dict[str, int]:
        return self.source.encode(self._latest())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return self.source.partitions(self.source.decode(start), self.source.decode(end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        invariant(isinstance(partition, TxmqPartition), "txmq reads only its own partitions")
        return read_partition(partition)  # type: ignore[arg-type]

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the offsets live in Spark's checkpoint, not on the broker."""

    def stop(self) -> None:
        """No connection outlives a call."""


class TxmqDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("txmq")``. Options: docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "txmq"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return TxmqBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TxmqStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from txmq.spark.sink import TxmqBatchWriter  # the sink imports this module

        return TxmqBatchWriter(self.options, schema, overwrite=overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from txmq.spark.sink import TxmqStreamWriter

        return TxmqStreamWriter(self.options, schema, overwrite=overwrite)
