"""The dispatcher fsyncs queue and index files, and reads a queue entry, outside its lock.

A checkpoint's fsyncs must not stall the flusher's publish (which takes the same lock); a file
that retention retires while its fsync is pending is skipped, and a failing fsync of a live
file still raises (ADR 0001).
"""

from __future__ import annotations

import threading
from pathlib import Path

from txmq.format.record import Entry
from txmq.model import TxnFlag
from txmq.store.derived.consume_queue import tag_hash
from txmq.store.derived.dispatch import Dispatcher
from txmq.store.files.disk import FileHandle, OsDisk, WrappedFile

WAIT_S = 10.0


class _GatedFile(WrappedFile):
    """A real file whose ``sync`` waits for the test to open the gate (and can fail)."""

    def __init__(self, inner: FileHandle, disk: _GatedDisk) -> None:
        super().__init__(inner)
        self._disk = disk

    def sync(self) -> None:
        self._disk.syncing.set()
        assert self._disk.gate.wait(WAIT_S), "the test never opened the gate"
        if self._disk.fail:
            raise OSError(5, "injected fsync failure (EIO)")
        self._inner.sync()
        self._disk.synced += 1


class _GatedDisk(OsDisk):
    def __init__(self) -> None:
        self.gate = threading.Event()
        self.syncing = threading.Event()
        self.fail = False
        self.synced = 0

    def open(self, path: Path) -> FileHandle:
        return _GatedFile(super().open(path), self)


def _entries(first: int, count: int) -> list[Entry]:
    return [
        Entry(1000 * i, 100, TxnFlag.NORMAL, 0, "t", 0, i, 5000 + i, "a", f"m{i}", ())
        for i in range(first, first + count)
    ]


def _sync_in_thread(d: Dispatcher) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            d.sync()
        except OSError as exc:
            errors.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, errors


def test_sync_lets_go_of_the_lock_while_it_fsyncs(tmp_path: Path) -> None:
    disk = _GatedDisk()
    d = Dispatcher(tmp_path, disk, 4)
    d.publish(_entries(0, 6), 6000)
    snap = d.snapshot()
    t, errors = _sync_in_thread(d)
    assert disk.syncing.wait(WAIT_S)
    # The fsync is under way (held at the gate): publish and a probe must not wait for it.
    assert d.lock.acquire(timeout=WAIT_S), "sync holds the dispatcher lock while it fsyncs"
    d.lock.release()
    d.publish(_entries(6, 2), 8000)
    cq, lo, hi = d.queue_range("t", 0)
    assert cq is not None and (lo, hi) == (0, 8)
    assert d.read_entry(cq, 7) == (7000, 100, tag_hash("a"))
    assert d.read_entry(cq, 8) is None, "past the written entries"
    disk.gate.set()
    t.join(WAIT_S)
    assert not t.is_alive() and errors == []
    assert disk.synced == 3, "two queue files and the index, as dirty when sync began"
    assert snap.queues[("t", 0)] == 6
    disk.synced = 0
    d.snapshot()  # the next checkpoint writes what the late publish buffered ...
    d.sync()  # ... and its sync syncs it
    assert disk.synced == 2, "the queue file the late publish wrote, and the index"
    d.close()


def test_a_file_retired_during_sync_is_skipped_a_live_one_fails(tmp_path: Path) -> None:
    disk = _GatedDisk()
    d = Dispatcher(tmp_path, disk, 4)
    d.publish(_entries(0, 9), 9000)
    d.snapshot()  # as a checkpoint does: the buffered entries go to their files first
    disk.fail = True
    t, errors = _sync_in_thread(d)
    assert disk.syncing.wait(WAIT_S)
    d.drop_expired(8000)  # retention retires the files of entries 0..7 mid-sync
    cq, lo, _hi = d.queue_range("t", 0)
    assert cq is not None and lo == 8 and sorted(cq.files) == [8]
    disk.gate.set()
    t.join(WAIT_S)
    assert not t.is_alive()
    assert len(errors) == 1 and errors[0].errno == 5, "the live file's failed fsync raises"
    assert d.read_entry(cq, 3) is None, "an expired entry reads as absent"
    disk.fail = False
    d.sync()  # the files the failed sync did not sync are dirty again: this one syncs them
    assert disk.synced == 2, "the live queue file and the index"
    d.close()
