"""Failover under load with the official client (slow): producers sending and deciding
transactions and a consumer acking, all given both replicas' endpoints, while the leader is
killed with SIGKILL and its data directory deleted. Every committed-and-acknowledged message is
delivered; no rolled-back one ever is."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from tests.integration.clients import consumer, transaction_load
from tests.integration.conftest import wait_until
from tests.integration.test_replication import (
    FAILOVER_S,
    create_topic,
    leader_of,
    replicas,
    status,
)

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

# Routes carry both replicas' addresses and a follower forwards to its leader (ADR 0006): the
# client dials the surviving replica at once and commits again within seconds of the kill (no
# route refresh needed); test_replication_failover.py bounds that time in the default suite.
LOAD_S = 20.0
DELIVERY_S = 60.0


@pytest.mark.slow
def test_clients_carry_on_through_a_failover(tmp_path: Path, etcd_endpoint: str) -> None:  # noqa: F811
    group = replicas(tmp_path, etcd_endpoint, "--min-insync-replicas", "2")
    try:
        leader, follower = leader_of(group)
        create_topic(leader, follower, "load")
        both = f"{leader.endpoints};{follower.endpoints}"
        committed: set[bytes] = set()
        rolled: set[bytes] = set()
        failures: list[str] = []
        received: set[bytes] = set()
        consume_errors: list[str] = []
        stop = threading.Event()

        def produce() -> None:
            # back off 0.2 s after a failed call while the routes move to the new leader
            transaction_load(
                both, "load", stop, rollback_every=3, committed=committed.add, rolled=rolled,
                failures=failures, backoff_s=0.2,
            )  # fmt: skip

        def consume() -> None:
            c = consumer(both, "loader", "load")
            end = time.monotonic() + LOAD_S + DELIVERY_S
            try:
                while time.monotonic() < end and (not stop.is_set() or not committed <= received):
                    try:
                        for m in c.receive(32, 10):
                            received.add(bytes(m.body))
                            c.ack(m)
                    except Exception as exc:  # the old leader is gone: a new one is chosen
                        consume_errors.append(repr(exc)[:120])
                        stop.wait(0.2)  # back off, as a consumer application would
            finally:
                c.shutdown()

        threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
        for t in threads:
            t.start()
        wait_until(lambda: len(committed) >= 20, 30, "load before the fault")
        leader.kill9()
        shutil.rmtree(leader.data_dir)
        wait_until(lambda: status(follower.endpoints).get("role") == "leader", FAILOVER_S, "lead")
        leader.start()  # back, empty: it copies the new leader's log (SYNC 2 of 2)
        before = len(committed)
        deadline = time.monotonic() + LOAD_S
        wait_until(lambda: len(committed) > before + 20 or time.monotonic() > deadline,
                   LOAD_S + 5, "load after the failover")  # fmt: skip
        stop.set()
        threads[0].join(30)
        threads[1].join(DELIVERY_S)
        print(f"last failed send: {failures[-1:]}, last failed receive: {consume_errors[-1:]}")
        print(f"committed {len(committed)}, rolled back {len(rolled)}, failed sends"
              f" {len(failures)}, failed receives {len(consume_errors)}")  # fmt: skip
        assert len(committed) > before, f"no commit after the failover: {failures[-3:]}"
        assert committed <= received, f"lost {sorted(committed - received)[:10]}"
        assert not rolled & received, f"delivered rolled back {sorted(rolled & received)[:10]}"
    finally:
        for b in group:
            if b.running:
                b.stop()
