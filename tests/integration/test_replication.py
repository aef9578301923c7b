"""Replica groups with real processes, a real etcd and the official client.

Two replicas of one group (``txmq broker --etcd E --replica-group g``) with SYNC replication
(``--min-insync-replicas 2``): one leads, the other copies its log. Producers send and decide
transactions through the official client; the leader is killed with SIGKILL and its data
directory deleted; the follower must lead within 10 s and deliver every acknowledged message
and no rolled-back one.
"""

from __future__ import annotations

import json
import shutil
import signal
import struct
import time
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq import TransactionResolution as R
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from tests.integration.clients import Checker, consumer, drain, message, producer
from tests.integration.conftest import FAST, BrokerProcess, wait_until
from txmq.coordination.etcd import Etcd
from txmq.coordination.keys import insync_key

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)

FAILOVER_S = 10.0


def status(endpoint: str) -> dict[str, object]:
    """A replica's Replica.Status header ({} when it does not answer)."""
    with grpc.insecure_channel(endpoint) as ch:
        call = ch.unary_unary("/txmq.replica.v1.Replica/Status")
        try:
            reply = call(b"{}", timeout=2)
        except grpc.RpcError:
            return {}
    (n,) = struct.unpack_from(">I", reply, 0)
    doc: dict[str, object] = json.loads(reply[4 : 4 + n])
    return doc


def route(endpoint: str, topic: str) -> list[int]:
    """The ports QueryRoute at ``endpoint`` names for ``topic``, every address of every queue
    ([] when refused)."""
    with grpc.insecure_channel(endpoint) as ch:
        stub = sg.MessagingServiceStub(ch)
        r = stub.QueryRoute(sv.QueryRouteRequest(topic=pb.Resource(name=topic)), timeout=2)
    if r.status.code != pb.OK:
        return []
    return sorted({a.port for q in r.message_queues for a in q.broker.endpoints.addresses})


def follower_has_topic(follower: BrokerProcess, topic: str) -> bool:
    """The follower copied ``topic``'s definition (its topics file names it)."""
    path = follower.data_dir / "topics.json"
    return path.exists() and f'"{topic}"' in path.read_text()


def create_topic(leader: BrokerProcess, follower: BrokerProcess, topic: str) -> None:
    """Auto-create ``topic`` on the leader (a route query does) and wait for the follower to
    copy it; both advertise both replicas (ADR 0006)."""
    both = sorted([leader.port, follower.port])
    wait_until(lambda: route(leader.endpoints, topic) == both, 10, "both replicas in the route")
    wait_until(lambda: follower_has_topic(follower, topic), 10, "topic copied")
    wait_until(lambda: route(follower.endpoints, topic) == both, 10, "the follower lists both")


def replicas(tmp_path: Path, etcd: str, *extra: str) -> list[BrokerProcess]:
    out = []
    for name in ("r0", "r1"):
        b = BrokerProcess(
            tmp_path / name,
            [*FAST, "--etcd", etcd, "--replica-group", "g", "--broker-name", name, *extra],
        )
        b.start()
        out.append(b)
    return out


def replica_group(
    tmp_path: Path, etcd: str, group: str, names: tuple[str, ...], insync: int
) -> list[BrokerProcess]:
    """Replicas ``names`` of ``group`` (SYNC ``insync`` of them), started; a set an earlier
    run left in etcd for that group deleted first."""
    Etcd(etcd).delete(insync_key("txmq", group))
    out = []
    for name in names:
        b = BrokerProcess(
            tmp_path / name,
            [*FAST, "--etcd", etcd, "--replica-group", group, "--broker-name", name,
             "--min-insync-replicas", str(insync)],
        )  # fmt: skip
        b.start()
        out.append(b)
    return out


