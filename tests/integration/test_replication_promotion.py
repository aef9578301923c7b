"""A follower's promotion when its leader dies under load (ADR 0005). Two ways a
group was left without a leader, both found chasing CI's Spark failover flake ("the follower
did not lead within 10 s"); real broker processes, a real etcd.

The lease outlasted by the open. A follower that wins the election closes its follower's
store and opens a full broker on the same directory; only then does it stamp its epoch and
serve. At load 9-12 on 2 cores that open took 4-5 s on the event loop, longer than the lease
(3 s), so the lease had lapsed by its own clock at the stamp: an invariant, the process died,
and with the old leader killed the group had no live replica. Now the open runs off the loop
(the lease is renewed meanwhile), and a lease that lapsed anyway makes the replica follow and
campaign again. Made to happen by SIGSTOP: the follower is paused as soon as it logs that it
leads (before its broker is open), until etcd expired its lease.

The follower's own view. A follower behind its leader's unacknowledged tail for longer than
REPLICA_LAG_MAX_MS (copying a burst, 1 MiB a fetch) judged itself out of sync by its last
fetch, and a dead leader never answers the fetch that would change that: it never campaigned,
although the stored in-sync set named it and so it held every acknowledged write. Now the
stored set alone decides (Election.may_campaign).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from tests.integration.conftest import BrokerProcess, wait_until
from tests.integration.test_replication import (
    FAILOVER_S,
    _send_raw,
    create_topic,
    leader_of,
    replica_group,
    status,
)
from txmq.coordination.etcd import Etcd
from txmq.coordination.keys import leader_key
from txmq.spark.client import BrokerClient

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

GROUP = "promo"
TOPIC = "promoted"


@pytest.fixture
def two(tmp_path: Path, etcd_endpoint: str) -> Iterator[list[BrokerProcess]]:  # noqa: F811
    group = replica_group(tmp_path, etcd_endpoint, GROUP, ("r0", "r1"), 2)
    yield group
    for b in group:
        if b.proc is not None and b.running:
            b.proc.send_signal(signal.SIGCONT)
            b.stop()


def _pause_once_it_leads(replica: BrokerProcess, since: int) -> None:
    """SIGSTOP ``replica`` as soon as its log (past byte ``since``) says it leads: its broker
    is not open yet (it opens right after that line)."""
    assert replica.proc is not None
    deadline = time.monotonic() + FAILOVER_S
    with replica.log_path.open("rb") as log:
        log.seek(since)
        seen = b""
        while time.monotonic() < deadline:
            seen += log.read()
            if b"leading group as" in seen:
                replica.proc.send_signal(signal.SIGSTOP)
                return
            time.sleep(0.001)  # sleep: poll interval of this bounded wait on a log line
    raise AssertionError(f"{replica.data_dir.name} did not lead\n{replica.log_tail()}")


def test_a_lease_lapsed_while_the_promoted_broker_opens_is_followed_by_leading_again(
    two: list[BrokerProcess],
    etcd_endpoint: str,  # noqa: F811
) -> None:
    """SYNC 2 of 2. The leader is killed -9; the follower wins, and is paused before its
    broker is open until etcd has expired its lease; resumed, it finds the lease lapsed before
    its epoch is stamped. It must not die (the code before: AssertionError "only a leader
    stamps its epoch", the group left with no live replica): it campaigns again and leads,
    with the acknowledged message."""
    leader, follower = leader_of(two)
    create_topic(leader, follower, TOPIC)
    wait_until(lambda: _send_raw(leader.endpoints, TOPIC, b"acked", "0A")[0] == pb.OK, 20, "ack")
    since = follower.log_path.stat().st_size
    leader.kill9()
    _pause_once_it_leads(follower, since)
    etcd, key = Etcd(etcd_endpoint), leader_key("txmq", GROUP)
    try:
        wait_until(lambda: etcd.get(key) is None, 3 * FAILOVER_S, "etcd expired its lease")
    finally:
        assert follower.proc is not None
        follower.proc.send_signal(signal.SIGCONT)
    wait_until(
        lambda: not follower.running or status(follower.endpoints).get("role") == "leader",
        FAILOVER_S,
        "the resumed replica leads again",
    )
    assert follower.running, f"the promoted replica died:\n{follower.log_tail()}"
    # Which way it went: the lapse seen at the stamp, or a new epoch won before the open ended.
    print("lapsed before the stamp:", "did not lead" in follower.log_path.read_text())
    # The acknowledged message is held from readers until the other stored member has it
    # again (ADR 0005, "on open"): the old leader, restarted on its data.
    leader.start()
    wait_until(lambda: _bodies(follower) == [b"acked"], 20, "the acknowledged message read")


def _bodies(replica: BrokerProcess) -> list[bytes]:
    with BrokerClient(replica.endpoints) as b:
        ranges = list(enumerate(b.queue_ranges(TOPIC)))
        return [r.body for q, (lo, hi) in ranges for r in b.read_range(TOPIC, q, lo, hi)]


def _end(replica: BrokerProcess) -> int:
    return int(status(replica.endpoints).get("end", 0))  # type: ignore[call-overload]


def _send_unacknowledged(leader: BrokerProcess, count: int) -> None:
    """``count`` sends of 1 MiB each to ``leader`` at once, while its only follower is paused:
    each is stored and then refused after REPLICA_ACK_TIMEOUT_MS (never acknowledged)."""
    answers: list[int] = []
    body = b"x" * (1 << 20)

    def send(i: int) -> None:
        answers.append(_send_raw(leader.endpoints, TOPIC, body, f"1{i:03X}")[0])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(answers) == count and pb.OK not in answers, answers


def _pause_once_past(replica: BrokerProcess, offset: int) -> None:
    """SIGSTOP ``replica`` as soon as its log end passes ``offset`` (asked without pauses: it
    copies a MiB per fetch, and must be caught well before it reaches its leader's end)."""
    assert replica.proc is not None
    deadline = time.monotonic() + FAILOVER_S
    while time.monotonic() < deadline:
        if _end(replica) >= offset:
            replica.proc.send_signal(signal.SIGSTOP)
            return
    raise AssertionError(f"{replica.data_dir.name} copied nothing\n{replica.log_tail()}")


def test_a_follower_behind_the_unacknowledged_tail_leads_when_its_leader_dies(
    two: list[BrokerProcess],
) -> None:
    """SYNC 2 of 2. The follower is paused while 32 MiB are written to the leader and refused
    (unacknowledged: acks wait for the follower); resumed, it copies a few MiB of them (each
    fetch ships 1 MiB, so none of its fetches reaches the leader's end), is paused again, and
    the leader is killed -9. It holds every acknowledged write, and the stored in-sync set
    names it: it must lead. The code before judged it by its own last fetch (not caught up
    for longer than REPLICA_LAG_MAX_MS) and never campaigned: the group stayed leaderless."""
    leader, follower = leader_of(two)
    create_topic(leader, follower, TOPIC)
    wait_until(lambda: _send_raw(leader.endpoints, TOPIC, b"acked", "0A")[0] == pb.OK, 20, "ack")
    assert follower.proc is not None
    before = _end(follower)
    follower.proc.send_signal(signal.SIGSTOP)
    try:
        _send_unacknowledged(leader, 32)  # >= REPLICA_ACK_TIMEOUT_MS > REPLICA_LAG_MAX_MS
        assert _end(leader) >= before + 32 * (1 << 20)
        follower.proc.send_signal(signal.SIGCONT)
        _pause_once_past(follower, before + 2 * (1 << 20))  # two fetches copied
        lags = status(leader.endpoints)["lag_bytes"]
        lag = lags[follower.data_dir.name]  # type: ignore[index]
        assert lag > 4 * (1 << 20), f"the follower caught up before it was paused: lag {lag}"
        leader.kill9()
    finally:
        follower.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: status(follower.endpoints).get("role") == "leader", FAILOVER_S, "lead")
    leader.start()
    wait_until(lambda: _bodies(follower)[:1] == [b"acked"], 20, "the acknowledged message read")
