"""Record codec tests: round trips (hypothesis), the fast dispatch decode agrees with the full
decode, every single-byte corruption is detected, input validation refuses bad drafts."""

from __future__ import annotations

import ast
import json
import struct
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq import limits
from txmq.errors import (
    BadRequestError,
    CorruptRecordError,
    IllegalKeyError,
    IllegalTagError,
    IllegalTopicError,
    MessageBodyTooLargeError,
    MessagePropertiesTooLargeError,
)
from txmq.format import record as codec
from txmq.format.properties import properties_json, properties_value
from txmq.model import RecordDraft, TxnFlag

text = st.text(max_size=20)
drafts = st.builds(
    RecordDraft,
    topic=st.text(min_size=1, max_size=30),
    queue_id=st.integers(0, limits.QUEUES_PER_TOPIC_MAX - 1),
    body=st.binary(max_size=300),
    flag=st.sampled_from(TxnFlag),
    message_id=text,
    tag=text,
    keys=st.lists(
        st.text(
            st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)),
            min_size=1,
            max_size=10,
        ),
        max_size=3,
    ).map(tuple),
    properties=st.dictionaries(text, text, max_size=3),
    born_timestamp_ms=st.integers(0, limits.BORN_TIMESTAMP_MS_MAX),
    born_host=text,
    reconsume_times=st.integers(0, 2**31),
    prepared_offset=st.integers(-1, 2**62),
)


def placed(d: RecordDraft, phys: int = 4096, batch_left: int = 0) -> bytes:
    buf = codec.encode(d, queue_offset=7, store_timestamp_ms=123)
    return codec.place(buf, phys, batch_left=batch_left)


@settings(max_examples=100, deadline=None)
@given(drafts, st.integers(0, 2**40), st.integers(0, 65535))
def test_round_trip(d: RecordDraft, phys: int, batch_left: int) -> None:
    data = placed(d, phys, batch_left)
    rec = codec.decode(data, phys)
    assert (rec.topic, rec.queue_id, rec.body, rec.flag) == (d.topic, d.queue_id, d.body, d.flag)
    assert (rec.message_id, rec.tag, rec.keys) == (d.message_id, d.tag, d.keys)
    assert dict(rec.properties) == dict(d.properties)
    assert (rec.born_timestamp_ms, rec.reconsume_times) == (d.born_timestamp_ms, d.reconsume_times)
    assert rec.prepared_offset == d.prepared_offset and rec.born_host == d.born_host
    assert (rec.queue_offset, rec.store_timestamp_ms, rec.size) == (7, 123, len(data))
    entry = codec.decode_entry(b"pad" + data, 3, phys)
    assert entry == codec.Entry(
        phys, len(data), d.flag, batch_left, d.topic, d.queue_id, 7, 123, d.tag,
        d.message_id, d.keys,
    )  # fmt: skip


def test_every_flipped_byte_is_detected() -> None:
    d = RecordDraft(topic="t", queue_id=1, body=b"hello", message_id="m", keys=("k",), tag="x")
    data = placed(d)
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x41
        with pytest.raises(CorruptRecordError) as info:
            codec.decode(bytes(bad), 4096)
        assert info.value.offset == 4096
        with pytest.raises(CorruptRecordError):
            codec.decode_entry(bytes(bad), 0, 4096)


def test_misdirected_read_and_truncation_are_detected() -> None:
    data = placed(RecordDraft(topic="t", queue_id=0, body=b"x" * 50))
    with pytest.raises(CorruptRecordError, match="physical offset"):
        codec.decode(data, 8192)
    for cut in (0, 5, codec.HEAD_SIZE, len(data) - 1):
        with pytest.raises(CorruptRecordError):
            codec.decode(data[:cut], 4096)


def test_blank_is_not_a_record() -> None:
    b = codec.blank(100)
    assert codec.peek(b) == (100, codec.BLANK_MAGIC) and len(b) == codec.HEAD_SIZE
    with pytest.raises(CorruptRecordError, match="magic"):
        codec.decode(b, 0)


