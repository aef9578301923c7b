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
