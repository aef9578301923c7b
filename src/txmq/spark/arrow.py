"""Queue records -> pyarrow RecordBatches with the source's exact schema.

Owns: the read schema (as Spark DDL and as Arrow; they must describe the same columns, which
tests/spark checks) and the conversion. Must not: talk to the broker or import pyspark.
Timestamps are microseconds in UTC, which is how Spark's TimestampType travels in Arrow.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

import pyarrow as pa

from txmq.model import Record
from txmq.protocol.mapping import is_internal_property

SCHEMA_DDL: Final = (
    "topic string, queue_id int, queue_offset long, message_id string, keys array<string>, "
    "tag string, properties map<string,string>, body binary, born_timestamp timestamp, "
    "store_timestamp timestamp"
)
ARROW_SCHEMA: Final = pa.schema(
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
# Rows per RecordBatch handed to Spark: large enough to amortise Arrow's per-batch cost, small
# enough that a batch of 4 MiB bodies stays bounded in memory (Spark copies each batch).
ROWS_PER_BATCH_MAX: Final = 4096
BATCH_BYTES_MAX: Final = 64 * 1024 * 1024


class _Columns:
    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = {name: [] for name in ARROW_SCHEMA.names}
        self.rows = 0
        self.body_bytes = 0

    def add(self, rec: Record) -> None:
        c = self.cols
        c["topic"].append(rec.topic)
        c["queue_id"].append(rec.queue_id)
        c["queue_offset"].append(rec.queue_offset)
        c["message_id"].append(rec.message_id)
        c["keys"].append(list(rec.keys))
        c["tag"].append(rec.tag or None)  # no tag reads as null, not ""
        # Only the user's properties: the broker's own (transaction, delay, group) stay out,
        # as in the v2 Message a consumer receives.
        c["properties"].append(
            [(k, v) for k, v in rec.properties.items() if not is_internal_property(k)]
        )
        c["body"].append(rec.body)
        # A message without a born time reads as born when stored, as consumers see it.
        c["born_timestamp"].append((rec.born_timestamp_ms or rec.store_timestamp_ms) * 1000)
        c["store_timestamp"].append(rec.store_timestamp_ms * 1000)
        self.rows += 1
        self.body_bytes += len(rec.body)

    def full(self) -> bool:
        return self.rows >= ROWS_PER_BATCH_MAX or self.body_bytes >= BATCH_BYTES_MAX

    def batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict(self.cols, schema=ARROW_SCHEMA)


def to_batches(records: Iterable[Record]) -> Iterator[pa.RecordBatch]:
    """Bounded RecordBatches of the records, in order; nothing for no records."""
    cols = _Columns()
    for rec in records:
        cols.add(rec)
        if cols.full():
            yield cols.batch()
            cols = _Columns()
    if cols.rows:
        yield cols.batch()
