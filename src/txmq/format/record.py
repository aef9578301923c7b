"""Record codec: RecordDraft/Record <-> bytes. Pure: no I/O, no clock, no threads.

Owns the commit-log record layout (documented in docs/formats.md). Every record is checked right
before it is written (``place`` re-reads the header it produced) and right after it is read
(``decode``/``decode_entry`` check size, magic, CRC, the stored physical offset and that the field
lengths add up), TigerStyle's paired assertions.

Layout, big-endian::

    0  total_size   u32   whole record, header included
    4  magic        u32   RECORD_MAGIC, or BLANK_MAGIC for the end-of-segment filler
    8  crc          u32   CRC-32C of bytes [12, total_size)
    12 flag         u8    TxnFlag
    13 batch_left   u16   records after this one in the same append_many batch (0 = last)
    15 queue_id     u16
    17 queue_offset i64   -1 for records outside any consume queue (PREPARED, ROLLBACK)
    25 physical_off i64
    33 born_ts_ms   i64
    41 store_ts_ms  i64
    49 reconsume    u32
    53 prepared_off i64   -1 unless a COMMIT/ROLLBACK deciding a half record
    61 topic        u16 length + utf-8
       born_host    u16 length + utf-8
       message_id   u16 length + utf-8
       tag          u16 length + utf-8
       keys         u16 length + utf-8, keys joined by NUL
       properties   u32 length + utf-8 JSON object
       body         u32 length + bytes
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Final

import crc32c

from txmq import limits
from txmq.errors import (
    BadRequestError,
    CorruptRecordError,
    IllegalKeyError,
    IllegalTagError,
    IllegalTopicError,
    MessageBodyTooLargeError,
    MessagePropertiesTooLargeError,
    invariant,
)
from txmq.format.properties import properties_json, properties_value
from txmq.model import Entry as Entry  # named codec.Entry by its users (it was defined here)
from txmq.model import Record, RecordDraft, TxnFlag

RECORD_MAGIC: Final = 0xDAA320A8
BLANK_MAGIC: Final = 0xCBD43194
_HEAD = struct.Struct(">III")  # total_size, magic, crc
# The fixed fields after the head, in layout order: (name, struct code). The struct and every
# named offset below are derived from this one table, so a reader that picks single fields out
# of a record (txmq.spark.columnar, through the named offsets) cannot drift from the writer.
_FIXED_FIELDS: Final = (
    ("flag", "B"),
    ("batch_left", "H"),
    ("queue_id", "H"),
    ("queue_offset", "q"),
    ("physical_offset", "q"),
    ("born_timestamp_ms", "q"),
    ("store_timestamp_ms", "q"),
    ("reconsume_times", "I"),
    ("prepared_offset", "q"),
)
_FIXED = struct.Struct(">" + "".join(code for _, code in _FIXED_FIELDS))
HEAD_SIZE: Final = _HEAD.size
FIXED_END: Final = _HEAD.size + _FIXED.size
# Where each fixed field starts, from the record's first byte ("no padding" with ">").
FIELD_AT: Final = MappingProxyType(
    {
        name: HEAD_SIZE + struct.calcsize(">" + "".join(c for _, c in _FIXED_FIELDS[:i]))
        for i, (name, _) in enumerate(_FIXED_FIELDS)
    }
)
FLAG_AT: Final = FIELD_AT["flag"]
BATCH_LEFT_AT: Final = FIELD_AT["batch_left"]
QUEUE_ID_AT: Final = FIELD_AT["queue_id"]
QUEUE_OFFSET_AT: Final = FIELD_AT["queue_offset"]
PHYSICAL_OFFSET_AT: Final = FIELD_AT["physical_offset"]
BORN_TIMESTAMP_AT: Final = FIELD_AT["born_timestamp_ms"]
STORE_TIMESTAMP_AT: Final = FIELD_AT["store_timestamp_ms"]
# Then, from FIXED_END: STRING_FIELDS u16-length strings, then two u32-length blocks.
STRING_FIELDS: Final = 5
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
# Smallest well-formed record: fixed header + five empty u16 strings + two empty u32 blocks.
RECORD_SIZE_MIN: Final = FIXED_END + STRING_FIELDS * 2 + 2 * 4
_FLAGS: Final = tuple(TxnFlag)
# Bound once for encode and place: no attribute lookup per call (~28 calls a transaction).
_PACK_FIXED: Final = _FIXED.pack
_PACK_U16: Final = _U16.pack
_PACK_U32: Final = _U32.pack
_U16_INTO: Final = _U16.pack_into
_I64_INTO: Final = _I64.pack_into
_PACK_HEAD: Final = _HEAD.pack
_HEAD_FROM: Final = _HEAD.unpack_from
_CRC: Final = crc32c.crc32c
# Short u16 lengths packed once (a tuple index, not a pack call, per string field), and the
# record joined straight into the bytearray ``place`` fills in, not joined then copied.
_U16_SHORT: Final = tuple(_U16.pack(n) for n in range(256))
_BYTEARRAY_JOIN: Final = bytearray().join


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
        if not key or len(key) > limits.KEY_LENGTH_MAX or "\0" in key:
            raise IllegalKeyError(f"each key must be 1..{limits.KEY_LENGTH_MAX} characters, no NUL")
    if not 0 <= draft.queue_id < limits.QUEUES_PER_TOPIC_MAX:
        raise IllegalTopicError(f"queue id must be 0..{limits.QUEUES_PER_TOPIC_MAX - 1}")
    if not 0 <= draft.born_timestamp_ms <= limits.BORN_TIMESTAMP_MS_MAX:
        raise BadRequestError(
            f"born timestamp {draft.born_timestamp_ms} ms is outside 0..year 9999"
        )


def encode(draft: RecordDraft, *, queue_offset: int, store_timestamp_ms: int) -> bytearray:
    """Encode a draft with its queue offset, all but the head (size, magic, CRC: the record
    is ``HEAD_SIZE`` bytes longer); ``place`` fills in position, size and CRC.

    Why two steps: the physical offset is known only once the log has reserved room for a
    record of this size, and the size is known only after encoding.

    Raises:
        MessagePropertiesTooLargeError: the properties block exceeds PROPERTIES_SIZE_MAX.
        BadRequestError: a text field holds a lone surrogate (not encodable as UTF-8).
    """
    try:
        topic = draft.topic.encode()
        host = draft.born_host.encode()[: limits.BORN_HOST_LENGTH_MAX]
        message_id = draft.message_id.encode()
        tag = draft.tag.encode()
        keys = "\0".join(draft.keys).encode()  # validate_draft refuses a NUL inside a key
    except UnicodeEncodeError as exc:
        # Only a str built in Python can hold a lone surrogate (protobuf strings cannot), but
        # the store is a library too: refuse it as input, never as a crash.
        raise BadRequestError(f"a text field is not encodable as UTF-8: {exc}") from exc
    properties, props = draft.properties, draft.properties_block  # the builder's encoding
    if not props:  # (a half and its commit have one, txn/records.py), else encoded here
        props = properties_json(properties if type(properties) is dict else dict(properties))
    if len(props) > limits.PROPERTIES_SIZE_MAX:
        raise MessagePropertiesTooLargeError(len(props), limits.PROPERTIES_SIZE_MAX)
    parts = (  # one join of a fixed tuple: no appends, no loop
        _PACK_FIXED(draft.flag, 0, draft.queue_id, queue_offset, -1, draft.born_timestamp_ms,
                    store_timestamp_ms, draft.reconsume_times, draft.prepared_offset),
        _len16(topic), topic, _len16(host), host, _len16(message_id), message_id, _len16(tag), tag,
        _len16(keys), keys, _PACK_U32(len(props)), props, _PACK_U32(len(draft.body)), draft.body,
    )  # fmt: skip
    buf = _BYTEARRAY_JOIN(parts)
    invariant(len(buf) + HEAD_SIZE <= limits.RECORD_SIZE_MAX, "record exceeds RECORD_SIZE_MAX")
    return buf


def _len16(field: bytes) -> bytes:
    """The u16 length prefix of a string field."""
    n = len(field)
    invariant(n < 65536, "string field too long for a u16 length")
    return _U16_SHORT[n] if n < 256 else _PACK_U16(n)


def place(buf: bytearray, physical_offset: int, *, batch_left: int = 0) -> bytes:
    """Fill in the physical offset and batch position of what ``encode`` returned; return the
    record: its head (size, magic, CRC) and ``buf``.

    Why the head apart: the CRC covers everything after it, so computed over ``buf`` itself it
    needs no view or slice, and the head joined in front is the one copy out."""
    invariant(physical_offset >= 0, "negative physical offset")
    invariant(0 <= batch_left < 65536, "batch too long for a u16 count")
    if batch_left:  # ``encode`` wrote 0
        _U16_INTO(buf, BATCH_LEFT_AT - HEAD_SIZE, batch_left)
    _I64_INTO(buf, PHYSICAL_OFFSET_AT - HEAD_SIZE, physical_offset)
    out: bytes = _PACK_HEAD(len(buf) + HEAD_SIZE, RECORD_MAGIC, _CRC(buf)) + buf
    # Paired check, write side: what we produced must verify the way a reader verifies it.
    size, magic, stored = _HEAD_FROM(out, 0)
    invariant(size == len(out) and magic == RECORD_MAGIC, "record header mismatch")
    invariant(stored == _CRC(buf), "record CRC mismatch")
    return out


def blank(size: int) -> bytes:
    """The end-of-segment blank's header: it claims the last ``size`` bytes of a segment as
    unused. Only the header is written (the span it claims is never written, so sealing a
    segment costs a 12-byte write inside space reserved for it; ADR 0003)."""
    invariant(size >= HEAD_SIZE, "blank filler smaller than a header")
    return _HEAD.pack(size, BLANK_MAGIC, 0)


def peek(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Return (total_size, magic) of the record starting at ``pos`` in ``buf``."""
    size, magic, _ = _HEAD.unpack_from(buf, pos)
    return size, magic


