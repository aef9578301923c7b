"""Partitions with the official Python client (ADR 0006, "a replica cut off"): real processes,
a real etcd reached by each replica through a cuttable TCP proxy (tests/integration/faults.py).

Three replicas, SYNC with min_insync_replicas 2, the leader on the lowest port, so the official
producer given every replica (its channel dials the sorted addresses and stays on the first
that connects) is connected to the leader. The leader is cut from etcd, connections
black-holed: its lease lapses by its own clock (2.25 s) and it cannot learn who leads next.
Were its port left open, the client would stay on it for the whole cut (acknowledged nothing
in the tester's runs); it closes its port instead, the client's channel dials the next replica,
and acks resume through the new leader within the issue's bound of 10 s of the cut. Healed, the
old leader follows and opens its port again.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.integration.clients import message, producer
from tests.integration.conftest import FAST, BrokerProcess, wait_until
from tests.integration.faults import TcpProxy
from tests.integration.test_replication import status
from tests.integration.test_replication_failover import free_ports, ready, stop_all

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

RESUME_S = 10.0  # from the cut to the first ack the old leader could not have given
LEASE_S = 3.0  # the old leader acknowledges nothing after its lease (2.25 s by its clock)


def start_cut_group(
    tmp_path: Path, etcd: str, name: str, *extra: str, replicas: int = 3
) -> tuple[list[BrokerProcess], list[TcpProxy]]:
    """Replicas r0, r1, ... of group ``name`` on ascending ports, each reaching etcd through
    its own proxy (returned in the same order); r0 leads before the others start."""
    proxies: list[TcpProxy] = []
    group: list[BrokerProcess] = []
    try:
        for i, port in enumerate(free_ports(replicas)):
            proxy = TcpProxy(etcd)
            proxies.append(proxy)
            args = [*FAST, "--etcd", proxy.endpoint, "--replica-group", name,
                    "--broker-name", f"r{i}", *extra]  # fmt: skip
            b = BrokerProcess(tmp_path / f"r{i}", args, port=port)
            group.append(b)
            b.start()
            if i == 0:
                wait_until(lambda b=b: status(b.endpoints).get("role") == "leader", 20, "r0 leads")
    except BaseException:
        stop_all(group)
        for p in proxies:
            p.close()
        raise
    return group, proxies


def test_clients_of_a_leader_cut_from_etcd_move_to_the_new_leader(
    tmp_path: Path,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    group, proxies = start_cut_group(tmp_path, etcd_endpoint, "cut", "--min-insync-replicas", "2")
    acks: list[tuple[float, float]] = []  # (sent, acknowledged), monotonic
    failures: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        p = producer(";".join(b.endpoints for b in group), ("cut",))
        try:
            for n in range(100_000):
                if stop.is_set():
                    return
                sent = time.monotonic()
                try:
                    p.send(message("cut", f"m-{n}".encode()))
                except Exception as exc:  # not acknowledged: the load goes on
                    failures.append(repr(exc)[:160])
                    stop.wait(0.05)  # back off, as an application riding out a failover
                    continue
                acks.append((sent, time.monotonic()))
        finally:
            p.shutdown()

    worker = threading.Thread(target=produce)
    try:
        ready(group, "cut")
        worker.start()
        wait_until(lambda: len(acks) >= 20, 30, "acks before the cut")
        old = group[0]
        proxies[0].cut("blackhole")
        cut = time.monotonic()
        wait_until(lambda: any(s > cut + LEASE_S for s, _ in acks), RESUME_S + 20,
                   "an ack through another replica")  # fmt: skip
        resumed = next(a for s, a in acks if s > cut + LEASE_S) - cut
        print(f"cut -> first ack the old leader could not give: {resumed:.2f} s")
        new = [b for b in group[1:] if status(b.endpoints).get("role") == "leader"]
        assert status(old.endpoints) == {}, "the cut-off replica's port is closed"
        before = len(acks)
        wait_until(lambda: len(acks) >= before + 20, 20, "the load carries on")
        proxies[0].heal()
        wait_until(lambda: status(old.endpoints).get("role") == "follower", 20,
                   "the old leader follows once healed")  # fmt: skip
        print(f"leader now {[b.data_dir.name for b in new]}; {len(acks)} acks,"
              f" {len(failures)} failed: {failures[-2:]}")  # fmt: skip
        assert resumed < RESUME_S, f"acks resumed {resumed:.2f} s after the cut"
    finally:
        stop.set()
        if worker.is_alive():
            worker.join(30)
        stop_all(group)
        for p in proxies:
            p.close()
