"""Record codec: RecordDraft/Record <-> bytes. Pure: no I/O, no clock.

Owns the commit-log record layout (documented in docs/formats.md). Every record is checked right
before it is written (``encode`` re-validates what it produced) and right after it is read
(``decode`` checks size, magic and CRC), TigerStyle's paired assertions.

Layout, big-endian::

    0  total_size   u32   whole record, header included
    4  magic        u32   RECORD_MAGIC, or BLANK_MAGIC for the end-of-segment filler
    8  crc          u32   crc32c of bytes [12, total_size)
    12 flag         u8    TxnFlag
    13 queue_id     u16
    15 queue_offset i64   -1 for records outside any consume queue (PREPARED, ROLLBACK)
    23 physical_off i64
    31 born_ts_ms   i64
    39 store_ts_ms  i64
    47 reconsume    u32
    51 prepared_off i64   -1 unless a COMMIT/ROLLBACK deciding a half record
    59 topic        u16 length + utf-8
       born_host    u16 length + utf-8
       message_id   u16 length + utf-8
       tag          u16 length + utf-8
       keys         u16 length + utf-8 JSON list
       properties   u32 length + utf-8 JSON object
       body         u32 length + bytes
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

import crc32c

from txmq import limits
from txmq.errors import (
    CorruptRecordError,
    IllegalKeyError,
    IllegalTagError,
    IllegalTopicError,
    MessageBodyTooLargeError,
    MessagePropertiesTooLargeError,
    invariant,
)
from txmq.model import Record, RecordDraft, TxnFlag

RECORD_MAGIC: Final = 0xDAA320A7
BLANK_MAGIC: Final = 0xCBD43194
_HEAD = struct.Struct(">III")  # total_size, magic, crc
_FIXED = struct.Struct(">BHqqqqIq")  # flag, queue_id, queue_offset, phys, born, store, recon, prep
HEAD_SIZE: Final = _HEAD.size
FIXED_END: Final = _HEAD.size + _FIXED.size
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
# Smallest well-formed record: fixed header + five empty u16 strings + two empty u32 blocks.
RECORD_SIZE_MIN: Final = FIXED_END + 5 * 2 + 2 * 4


def validate_draft(draft: RecordDraft, *, body_size_max: int) -> None:
    """Raise a typed input error if the draft cannot be stored. Nothing is written on error."""
    if len(draft.body) > body_size_max:
        raise MessageBodyTooLargeError(len(draft.body), body_size_max)
    if not draft.topic or len(draft.topic) > limits.TOPIC_NAME_LENGTH_MAX:
        raise IllegalTopicError(f"topic name must be 1..{limits.TOPIC_NAME_LENGTH_MAX} characters")
    if len(draft.tag) > limits.TAG_LENGTH_MAX:
        raise IllegalTagError(f"tag is longer than {limits.TAG_LENGTH_MAX} characters")
    if len(draft.keys) > limits.KEYS_PER_MESSAGE_MAX:
        raise IllegalKeyError(f"more than {limits.KEYS_PER_MESSAGE_MAX} keys")
    for key in draft.keys:
        if not key or len(key) > limits.KEY_LENGTH_MAX:
            raise IllegalKeyError(f"each key must be 1..{limits.KEY_LENGTH_MAX} characters")
    invariant(0 <= draft.queue_id < 65536, "queue id out of range")


def encode(draft: RecordDraft, *, queue_offset: int, store_timestamp_ms: int) -> bytearray:
    """Encode a draft with its queue offset; the physical offset is filled in by ``place``.

    Why two steps: the physical offset is known only once the log has reserved room for a
    record of this size, and the size is known only after encoding.
    """
    strings = [
        draft.topic.encode(),
        draft.born_host.encode()[: limits.BORN_HOST_LENGTH_MAX],
        draft.message_id.encode(),
        draft.tag.encode(),
        json.dumps(list(draft.keys), separators=(",", ":")).encode(),
    ]
    props = json.dumps(dict(draft.properties), separators=(",", ":")).encode()
    if len(props) > limits.PROPERTIES_SIZE_MAX:
        raise MessagePropertiesTooLargeError(len(props), limits.PROPERTIES_SIZE_MAX)
    parts = [
        bytes(_HEAD.size),
        _FIXED.pack(
            int(draft.flag),
            draft.queue_id,
            queue_offset,
            -1,
            draft.born_timestamp_ms,
            store_timestamp_ms,
            draft.reconsume_times,
            draft.prepared_offset,
        ),
    ]
    for s in strings:
        invariant(len(s) < 65536, "string field too long for u16 length")
        parts.append(_U16.pack(len(s)))
        parts.append(s)
    parts += [_U32.pack(len(props)), props, _U32.pack(len(draft.body)), draft.body]
    buf = bytearray(b"".join(parts))
    invariant(len(buf) <= limits.RECORD_SIZE_MAX, "record exceeds RECORD_SIZE_MAX")
    return buf


_PHYS_AT = HEAD_SIZE + 1 + 2 + 8


def place(buf: bytearray, physical_offset: int) -> bytes:
    """Fill in the physical offset, size, magic and CRC; returns the bytes to write."""
    invariant(physical_offset >= 0, "negative physical offset")
    struct.pack_into(">q", buf, _PHYS_AT, physical_offset)
    crc = crc32c.crc32c(memoryview(buf)[HEAD_SIZE:])
    _HEAD.pack_into(buf, 0, len(buf), RECORD_MAGIC, crc)
    # Paired check (write side): the header we produced must parse back to itself.
    size, magic, _ = _HEAD.unpack_from(buf, 0)
    invariant(size == len(buf) and magic == RECORD_MAGIC, "record header mismatch")
    return bytes(buf)


def blank(size: int) -> bytes:
    """End-of-segment filler: tells readers the rest of the segment is unused."""
    invariant(size >= HEAD_SIZE, "blank filler smaller than a header")
    return _HEAD.pack(size, BLANK_MAGIC, 0) + bytes(size - HEAD_SIZE)


def peek(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """Return (total_size, magic) of the record starting at ``pos`` in ``buf``."""
    size, magic, _ = _HEAD.unpack_from(buf, pos)
    return size, magic


def decode(buf: bytes | memoryview, physical_offset: int) -> Record:
    """Decode and verify one record; ``buf`` starts at the record.

    Raises:
        CorruptRecordError: bad size, magic, CRC or field lengths.
    """
    if len(buf) < HEAD_SIZE:
        raise CorruptRecordError(physical_offset, "truncated header")
    total, magic, crc = _HEAD.unpack_from(buf, 0)
    if magic != RECORD_MAGIC:
        raise CorruptRecordError(physical_offset, f"bad magic {magic:#x}")
    if not RECORD_SIZE_MIN <= total <= limits.RECORD_SIZE_MAX or total > len(buf):
        raise CorruptRecordError(physical_offset, f"bad size {total}")
    view = memoryview(buf)[:total]
    if crc32c.crc32c(view[HEAD_SIZE:]) != crc:
        raise CorruptRecordError(physical_offset, "CRC mismatch")
    try:
        return _decode_fields(view, total, physical_offset)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise CorruptRecordError(physical_offset, f"bad field: {exc}") from exc


def _decode_fields(view: memoryview, total: int, physical_offset: int) -> Record:
    flag, qid, qoff, phys, born, store, recon, prep = _FIXED.unpack_from(view, HEAD_SIZE)
    if phys != physical_offset:
        raise CorruptRecordError(physical_offset, f"stored physical offset {phys} differs")
    pos = FIXED_END
    strings: list[str] = []
    for _ in range(5):
        (n,) = _U16.unpack_from(view, pos)
        pos += 2
        strings.append(bytes(view[pos : pos + n]).decode())
        pos += n
    (n,) = _U32.unpack_from(view, pos)
    pos += 4
    props_raw = json.loads(bytes(view[pos : pos + n]))
    pos += n
    (n,) = _U32.unpack_from(view, pos)
    pos += 4
    body = bytes(view[pos : pos + n])
    pos += n
    if pos != total or len(body) != n:
        raise CorruptRecordError(physical_offset, "field lengths do not add up")
    keys = json.loads(strings[4])
    if not isinstance(keys, list) or not isinstance(props_raw, dict):
        raise CorruptRecordError(physical_offset, "keys/properties have the wrong shape")
    properties: Mapping[str, str] = MappingProxyType({str(k): str(v) for k, v in props_raw.items()})
    return Record(
        topic=strings[0],
        queue_id=qid,
        queue_offset=qoff,
        physical_offset=phys,
        size=total,
        flag=TxnFlag(flag),
        store_timestamp_ms=store,
        born_timestamp_ms=born,
        born_host=strings[1],
        reconsume_times=recon,
        prepared_offset=prep,
        message_id=strings[2],
        tag=strings[3],
        keys=tuple(str(k) for k in keys),
        properties=properties,
        body=body,
    )


def enters_queue(flag: TxnFlag) -> bool:
    """Only NORMAL and COMMIT records are dispatched to consume queues."""
    return flag in (TxnFlag.NORMAL, TxnFlag.COMMIT)