@pytest.mark.parametrize(
    ("draft", "error"),
    [
        (RecordDraft(topic="t", queue_id=0, body=b"x" * 11), MessageBodyTooLargeError),
        (RecordDraft(topic="", queue_id=0, body=b""), IllegalTopicError),
        (RecordDraft(topic="t" * 200, queue_id=0, body=b""), IllegalTopicError),
        (RecordDraft(topic="t", queue_id=-1, body=b""), IllegalTopicError),
        (RecordDraft(topic="t", queue_id=0, body=b"", tag="x" * 300), IllegalTagError),
        (RecordDraft(topic="t", queue_id=0, body=b"", keys=("",)), IllegalKeyError),
        (RecordDraft(topic="t", queue_id=0, body=b"", keys=("a\0b",)), IllegalKeyError),
        (RecordDraft(topic="t", queue_id=0, body=b"", keys=("k",) * 40), IllegalKeyError),
        (RecordDraft(topic="t", queue_id=0, body=b"", born_timestamp_ms=-1), BadRequestError),
        (RecordDraft(topic="t", queue_id=0, body=b"", born_timestamp_ms=2**62), BadRequestError),
    ],
)
def test_validation_refuses(draft: RecordDraft, error: type[Exception]) -> None:
    with pytest.raises(error):
        codec.validate_draft(draft, body_size_max=10)


def test_properties_too_large() -> None:
    d = RecordDraft(topic="t", queue_id=0, body=b"", properties={"p": "v" * 40_000})
    with pytest.raises(MessagePropertiesTooLargeError):
        codec.encode(d, queue_offset=0, store_timestamp_ms=0)


def test_only_normal_and_commit_enter_queues() -> None:
    assert [f for f in TxnFlag if codec.enters_queue(f)] == [TxnFlag.NORMAL, TxnFlag.COMMIT]


def test_text_that_is_not_utf8_is_refused_as_input() -> None:
    for bad in ({"keys": ("\ud800",)}, {"tag": "\udfff"}, {"message_id": "a\ud800"}):
        d = replace(RecordDraft(topic="t", queue_id=0, body=b"x"), **bad)
        with pytest.raises(BadRequestError, match="UTF-8"):
            codec.encode(d, queue_offset=0, store_timestamp_ms=1)


def test_named_offsets_match_the_documented_layout() -> None:
    """The offsets readers use (``FIELD_AT``, derived from the struct) are the ones the module's
    layout table documents, and a field written by ``encode``/``place`` is found there."""
    documented = {}
    # From the source: a compiled module (mypyc, txmq/compiled.py) keeps no docstring.
    source = Path(codec.__file__).with_name("record.py").read_text()
    for line in (ast.get_docstring(ast.parse(source)) or "").splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].isdigit() and parts[2] in ("u8", "u16", "u32", "i64"):
            documented[parts[1]] = int(parts[0])
    names = {
        "flag": "flag",
        "batch_left": "batch_left",
        "queue_id": "queue_id",
        "queue_offset": "queue_offset",
        "physical_offset": "physical_off",
        "born_timestamp_ms": "born_ts_ms",
        "store_timestamp_ms": "store_ts_ms",
        "reconsume_times": "reconsume",
        "prepared_offset": "prepared_off",
    }
    assert {names[k]: v for k, v in codec.FIELD_AT.items()} == {
        k: v for k, v in documented.items() if k in names.values()
    }
    assert documented["topic"] == codec.FIXED_END
    d = RecordDraft(topic="t", queue_id=7, body=b"x", born_timestamp_ms=123)
    rec = codec.place(codec.encode(d, queue_offset=42, store_timestamp_ms=456), 99, batch_left=3)
    at = codec.FIELD_AT
    assert rec[codec.FLAG_AT] == int(TxnFlag.NORMAL)
    assert int.from_bytes(rec[at["batch_left"] : at["batch_left"] + 2]) == 3
    assert int.from_bytes(rec[codec.QUEUE_ID_AT : codec.QUEUE_ID_AT + 2]) == 7
    assert int.from_bytes(rec[codec.QUEUE_OFFSET_AT : codec.QUEUE_OFFSET_AT + 8]) == 42
    assert int.from_bytes(rec[codec.PHYSICAL_OFFSET_AT : codec.PHYSICAL_OFFSET_AT + 8]) == 99
    assert int.from_bytes(rec[codec.BORN_TIMESTAMP_AT : codec.BORN_TIMESTAMP_AT + 8]) == 123
    assert int.from_bytes(rec[codec.STORE_TIMESTAMP_AT : codec.STORE_TIMESTAMP_AT + 8]) == 456


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=4))
def test_properties_block_is_the_compact_json_the_format_documents(props: dict[str, str]) -> None:
    """The on-disk properties block stays byte for byte ``json.dumps(..., separators=(",",
    ":"))`` (ASCII, escapes), whatever the encoder does to be fast."""
    d = RecordDraft(topic="t", queue_id=0, body=b"", properties=props)
    data = placed(d)
    at = codec.FIXED_END + sum(2 + len(s) for s in (b"t", b"", b"", b"", b""))
    want = json.dumps(props, separators=(",", ":")).encode()
    assert data[at : at + 4 + len(want)] == len(want).to_bytes(4, "big") + want


