"""A write its replicas cannot confirm is refused within the caller's own deadline, readably
(ADR 0006, "partitions"): real processes, a real etcd, the official Python client.

Two replicas, SYNC 2 of 2; the follower is killed, so no write can be confirmed. The official
client's send carries a 3 s deadline; the leader's replication bound is 5 s. The leader must
answer within the call's deadline (gRPC carries it) with SLAVE_PERSISTENCE_TIMEOUT and a
message naming the replica the write is missing on; before, the client saw DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from rocketmq.v5.exception import ProxyTimeoutException

from tests.integration.clients import message, producer
from tests.integration.test_replication import create_topic, leader_of, replica_group

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

SLAVE_PERSISTENCE_TIMEOUT = 50402
CLIENT_DEADLINE_S = 3.0  # rocketmq-python-client 5.1.2's request timeout
ATTEMPTS = 3  # its producer's attempts per send


def test_a_write_no_replica_can_confirm_is_refused_within_the_clients_deadline(
    tmp_path: Path,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    group = replica_group(tmp_path, etcd_endpoint, "refusals", ("r0", "r1"), 2)
    try:
        leader, follower = leader_of(group)
        create_topic(leader, follower, "refused")
        p = producer(leader.endpoints, ("refused",))
        try:
            p.send(message("refused", b"confirmed"))
            follower.kill9()
            started = time.monotonic()
            with pytest.raises(ProxyTimeoutException) as refused:
                p.send(message("refused", b"not confirmed"))
            took = time.monotonic() - started
        finally:
            p.shutdown()
        text = str(refused.value)
        print(f"refused after {took:.1f} s ({ATTEMPTS} attempts): {text}")
        assert refused.value.code == SLAVE_PERSISTENCE_TIMEOUT, text
        assert f"missing on {follower.data_dir.name}" in text and "call's deadline" in text, text
        assert took < ATTEMPTS * CLIENT_DEADLINE_S, took
    finally:
        for b in group:
            if b.running:
                b.stop()
