"""Protobuf's wire format written by hand: varints, length-delimited fields, timestamps and
durations, for the replies ``protocol/mapping.py`` writes as bytes instead of building protobuf
messages (a field set from Python costs a call into upb, and the reply is serialized
once more after). Pure; tests/unit/test_protocol_wire.py compares with protobuf's own bytes.

A length-delimited field's key is (number << 3) | 2, a varint's (number << 3) | 0.
"""

from __future__ import annotations

from typing import Final

ONE_BYTE: Final = tuple(bytes((i,)) for i in range(128))
MORE: Final = tuple(bytes((i | 128,)) for i in range(128))  # a varint's byte with more to come


def varint(n: int) -> bytes:
    """Protobuf's base-128 varint; a negative int64 as its 64-bit two's complement. One or two
    bytes from two tables of one-byte strings; longer ones (a timestamp's seconds, a queue
    offset) as one int holding each 7 bits in a byte with the high bit of all but the last
    set, written out by one ``to_bytes``: a concatenation per byte cost ~1.8k instructions for
    a timestamp's five."""
    if 0 <= n < 128:
        return ONE_BYTE[n]
    if n < 0:
        n += 1 << 64
    if n < 16384:
        return MORE[n & 127] + ONE_BYTE[n >> 7]
    spread = 0
    shift = 0
    while n >= 128:
        spread |= (n & 127 | 128) << shift
        n >>= 7
        shift += 8
    return (spread | n << shift).to_bytes(shift // 8 + 1, "little")


# A timestamp's or duration's nanos field (2) for each millisecond part (none for 0).
NANOS: Final = tuple(b"\x10" + varint(ms * 1_000_000) if ms else b"" for ms in range(1000))


def text(key: bytes, value: str) -> bytes:
    data = value.encode()
    return key + varint(len(data)) + data


def nested(key: bytes, data: bytes) -> bytes:
    return key + varint(len(data)) + data


# Seconds with a five-byte varint that ``seconds_nanos`` writes as one int (2^28..2^34).
ERA_FIRST: Final = 1 << 28
ERA_END: Final = 1 << 34


def seconds_nanos(key: int, ms: int) -> bytes:
    """A Timestamp or Duration field of ``ms`` (zero parts left out, as protobuf does) under the
    one-byte field key ``key``. A time of this era (seconds of 2^28..2^34: 1978 to 2514) has
    five bytes of seconds: the key, the length, the seconds' field key and varint then come as
    one int's eight bytes, and only the nanos are added."""
    seconds = ms // 1000
    nanos = NANOS[ms % 1000]
    if ERA_FIRST <= seconds < ERA_END:
        head = (
            key
            | (6 + len(nanos)) << 8
            | 0x08 << 16
            | (seconds & 127 | 128) << 24
            | (seconds >> 7 & 127 | 128) << 32
            | (seconds >> 14 & 127 | 128) << 40
            | (seconds >> 21 & 127 | 128) << 48
            | (seconds >> 28) << 56
        )
        return head.to_bytes(8, "little") + nanos
    data = (b"\x08" + varint(seconds) if seconds else b"") + nanos
    return ONE_BYTE[key] + ONE_BYTE[len(data)] + data
