"""One commit-log segment file: naming, reading records out of it, and chunked scans.

Owns: the file-name rule (20-digit zero-padded start offset, as RocketMQ), the ``Segment`` value
(start offset, handle, bytes in use), ``iter_raw``, the chunked walk that recovery and the
log's forward scans share, and ``decoded``, a walked record or why it is not one. Must not:
write, decide what a bad record means (recovery does), or know about other segments.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, NamedTuple

from txmq import limits
from txmq.errors import CorruptRecordError
from txmq.format import record as codec
from txmq.model import Record
from txmq.store.files.disk import FileHandle

# Scans read segments in chunks this big, so a 1 GiB log costs ~128 reads, not a million.
SCAN_CHUNK_BYTES: Final = 8 * limits.MiB
NAME_LENGTH: Final = 20


def segment_name(start: int) -> str:
    return f"{start:0{NAME_LENGTH}d}"


def is_segment_name(name: str) -> bool:
    return len(name) == NAME_LENGTH and name.isdigit()


@dataclass
class Segment:
    start: int
    handle: FileHandle
    # Bytes of this segment in use (records + blank filler).
    used: int
    # Bytes from the segment start reserved on disk (ADR 0003); 0 until reserved this run.
    reserved: int = 0


class RawItem(NamedTuple):
    """One step of a walk: a record (``kind == "record"``), the end-of-segment blank, the end of
    the written bytes (``"end"``), or bytes that are not a valid record (``"bad"``).

    For "record", ``buf[pos:pos + size]`` holds the record; ``offset`` is its physical offset.
    """

    kind: str
    offset: int
    size: int = 0
    buf: bytes = b""
    pos: int = 0
    reason: str = ""


def decoded(item: RawItem) -> Record | str:
    """The verified record of a "record" item, or why it is not one (the CorruptRecordError's
    reason). Returned, not raised: a compiled generator that yields inside an ``except`` block
    and is abandoned there leaves the error in its caller's ``sys.exc_info()`` (ADR 0007)."""
    try:
        return codec.decode(memoryview(item.buf)[item.pos :], item.offset)
    except CorruptRecordError as exc:
        return exc.reason


def iter_raw(seg: Segment, segment_size: int, from_pos: int) -> Iterator[RawItem]:
    """Walk record frames of one segment from ``from_pos`` (a record boundary).

    Checks only the frame (magic and size within the segment); the caller verifies CRCs, so a
    scan that needs only dispatch fields and a scan that needs whole records share this loop.
    Ends with exactly one "blank", "end" or "bad" item.
    """
    limit = min(seg.handle.size(), segment_size)
    pos = from_pos
    buf, buf_at = b"", pos
    while pos < limit:
        rel = pos - buf_at
        if rel + codec.HEAD_SIZE > len(buf):
            buf, buf_at, rel = seg.handle.pread(min(SCAN_CHUNK_BYTES, limit - pos), pos), pos, 0
        if len(buf) - rel < codec.HEAD_SIZE:
            yield RawItem("bad", seg.start + pos, reason="truncated header")
            return
        size, magic = codec.peek(buf, rel)
        if magic == codec.BLANK_MAGIC and pos + size == segment_size:
            yield RawItem("blank", seg.start + pos, size)
            return
        if magic != codec.RECORD_MAGIC or not codec.RECORD_SIZE_MIN <= size <= limit - pos:
            yield RawItem(
                "bad", seg.start + pos, reason=f"bad frame (magic {magic:#x}, size {size})"
            )
            return
        if rel + size > len(buf):
            buf, buf_at, rel = seg.handle.pread(max(SCAN_CHUNK_BYTES, size), pos), pos, 0
        yield RawItem("record", seg.start + pos, size, buf, rel)
        pos += size
    yield RawItem("end", seg.start + pos)
