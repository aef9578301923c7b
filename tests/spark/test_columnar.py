"""The columnar decoder (txmq.spark.columnar) against the per-row one.

Goal: a pulled blob decodes to exactly the batch the obviously-right path builds
(``record.split``, the full decoder, then ``pa.RecordBatch.from_pydict`` cell by cell, the
broker's own properties left out), for any records the store accepts, and anything cut,
altered or inconsistent is refused as CorruptRecordError, never decoded into wrong rows.
Method: hypothesis drafts (the record codec's strategy) encoded as a record pull sends them;
hand-made corruptions, including a record whose CRC is recomputed over a wrong field length
(the case the CRC cannot catch).
"""

from __future__ import annotations

import struct

import crc32c
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_format_record import drafts
from txmq.errors import CorruptRecordError
from txmq.format import record as codec
from txmq.model import RecordDraft, is_internal_property
from txmq.spark.arrow import ARROW_SCHEMA
from txmq.spark.columnar import to_batch


def blob_of(drafts: list[RecordDraft], first_phys: int = 0) -> bytes:
    out, at = [], first_phys
    for i, d in enumerate(drafts):
        buf = codec.encode(d, queue_offset=i, store_timestamp_ms=1_700_000_000_000 + i)
        out.append(bytes(codec.place(buf, at, batch_left=0)))
        at += len(buf)
    return b"".join(out)


def oracle(blob: bytes) -> pa.RecordBatch:
    """The obviously-right path: the full per-record decoder (``record.split``), then one
    Python object per cell."""
    recs = list(codec.split(blob))
    cols = {
        "topic": [r.topic for r in recs],
        "queue_id": [r.queue_id for r in recs],
        "queue_offset": [r.queue_offset for r in recs],
        "message_id": [r.message_id for r in recs],
        "keys": [list(r.keys) for r in recs],
        "tag": [r.tag or None for r in recs],
        "properties": [
            [(k, v) for k, v in r.properties.items() if not is_internal_property(k)] for r in recs
        ],
        "body": [r.body for r in recs],
        "born_timestamp": [(r.born_timestamp_ms or r.store_timestamp_ms) * 1000 for r in recs],
        "store_timestamp": [r.store_timestamp_ms * 1000 for r in recs],
    }
    return pa.RecordBatch.from_pydict(cols, schema=ARROW_SCHEMA)


@settings(max_examples=150, deadline=None)
@given(st.lists(drafts, max_size=12), st.integers(0, 2**40))
def test_columnar_equals_the_row_path(batch: list[RecordDraft], phys: int) -> None:
    blob = blob_of(batch, phys)
    got = to_batch(blob)
    assert got.schema == ARROW_SCHEMA
    assert got.equals(oracle(blob))
    assert got.num_rows == len(batch)


def test_common_shapes_take_the_fast_paths() -> None:
    # One key or none, no properties, bodies long enough for the slice join, ids for the gather.
    batch = [
        RecordDraft(topic="orders", queue_id=3, body=b"b" * (200 + i), keys=(f"k{i}",) * (i % 2),
                    message_id=f"{i:032x}", tag="t" if i % 3 else "")
        for i in range(300)
    ]  # fmt: skip
    blob = blob_of(batch)
    got = to_batch(blob)
    assert got.equals(oracle(blob))
    assert got.column("tag").null_count == 100
    assert got.column("keys").to_pylist()[:2] == [[], ["k1"]]
    assert got.column("properties").to_pylist()[0] == []


def test_empty_blob_is_an_empty_batch() -> None:
    got = to_batch(b"")
    assert got.num_rows == 0 and got.schema == ARROW_SCHEMA


def _reseal(rec: bytearray) -> bytes:
    """Recompute a record's CRC after an edit, as a buggy writer would have stored it."""
    struct.pack_into(">I", rec, 8, crc32c.crc32c(bytes(rec[codec.HEAD_SIZE :])))
    return bytes(rec)


def test_cut_altered_and_inconsistent_blobs_are_refused() -> None:
    blob = blob_of([RecordDraft(topic="t", queue_id=0, body=b"x" * 50, message_id=f"m{i}")
                    for i in range(3)])  # fmt: skip
    size = len(blob) // 3
    with pytest.raises(CorruptRecordError):
        to_batch(blob[:-1])  # ends inside a record
    with pytest.raises(CorruptRecordError):
        to_batch(blob + b"\0" * 10)  # stray bytes
    flipped = bytearray(blob)
    flipped[size + 70] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        to_batch(bytes(flipped))
    # A topic length one too long, CRC recomputed: only the lengths check can catch it.
    rec = bytearray(blob[:size])
    struct.pack_into(">H", rec, codec.FIXED_END, 2)
    with pytest.raises(CorruptRecordError, match=r"lengths|runs past"):
        to_batch(_reseal(rec) + blob[size:])
    # A message id that is not UTF-8, CRC recomputed.
    rec = bytearray(blob[:size])
    mid_at = rec.index(b"m0")
    rec[mid_at] = 0xFF
    with pytest.raises(CorruptRecordError, match="text"):
        to_batch(_reseal(rec) + blob[size:])