def _check(buf: bytes | bytearray | memoryview, pos: int, physical_offset: int) -> int:
    """Verify header, size bound and CRC of the record at ``pos``; return its size."""
    if len(buf) - pos < HEAD_SIZE:
        raise CorruptRecordError(physical_offset, "truncated header")
    total, magic, crc = _HEAD.unpack_from(buf, pos)
    if magic != RECORD_MAGIC:
        raise CorruptRecordError(physical_offset, f"bad magic {magic:#x}")
    if not RECORD_SIZE_MIN <= total <= limits.RECORD_SIZE_MAX or total > len(buf) - pos:
        raise CorruptRecordError(physical_offset, f"bad size {total}")
    if crc32c.crc32c(memoryview(buf)[pos + HEAD_SIZE : pos + total]) != crc:
        raise CorruptRecordError(physical_offset, "CRC mismatch")
    return int(total)


def _strings(view: memoryview, pos: int, end: int, physical_offset: int) -> tuple[list[str], int]:
    """The five u16-length strings starting at ``pos``, and the position after them."""
    out: list[str] = []
    for _ in range(STRING_FIELDS):
        (n,) = _U16.unpack_from(view, pos)
        pos += 2
        if pos + n > end:
            raise CorruptRecordError(physical_offset, "string field runs past the record")
        out.append(str(view[pos : pos + n], "utf-8"))
        pos += n
    return out, pos


