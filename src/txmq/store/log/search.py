"""Looking for a verifiable record where the log says none should be.

Owns: ``verifiable_in`` (the first record at or after a position of a segment that verifies
in full) and ``blank_span_reason``. Recovery asks after a bad record (a valid record behind it
means mid-log corruption, not a torn tail) and every scan asks inside the span an
end-of-segment blank claims (a record there was written after the blank: corruption, never
padding to skip; ADR 0003). Must not: write, or decide what a found record means.
"""

from __future__ import annotations

from txmq import limits
from txmq.errors import CorruptRecordError
from txmq.format import record as codec
from txmq.store.log.segment import Segment

# Bytes read at a time while searching for the record magic.
_SEARCH_CHUNK = 8 * limits.MiB


def blank_span_reason(blank_at: int, inside: int) -> str:
    return (
        f"the end-of-segment blank at {blank_at} claims the rest of its segment, but a valid"
        f" record lies inside that span at {inside} (a scan would skip it as padding)"
    )


def verifiable_in(seg: Segment, pos: int, segment_size: int) -> int | None:
    """Offset of the first verifiable record at or after ``pos`` in ``seg``. Searches for the
    magic number chunk by chunk (a body may contain it too, so each candidate is fully
    verified)."""
    magic = codec.RECORD_MAGIC.to_bytes(4, "big")
    limit = min(seg.handle.size(), segment_size)
    while pos < limit:
        chunk = seg.handle.pread(min(limit - pos, _SEARCH_CHUNK), pos)
        at = chunk.find(magic, 4)
        while at != -1:
            start = pos + at - 4
            if _verifies(seg, start, limit):
                return seg.start + start
            at = chunk.find(magic, at + 1)  # magic bytes inside a body
        pos += max(1, len(chunk) - 8)
    return None


def _verifies(seg: Segment, pos: int, limit: int) -> bool:
    size, _magic = codec.peek(seg.handle.pread(codec.HEAD_SIZE, pos).ljust(codec.HEAD_SIZE))
    if not codec.RECORD_SIZE_MIN <= size <= limit - pos:
        return False
    try:
        codec.decode(seg.handle.pread(size, pos), seg.start + pos)
    except CorruptRecordError:
        return False
    return True