def leader_of(group: list[BrokerProcess]) -> tuple[BrokerProcess, BrokerProcess]:
    found: list[BrokerProcess] = []

    def one_leads() -> bool:
        found[:] = [b for b in group if b.running and status(b.endpoints).get("role") == "leader"]
        return len(found) == 1

    wait_until(one_leads, 20, "one replica to lead")
    leader = found[0]
    return leader, next(b for b in group if b is not leader)


@pytest.fixture
def group(tmp_path: Path, etcd_endpoint: str):  # type: ignore[no-untyped-def]  # noqa: F811
    started = replicas(tmp_path, etcd_endpoint, "--min-insync-replicas", "2")
    yield started
    for b in started:
        if b.running:
            b.stop()


def test_sync_replicas_fail_over_without_losing_an_acknowledged_message(group) -> None:  # type: ignore[no-untyped-def]
    leader, follower = leader_of(group)
    wait_until(lambda: status(follower.endpoints).get("role") == "follower", 20, "a follower")
    create_topic(leader, follower, "orders")
    # The producer is given the follower: its route names the leader, where it sends.
    p = producer(follower.endpoints, ("orders",), Checker(lambda m: R.ROLLBACK))
    sent, rolled = [], []
    try:
        for i in range(20):
            sent.append(p.send(message("orders", f"plain-{i}".encode())).message_id)
            tx = p.begin_transaction()
            ok = p.send(message("orders", f"commit-{i}".encode()), tx)
            tx.commit()
            sent.append(ok.message_id)
            tx = p.begin_transaction()
            no = p.send(message("orders", f"rollback-{i}".encode()), tx)
            tx.rollback()
            rolled.append(no.message_id)
    finally:
        p.shutdown()
    st = status(leader.endpoints)
    assert st["role"] == "leader" and "r0" in st["in_sync"] and "r1" in st["in_sync"], st
    # Every acknowledged write is on the follower already (SYNC): kill the leader, lose its disk.
    leader.kill9()
    shutil.rmtree(leader.data_dir)
    killed = time.monotonic()
    wait_until(lambda: status(follower.endpoints).get("role") == "leader", FAILOVER_S, "failover")
    took = time.monotonic() - killed
    print(f"failover: the follower led {took:.2f} s after the leader was killed")
    assert took < FAILOVER_S
    c = consumer(follower.endpoints, "billing", "orders")
    try:
        got = drain(c, len(sent), timeout_s=30)
    finally:
        c.shutdown()
    ids = [m.message_id for m in got]
    assert set(sent) <= set(ids), f"lost {set(sent) - set(ids)} after a {took:.1f} s failover"
    assert not set(rolled) & set(ids)
    bodies = {bytes(m.body).decode() for m in got}
    assert not any(b.startswith("rollback") for b in bodies)


def test_a_follower_forwards_data_calls_to_its_leader(group) -> None:  # type: ignore[no-untyped-def]
    leader, follower = leader_of(group)
    create_topic(leader, follower, "t")
    # A send to the follower is forwarded: stored and acknowledged by the leader (SYNC 2 of 2).
    code, text = _send_raw(follower.endpoints, "t", b"via-follower", "01")
    assert code == pb.OK, text
    receive = sv.ReceiveMessageRequest(
        group=pb.Resource(name="g"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="t")),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=1,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=1),
    )
    # The receive stream too: the message comes from the leader through the follower.
    with grpc.insecure_channel(follower.endpoints) as ch:
        got = list(sg.MessagingServiceStub(ch).ReceiveMessage(receive, timeout=10))
    bodies = [bytes(r.message.body) for r in got if r.HasField("message")]
    assert bodies == [b"via-follower"], got
    # The admin channel is not forwarded: refused, naming the leader.
    assert "follows" in _admin_list(follower.endpoints)


def _admin_list(endpoint: str) -> str:
    """The error text of an admin TopicList at ``endpoint`` ("" when it answered ok)."""
    with grpc.insecure_channel(endpoint) as ch:
        reply = ch.unary_unary("/txmq.admin.v1.Admin/TopicList")(b"{}", timeout=2)
    (n,) = struct.unpack_from(">I", reply, 0)
    doc = json.loads(reply[4 : 4 + n])
    return "" if doc.get("ok") else str(doc.get("error"))


