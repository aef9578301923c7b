"""txmq.malloc: the tuning takes effect on glibc Linux (this project's platform) and is
idempotent; elsewhere it reports that it did nothing instead of failing."""

from __future__ import annotations

import sys

import pytest

from txmq import malloc


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc tuning")
def test_large_blocks_are_kept_on_glibc() -> None:
    assert malloc.keep_large_blocks() is True
    assert malloc.keep_large_blocks() is True, "a second call is a no-op that still says yes"


def test_collect_less_often_freezes_and_raises_the_young_threshold() -> None:
    import gc

    before = gc.get_threshold()
    try:
        malloc.collect_less_often()
        assert gc.get_freeze_count() > 0, "what lived at the call is out of the collector's view"
        young, older, oldest = gc.get_threshold()
        assert young > before[0]
        assert (older, oldest) == before[1:], "older generations keep CPython's ratios"
        cycle: list[object] = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1, "collection still works: cycles are still freed"
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


_BURST = """
import threading
from pathlib import Path
from txmq import malloc

def rss_mib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")

assert malloc.keep_large_blocks()
kept_alive = []  # what recovery builds and keeps (indexes): malloc'ed beside its reads
def burst() -> None:  # a recovery's reads: 4 MiB blocks, each freed before the next few
    held = []
    for i in range(48):
        held.append(bytes([i % 251]) * (4 << 20))
        kept_alive.append(bytes(2048))
        if len(held) > 8:
            held.pop(0)
t = threading.Thread(target=burst)
t.start()
t.join()
kept = rss_mib()
assert malloc.give_back_free()
print(kept, rss_mib())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc tuning")
def test_a_thread_burst_kept_by_its_arena_is_given_back() -> None:
    """With large blocks kept, a thread's freed 4 MiB blocks stay in the process (its arena
    keeps up to 256 MiB free) until give_back_free returns them: the broker's open runs in a
    thread, and without this its recovery's reads stayed resident for good."""
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", _BURST], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    kept, after = int(out[0]), int(out[1])
    assert kept - after >= 24, f"RSS {kept} MiB after the burst, {after} MiB after the trim"
