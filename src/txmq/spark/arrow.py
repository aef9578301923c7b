"""Wire messages -> pyarrow RecordBatches with the source's exact schema.

Owns: the read schema (as Spark DDL and as Arrow; they must describe the same columns, which
tests/spark checks) and the conversion. Must not: talk to the broker or import pyspark.
Timestamps are microseconds in UTC, which is how Spark's TimestampType travels in Arrow.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

import pyarrow as pa

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


def _micros(ts: Any) -> int:
    return int(ts.seconds) * 1_000_000 + int(ts.nanos) // 1000


class _Columns:
    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = {name: [] for name in ARROW_SCHEMA.names}
        self.rows = 0
        self.body_bytes = 0

    def add(self, m: Any) -> None:
        sp = m.system_properties
        c = self.cols
        c["topic"].append(m.topic.name)
        c["queue_id"].append(sp.queue_id)
        c["queue_offset"].append(sp.queue_offset)
        c["message_id"].append(sp.message_id)
        c["keys"].append(list(sp.keys))
        c["tag"].append(sp.tag or None)  # no tag reads as null, not ""
        c["properties"].append(list(m.user_properties.items()))
        c["body"].append(m.body)
        c["born_timestamp"].append(_micros(sp.born_timestamp))
        c["store_timestamp"].append(_micros(sp.store_timestamp))
        self.rows += 1
        self.body_bytes += len(m.body)

    def full(self) -> bool:
        return self.rows >= ROWS_PER_BATCH_MAX or self.body_bytes >= BATCH_BYTES_MAX

    def batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict(self.cols, schema=ARROW_SCHEMA)


def to_batches(messages: Iterable[Any]) -> Iterator[pa.RecordBatch]:
    """Bounded RecordBatches of the messages, in order; nothing for no messages."""
    cols = _Columns()
    for m in messages:
        cols.add(m)
        if cols.full():
            yield cols.batch()
            cols = _Columns()
    if cols.rows:
        yield cols.batch()
