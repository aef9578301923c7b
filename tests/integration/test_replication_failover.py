"""Clients fail over fast (ADR 0006): routes carry every replica's address and a
follower forwards data calls to its leader, so the official client given every replica needs no
new route after the leader is killed.

Real processes, a real etcd, the official Python client (unmodified). The client builds one gRPC
channel per route entry with its addresses sorted (``ipv4:a,b,c``) and gRPC's pick_first dials
the first that answers; the ports here are chosen so that the client is connected either to the
leader (the connection dies with it: the client dials the next replica) or to a follower (which
forwards; after the failover, to the new leader).
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from rocketmq import TransactionResolution as R

from tests.integration.clients import Checker, consumer, drain, message, producer, transaction_load
from tests.integration.conftest import FAST, BrokerProcess, wait_until
from tests.integration.test_replication import route, status

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

# The bound for a follower to lead is 10 s; the clients must commit again within it too.
COMMIT_AGAIN_S = 10.0


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports, ascending (held open together so none repeats)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return sorted(s.getsockname()[1] for s in socks)


def start_group(
    tmp_path: Path, etcd: str, group_name: str, ports: list[int], *extra: str
) -> list[BrokerProcess]:
    """Replicas r0, r1, ... of ``group_name`` on ``ports``; r0 starts alone and leads before the
    others start. (A group's replica list stays in etcd, which the tests share: one group name
    per test.)"""
    group = []
    for i, port in enumerate(ports):
        name = f"r{i}"
        b = BrokerProcess(
            tmp_path / name,
            [*FAST, "--etcd", etcd, "--replica-group", group_name, "--broker-name", name, *extra],
            port=port,
        )
        b.start()
        group.append(b)
        if i == 0:
            wait_until(lambda b=b: status(b.endpoints).get("role") == "leader", 20, "r0 leads")
    return group


def ready(group: list[BrokerProcess], topic: str) -> None:
    """``topic`` created on the leader (group[0]) and every replica lists every replica."""
    every = sorted(b.port for b in group)
    for b in group:
        wait_until(
            lambda b=b: route(b.endpoints, topic) == every, 15, f"{b.data_dir.name} lists all"
        )
    for b in group[1:]:
        wait_until(lambda b=b: status(b.endpoints).get("role") == "follower", 15, "following")


def stop_all(group: list[BrokerProcess]) -> None:
    for b in group:
        if b.running:
            b.stop()


def test_transactions_commit_again_within_seconds_of_killing_the_leader(
    tmp_path: Path,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    # Three replicas, SYNC 2: one lost machine leaves two, enough to acknowledge. The leader
    # has the lowest port, so the client is connected to it when it dies.
    group = start_group(
        tmp_path, etcd_endpoint, "fast", free_ports(3), "--min-insync-replicas", "2"
    )
    try:
        ready(group, "fast")
        leader = group[0]
        every = ";".join(b.endpoints for b in group)
        committed: list[tuple[float, bytes]] = []
        rolled: set[bytes] = set()
        failures: list[str] = []
        stop = threading.Event()

        def produce() -> None:
            transaction_load(
                every, "fast", stop, rollback_every=4, rolled=rolled, failures=failures,
                committed=lambda body: committed.append((time.monotonic(), body)),
                backoff_s=0.05,
            )  # fmt: skip

        worker = threading.Thread(target=produce)
        worker.start()
        try:
            wait_until(lambda: len(committed) >= 10, 30, "commits before the fault")
            leader.kill9()
            killed = time.monotonic()
            shutil.rmtree(leader.data_dir)
            wait_until(lambda: committed[-1][0] > killed, 30, "a commit after the kill")
            took = next(t for t, _ in committed if t > killed) - killed
            after = len(committed)
            wait_until(lambda: len(committed) >= after + 10, 20, "load carries on")
        finally:
            stop.set()
            worker.join(30)
        print(f"kill -9 -> first commit: {took:.2f} s; {len(committed)} committed, "
              f"{len(rolled)} rolled back, {len(failures)} failed: {failures[-2:]}")  # fmt: skip
        bodies = {b for _, b in committed}
        c = consumer(";".join(b.endpoints for b in group[1:]), "check", "fast")
        got: set[bytes] = set()
        try:
            # Until every acknowledged body came, not a count of messages: a commit whose reply
            # the kill cut off (a failure above) may have landed, and is delivered too.
            deadline = time.monotonic() + 30
            while not bodies <= got and time.monotonic() < deadline:
                want = len(bodies - got)
                got |= {bytes(m.body) for m in drain(c, want, deadline - time.monotonic())}
        finally:
            c.shutdown()
        assert bodies <= got, f"lost {sorted(bodies - got)[:10]}"
        assert not rolled & got, f"delivered rolled back {sorted(rolled & got)[:10]}"
        assert took < COMMIT_AGAIN_S, f"first commit {took:.2f} s after the kill"
    finally:
        stop_all(group)


def test_a_producer_connected_to_a_follower_gets_its_check_back(
    tmp_path: Path,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    # The leader has the highest port: the client's channel dials the follower first, and its
    # Telemetry stream (the check-back channel) is forwarded to the leader.
    low, high = free_ports(2)
    group = start_group(
        tmp_path, etcd_endpoint, "checked", [high, low], "--min-insync-replicas", "2"
    )
    try:
        ready(group, "checked")
        follower = group[1]
        checker = Checker(lambda m: R.COMMIT)
        p = producer(follower.endpoints, ("checked",), checker)
        try:
            tx = p.begin_transaction()
            half = p.send(message("checked", b"ask me"), tx)  # never decided by the app
            wait_until(lambda: half.message_id in checker.calls, 20, "the leader's check-back")
        finally:
            p.shutdown()
        forwarded = status(follower.endpoints).get("forwarded", 0)
        assert isinstance(forwarded, int) and forwarded > 0, "the client went to the follower"
        c = consumer(follower.endpoints, "after", "checked")
        try:
            got = drain(c, 1, timeout_s=20)
        finally:
            c.shutdown()
        assert [m.message_id for m in got] == [half.message_id]
    finally:
        stop_all(group)
