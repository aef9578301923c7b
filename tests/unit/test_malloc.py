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
