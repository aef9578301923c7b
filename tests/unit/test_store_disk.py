"""Disk tests: the simulated disk keeps synced bytes across a crash and loses (or tears) the
rest; handles die with the crash; fsync faults; the real disk's atomic write."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from txmq.store.files.disk import Faults, FaultyDisk, OsDisk
from txmq.store.files.sim_disk import SimDisk

P = Path("/sim/d/f")


def test_synced_bytes_survive_and_unsynced_may_not() -> None:
    disk = SimDisk()
    f = disk.open(P)
    f.pwrite(b"durable", 0)
    f.sync()
    f.pwrite(b"-lost", 7)
    disk.crash(random.Random(1), torn=False)
    data = disk.read_all(P)
    assert data.startswith(b"durable") and data in (b"durable", b"durable-lost")
    with pytest.raises(OSError):
        f.pread(3, 0)  # the handle died with the crash
    assert disk.open(P).pread(7, 0) == b"durable"


def test_crash_keeps_an_in_order_prefix_possibly_torn() -> None:
    seen: set[bytes] = set()
    for seed in range(200):
        disk = SimDisk()
        f = disk.open(P)
        for i, chunk in enumerate((b"aaaa", b"bbbb", b"cccc")):
            f.pwrite(chunk, 4 * i)
        disk.crash(random.Random(seed))
        data = disk.read_all(P)
        assert b"aaaabbbbcccc".startswith(data), "only a prefix, in write order"
        seen.add(data)
    assert len(seen) > 6, "crashes keep different prefixes, torn ones included"


def test_truncate_is_lost_unless_synced() -> None:
    disk = SimDisk()
    f = disk.open(P)
    f.pwrite(b"0123456789", 0)
    f.sync()
    f.truncate(4)
    assert f.size() == 4
    disk.crash(random.Random(0), torn=False)  # seed 0 keeps no pending op
    assert disk.read_all(P) in (b"0123456789", b"0123")


def test_directory_operations_and_listing() -> None:
    disk = SimDisk()
    disk.write_atomic(Path("/sim/d/a.json"), b"{}")
    disk.open(Path("/sim/d/sub/x"))
    disk.makedirs(Path("/sim/d/empty"))
    assert disk.list(Path("/sim/d")) == ["a.json", "empty", "sub"]
    disk.rename(Path("/sim/d/a.json"), Path("/sim/d/b.json"))
    assert disk.exists(Path("/sim/d/b.json")) and not disk.exists(Path("/sim/d/a.json"))
    disk.remove(Path("/sim/d/b.json"))
    with pytest.raises(FileNotFoundError):
        disk.remove(Path("/sim/d/b.json"))


def test_sim_fsync_error_after_n() -> None:
    disk = SimDisk(fsync_error_after=1)
    f = disk.open(P)
    f.sync()
    with pytest.raises(OSError):
        f.sync()


def test_os_disk_atomic_write_and_faulty_sync(tmp_path: Path) -> None:
    disk = OsDisk()
    disk.write_atomic(tmp_path / "x" / "cp.json", b"one")
    disk.write_atomic(tmp_path / "x" / "cp.json", b"two")
    assert disk.read_all(tmp_path / "x" / "cp.json") == b"two"
    assert disk.list(tmp_path / "x") == ["cp.json"]
    assert 0.0 <= disk.used_ratio(tmp_path) <= 1.0
    faulty = FaultyDisk(Faults(fsync_error_after=1))
    f = faulty.open(tmp_path / "seg")
    f.pwrite(b"abc", 0)
    f.sync()
    with pytest.raises(OSError):
        f.sync()
    assert f.pread(3, 0) == b"abc"
    f.close()
    f.close()  # closing twice is harmless
