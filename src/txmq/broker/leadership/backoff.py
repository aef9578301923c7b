"""Retrying a coordination call that failed: how long to wait, and how often to say so.

Owns: ``Backoff``, the delays between retries of a failed etcd call (bounded, jittered; pure:
the random source is injected, so the election stays sans-I/O and its tests exact), and
``Repeats``, which logs a failure that keeps happening once per period with a count instead of
once per try (a replica cut off from etcd tries for as long as the cut lasts).
Must not: call etcd or decide what to do next (election.py does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from txmq import limits
from txmq.errors import invariant


class Backoff:
    """Delays between retries: the bound doubles from ``first_ms`` to at most ``max_ms`` with
    each failure in a row, and each delay is drawn uniformly from the bound's upper half
    ("equal jitter"): never less than half the bound, so a retry never comes at once, and never
    in step with another replica's. ``reset`` after a success."""

    def __init__(
        self,
        rand: Callable[[], float],
        *,
        first_ms: int = limits.COORDINATION_RETRY_FIRST_MS,
        max_ms: int = limits.COORDINATION_RETRY_MAX_MS,
    ) -> None:
        invariant(0 < first_ms <= max_ms, "backoff bounds: 0 < first <= max")
        self.rand = rand  # uniform in [0, 1)
        self.first_ms = first_ms
        self.max_ms = max_ms
        self.failures = 0  # in a row
        self._bound = first_ms  # of the next delay

    def next_ms(self) -> int:
        """The delay before the next try, after one more failure."""
        bound = self._bound
        self._bound = min(self.max_ms, 2 * bound)
        self.failures += 1
        half = bound // 2
        return max(1, half + int(self.rand() * (bound - half)))

    def reset(self) -> None:
        self.failures = 0
        self._bound = self.first_ms


class Repeats:
    """Log a failure at once, then the same failure again at most once per ``period_ms``,
    saying how many times it happened since it was last logged (failures that alternate are
    counted each apart, for up to COORDINATION_LOG_TEXTS_MAX texts); and, once the call
    succeeds again, one line saying how many tries failed."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        clock: Callable[[], int],
        period_ms: int = limits.COORDINATION_LOG_PERIOD_MS,
        level: int = logging.WARNING,
    ) -> None:
        self.logger = logger
        self.what = what
        self.clock = clock
        self.period_ms = period_ms
        self.level = level
        self.failures = 0  # in a row
        # Each failure text logged: [when it was last logged, times it happened since].
        self._seen: dict[str, list[int]] = {}

    def failed(self, text: str) -> None:
        now = self.clock()
        self.failures += 1
        seen = self._seen.get(text)
        if seen is not None and now - seen[0] < self.period_ms:
            seen[1] += 1
            return
        if seen is not None:
            self.logger.log(
                self.level, "%s: %s (%d times in the last %.1f s)", self.what, text, seen[1] + 1,
                (now - seen[0]) / 1000,
            )  # fmt: skip
            seen[:] = [now, 0]
            return
        if len(self._seen) >= limits.COORDINATION_LOG_TEXTS_MAX:
            oldest = min(self._seen, key=lambda t: self._seen[t][0])
            self._flush(oldest, now)
        self.logger.log(self.level, "%s: %s", self.what, text)
        self._seen[text] = [now, 0]

    def _flush(self, text: str, now: int) -> None:
        """Say how many times ``text`` happened since it was logged (if any), and forget it."""
        said, unsaid = self._seen.pop(text)
        if unsaid:
            self.logger.log(
                self.level, "%s: %s, %d times more in the last %.1f s", self.what, text, unsaid,
                (now - said) / 1000,
            )  # fmt: skip

    def succeeded(self) -> None:
        if not self.failures:
            return
        now = self.clock()
        for text in list(self._seen):
            self._flush(text, now)
        self.logger.info("%s: answered again after %d failed tries", self.what, self.failures)
        self.failures = 0
