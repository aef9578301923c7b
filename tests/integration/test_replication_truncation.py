"""A divergent tail is cut by leader epoch, with real processes and a real etcd.

Two SYNC replicas (``--min-insync-replicas 2``). The leader takes acknowledged writes (both
replicas hold them), then the follower is paused (SIGSTOP) and the leader stores a tail nobody
copies (never acknowledged: SLAVE_PERSISTENCE_TIMEOUT). The leader is killed (-9) with that
tail on its disk; the follower resumes, leads (a later epoch) and takes writes; the old leader
restarts on the same data directory and follows. It must cut exactly its divergent tail (where
its epoch history and the new leader's part), fetch only what the new leader wrote since, and
then hold byte for byte the new leader's commit log; every acknowledged message is delivered,
no message of the cut tail ever is.
"""

from __future__ import annotations

import concurrent.futures
import json
import signal
from pathlib import Path
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from tests.integration.clients import consumer, drain
from tests.integration.conftest import BrokerProcess, wait_until
from tests.integration.test_replication import (
    FAILOVER_S,
    create_topic,
    group,  # noqa: F401  (fixture: 2 replicas, SYNC 2)
    leader_of,
    status,
)

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

BODY = 4096


def send_batch(endpoint: str, topic: str, ids: list[str]) -> tuple[int, str]:
    """One SendMessage carrying a message per id (each body BODY bytes): (code, message)."""
    msgs = [
        pb.Message(
            topic=pb.Resource(name=topic),
            body=(mid.encode() * BODY)[:BODY],
            system_properties=pb.SystemProperties(
                message_id=mid, body_encoding=pb.IDENTITY, message_type=pb.NORMAL
            ),
        )
        for mid in ids
    ]
    with grpc.insecure_channel(endpoint) as ch:
        try:
            r = sg.MessagingServiceStub(ch).SendMessage(
                sv.SendMessageRequest(messages=msgs), timeout=15
            )
        except grpc.RpcError as exc:
            return -1, str(exc.code())
    return r.status.code, r.status.message


def commit_log(data_dir: Path) -> bytes:
    """The replica's whole commit log, segment files in order."""
    d = data_dir / "store" / "commitlog"
    return b"".join((d / name).read_bytes() for name in sorted(p.name for p in d.iterdir()))


def test_an_old_leader_refetches_only_its_divergent_tail(group: list[BrokerProcess]) -> None:  # noqa: F811
    leader, follower = leader_of(group)
    wait_until(lambda: status(follower.endpoints).get("role") == "follower", 20, "a follower")
    create_topic(leader, follower, "t")
    acked: list[str] = []
    for b in range(40):  # ~2.6 MB acknowledged, on both replicas
        ids = [f"base-{b}-{i}" for i in range(16)]
        code, text = send_batch(leader.endpoints, "t", ids)
        assert code == pb.OK, text
        acked += ids
    # The follower stops copying; the leader stores a tail it can never acknowledge.
    assert follower.proc is not None
    follower.proc.send_signal(signal.SIGSTOP)
    try:
        # The paused follower's outstanding long poll is answered (empty) after
        # REPLICA_FETCH_WAIT_MS; a tail written before then could still reach it (see below).
        # Done when the leader holds no fetch and answers none between two looks.
        def fetches_done() -> bool:
            first = status(leader.endpoints)
            again = status(leader.endpoints)
            return first.get("fetches_parked") == again.get("fetches_parked") == 0 and first.get(
                "fetches_answered"
            ) == again.get("fetches_answered")

        wait_until(fetches_done, 10, "the paused follower's last fetch answered")
        tail = [[f"tail-{b}-{i}" for i in range(16)] for b in range(4)]
        with concurrent.futures.ThreadPoolExecutor(len(tail)) as pool:
            codes = list(pool.map(lambda ids: send_batch(leader.endpoints, "t", ids), tail))
        assert all(code != pb.OK for code, _ in codes), codes
        old_end = int(status(leader.endpoints)["end"])  # type: ignore[call-overload]
        leader.kill9()
    finally:
        follower.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: status(follower.endpoints).get("role") == "leader", FAILOVER_S, "failover")
    # The old leader comes back on its own disk, tail and all, and follows the new epoch.
    leader.start()
    wait_until(lambda: status(leader.endpoints).get("role") == "follower", 20, "old leader follows")
    for b in range(2):  # acknowledged once the old leader has caught up again (2 of 2)
        ids = [f"new-{b}-{i}" for i in range(16)]
        wait_until(lambda ids=ids: send_batch(follower.endpoints, "t", ids)[0] == pb.OK, 30, "ack")
        acked += ids
    new_end = int(status(follower.endpoints)["end"])  # type: ignore[call-overload]
    wait_until(lambda: status(leader.endpoints).get("end") == new_end, 20, "caught up")
    st: dict[str, Any] = status(leader.endpoints)
    (old_epoch, _), (new_epoch, agreed) = st["epochs"][-2:]
    assert new_epoch > old_epoch
    print(
        f"divergent tail: cut {st['truncated_bytes']} bytes at {agreed} of a {old_end}-byte log;"
        f" refetched {st['fetched_bytes']} bytes of the new leader's {new_end}"
    )
    assert st["truncations"] == 1
    # The whole stored tail and only it (a batch sent once the paused follower had left the
    # in-sync set may have been refused before it was stored).
    assert st["truncated_bytes"] == old_end - agreed > 16 * BODY
    assert st["fetched_bytes"] == new_end - agreed  # only the new leader's records
    assert st["fetched_bytes"] * 10 < new_end  # far less than the whole log
    c = consumer(follower.endpoints, "reader", "t")
    got: set[str] = set()
    try:
        for _ in range(10):  # bounded; a round ends once it got as many as are missing
            missing = len(set(acked) - got)
            if not missing:
                break
            got |= {m.message_id for m in drain(c, missing, timeout_s=20)}
    finally:
        c.shutdown()
    assert set(acked) <= got, f"lost {len(set(acked) - got)} acknowledged messages"
    # Had a tail batch reached the follower (the leader answering its long poll into the
    # socket, read by the paused process on resuming), it would stay in the new leader's log,
    # whole, never acknowledged; the rest of the tail is cut.
    kept = {m for m in got if m.startswith("tail-")}
    batches = {m.rsplit("-", 1)[0] for m in kept}
    assert kept == {f"{b}-{i}" for b in batches for i in range(16)}, kept  # whole batches
    # Stopped cleanly, the two commit logs are the same bytes.
    for b in group:
        b.stop()
    assert commit_log(leader.data_dir) == commit_log(follower.data_dir)
    assert json.loads(
        (leader.data_dir / "store" / "leader-epochs.json").read_bytes()
    ) == json.loads((follower.data_dir / "store" / "leader-epochs.json").read_bytes())
