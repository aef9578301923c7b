"""A follower learns that the group acknowledged a write without waiting for the next write
(issue 19, ADR 0005 "On open"): real processes, a real etcd, reads through the Spark
connector's client (the helpers of test_replication_visibility.py)."""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

from tests.integration.conftest import BrokerProcess
from tests.integration.test_replication import _send_raw
from tests.integration.test_replication_visibility import (
    TOPIC,
    _bodies,
    _leader,
    _setup,
    two,  # noqa: F401  (fixture: 2 replicas, SYNC 2 of 2)
)

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)


def test_a_promoted_follower_shows_the_last_acknowledged_write(two: list[BrokerProcess]) -> None:  # noqa: F811
    """Two replicas, SYNC 2 of 2. A send is acknowledged, nothing is written after it, and the
    leader is killed -9 right after the ack. The follower leads and shows the send at once:
    its leader answered the follower's long poll as soon as the group's durable end passed what
    it had told it. Before, the follower learnt of the ack only with the next write or after
    REPLICA_FETCH_WAIT_MS, so as the new leader it held the acknowledged send back until the
    old leader was back (fails so on the code before: [b"acked"])."""
    leader = _setup(two)
    (follower,) = (b for b in two if b is not leader)
    code, text = _send_raw(leader.endpoints, TOPIC, b"last", "0C")
    assert code == pb.OK, text
    leader.kill9()
    assert _leader(two) is follower
    assert _bodies(follower.endpoints) == [b"acked", b"last"]
