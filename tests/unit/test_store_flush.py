"""Flush tests. Group commit is made deterministic with a disk whose fsync of the log blocks
until the test releases it: writers that arrive during one fsync share the next one; a record
is not visible until its fsync is done; a failed fsync fences every waiting and later writer.
Also ASYNC interval flushing and the disk-usage check's cadence."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import SMALL, Clock
from txmq.errors import ConfigError, DiskFullError, StoreFencedError
from txmq.model import FlushMode, RecordDraft
from txmq.store.files.disk import FileHandle, WrappedFile
from txmq.store.files.sim_disk import SimDisk
from txmq.store.store import Store
from txmq.store.write.group_commit import Group

ROOT = Path("/sim/store")


class GatedDisk(SimDisk):
    """SimDisk whose commit-log fsyncs wait for ``gate`` while ``gated`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gated = False
        self.entered = threading.Semaphore(0)
        self.fail_next = False

    def open(self, path: Path) -> FileHandle:
        inner = super().open(path)
        return _GatedFile(inner, self) if "commitlog" in str(path) else inner


class _GatedFile(WrappedFile):
    def __init__(self, inner: FileHandle, disk: GatedDisk) -> None:
        super().__init__(inner)
        self._disk = disk

    def sync(self) -> None:
        if self._disk.gated:
            self._disk.entered.release()
            assert self._disk.gate.wait(10), "test never opened the gate"
        if self._disk.fail_next:
            raise OSError(5, "injected EIO")
        self._inner.sync()


def draft(i: int) -> RecordDraft:
    return RecordDraft(topic="t", queue_id=0, body=b"x" * 10, message_id=f"m{i}")


def wait_until(cond: object, what: str) -> None:
    deadline = time.monotonic() + 10
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.002)  # sleep: poll interval of this bounded wait


def start_writers(store: Store, ids: range, errors: list[BaseException]) -> list[threading.Thread]:
    def run(i: int) -> None:
        try:
            store.append(draft(i))
        except BaseException as exc:  # recorded and asserted by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    return threads


def test_writers_during_one_fsync_share_the_next(clock: Clock) -> None:
    disk = GatedDisk()
    s = Store.open(ROOT, SMALL, now_ms=clock, disk=disk)
    disk.gated = True
    errors: list[BaseException] = []
    first = start_writers(s, range(1), errors)
    assert disk.entered.acquire(timeout=10), "the first writer's fsync started"
    # While that fsync is blocked, ten more writers write and wait.
    rest = start_writers(s, range(1, 11), errors)
    wait_until(lambda: len(s.writes.group._pending) == 10, "ten writers wrote and wait")
    assert s.queue_offsets("t", 0) == (0, 0), "nothing is visible before its fsync"
    assert s.scan(0, 99) == [] and s.log_end_offset == 0
    syncs_before = s.writes.group.syncs
    disk.gated = False
    disk.gate.set()
    for t in first + rest:
        t.join(10)
    assert not errors
    assert s.writes.group.syncs - syncs_before == 2, "one fsync for the first, one for the ten"
    assert s.queue_offsets("t", 0) == (0, 11)
    s.close()


def test_failed_fsync_fences_waiting_and_later_writers(clock: Clock) -> None:
    disk = GatedDisk()
    s = Store.open(ROOT, SMALL, now_ms=clock, disk=disk)
    s.append(draft(0))
    disk.gated, disk.fail_next = True, True
    errors: list[BaseException] = []
    threads = start_writers(s, range(1, 6), errors)
    assert disk.entered.acquire(timeout=10)
    disk.gate.set()
    for t in threads:
        t.join(10)
    assert len(errors) == 5 and all(isinstance(e, StoreFencedError) for e in errors)
    disk.fail_next = False  # even a healthy disk now: the fence holds, fsync is never retried
    with pytest.raises(StoreFencedError):
        s.append(draft(9))
    with pytest.raises(StoreFencedError):
        s.flush()
    with pytest.raises(StoreFencedError):
        s.delete_expired_segments(keep_from_offset=0)  # its checkpoint would fsync again
    assert s.queue_offsets("t", 0) == (0, 1), "unfenced records only"
    s.close()
    s = Store.open(ROOT, SMALL, now_ms=clock, disk=disk)
    assert s.recovery.crashed
    assert s.append(draft(10)).queue_offset >= 1
    s.close()


def test_async_mode_flushes_on_its_interval_without_being_asked(clock: Clock) -> None:
    cfg = replace(SMALL, flush_mode=FlushMode.ASYNC, flush_interval_ms=20)
    s = Store.open(ROOT, cfg, now_ms=clock, disk=SimDisk())
    for i in range(5):
        s.append(draft(i))
    assert s.queue_offsets("t", 0) == (0, 5), "ASYNC records are readable at once"
    group = s.writes.group
    wait_until(lambda: group.durable_end == group.written_end, "the interval flush ran")
    assert 1 <= group.syncs <= 5
    s.close()


class CountingDisk(SimDisk):
    def __init__(self) -> None:
        super().__init__()
        self.usage_calls = 0

    def used_ratio(self, directory: Path) -> float:
        self.usage_calls += 1
        return self.used


def test_disk_usage_is_checked_every_n_appends_not_each(clock: Clock) -> None:
    disk = CountingDisk()
    s = Store.open(ROOT, SMALL, now_ms=clock, disk=disk)
    for i in range(600):
        s.append(draft(i))
    assert 1 <= disk.usage_calls <= 3, "a frozen clock: only the every-256-appends check"
    disk.used = 0.99
    clock.advance(1_000)  # the time-based check sees the full disk at once
    with pytest.raises(DiskFullError):
        s.append(draft(600))
    disk.used = 0.1
    clock.advance(1_000)
    s.append(draft(601))  # space freed: writes resume (the error is retriable)
    s.close()


def test_a_nowait_write_calls_back_once_its_fsync_returned(clock: Clock) -> None:
    disk = GatedDisk()
    s = Store.open(ROOT, SMALL, now_ms=clock, disk=disk)
    s.append(draft(0))
    disk.gated = True
    pending = s.append_many_nowait([draft(1), draft(2)])
    assert pending.group is not None
    called: list[str] = []
    pending.group.on_done(lambda: called.append("a"))
    pending.group.on_done(lambda: [][0])  # a broken callback must not stop the others
    pending.group.on_done(lambda: called.append("b"))
    assert disk.entered.acquire(timeout=10)
    assert called == [] and s.queue_offsets("t", 0) == (0, 1), "nothing visible before the fsync"
    disk.gated = False
    disk.gate.set()
    wait_until(lambda: called == ["a", "b"], "the callbacks after the fsync")
    assert [r.queue_offset for r in s.durable(pending)] == [1, 2]
    pending.group.on_done(lambda: called.append("late"))  # done already: called at once
    assert called[-1] == "late"
    s.close()


def test_a_nowait_write_whose_fsync_failed_is_told_and_refused(clock: Clock) -> None:
    disk = GatedDisk()
    s = Store.open(ROOT, SMALL, now_ms=clock, disk=disk)
    disk.gated, disk.fail_next = True, True
    pending = s.append_many_nowait([draft(1)])
    assert pending.group is not None
    done = threading.Event()
    pending.group.on_done(done.set)
    assert disk.entered.acquire(timeout=10)
    disk.gate.set()
    assert done.wait(10), "a fence completes the group too"
    with pytest.raises(StoreFencedError):
        s.durable(pending)
    s.close()


def test_a_roll_writes_the_staged_records_before_syncing_the_full_segment(clock: Clock) -> None:
    """SYNC writers only stage their bytes; the flusher pwrites them before its fsync. A roll
    while some are staged (the flusher busy in an fsync) must write them into the full segment
    before syncing it: after a power loss every acknowledged record is there."""
    disk = GatedDisk()
    s = Store.open(ROOT, SMALL, now_ms=clock, disk=disk)
    big = 60 * 1024
    for i in range(4):  # ~240 KiB of the 256 KiB segment: the next big record rolls
        s.append(RecordDraft(topic="t", queue_id=0, body=b"b" * big, message_id=f"b{i}"))
    disk.gated = True
    errors: list[BaseException] = []
    first = start_writers(s, range(10, 11), errors)
    assert disk.entered.acquire(timeout=10), "the flusher's fsync started"
    staged = start_writers(s, range(11, 16), errors)
    wait_until(lambda: len(s.writes.group._pending) == 5, "five writers staged and wait")
    assert len(s.log._staging) == 5, "their bytes wait for the flusher, not written yet"
    roller = threading.Thread(
        target=s.append, args=(RecordDraft(topic="t", queue_id=0, body=b"r" * big),)
    )
    roller.start()
    assert disk.entered.acquire(timeout=10), "the roll syncs the full segment"
    assert len(s.log._staging) == 0, "written before that sync"
    disk.gated = False
    disk.gate.set()
    for t in [*first, *staged, roller]:
        t.join(10)
    assert not errors and not roller.is_alive()
    s.abandon()
    disk.crash(random.Random(7))  # what was not synced is lost, maybe torn
    s = Store.open(ROOT, SMALL, now_ms=clock, disk=disk)
    got = [r.message_id for r in s.read_queue("t", 0, 0, 99).records]
    assert got[:4] == [f"b{i}" for i in range(4)] and len(got) == 11
    assert sorted(got[4:10]) == [f"m{i}" for i in range(10, 16)]
    s.close()


def test_a_group_releases_every_waiting_thread_and_calls_back_once() -> None:
    group = Group()
    calls: list[str] = []
    group.on_done(lambda: calls.append("early"))
    released: list[int] = []
    waiters = [
        threading.Thread(target=lambda k=k: (group.wait(), released.append(k))) for k in range(3)
    ]
    for t in waiters:
        t.start()
    wait_until(lambda: len(group._sleepers) == 3, "three threads wait on the group")
    assert released == [] and calls == []
    group.set()
    group.set()  # a second set (the flusher after fence) changes nothing
    for t in waiters:
        t.join(10)
    assert sorted(released) == [0, 1, 2] and calls == ["early"]
    group.wait()  # done: returns at once
    group.on_done(lambda: calls.append("late"))  # done: runs now, in this thread
    assert calls == ["early", "late"]


LINGER = replace(SMALL, group_commit_linger_us=1_000_000)


def after_a_busy_group() -> Store:
    """A store with a 1 s linger whose last group held two writes while a third was in flight
    (three outstanding at once: the next group lingers until it holds three)."""
    disk = GatedDisk()
    s = Store.open(ROOT, LINGER, now_ms=Clock(), disk=disk)
    disk.gated = True
    errors: list[BaseException] = []
    first = start_writers(s, range(1), errors)
    assert disk.entered.acquire(timeout=10), "the first writer's fsync started"
    busy = start_writers(s, range(1, 3), errors)  # two writes: the next group follows a busy one
    wait_until(lambda: len(s.writes.group._pending) == 2, "two writers wrote and wait")
    disk.gated = False
    disk.gate.set()
    for t in first + busy:
        t.join(10)
    assert not errors
    group = s.writes.group
    assert group.syncs == 2 and group.lingers == 0, "a group after a lone write: no linger"
    return s


def test_after_a_busy_group_the_flusher_lingers_until_the_writers_it_saw_are_back() -> None:
    s = after_a_busy_group()
    # Three writes were outstanding at once: the flusher waits (up to 1 s) for three, and takes
    # the group as soon as the third wrote, not at the end of the second. (It lingers only if it
    # looks before the third wrote; either way the three share one fsync and nothing waits the
    # linger out: the old target of four did.)
    errors: list[BaseException] = []
    later = start_writers(s, range(3, 6), errors)
    for t in later:
        t.join(10)
    assert not errors
    assert s.writes.group.lingers <= 1 and s.writes.group.linger_timeouts == 0
    assert s.writes.group.syncs == 3, "the three later writes share one fsync"
    assert s.queue_offsets("t", 0) == (0, 6)
    s.close()


def test_two_writers_in_lockstep_do_not_wait_out_the_linger() -> None:
    """Two writers, each writing as soon as its last write is durable: groups of two, and a
    linger that ends when both wrote (at most the last one, after a writer stopped, runs its
    full length; the linger is 1 s, so waiting out each would take the 40 writes ~20 s)."""
    s = Store.open(ROOT, LINGER, now_ms=Clock(), disk=SimDisk())
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            for i in range(20):
                s.append(draft(100 * k + i))
        except BaseException as exc:  # reported below
            errors.append(exc)

    writers = [threading.Thread(target=run, args=(k,)) for k in (1, 2)]
    for t in writers:
        t.start()
    for t in writers:
        t.join(30)
    assert not errors and not any(t.is_alive() for t in writers)
    assert s.writes.group.linger_timeouts <= 1, "a linger waited for a writer that was not there"
    assert s.queue_offsets("t", 0) == (0, 40)
    s.close()


def test_a_lone_writer_never_lingers(clock: Clock) -> None:
    s = Store.open(ROOT, LINGER, now_ms=clock, disk=SimDisk())
    for i in range(20):
        s.append(draft(i))
    assert s.writes.group.lingers == 0 and s.writes.group.syncs == 20
    s.close()


def test_flush_cuts_a_linger_short_and_keeps_the_lingering_write() -> None:
    s = after_a_busy_group()
    errors: list[BaseException] = []
    lone = start_writers(s, range(3, 4), errors)  # one of the four the linger waits for
    wait_until(lambda: s.writes.group.lingers == 1, "the flusher lingers")
    s.flush()  # urgent: ends the linger (else this would wait out the full second)
    for t in lone:
        t.join(10)
    assert not errors and s.writes.group.syncs == 3
    assert s.queue_offsets("t", 0) == (0, 4)
    s.close()


def test_linger_is_validated() -> None:
    with pytest.raises(ConfigError, match="group_commit_linger_us"):
        replace(SMALL, group_commit_linger_us=-1)
    with pytest.raises(ConfigError, match="group_commit_linger_us"):
        replace(SMALL, group_commit_linger_us=1_000_001)