def _routing_strings(
    buf: bytes | bytearray | memoryview, at: int
) -> tuple[str, str, str, tuple[str, ...], int]:
    """(topic, message id, tag, keys, position after them) of the string fields starting at
    ``at``, the born host skipped: the flat decoders' shared part. Bounds are the caller's
    check that the field lengths add up (and the CRC's)."""
    u16 = _U16.unpack_from
    n = u16(buf, at)[0]
    topic = str(buf[at + 2 : at + 2 + n], "utf-8")
    at += 2 + n
    at += 2 + u16(buf, at)[0]  # born host
    n = u16(buf, at)[0]
    message_id = str(buf[at + 2 : at + 2 + n], "utf-8")
    at += 2 + n
    n = u16(buf, at)[0]
    tag = str(buf[at + 2 : at + 2 + n], "utf-8")
    at += 2 + n
    n = u16(buf, at)[0]
    keys = _split_keys(bytes(buf[at + 2 : at + 2 + n]))
    return topic, message_id, tag, keys, at + 2 + n


def decode_entry(buf: bytes | bytearray | memoryview, pos: int, physical_offset: int) -> Entry:
    """Verify the record at ``buf[pos:]`` and return its dispatch fields without the body.

    Recovery's fast path (one call per record, so it is written flat): no properties, no body
    copy, born host skipped. Per-string bounds are covered by the CRC and by the final check
    that the field lengths add up to the record size.

    Raises:
        CorruptRecordError: bad size, magic, CRC, offset or field lengths.
    """
    total = _check(buf, pos, physical_offset)
    u32 = _U32.unpack_from
    try:
        flag, batch, qid, qoff, phys, _born, store, _rc, _prep = _FIXED.unpack_from(
            buf, pos + HEAD_SIZE
        )
        if phys != physical_offset:
            raise CorruptRecordError(physical_offset, f"stored physical offset {phys} differs")
        topic, message_id, tag, keys, at = _routing_strings(buf, pos + FIXED_END)
        at += 4 + u32(buf, at)[0]  # properties
        if at + 4 + u32(buf, at)[0] != pos + total:
            raise CorruptRecordError(physical_offset, "field lengths do not add up")
        return Entry(
            phys, total, _FLAGS[flag], batch, topic, qid, qoff, store, tag, message_id, keys
        )
    except (struct.error, UnicodeDecodeError, ValueError, IndexError) as exc:
        raise CorruptRecordError(physical_offset, f"bad field: {exc}") from exc


