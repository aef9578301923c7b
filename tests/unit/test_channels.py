"""One framing for both txmq channels (protocol/channels.py): every reply is a 4-byte big-endian
header length, a JSON header, then payload bytes; an admin reply is the frame with no payload."""

from __future__ import annotations

import json

import pytest

from txmq.errors import (
    BadRequestError,
    DiskFullError,
    RemoteProtocolError,
    TopicNotFoundError,
)
from txmq.protocol import channels


def test_frame_layout_read_independently() -> None:
    raw = channels.frame({"ok": True, "count": 2}, [b"ab", memoryview(b"cd")])
    n = int.from_bytes(raw[:4], "big")
    assert json.loads(raw[4 : 4 + n]) == {"ok": True, "count": 2}
    assert raw[4 + n :] == b"abcd"
    bare = channels.frame({"ok": True})
    assert len(bare) == 4 + int.from_bytes(bare[:4], "big"), "no payload: the header ends it"


def test_admin_and_data_replies_decode_the_same_frame() -> None:
    raw = channels.frame({"ok": True, "topics": ["a"]})
    assert channels.admin_reply(raw, "TopicList")["topics"] == ["a"]
    header, payload = channels.data_reply(raw, "QueueOffsets")
    assert header["topics"] == ["a"] and len(payload) == 0
    with pytest.raises(RemoteProtocolError, match="bytes after an admin reply"):
        channels.admin_reply(channels.frame({"ok": True}, [b"x"]), "TopicList")


def test_a_refusal_raises_its_class_with_retriable() -> None:
    missing = channels.frame({"ok": False, "code": TopicNotFoundError.code, "error": "no t"})
    with pytest.raises(TopicNotFoundError, match="no t"):
        channels.admin_reply(missing, "TopicDescribe")
    full = channels.frame({"ok": False, "code": DiskFullError.code, "retriable": True})
    with pytest.raises(DiskFullError) as info:
        channels.data_reply(full, "PrepareBundle")
    assert info.value.retriable
    with pytest.raises(RemoteProtocolError, match="without an error code"):
        channels.admin_reply(channels.frame({"ok": False}), "TopicList")


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00\x00",
        b"\x00\x00\x00\x09{}",  # header length past the frame
        b"\x00\x00\x00\x02[]",  # not an object
        b'\x00\x00\x00\x02{"',  # not JSON
        b'{"ok": true}',  # the old bare-JSON admin reply
    ],
)
def test_a_broken_frame_raises_the_callers_error(raw: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        channels.admin_reply(raw, "TopicList")
    with pytest.raises(BadRequestError):
        channels.split(raw, "PrepareBundle", error=BadRequestError)


def test_split_bounds_the_header() -> None:
    raw = channels.frame({"topic": "t" * 100})
    assert channels.split(raw, "PrepareBundle", header_max=200)[0]["topic"] == "t" * 100
    with pytest.raises(BadRequestError, match="bound"):
        channels.split(raw, "PrepareBundle", header_max=50, error=BadRequestError)
