"""Two groups of two replicas in one cluster: real processes, a real etcd, the
official Python client.

Goal: the route any replica answers lists both groups' queues at every replica of each group
(any replica serves: a follower forwards to its leader, ADR 0006), so the unmodified client
spreads sends and transactions over both groups and one consumer receives everything; when one
group's leader is killed with SIGKILL its follower leads within the failover bound, the routes
do not change, and nothing acknowledged is lost.
Method: four ``txmq broker --cluster FILE --broker-name replica-<k>`` processes on free ports
named in one cluster file with two [[group]] tables and the session's etcd; SYNC replication
(``--min-insync-replicas 2``); clients are given all four endpoints.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from rocketmq import TransactionResolution as R
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from tests.integration.clients import Checker, consumer, drain, message, producer
from tests.integration.conftest import FAST, BrokerProcess, wait_until
from tests.integration.test_cluster import brokers_of, free_ports
from tests.integration.test_replication import FAILOVER_S, status
from txmq.client.admin import call
from txmq.coordination.cluster_file import ClusterFile, Group, Member, write

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

GROUPS, REPLICAS = 2, 2


class Groups:
    """N groups of R replicas named in one cluster file, led through ``etcd``."""

    def __init__(self, root: Path, etcd: str, groups: int, replicas: int) -> None:
        ports = iter(free_ports(groups * replicas))
        self.layout = ClusterFile.of_groups(
            root.name,  # unique per test: the session's etcd holds every test's leader keys
            tuple(
                Group(
                    f"group-{g}",
                    tuple(
                        Member(f"replica-{k}", "127.0.0.1", next(ports))
                        for k in range(g * replicas, (g + 1) * replicas)
                    ),
                )
                for g in range(groups)
            ),
            etcd,
        )
        write(root / "cluster.toml", self.layout)
        args = [*FAST, "--cluster", str(root / "cluster.toml"), "--min-insync-replicas", "2"]
        self.replicas = {
            m.name: BrokerProcess(root / m.name, [*args, "--broker-name", m.name], port=m.port)
            for m in self.layout.members
        }

    @property
    def endpoints(self) -> str:
        return ";".join(b.endpoints for b in self.replicas.values())

    def start(self) -> None:
        with ThreadPoolExecutor(len(self.replicas)) as pool:
            list(pool.map(lambda b: b.start(), self.replicas.values()))

    def stop(self) -> None:
        for b in self.replicas.values():
            if b.running:
                b.stop()

    def leaders(self, *, preferred: bool = False) -> dict[str, BrokerProcess]:
        """Group name -> its leading replica, once every group has exactly one (with
        ``preferred``: its first replica, which takes the lead back once it is in sync, ADR
        0005, and every running replica answers: the replicas start at once here, so another
        may lead first, and it keeps its port closed a moment after it hands the lead back)."""
        found: dict[str, BrokerProcess] = {}

        def one_each() -> bool:
            found.clear()
            for g in self.layout.groups:
                roles = {
                    m.name: status(self.replicas[m.name].endpoints).get("role")
                    for m in g.replicas
                    if self.replicas[m.name].running
                }
                first = roles.get(g.replicas[0].name)
                if preferred and (first != "leader" or None in roles.values()):
                    return False
                leading = [self.replicas[n] for n, r in roles.items() if r == "leader"]
                if len(leading) != 1:
                    return False
                found[g.name] = leading[0]
            return True

        wait_until(one_each, 30, "one leader in every group")
        return dict(found)


def routes(endpoint: str, topic: str) -> dict[str, set[int]]:
    """Group name -> the ports its queues carry, as QueryRoute at ``endpoint`` answers ({}
    while its port is closed: a replica that handed the lead back to its group's preferred
    replica keeps it closed a moment, replica_node._after_hand_back)."""
    with grpc.insecure_channel(endpoint) as ch:
        try:
            r = sg.MessagingServiceStub(ch).QueryRoute(
                sv.QueryRouteRequest(topic=pb.Resource(name=topic)), timeout=2
            )
        except grpc.RpcError:
            return {}
    out: dict[str, set[int]] = {}
    for q in r.message_queues if r.status.code == pb.OK else []:
        out.setdefault(q.broker.name, set()).update(a.port for a in q.broker.endpoints.addresses)
    return out


def routed_to(c: Groups, topic: str) -> bool:
    """Every live replica's route names every group at all its replicas."""
    want = {g.name: {m.port for m in g.replicas} for g in c.layout.groups}
    return all(routes(b.endpoints, topic) == want for b in c.replicas.values() if b.running)


