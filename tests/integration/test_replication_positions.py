"""Consumer positions survive a failover whatever order the group acknowledged in (ADR 0006,
"consumer positions"): real processes, a real etcd, the official Python client.

Two replicas, SYNC 2 of 2. A SimpleConsumer group receives every message and acknowledges all
but a few, out of order (the holes stay invisible, unacknowledged, across the fault), so its
position on each queue is an ack offset below the holes with acknowledged offsets above them.
After the documented window the leader is killed (kill -9, data directory deleted) and comes
back empty; the group, reading from the new leader, must get again only what it had not
acknowledged: the holes. Nothing it acknowledged more than the window before the fault.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from rocketmq.grpc_protocol import definition_pb2 as pb

from tests.integration.clients import consumer
from tests.integration.conftest import wait_until
from tests.integration.test_replication import (
    FAILOVER_S,
    _send_raw,
    create_topic,
    leader_of,
    replica_group,
    status,
)

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

MESSAGES = 60
HOLE_EVERY = 7  # every 7th message received is left unacknowledged
HOLD_S = 120  # the holes stay invisible across the fault
# Acknowledgements reach the followers at most this long after they were made (positions ride
# on a fetch every REPLICA_TOPICS_PERIOD_MS, 1 s): the documented window, with margin.
WINDOW_S = 2.5


def test_acknowledgements_above_a_hole_survive_a_failover(
    tmp_path: Path,
    etcd_endpoint: str,  # noqa: F811
) -> None:
    group = replica_group(tmp_path, etcd_endpoint, "positions", ("r0", "r1"), 2)
    try:
        leader, follower = leader_of(group)
        create_topic(leader, follower, "pos")
        for i in range(MESSAGES):
            code, text = _send_raw(leader.endpoints, "pos", f"p{i}".encode(), f"4{i:07X}")
            assert code == pb.OK, text
        c = consumer(leader.endpoints, "keeper", "pos")
        acked: set[bytes] = set()
        holes: set[bytes] = set()
        try:
            deadline = time.monotonic() + 30
            while len(acked) + len(holes) < MESSAGES and time.monotonic() < deadline:
                got = c.receive(32, HOLD_S) or []
                # Acknowledged newest first: every ack lands above an unacknowledged offset.
                for n, m in enumerate(reversed(got)):
                    if n % HOLE_EVERY == 0:
                        holes.add(bytes(m.body))
                    else:
                        c.ack(m)
                        acked.add(bytes(m.body))
        finally:
            c.shutdown()
        assert len(acked) + len(holes) == MESSAGES
        time.sleep(WINDOW_S)  # sleep: the documented window itself, after the last ack
        leader.kill9()
        shutil.rmtree(leader.data_dir)
        wait_until(lambda: status(follower.endpoints).get("role") == "leader", FAILOVER_S, "lead")
        leader.start()  # SYNC 2 of 2: back, empty, it copies the new leader's log
        wait_until(lambda: _send_raw(follower.endpoints, "pos", b"after", "5000000A")[0] == pb.OK,
                   30, "an ack after the failover")  # fmt: skip
        again: list[bytes] = []
        c = consumer(follower.endpoints, "keeper", "pos")
        try:
            # Until the holes and the new message came, then one more long poll for anything
            # else (a message acknowledged before the fault would come with them).
            want = holes | {b"after"}
            deadline = time.monotonic() + 20
            while not want <= set(again) and time.monotonic() < deadline:
                again += [bytes(m.body) for m in c.receive(32, HOLD_S) or []]
            again += [bytes(m.body) for m in c.receive(32, HOLD_S) or []]
        finally:
            c.shutdown()
        redelivered = sorted(set(again) & acked)
        print(
            f"acked {len(acked)} out of order, {len(holes)} holes; after the failover:"
            f" {len(again)} delivered, {len(redelivered)} acknowledged before the window"
        )
        assert not redelivered, f"acknowledged before the fault, delivered again: {redelivered}"
        assert want <= set(again), sorted(want - set(again))
    finally:
        for b in group:
            if b.running:
                b.stop()
