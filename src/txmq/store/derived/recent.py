"""The records this store wrote last, kept as written so a read of one skips decoding it.

Owns: ``Recent``, a bounded map from physical offset to the bytes a record was written as and
the draft it came from. Why: a consumer reads a committed message a few milliseconds after it
was written, and decoding the record (every field, the properties' JSON included) to
build a ``Record`` cost ~50k instructions of ~0.99 M per transaction, more than any other step
of the read. How: the writer adds each queue record it placed (``add``, under the writer lock);
a reader that finds one (``get``) still reads the record's bytes from the log and compares them
with what was written (``Reader.read_live``): only bytes equal to the written ones, which passed
the write's own paired CRC check, are answered from the draft (``record``); anything else
(another record there after a truncation, damage) goes through the full decode as before. A
draft whose decode could differ from it is not kept. Must not: answer without that comparison,
hold more than RECENT_RECORDS_BYTES_MAX of records (as much again of their drafts' bodies), or
keep one above RECENT_RECORD_BYTES_MAX (limits.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from txmq import limits
from txmq.model import AppendResult, Record, RecordDraft, stored_record

# Written bytes, draft, its properties as the record holds them, where and when it was written.
_Entry = tuple[bytes, RecordDraft, Mapping[str, str], AppendResult]


class Recent:
    """See the module docstring. ``add`` under the writer lock; ``get`` from any thread."""

    def __init__(
        self,
        bytes_max: int = limits.RECENT_RECORDS_BYTES_MAX,
        record_max: int = limits.RECENT_RECORD_BYTES_MAX,
    ) -> None:
        self._entries: dict[int, _Entry] = {}
        self._bytes = 0
        self._bytes_max: Final = bytes_max
        self._record_max: Final = record_max

    def add(self, written: bytes, draft: RecordDraft, result: AppendResult) -> None:
        """Remember the record written as ``result`` says (the oldest go past the byte bound),
        unless its decode could differ from its draft (``_properties``)."""
        size = len(written)
        if size > self._record_max:
            return
        props = _properties(draft)
        if props is None:
            return
        entries, at = self._entries, result.physical_offset
        old = entries.get(at)  # a truncated log's offset written again
        if old is not None:
            del entries[at]
            self._bytes -= len(old[0])
        entries[at] = (written, draft, props, result)
        self._bytes += size
        while self._bytes > self._bytes_max:
            first = next(iter(entries))
            self._bytes -= len(entries.pop(first)[0])

    def get(self, at: int) -> _Entry | None:
        return self._entries.get(at)


def _properties(draft: RecordDraft) -> Mapping[str, str] | None:
    """The draft's properties as ``codec.decode`` returns them (a read-only copy: the caller's
    dict may change after the write), or None where its decode could differ from the draft: a
    born host the encoder cuts, a body not of type bytes, a property key or value not a str."""
    host = draft.born_host
    if type(draft.body) is not bytes or not (
        host.isascii() and len(host) <= limits.BORN_HOST_LENGTH_MAX
    ):
        return None
    props = draft.properties
    # A dict's own copy (one C call), its pairs then read as a dict's, not through ``items()``'
    # iterator; not cast to str on the way: checked here.
    copy: dict[Any, Any] = props.copy() if type(props) is dict else dict(props)
    for k, v in copy.items():
        if type(k) is not str or type(v) is not str:
            return None
    return MappingProxyType(copy)


def record(entry: _Entry) -> Record:
    """The Record ``codec.decode`` returns for the entry's bytes, built from its draft."""
    return stored_record(entry[1], entry[3], entry[2])
