"""How long a SYNC write waits for its replicas, and what its refusal names (pure parts of
txmq.broker.replication.leader and txmq.broker.leadership.election.InSync)."""

from __future__ import annotations

import pytest

from txmq import limits
from txmq.broker.leadership.election import InSync
from txmq.broker.replication.leader import ack_wait_s

MOST = limits.REPLICA_ACK_TIMEOUT_MS / 1000
MARGIN = limits.REPLICA_ACK_MARGIN_MS / 1000


@pytest.mark.parametrize(
    ("left", "waits"),
    [
        (None, MOST),  # no deadline: the replication bound
        (60.0, MOST),  # a far deadline: the bound too
        (3.0, 3.0 - max(MARGIN, 0.3)),  # the official clients' 3 s: a refusal before it
        (1.0, 1.0 - MARGIN),
        (0.1, 0.0),  # (almost) out of time: refused at once, not after the deadline
        (-1.0, 0.0),
    ],
)
def test_a_write_waits_for_its_replicas_no_longer_than_its_calls_deadline_allows(
    left: float | None, waits: float
) -> None:
    assert ack_wait_s(left) == pytest.approx(waits)


def test_a_refusal_names_the_replicas_a_write_is_missing_on() -> None:
    isr = InSync(["r1", "r2"], now_ms=0, lag_max_ms=2_000)
    isr.fetched("r1", 100, leader_end=100, now_ms=10, incarnation="a")
    isr.fetched("r2", 40, leader_end=100, now_ms=10, incarnation="b")
    assert isr.missing(100, min_insync=3, now_ms=10) == ["r2"]
    assert isr.missing(100, min_insync=3, now_ms=5_000) == ["r1 (out of sync)", "r2 (out of sync)"]
    isr.keep_stored([("r1", "a"), ("r2", "b")], now_ms=10)
    assert isr.missing(100, min_insync=2, now_ms=10) == ["r2"]
    isr.fetched("r2", 0, leader_end=100, now_ms=20, incarnation="c")  # its directory wiped
    assert isr.missing(100, min_insync=2, now_ms=20) == ["r2 (its data directory started anew)"]
    isr.stored = {("r1", "a")}
    assert isr.missing(100, min_insync=3, now_ms=20) == ["1 more in-sync replica(s)"]