def _loads(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except ValueError as exc:
        return type(exc)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=4).map(
            properties_json
        ),
        st.binary(max_size=40),
        st.sampled_from(
            [b" {}", b"{} ", b"{}x", b"", b"[1", b'"a"', b"\xef\xbb\xbf{}", b'{"a":1}']
        ),
        st.from_regex(rb"\A[{}\[\]\x22:,a-c0-9 \\u]{0,12}\Z"),
    )
)
def test_properties_are_read_back_as_json_loads_reads_them(raw: bytes) -> None:
    """The read side's fast path returns what ``json.loads`` returns, and raises the same
    kind of error where it raises (whitespace, trailing data, bad UTF-8, other JSON values)."""
    want = _loads(raw)
    try:
        got: object = properties_value(memoryview(raw))
    except ValueError as exc:
        got = type(exc)
    assert got == want


@settings(max_examples=50, deadline=None)
@given(st.lists(drafts, min_size=1, max_size=5))
def test_split_verified_agrees_with_split(ds: list[RecordDraft]) -> None:
    blob, phys = b"", 0
    for d in ds:  # back to back, each naming its own position, as a bundle holds them
        data = placed(d, phys)
        blob, phys = blob + data, phys + len(data)
    fast = list(codec.split_verified(blob))
    full = [
        (r.born_timestamp_ms, r.message_id, r.tag, r.keys, dict(r.properties), r.body)
        for r in codec.split(blob)
    ]
    assert fast == full


def test_split_verified_refuses_sizes_that_do_not_add_up() -> None:
    d = RecordDraft(topic="t", queue_id=0, body=b"abc", message_id="m", properties={"k": "v"})
    data = placed(d, 0)
    with pytest.raises(CorruptRecordError):
        list(codec.split_verified(data + data[:10]))  # the last record is cut short
    grown = (len(data) + 1).to_bytes(4, "big") + data[4:] + b"\0"
    with pytest.raises(CorruptRecordError):
        list(codec.split_verified(grown))  # its size covers a byte no field accounts for


def test_a_whole_record_is_the_documented_layout_byte_for_byte() -> None:
    """Every byte of one record, assembled here from docs/formats.md's layout with plain
    struct calls, so a faster encoder cannot drift from the format."""
    props = MappingProxyType({"k": "v\u00e9", "TRAN_MSG": "true"})  # not a dict: copied
    d = RecordDraft(
        topic="orders",
        queue_id=3,
        body=b"\x00body\xff",
        flag=TxnFlag.COMMIT,
        message_id="m-1",
        tag="tagA",
        keys=("k1", "k\u00e92"),
        properties=props,
        born_timestamp_ms=1_700_000_000_123,
        born_host="h" * (limits.BORN_HOST_LENGTH_MAX + 5),  # cut to its limit
        reconsume_times=2,
        prepared_offset=512,
    )
    got = codec.place(codec.encode(d, queue_offset=42, store_timestamp_ms=456), 4096, batch_left=1)
    fixed = struct.pack(
        ">BHHqqqqIq", int(TxnFlag.COMMIT), 1, 3, 42, 4096, d.born_timestamp_ms, 456, 2, 512
    )
    strings = (
        b"orders",
        b"h" * limits.BORN_HOST_LENGTH_MAX,
        b"m-1",
        b"tagA",
        "k1\0k\u00e92".encode(),
    )
    tail = b"".join(struct.pack(">H", len(s)) + s for s in strings)
    js = b'{"k":"v\\u00e9","TRAN_MSG":"true"}'
    tail += struct.pack(">I", len(js)) + js + struct.pack(">I", 6) + b"\x00body\xff"
    after_crc = fixed + tail
    head = struct.pack(">III", 12 + len(after_crc), codec.RECORD_MAGIC, crc32c.crc32c(after_crc))
    assert got == head + after_crc