def _send_raw(endpoint: str, topic: str, body: bytes, mid: str) -> tuple[int, str]:
    """One SendMessage over a fresh channel: (status code, message), or (-1, error) when the
    call itself failed (no acknowledgement either way)."""
    props = pb.SystemProperties(message_id=mid, body_encoding=pb.IDENTITY, message_type=pb.NORMAL)
    req = sv.SendMessageRequest(
        messages=[pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=props)]
    )
    with grpc.insecure_channel(endpoint) as ch:
        try:
            r = sg.MessagingServiceStub(ch).SendMessage(req, timeout=8)
        except grpc.RpcError as exc:
            return -1, str(exc.code())
    return r.status.code, r.status.message


def test_a_paused_leader_never_acknowledges_after_a_new_leader_is_chosen(group) -> None:  # type: ignore[no-untyped-def]
    leader, follower = leader_of(group)
    create_topic(leader, follower, "paused")
    assert _send_raw(leader.endpoints, "paused", b"before", "0A")[0] == pb.OK
    assert leader.proc is not None
    leader.proc.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: status(follower.endpoints).get("role") == "leader", FAILOVER_S, "lead")
    finally:
        leader.proc.send_signal(signal.SIGCONT)
    # The resumed process checks its lease before it acknowledges anything: lapsed. (It may
    # have written the record first: that tail is not the new leader's and is dropped below.)
    # Once it follows, it forwards the send to the new leader, which may acknowledge it: then it
    # must be delivered. Acknowledged => delivered, whichever replica answered.
    code, text = _send_raw(leader.endpoints, "paused", b"stale", "0C")
    print(f"a send to the resumed old leader: {code} {text}")
    # It goes back to following the new leader (its divergent tail dropped), routes to it, and
    # the new leader has its second in-sync replica again.
    wait_until(lambda: status(leader.endpoints).get("role") == "follower", 20, "old leader follows")
    # What it derived while leading is gone: its log is now the new leader's. (Consumer
    # positions are not checked here: a follower receives the new leader's positions about once
    # a second, so consumer-positions.json may already hold that copy.)
    for name in ("txn-snapshot.json", "delay.json"):
        assert not (leader.data_dir / name).exists(), name
    assert "dropping" in leader.log_tail(200)
    both = sorted([leader.port, follower.port])
    wait_until(lambda: route(leader.endpoints, "paused") == both, 10, "route")
    wait_until(
        lambda: _send_raw(follower.endpoints, "paused", b"after", "0D")[0] == pb.OK, 30, "ack"
    )
    c = consumer(follower.endpoints, "g1", "paused")
    try:
        bodies = [bytes(m.body) for m in drain(c, 3 if code == pb.OK else 2, timeout_s=20)]
    finally:
        c.shutdown()
    assert (b"stale" in bodies) == (code == pb.OK), (code, text, bodies)
    assert b"before" in bodies and b"after" in bodies, bodies


