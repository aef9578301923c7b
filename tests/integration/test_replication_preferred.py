"""The preferred replica leads again once it is back and in sync (ADR 0005): real
processes, a real etcd, the official Python client.

Goal: after a failover, a group's leader is whichever replica won; the Python client dials a
route's addresses sorted and stays on the first that connects, so while the group's first
member (its lowest port) follows, every call is forwarded (ADR 0006, "Cost"). The group's
preferred replica (its first member in the cluster file) must take the lead back, through the
normal campaign, once it is back and in sync, without losing an acknowledged message.
Method: one group of two replicas named in a cluster file, replica-0 (the preferred, lower
port) started first and leading, SYNC 2 of 2; an official producer sends back to back, given
both endpoints; kill -9 of replica-0; replica-1 must lead within the failover bound; replica-0
restarted on its data directory must lead again within PREFERRED_BACK_S of its restart, and
the producer's calls then reach it directly (replica-1 forwards none of them); a consumer
receives every acknowledged message.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.clients import consumer, message, producer
from tests.integration.conftest import FAST, BrokerProcess, wait_until
from tests.integration.test_cluster import free_ports
from tests.integration.test_replication import FAILOVER_S, create_topic, status
from txmq.coordination.cluster_file import ClusterFile, Group, Member, write

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

# From the restarted preferred replica's "listening" line to its leading: catch up (a few
# hundred KiB here), one drain round on the old leader, its resignation, then the preferred
# one's campaign (an observe period, two etcd calls) and its broker's open.
PREFERRED_BACK_S = 10.0
SENDS_MAX = 20_000
DELIVERY_S = 60.0


class Pair:
    """replica-0 (preferred: first in the file, lower port) and replica-1 of one group."""

    def __init__(self, root: Path, etcd: str) -> None:
        low, high = sorted(free_ports(2))
        members = (Member("replica-0", "127.0.0.1", low), Member("replica-1", "127.0.0.1", high))
        layout = ClusterFile.of_groups(root.name, (Group("group-0", members),), etcd)
        write(root / "cluster.toml", layout)
        args = [*FAST, "--cluster", str(root / "cluster.toml"), "--min-insync-replicas", "2"]
        self.preferred, self.other = (
            BrokerProcess(root / m.name, [*args, "--broker-name", m.name], port=m.port)
            for m in members
        )
        self.endpoints = f"{self.preferred.endpoints};{self.other.endpoints}"

    def stop(self) -> None:
        for b in (self.preferred, self.other):
            if b.running:
                b.stop()


def role(b: BrokerProcess) -> object:
    return status(b.endpoints).get("role")


@pytest.fixture
def pair(tmp_path: Path, etcd_endpoint: str) -> Iterator[Pair]:  # noqa: F811
    p = Pair(tmp_path, etcd_endpoint)
    try:
        p.preferred.start()  # as `cluster up` does: the first replica first, leading
        wait_until(lambda: role(p.preferred) == "leader", FAILOVER_S, "replica-0 to lead")
        p.other.start()
        wait_until(lambda: role(p.other) == "follower", FAILOVER_S, "replica-1 to follow")
        yield p
    finally:
        p.stop()


class Load:
    """One official producer sending back to back on its own thread until stopped; every
    acknowledged body noted (a failed send is not acknowledged: noted, then 0.1 s back-off)."""

    def __init__(self, endpoints: str, topic: str) -> None:
        self.endpoints, self.topic = endpoints, topic
        self.acked: list[bytes] = []
        self.failures: list[str] = []
        self.times: list[tuple[float, bool]] = []  # (when, acknowledged) of every send
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        p = producer(self.endpoints, (self.topic,))
        try:
            for n in range(SENDS_MAX):
                if self.stop.is_set():
                    return
                body = f"m-{n}".encode()
                try:
                    p.send(message(self.topic, body))
                    self.acked.append(body)
                    self.times.append((time.monotonic(), True))
                except Exception as exc:  # not acknowledged: noted, the load goes on
                    self.failures.append(repr(exc)[:160])
                    self.times.append((time.monotonic(), False))
                    self.stop.wait(0.1)
        finally:
            p.shutdown()

    def more(self, n: int, timeout_s: float, what: str) -> None:
        """Wait until ``n`` more sends were acknowledged."""
        want = len(self.acked) + n
        wait_until(lambda: len(self.acked) >= want, timeout_s, what)

    def since(self, t0: float) -> str:
        """What the load saw from ``t0`` on: failed sends and the longest time without an
        acknowledged one."""
        acks = [t0] + [t for t, ok in self.times if ok and t >= t0]
        failed = sum(1 for t, ok in self.times if not ok and t >= t0)
        gap = max((b - a for a, b in itertools.pairwise(acks)), default=0.0)
        return f"{failed} failed sends, longest gap between acknowledged sends {gap:.2f} s"

    def end(self) -> None:
        self.stop.set()
        self.thread.join(60)


def test_the_preferred_replica_leads_again_once_back_and_in_sync(pair: Pair) -> None:
    preferred, other = pair.preferred, pair.other
    create_topic(preferred, other, "load")
    load = Load(pair.endpoints, "load")
    try:
        load.more(50, 30, "sends before the kill")
        preferred.kill9()
        killed = time.monotonic()
        wait_until(lambda: role(other) == "leader", FAILOVER_S, "replica-1 to lead")
        print(f"replica-1 led {time.monotonic() - killed:.1f} s after the kill")
        preferred.start()  # on its data directory: it catches up and is in sync again
        back = time.monotonic()
        wait_until(lambda: role(preferred) == "leader", PREFERRED_BACK_S, "replica-0 to lead")
        print(f"replica-0 led again {time.monotonic() - back:.1f} s after its restart")
        wait_until(lambda: role(other) == "follower", FAILOVER_S, "replica-1 to follow")
        load.more(50, 30, "sends after the hand-back")
        # The producer's calls go to replica-0 directly: replica-1 forwards none of them.
        forwarded = status(other.endpoints).get("forwarded")
        load.more(100, 30, "sends at the preferred replica")
        assert status(other.endpoints).get("forwarded") == forwarded, "calls still forwarded"
        assert role(preferred) == "leader"
        print(f"from replica-0's restart: {load.since(back)}")
    finally:
        load.end()
    acked = set(load.acked)
    print(f"acknowledged {len(acked)}, failed {len(load.failures)}: {load.failures[-3:]}")
    c = consumer(pair.endpoints, "checker", "load")
    received: set[bytes] = set()
    deadline = time.monotonic() + DELIVERY_S
    try:
        while not acked <= received and time.monotonic() < deadline:
            for m in c.receive(32, 10):
                received.add(bytes(m.body))
                c.ack(m)
    finally:
        c.shutdown()
    assert acked <= received, f"lost {len(acked - received)}: {sorted(acked - received)[:10]}"
