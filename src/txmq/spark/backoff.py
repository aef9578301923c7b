"""Doubling pauses under one deadline, for the sink's calls that the broker may answer "later".

A broker answers a retriable error when it cannot take a write now: its disk above the
watermark, too many pending transactions, a replica group catching up or electing. Neither case
has an event the sink could wait on, so it asks again after a pause that doubles from
SINK_BUSY_BACKOFF_S_MIN to SINK_BUSY_BACKOFF_S_MAX, for up to SINK_BUSY_RETRY_S_MAX in all.
"""

from __future__ import annotations

import time

from txmq import limits


class Backoff:
    """The pauses of one call's retries: ``expired()`` says whether the next pause would end
    past the deadline (then the caller raises what it caught), ``pause()`` sleeps it and
    doubles the next one."""

    def __init__(self, retry_s_max: float = limits.SINK_BUSY_RETRY_S_MAX) -> None:
        assert retry_s_max >= 0, retry_s_max
        self._deadline = time.monotonic() + retry_s_max
        self._pause = limits.SINK_BUSY_BACKOFF_S_MIN

    def expired(self) -> bool:
        return time.monotonic() + self._pause > self._deadline

    def pause(self) -> None:
        time.sleep(self._pause)  # the broker said "later" without an event to wait on
        self._pause = min(self._pause * 2, limits.SINK_BUSY_BACKOFF_S_MAX)
