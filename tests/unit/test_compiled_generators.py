"""mypyc's free-instance race, fixed in the build (mypyc_patch.py, docs/adr/0007): a compiled
generator that is freed must not wipe a new generator set up in the same object while its
fields are cleared.

mypyc keeps one freed generator object per generator function for reuse; unpatched, the
deallocator offers the object for reuse *before* clearing its fields, and clearing one (the
walk's segment) may run a finalizer (``OsFile.__del__`` closes the descriptor) that starts
another walk, directly or by releasing the GIL to another thread. That walk gets the same
object, and the rest of the clearing then wipes its arguments: `iter_raw` ended early or raised
``AttributeError: attribute 'segment_size' of 'iter_raw_gen' undefined`` (the failure of
test_store_concurrency in the first CI run of the compiled build).

Both tests drive the real compiled ``txmq.store.segment.iter_raw`` over real files; they need the
compiled build (interpreted generators have no free list) and fail on one built without the
patch (checked 2026-11-27: see ADR 0007).
"""

from __future__ import annotations

import threading
import time
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from txmq.format import record as codec
from txmq.store import segment
from txmq.store.disk import OsFile
from txmq.store.segment import RawItem, Segment

pytestmark = pytest.mark.skipif(
    not segment.__file__.endswith(tuple(EXTENSION_SUFFIXES)),
    reason="interpreted build: the race is in the C mypyc generates (make compiled)",
)

SEGMENT_SIZE = 4096


def _sealed_segment(path: Path) -> OsFile:
    """A segment file that holds only its end-of-segment blank: its walk is one "blank" item."""
    file = OsFile(path)
    file.pwrite(codec.blank(SEGMENT_SIZE), 0)
    return file


class _Closing:
    """A segment's file handle that runs ``then`` once it is dropped and closed, as a reader
    that another thread resumes while ``os.close`` has released the GIL."""

    def __init__(self, file: OsFile, then: object) -> None:
        self.file, self.then = file, then

    def size(self) -> int:
        return self.file.size()

    def pread(self, size: int, offset: int) -> bytes:
        return self.file.pread(size, offset)

    def __del__(self) -> None:
        self.file.close()
        self.then()  # type: ignore[operator]


def test_a_walk_started_while_an_abandoned_walk_is_freed_keeps_its_arguments(
    tmp_path: Path,
) -> None:
    """Deterministic, one thread: the abandoned walk's segment is dropped while the walk is
    freed, and its handle's finalizer starts the next walk (what another thread does in the
    race); that walk must still see its own segment and size."""
    started: list[object] = []

    def start_next_walk() -> None:
        nxt = Segment(7000, _sealed_segment(tmp_path / "next"), SEGMENT_SIZE)
        started.append(segment.iter_raw(nxt, SEGMENT_SIZE, 0))

    first = Segment(0, _Closing(_sealed_segment(tmp_path / "first"), start_next_walk), 0)
    # Takes the freed object mypyc may keep from an earlier walk: the slot is empty when this
    # walk is freed, so an unpatched build offers exactly this object to the next walk.
    walk = segment.iter_raw(first, SEGMENT_SIZE, 0)
    del first
    assert next(walk) == RawItem("blank", 0, SEGMENT_SIZE)
    del walk  # freed: drops the segment, whose handle starts the next walk
    assert len(started) == 1
    try:
        got = list(started[0])  # type: ignore[call-overload]
    except AttributeError as exc:  # the unpatched build's symptom, named in the failure
        got = [f"AttributeError: {exc}"]
    assert got == [RawItem("blank", 7000, SEGMENT_SIZE)]


def test_threads_abandoning_walks_of_closing_segments_see_only_their_own(tmp_path: Path) -> None:
    """The race itself: 4 threads walk one segment each and abandon the walk after its first
    item, so the walk's last reference to the segment goes while it is freed and ``os.close``
    releases the GIL. Bounded: 10,000 walks per thread or 20 s."""
    errors: list[str] = []
    deadline = time.monotonic() + 20

    def walks(n: int) -> None:
        path = tmp_path / f"segment-{n}"
        _sealed_segment(path).close()
        for _ in range(10_000):
            if time.monotonic() > deadline or errors:
                return
            try:  # the walk holds the only reference to its segment
                seg = Segment(n * 1000, OsFile(path), SEGMENT_SIZE)
                walk = segment.iter_raw(seg, SEGMENT_SIZE, 0)
                del seg
                item = next(walk, None)
                del walk  # abandoned: freed here, and its segment's file closes
                if item != RawItem("blank", n * 1000, SEGMENT_SIZE):
                    errors.append(f"walk {n} got {item}")
            except Exception as exc:  # recorded and asserted below
                errors.append(f"walk {n}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=walks, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
