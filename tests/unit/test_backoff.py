"""Logging a coordination failure that keeps happening (txmq.broker.leadership.backoff.Repeats):
once per period with a count, not once per try; clock injected."""

from __future__ import annotations

import logging

import pytest

from txmq.broker.leadership.backoff import Backoff, Repeats

LOGGER = "txmq.test.repeats"


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def test_a_repeated_failure_is_logged_once_per_period_with_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    r = Repeats(logging.getLogger(LOGGER), "etcd", clock, period_ms=10_000)
    with caplog.at_level(logging.INFO, LOGGER):
        for _ in range(1_000):  # a thousand tries within the period: one line
            r.failed("lease/grant failed: connection refused")
            clock.now += 5
        assert [m.getMessage() for m in caplog.records] == [
            "etcd: lease/grant failed: connection refused"
        ]
        clock.now = 10_000
        r.failed("lease/grant failed: connection refused")
        assert caplog.records[-1].getMessage() == (
            "etcd: lease/grant failed: connection refused (1000 times in the last 10.0 s)"
        )
        r.failed("lease/grant failed: connection refused")
        r.failed("kv/range failed: timed out")  # another error: logged at once
        r.failed("lease/grant failed: connection refused")  # failures in turns: each counted
        r.failed("kv/range failed: timed out")
        assert [m.getMessage() for m in caplog.records[-2:]] == [
            "etcd: lease/grant failed: connection refused (1000 times in the last 10.0 s)",
            "etcd: kv/range failed: timed out",
        ]
        r.succeeded()  # the counts not yet said, then the recovery
        assert [m.getMessage() for m in caplog.records[-3:]] == [
            "etcd: lease/grant failed: connection refused, 2 times more in the last 0.0 s",
            "etcd: kv/range failed: timed out, 1 times more in the last 0.0 s",
            "etcd: answered again after 1005 failed tries",
        ]
        count = len(caplog.records)
        r.succeeded()  # nothing failed since: nothing to say
        assert len(caplog.records) == count


def test_a_backoff_needs_sane_bounds() -> None:
    with pytest.raises(AssertionError):
        Backoff(lambda: 0.5, first_ms=0, max_ms=10)
    b = Backoff(lambda: 0.5, first_ms=100, max_ms=300)
    assert [b.next_ms() for _ in range(4)] == [75, 150, 225, 225]
    b.reset()
    assert b.next_ms() == 75