@pytest.fixture
def groups(tmp_path: Path, etcd_endpoint: str) -> Iterator[Groups]:  # noqa: F811
    c = Groups(tmp_path, etcd_endpoint, GROUPS, REPLICAS)
    c.start()
    yield c
    c.stop()


def _send(endpoints: str, topic: str, bodies: list[bytes]) -> list[object]:
    """Each of ``bodies`` in a transaction, committed; one more, rolled back, after every
    fourth (``rolled-<body>``: never to be delivered). Every committed one's receipt.

    The checker answers a check-back as an application does, from its own record of what it
    decided (noted before the decision is sent; UNKNOWN, "ask later", before that): with FAST's
    800 ms transaction timeout a check-back may overtake a commit on a loaded machine, and a
    checker answering ROLLBACK regardless then contradicts the producer (its commit is refused,
    test_transactions_client.py)."""
    decided: dict[bytes, R] = {}
    p = producer(endpoints, (topic,), Checker(lambda m: decided.get(bytes(m.body), R.UNKNOWN)))
    try:
        receipts = []
        for i, body in enumerate(bodies):
            tx = p.begin_transaction()
            receipts.append(p.send(message(topic, body), tx))
            decided[body] = R.COMMIT
            tx.commit()
            if i % 4 == 3:
                tx = p.begin_transaction()
                p.send(message(topic, b"rolled-" + body), tx)
                decided[b"rolled-" + body] = R.ROLLBACK
                tx.rollback()
        return receipts
    finally:
        p.shutdown()


def test_two_groups_spread_fail_over_and_lose_nothing(groups: Groups) -> None:
    leaders = groups.leaders(preferred=True)
    # Created through any replica: the admin client skips followers; the leader forwards the
    # definition to the other group's leader, and each follower copies its leader's.
    call(groups.endpoints, "TopicCreate", {"name": "orders", "queues": 2, "type": "transaction"})
    wait_until(lambda: routed_to(groups, "orders"), 15, "every route names both groups")

    before = [f"a{i}".encode() for i in range(16)]
    assert brokers_of(_send(groups.endpoints, "orders", before)) == {"group-0", "group-1"}
    c = consumer(groups.endpoints, "g-orders", "orders")
    try:
        got = {bytes(m.body) for m in drain(c, len(before), 30)}
        got |= {bytes(m.body) for m in drain(c, 1, 2)}  # nothing more (no rolled-back one)
    finally:
        c.shutdown()
    assert got == set(before)

    acknowledged = [f"b{i}".encode() for i in range(16)]  # acknowledged, not yet consumed
    assert brokers_of(_send(groups.endpoints, "orders", acknowledged)) == {"group-0", "group-1"}
    old = leaders["group-0"]
    old.kill9()
    killed = time.monotonic()
    new = groups.leaders()
    failover_s = time.monotonic() - killed
    assert new["group-0"] is not old and new["group-1"] is leaders["group-1"]
    assert routed_to(groups, "orders"), "the routes are the same: every replica of each group"
    assert failover_s < FAILOVER_S
    # SYNC 2 of 2: group-0 takes writes again once a second replica is in sync. The old leader
    # comes back with an empty data directory (a lost machine) and copies the new leader's log.
    shutil.rmtree(old.data_dir)
    old.start()
    # In sync again, the old leader (group-0's first replica) takes the lead back (ADR 0005).
    assert groups.leaders(preferred=True)["group-0"] is old
    wait_until(lambda: len(status(old.endpoints).get("in_sync", [])) == 2, 20, "2 in sync")

    after = [f"c{i}".encode() for i in range(8)]
    assert brokers_of(_send(groups.endpoints, "orders", after)) == {"group-0", "group-1"}
    want = set(acknowledged) | set(after)
    received: set[bytes] = set()
    c = consumer(groups.endpoints, "g-orders", "orders")
    try:
        deadline = time.monotonic() + 60
        while not want <= received and time.monotonic() < deadline:
            # At least once: a few acks of the first batch may not have reached the follower.
            received |= {bytes(m.body) for m in drain(c, 1, 5)}
    finally:
        c.shutdown()
    assert want <= received, sorted(want - received)
    assert received <= set(before) | set(acknowledged) | set(after)
    print(f"group-0's new leader led {failover_s:.1f} s after kill -9")
