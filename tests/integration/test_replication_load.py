"""A leader keeps its lease while its process is alive, however busy the machine.

Real processes, a real etcd, the official Python client and raw SendMessage batches. A SYNC 2
group takes transactions and 1 MiB batches while CPU burners (bounded processes, ``while True:
pass``) load every core; the leader must not stop leading, the follower must not take over.
A soak in ``make test-slow`` (it loads the machine for LOAD_S): on main dc5a827, before the
keepalive had its own thread, it passed too (6 runs, load 10-14 on 2 cores: CPU load alone did
not make the loop's keepalives late by 300 ms). The deterministic check of the thread is
test_etcd_leadership.py's held-up loop; fencing is test_replication.py's paused leader.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from contextlib import ExitStack
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from tests.integration.clients import transaction_load
from tests.integration.conftest import wait_until
from tests.integration.test_replication import create_topic, leader_of, replica_group, status

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

LOAD_S = 30
PRODUCERS = 4
BATCH_SENDERS = 16  # each sends 64 messages of 16 KiB per call: 1 MiB to decode, store, ship
# Burners per core: the brokers, etcd and the clients share what is left.
BURNERS_PER_CORE = 6


def burners(stack: ExitStack, n: int, seconds: int) -> None:
    """``n`` busy processes, each ended by ``timeout`` after ``seconds`` at the latest, and by
    the stack's close (which waits for them) before that."""
    for _ in range(n):
        proc = subprocess.Popen(["timeout", str(seconds), sys.executable, "-c", "while True: pass"])
        stack.callback(proc.wait, 10)
        stack.callback(proc.terminate)


def send_batches(endpoint: str, topic: str, stop: threading.Event, sent: list[int]) -> None:
    """SendMessage calls of 64 messages of 16 KiB each until ``stop`` (at most 10,000)."""
    with grpc.insecure_channel(endpoint) as ch:
        stub = sg.MessagingServiceStub(ch)
        for n in range(10_000):
            if stop.is_set():
                return
            msgs = [
                pb.Message(
                    topic=pb.Resource(name=topic),
                    body=bytes(16 * 1024),
                    system_properties=pb.SystemProperties(
                        message_id=f"B{n:05d}{i:02d}", body_encoding=pb.IDENTITY,
                        message_type=pb.NORMAL,
                    ),
                )
                for i in range(64)
            ]  # fmt: skip
            try:
                r = stub.SendMessage(sv.SendMessageRequest(messages=msgs), timeout=10)
            except grpc.RpcError:
                continue  # not acknowledged: the leader's lease is what the test checks
            sent.append(r.status.code)


@pytest.mark.slow
def test_a_leader_keeps_its_lease_under_cpu_load(
    tmp_path: Path,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    group = replica_group(tmp_path, etcd_endpoint, "loaded", ("r0", "r1"), 2)
    try:
        leader, follower = leader_of(group)
        wait_until(lambda: status(follower.endpoints).get("role") == "follower", 20, "following")
        create_topic(leader, follower, "loaded")
        epoch = status(leader.endpoints).get("epoch")
        every = f"{leader.endpoints};{follower.endpoints}"
        committed: list[bytes] = []
        failures: list[str] = []
        stop = threading.Event()

        def produce() -> None:
            transaction_load(
                every, "loaded", stop, rollback_every=4, rolled=set(), failures=failures,
                committed=committed.append, backoff_s=0.05,
            )  # fmt: skip

        with ExitStack() as stack:
            burners(stack, BURNERS_PER_CORE * (os.cpu_count() or 1), LOAD_S + 30)
            workers = [threading.Thread(target=produce) for _ in range(PRODUCERS)]
            sent: list[int] = []
            workers += [
                threading.Thread(target=send_batches, args=(leader.endpoints, "loaded", stop, sent))
                for _ in range(BATCH_SENDERS)
            ]
            for w in workers:
                w.start()
            try:
                stop.wait(LOAD_S)  # sleep: the length of the load, not a synchronisation
            finally:
                stop.set()
                for w in workers:
                    w.join(60)
        lapsed = leader.log_tail(100_000).count("stopped leading")
        led = follower.log_tail(100_000).count("leading group as")
        now = status(leader.endpoints)
        print(
            f"{len(committed)} committed, {sent.count(pb.OK)} batches acknowledged"
            f" ({len(sent)} answered) in {LOAD_S} s under load, {len(failures)} failed"
            f" ({failures[-2:]}); leader stopped leading {lapsed} times, follower led {led}"
            f" times; epoch {epoch} -> {now.get('epoch')}"
        )
        # Work was acknowledged under the load (transactions may all time out there: FAST's
        # 800 ms transaction timeout, and the producers' checker answers rollback).
        assert committed or pb.OK in sent, failures[-3:]
        assert (lapsed, led) == (0, 0), leader.log_tail(30)
        assert now.get("role") == "leader" and now.get("epoch") == epoch, now
    finally:
        for b in group:
            if b.running:
                b.stop()
