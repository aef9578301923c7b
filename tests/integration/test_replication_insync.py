"""The in-sync set lives in etcd (ADR 0005): three replicas, min_insync_replicas 2.

A follower is paused (SIGSTOP) while writes go on: acks continue once the leader has stored the
smaller set in etcd. The leader is then killed (SIGKILL) and the paused follower resumed: it
believes itself in sync by its last fetch, but the stored set does not name it, so it must not
lead (it lacks the last acknowledged writes); the other follower does, and every acknowledged
message is delivered.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from tests.integration.clients import consumer, drain
from tests.integration.conftest import wait_until
from tests.integration.test_replication import (
    _send_raw,
    follower_has_topic,
    replica_group,
    route,
    status,
)
from txmq.coordination.etcd import Etcd
from txmq.coordination.keys import insync_key

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

GROUP = "isr3"
NAMES = ("r0", "r1", "r2")


def stored_set(etcd: str) -> list[str]:
    kv = Etcd(etcd).get(insync_key("txmq", GROUP))
    return sorted(json.loads(kv.value)["members"]) if kv is not None else []


@pytest.fixture
def group(tmp_path: Path, etcd_endpoint: str):  # type: ignore[no-untyped-def]  # noqa: F811
    started = replica_group(tmp_path, etcd_endpoint, GROUP, NAMES, 2)
    yield started
    for b in started:
        if b.proc is not None and b.running:
            b.proc.send_signal(signal.SIGCONT)
            b.stop()


def test_a_follower_dropped_from_the_stored_set_never_leads(group, etcd_endpoint) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    names = dict(zip(NAMES, group, strict=True))
    wait_until(
        lambda: sum(status(b.endpoints).get("role") == "leader" for b in group) == 1, 20, "a leader"
    )
    leader = next(b for b in group if status(b.endpoints).get("role") == "leader")
    paused, other = (b for b in group if b is not leader)
    every = sorted(b.port for b in group)
    wait_until(lambda: route(leader.endpoints, "t") == every, 15, "every replica in the route")
    wait_until(lambda: follower_has_topic(paused, "t") and follower_has_topic(other, "t"), 15, "t")
    acked: list[bytes] = []

    def send(body: bytes) -> bool:
        code, _ = _send_raw(leader.endpoints, "t", body, body.hex().upper()[:32])
        if code == pb.OK:
            acked.append(body)
        return code == pb.OK

    wait_until(lambda: send(b"m-first"), 20, "a first ack")
    wait_until(lambda: stored_set(etcd_endpoint) == sorted(NAMES), 15, "all three stored")

    assert paused.proc is not None
    paused.proc.send_signal(signal.SIGSTOP)
    # Acks continue once etcd no longer names the paused follower (until then they wait for it).
    for i in range(5):
        wait_until(lambda i=i: send(f"m-{i}".encode()), 20, f"ack {i}")
    want = sorted(n for n, b in names.items() if b is not paused)
    assert stored_set(etcd_endpoint) == want

    leader.kill9()
    paused.proc.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and status(other.endpoints).get("role") != "leader":
        assert status(paused.endpoints).get("role") != "leader", "the paused follower leads"
        time.sleep(0.1)  # sleep: poll interval of this bounded wait (each pass checks both roles)
    assert status(other.endpoints).get("role") == "leader", status(other.endpoints)
    assert status(paused.endpoints).get("role") != "leader"

    c = consumer(other.endpoints, "reader", "t")
    try:
        got = {bytes(m.body) for m in drain(c, len(acked), timeout_s=30)}
    finally:
        c.shutdown()
    assert set(acked) <= got, (acked, got)
    # The resumed follower catches up from the new leader and is stored again.
    wait_until(lambda: status(paused.endpoints).get("role") == "follower", 20, "it follows")
