"""The source's read schema, as Spark DDL and as Arrow, and how properties become a column.

Owns: the schema (both forms must describe the same columns, which tests/spark checks), the
batch bounds and ``properties_column``; txmq.spark.columnar decodes pulled records into batches
of this schema. Must not: talk to the broker or import pyspark. Timestamps are microseconds in
UTC, which is how Spark's TimestampType travels in Arrow.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final

import pyarrow as pa

from txmq import limits
from txmq.model import is_internal_property

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


_EMPTY_PROPERTIES: Final = (b"{}", b"")


def _properties(raw: bytes, cache: dict[bytes, list[tuple[str, str]]]) -> list[tuple[str, str]]:
    """Only the user's properties: the broker's own (transaction, delay, group) stay out, as in
    the v2 Message a consumer receives."""
    if raw in _EMPTY_PROPERTIES:
        return []
    got = cache.get(raw)
    if got is None:
        items = json.loads(raw.decode()).items()
        got = [(str(k), str(v)) for k, v in items if not is_internal_property(k)]
        if len(cache) < limits.SPARK_PROPERTIES_CACHE_MAX:
            cache[raw] = got
    return got


def properties_column(raw: Iterable[bytes]) -> pa.Array:
    """The properties column from each record's properties JSON."""
    cache: dict[bytes, list[tuple[str, str]]] = {}
    return pa.array(
        [_properties(p, cache) for p in raw], type=ARROW_SCHEMA.field("properties").type
    )