def test_a_killed_follower_stops_sync_acks_until_it_is_back(group) -> None:  # type: ignore[no-untyped-def]
    leader, follower = leader_of(group)
    create_topic(leader, follower, "f")
    assert _send_raw(leader.endpoints, "f", b"one", "1D")[0] == pb.OK
    follower.kill9()
    # min_insync_replicas 2 of 2: the write is stored on the leader but not acknowledged.
    code, text = _send_raw(leader.endpoints, "f", b"two", "1E")
    assert code == pb.SLAVE_PERSISTENCE_TIMEOUT, text
    c = consumer(leader.endpoints, "reader", "f")
    try:
        # Stored on the leader alone, so no reader sees it (a failover now could lose it): the
        # first receive that returns anything returns "one" alone (a loaded machine may take
        # many seconds to the first), and one more long poll after it finds nothing.
        seen = [bytes(m.body) for m in drain(c, 1, timeout_s=30)]
        seen += [bytes(m.body) for m in c.receive(32, 15) or []]
        assert seen == [b"one"], seen
        assert status(leader.endpoints)["held_records"] == 1
        follower.start()  # same data dir: it catches up from its own end offset
        wait_until(lambda: _send_raw(leader.endpoints, "f", b"three", "1F")[0] == pb.OK, 30, "acks")
        st = status(leader.endpoints)
        assert sorted(st["in_sync"]) == ["r0", "r1"], st  # type: ignore[call-overload]
        later = {bytes(m.body) for m in drain(c, 2, timeout_s=20)}
        assert {b"two", b"three"} <= later, later
    finally:
        c.shutdown()


def test_an_undecided_transaction_is_checked_back_by_the_new_leader(group) -> None:  # type: ignore[no-untyped-def]
    leader, follower = leader_of(group)
    create_topic(leader, follower, "pending")
    p = producer(leader.endpoints, ("pending",), Checker(lambda m: R.UNKNOWN))
    try:
        tx = p.begin_transaction()
        half = p.send(message("pending", b"decide me"), tx)  # acknowledged: on both replicas
    finally:
        p.shutdown()  # gone without deciding
    leader.kill9()
    shutil.rmtree(leader.data_dir)
    wait_until(lambda: status(follower.endpoints).get("role") == "leader", FAILOVER_S, "failover")
    # SYNC with 2 of 2: the decision the check-back brings is readable once a second replica
    # has it, so the lost machine comes back, empty, and copies the new leader's log.
    leader.start()
    checker = Checker(lambda m: R.COMMIT)
    p2 = producer(follower.endpoints, ("pending",), checker)
    c = consumer(follower.endpoints, "after", "pending")
    try:
        got = drain(c, 1, timeout_s=30)
    finally:
        c.shutdown()
        p2.shutdown()
    assert [m.message_id for m in got] == [half.message_id]
    assert half.message_id in checker.calls  # the new leader asked, the producer committed


def test_consumer_positions_survive_a_failover(group) -> None:  # type: ignore[no-untyped-def]
    leader, follower = leader_of(group)
    create_topic(leader, follower, "pos")
    for i in range(10):
        assert _send_raw(leader.endpoints, "pos", f"p{i}".encode(), f"2{i:07X}")[0] == pb.OK
    c = consumer(leader.endpoints, "keeper", "pos")
    try:
        assert len(drain(c, 10, timeout_s=20)) == 10  # all acked
    finally:
        c.shutdown()
    copy = follower.data_dir / "consumer-positions.json"

    def follower_has_acks() -> bool:
        rows = json.loads(copy.read_text())["positions"] if copy.exists() else []
        keeper = [r for r in rows if r["group"] == "keeper"]
        return bool(keeper) and sum(int(r["ack"]) for r in keeper) == 10

    wait_until(follower_has_acks, 10, "the follower's copy of the positions")
    leader.kill9()
    shutil.rmtree(leader.data_dir)
    wait_until(lambda: status(follower.endpoints).get("role") == "leader", FAILOVER_S, "failover")
    leader.start()  # SYNC 2 of 2: the new leader needs a second replica to take writes
    assert _send_raw(follower.endpoints, "pos", b"new", "3000000A")[0] in (pb.OK, 50402)
    wait_until(
        lambda: _send_raw(follower.endpoints, "pos", b"new", "3000000B")[0] == pb.OK, 30, "ack"
    )
    c = consumer(follower.endpoints, "keeper", "pos")
    try:
        again = [bytes(m.body) for m in drain(c, 11, timeout_s=6)]
    finally:
        c.shutdown()
    # The group carries on where it was: only what was sent after the failover.
    assert again and all(b == b"new" for b in again), again