def verify(buf: bytes | bytearray | memoryview, physical_offset: int) -> int:
    """Verify the whole record ``buf`` holds (size, magic, CRC, stored physical offset) without
    decoding its fields; return its size. For readers that pass records on as bytes.

    Raises:
        CorruptRecordError: bad size, magic, CRC or offset, or ``buf`` is not exactly a record.
    """
    total = _check(buf, 0, physical_offset)
    (phys,) = _I64.unpack_from(buf, PHYSICAL_OFFSET_AT)
    if phys != physical_offset:
        raise CorruptRecordError(physical_offset, f"stored physical offset {phys} differs")
    if total != len(buf):
        raise CorruptRecordError(physical_offset, f"record of {total} bytes in {len(buf)}")
    return total


def split(blob: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Decode and verify records packed back to back, as a record pull sends them.

    Each record names its own physical offset; the CRC covers it, so a record cut short or
    spliced in the middle still fails verification.

    Raises:
        CorruptRecordError: a record fails verification or the blob ends inside one.
    """
    view = memoryview(blob)
    pos, end = 0, len(view)
    while pos < end:
        if end - pos < FIXED_END:
            raise CorruptRecordError(-1, f"{end - pos} stray bytes after the last record")
        (phys,) = _I64.unpack_from(view, pos + PHYSICAL_OFFSET_AT)
        (total,) = _U32.unpack_from(view, pos)
        if not RECORD_SIZE_MIN <= total <= end - pos:
            raise CorruptRecordError(phys, f"bad size {total}")
        yield decode(view[pos : pos + total], phys)  # checks magic, CRC and fields
        pos += total


def split_verified(
    blob: bytes | memoryview,
) -> Iterator[tuple[int, str, str, tuple[str, ...], dict[str, str], bytes]]:
    """(born_timestamp_ms, message id, tag, keys, properties, body) of records packed back to back
    that ``split`` already verified (a bundle half: each record checked when it was prepared,
    the half's own CRC on every read). Skips the CRCs and the Record objects: a bundle's commit
    reads ~850 records per MiB on the decision's critical path.

    Raises CorruptRecordError on sizes or fields that do not add up (never loops forever)."""
    view = memoryview(blob)
    pos, end = 0, len(view)
    try:
        while pos < end:
            (total,) = _U32.unpack_from(view, pos)
            if not RECORD_SIZE_MIN <= total <= end - pos:
                raise CorruptRecordError(-1, f"bad size {total} in verified records")
            (born,) = _I64.unpack_from(view, pos + BORN_TIMESTAMP_AT)
            strings, at = _strings(view, pos + FIXED_END, pos + total, -1)
            (n,) = _U32.unpack_from(view, at)
            props = properties_value(view[at + 4 : at + 4 + n]) if n > 2 else {}
            at += 4 + n
            (n,) = _U32.unpack_from(view, at)
            if at + 4 + n != pos + total or not isinstance(props, dict):
                raise CorruptRecordError(-1, "fields of a verified record do not add up")
            keys = tuple(strings[4].split("\0")) if strings[4] else ()  # as _split_keys
            yield born, strings[2], strings[3], keys, props, bytes(view[at + 4 : at + 4 + n])
            pos += total
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise CorruptRecordError(-1, f"bad field in verified records: {exc}") from exc


def verify_spans(view: memoryview, base: int, spans: Sequence[tuple[int, int]]) -> list[memoryview]:
    """``verify`` for each ``(physical offset, size)`` record inside ``view``, which holds the
    log from offset ``base``; returns each record's slice. Inline for the bulk reader, where a
    call per record would cost more than the CRC.

    Raises:
        CorruptRecordError: as ``verify``, for the first bad record.
    """
    head = _HEAD.unpack_from
    i64 = _I64.unpack_from
    crc = crc32c.crc32c
    out: list[memoryview] = []
    for at, size in spans:
        pos = at - base
        rec = view[pos : pos + size]
        if len(rec) < FIXED_END:
            verify(rec, at)  # raises, naming what is wrong
        total, magic, want = head(rec, 0)
        if (
            magic != RECORD_MAGIC
            or total != size
            or total < RECORD_SIZE_MIN
            or i64(rec, PHYSICAL_OFFSET_AT)[0] != at
            or crc(rec[HEAD_SIZE:]) != want
        ):
            verify(rec, at)
            invariant(False, "verify passed a record verify_spans refused")
        out.append(rec)
    return out


def frames(blob: bytes | bytearray | memoryview) -> list[int]:
    """Where each record packed back to back starts (each ends where the next starts, the last
    at the blob's end), each verified as a whole (size bound, magic, CRC over its bytes) but not
    decoded: for a columnar decoder that reads the fields of many records at once
    (txmq.spark.columnar, through the named offsets), which must still check that each
    record's field lengths add up.

    Why inline rather than ``_check`` per record: this loop is the only per-record Python work
    left on a Spark read, and a call per record would double it.

    Raises:
        CorruptRecordError: a record fails verification or the blob ends inside one.
    """
    view = memoryview(blob)
    head = _HEAD.unpack_from
    crc = crc32c.crc32c
    size_max = limits.RECORD_SIZE_MAX
    starts: list[int] = []
    pos, end = 0, len(view)
    while pos < end:
        if end - pos < FIXED_END:
            raise CorruptRecordError(-1, f"{end - pos} stray bytes after the last record")
        total, magic, want = head(view, pos)
        after = pos + total
        if (
            magic != RECORD_MAGIC
            or total < RECORD_SIZE_MIN
            or total > size_max
            or after > end
            or crc(view[pos + HEAD_SIZE : after]) != want
        ):
            (phys,) = _I64.unpack_from(view, pos + PHYSICAL_OFFSET_AT)
            _check(view, pos, phys)  # raises, naming what is wrong
            invariant(False, "_check passed a record frames refused")
        starts.append(pos)
        pos = after
    return starts


def _split_keys(raw: bytes) -> tuple[str, ...]:
    return tuple(raw.decode().split("\0")) if raw else ()


def decode(buf: bytes | bytearray | memoryview, physical_offset: int) -> Record:
    """Decode and verify one whole record; ``buf`` starts at the record.

    Raises:
        CorruptRecordError: bad size, magic, CRC, offset or field lengths.
    """
    total = _check(buf, 0, physical_offset)
    view = memoryview(buf)[:total]
    try:
        return _decode_fields(view, total, physical_offset)
    except (struct.error, UnicodeDecodeError, ValueError, IndexError) as exc:
        raise CorruptRecordError(physical_offset, f"bad field: {exc}") from exc


def _decode_fields(view: memoryview, total: int, physical_offset: int) -> Record:
    flag, _batch, qid, qoff, phys, born, store, recon, prep = _FIXED.unpack_from(view, HEAD_SIZE)
    if phys != physical_offset:
        raise CorruptRecordError(physical_offset, f"stored physical offset {phys} differs")
    strings, pos = _strings(view, FIXED_END, total, physical_offset)
    (n,) = _U32.unpack_from(view, pos)
    props_raw = properties_value(view[pos + 4 : pos + 4 + n])
    pos += 4 + n
    (n,) = _U32.unpack_from(view, pos)
    body = bytes(view[pos + 4 : pos + 4 + n])
    if pos + 4 + n != total or len(body) != n:
        raise CorruptRecordError(physical_offset, "field lengths do not add up")
    if not isinstance(props_raw, dict):
        raise CorruptRecordError(physical_offset, "properties are not an object")
    keys = _split_keys(strings[4].encode())
    properties: Mapping[str, str] = MappingProxyType({str(k): str(v) for k, v in props_raw.items()})
    return Record(
        topic=strings[0],
        queue_id=qid,
        queue_offset=qoff,
        physical_offset=phys,
        size=total,
        flag=_FLAGS[flag],  # IndexError (caught): not a TxnFlag
        store_timestamp_ms=store,
        born_timestamp_ms=born,
        born_host=strings[1],
        reconsume_times=recon,
        prepared_offset=prep,
        message_id=strings[2],
        tag=strings[3],
        keys=keys,
        properties=properties,
        body=body,
    )


def enters_queue(flag: TxnFlag) -> bool:
    """Only NORMAL and COMMIT records are dispatched to consume queues."""
    return flag is TxnFlag.NORMAL or flag is TxnFlag.COMMIT
