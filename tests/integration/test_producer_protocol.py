"""The broker's protocol edges, spoken with the generated v2 stubs against a real broker process:
malformed and refused requests answer a Status (never a crash, never a gRPC error), the RPCs
txmq does not implement answer UNSUPPORTED, the Telemetry handshake echoes Settings and survives
the client's stream rebuild, metrics are served, and SIGTERM shuts down cleanly.

Method: raw grpc calls with the official client's stubs and ``x-mq-client-id`` metadata; after
every abuse the broker must still serve an official-client producer."""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from tests.integration.clients import message, producer
from tests.integration.conftest import FAST, BrokerProcess
from tests.ports import free_port
from txmq import errors, limits

TIMEOUT_S = 15


@pytest.fixture
def stub(broker: BrokerProcess) -> Iterator[Any]:
    channel = grpc.insecure_channel(broker.endpoints)
    yield sg.MessagingServiceStub(channel)
    channel.close()


def meta(client_id: str = "test-client") -> list[tuple[str, str]]:
    return [("x-mq-client-id", client_id)]


def wire(topic: str, body: bytes = b"x", **sp: Any) -> Any:
    m = pb.Message(body=body)
    m.topic.name = topic
    m.system_properties.message_id = sp.pop("message_id", uuid.uuid4().hex)
    m.system_properties.keys.extend(sp.pop("keys", []))
    m.user_properties.update(sp.pop("user", {}))
    for k, v in sp.items():
        setattr(m.system_properties, k, v)
    return m


def send(stub: Any, *messages: Any) -> Any:
    return stub.SendMessage(
        sv.SendMessageRequest(messages=list(messages)), metadata=meta(), timeout=TIMEOUT_S
    )


def still_serves(broker: BrokerProcess) -> None:
    assert broker.running, broker.log_tail()
    p = producer(broker.endpoints, ("alive",))
    try:
        assert p.send(message("alive", b"still here")).message_id
    finally:
        p.shutdown()


def test_refused_sends_answer_a_status_and_store_nothing(broker: BrokerProcess, stub: Any) -> None:
    cases = [
        (wire("bad topic"), pb.ILLEGAL_TOPIC),
        (wire("RMQ_SYS_TRANS_HALF_TOPIC"), pb.ILLEGAL_TOPIC),
        (wire("p1", b""), pb.BAD_REQUEST),
        (wire("p1", b"x" * (4 * 1024 * 1024 + 1)), pb.MESSAGE_BODY_TOO_LARGE),
        (wire("p1", message_id=""), pb.ILLEGAL_MESSAGE_ID),
        (wire("p1", tag="a||b"), pb.ILLEGAL_MESSAGE_TAG),
        (wire("p1", message_type=pb.FIFO), pb.ILLEGAL_MESSAGE_GROUP),
        (
            wire("p1", message_type=pb.NORMAL, message_group="g"),
            pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        (wire("p1", message_type=pb.DELAY), pb.ILLEGAL_DELIVERY_TIME),
        (wire("p1", keys=["a\0b"]), pb.ILLEGAL_MESSAGE_KEY),
        (wire("p1", user={"big": "v" * 40_000}), pb.MESSAGE_PROPERTIES_TOO_LARGE),
        (
            wire("p1", user={"big": "v" * 40_000}, message_type=pb.TRANSACTION),
            pb.MESSAGE_PROPERTIES_TOO_LARGE,
        ),
    ]
    for msg, code in cases:
        r = send(stub, msg)
        assert r.status.code == code, (msg.topic.name, r.status)
        assert r.entries[0].status.code == code
        assert r.status.message, "a refusal says why"
    empty = stub.SendMessage(sv.SendMessageRequest(), metadata=meta(), timeout=TIMEOUT_S)
    assert empty.status.code == pb.BAD_REQUEST
    ok = send(stub, wire("p1", b"fine"))
    assert ok.status.code == pb.OK and ok.entries[0].offset == 0, "nothing refused was stored"
    still_serves(broker)


def test_a_typed_topic_refuses_other_message_types(broker: BrokerProcess, stub: Any) -> None:
    channel = grpc.insecure_channel(broker.endpoints)
    create = channel.unary_unary("/txmq.admin.v1.Admin/TopicCreate")
    raw = create(json.dumps({"name": "fifo-only", "type": "fifo"}).encode())
    channel.close()
    # The admin reply is the data channel's frame without payload (docs/formats.md).
    n = int.from_bytes(raw[:4], "big")
    assert len(raw) == 4 + n, "nothing after the header"
    reply = json.loads(raw[4:])
    assert reply["ok"], reply
    r = send(stub, wire("fifo-only", message_type=pb.NORMAL))
    assert r.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert (
        send(stub, wire("fifo-only", message_type=pb.FIFO, message_group="g")).status.code == pb.OK
    )
    route = stub.QueryRoute(
        sv.QueryRouteRequest(topic=pb.Resource(name="fifo-only")), metadata=meta(), timeout=10
    )
    assert {tuple(q.accept_message_types) for q in route.message_queues} == {(pb.FIFO,)}


def test_route_has_read_write_queues_on_this_broker(broker: BrokerProcess, stub: Any) -> None:
    r = stub.QueryRoute(
        sv.QueryRouteRequest(topic=pb.Resource(name="routed")), metadata=meta(), timeout=10
    )
    assert r.status.code == pb.OK
    assert [q.id for q in r.message_queues] == [0, 1, 2, 3]
    for q in r.message_queues:
        assert q.permission == pb.READ_WRITE and q.broker.id == 0
        assert q.broker.endpoints.addresses[0].port == broker.port
        assert set(q.accept_message_types) == {pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION}
    bad = stub.QueryRoute(
        sv.QueryRouteRequest(topic=pb.Resource(name="no spaces")), metadata=meta(), timeout=10
    )
    assert bad.status.code == pb.ILLEGAL_TOPIC


def test_unimplemented_rpcs_answer_unsupported(broker: BrokerProcess, stub: Any) -> None:
    r = stub.RecallMessage(sv.RecallMessageRequest(), metadata=meta(), timeout=10)
    assert r.status.code == pb.UNSUPPORTED and "RecallMessage" in r.status.message
    r = stub.SyncLiteSubscription(sv.SyncLiteSubscriptionRequest(), metadata=meta(), timeout=10)
    assert r.status.code == pb.UNSUPPORTED


def test_bad_end_transaction_and_heartbeat_answer_statuses(
    broker: BrokerProcess, stub: Any
) -> None:
    end = stub.EndTransaction(
        sv.EndTransactionRequest(
            topic=pb.Resource(name="p1"),
            message_id="m",
            transaction_id="nope",
            resolution=pb.COMMIT,
        ),
        metadata=meta(),
        timeout=10,
    )
    assert end.status.code == pb.INVALID_TRANSACTION_ID
    end = stub.EndTransaction(
        sv.EndTransactionRequest(transaction_id="x"), metadata=meta(), timeout=10
    )
    assert end.status.code == pb.BAD_REQUEST, "no resolution"
    hb = stub.Heartbeat(sv.HeartbeatRequest(), timeout=10)
    assert hb.status.code == pb.CLIENT_ID_REQUIRED
    assert stub.Heartbeat(sv.HeartbeatRequest(), metadata=meta(), timeout=10).status.code == pb.OK


def test_garbage_bytes_do_not_hurt_the_broker(broker: BrokerProcess) -> None:
    channel = grpc.insecure_channel(broker.endpoints)
    # Bytes that do not parse get the RPC's own reply with BAD_REQUEST (broker/rpc/decode.py), a
    # status RocketMQ clients read, rather than gRPC's UNKNOWN.
    for method in ("SendMessage", "EndTransaction", "QueryRoute", "Heartbeat"):
        reply_type = getattr(sv, f"{method}Response")
        call = channel.unary_unary(
            f"/apache.rocketmq.v2.MessagingService/{method}",
            response_deserializer=reply_type.FromString,
        )
        reply = call(b"\xff\xfe not a protobuf \x00" * 7, timeout=10)
        assert reply.status.code == errors.CODE_BAD_REQUEST, method
    channel.close()
    still_serves(broker)


class TelemetryStream:
    """One raw Telemetry stream: commands in through a queue, replies read by a thread."""

    def __init__(self, stub: Any, client_id: str) -> None:
        self.requests: queue.Queue[Any] = queue.Queue()
        self.replies: queue.Queue[Any] = queue.Queue()
        self.call = stub.Telemetry(iter(self.requests.get, None), metadata=meta(client_id))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for reply in self.call:
                self.replies.put(reply)
        except grpc.RpcError as exc:
            self.replies.put(exc)

    def settings(self, topics: tuple[str, ...]) -> Any:
        """Send Settings publishing ``topics``; the reply naming them (the broker repeats a
        stream's first reply, so an earlier reply may still arrive and is skipped)."""
        s = pb.Settings(client_type=pb.PRODUCER)
        for t in topics:
            s.publishing.topics.add(name=t)
        self.requests.put(sv.TelemetryCommand(settings=s))
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            reply = self.replies.get(timeout=max(0.0, deadline - time.monotonic()))
            if not isinstance(reply, sv.TelemetryCommand):
                return reply
            named = tuple(t.name for t in reply.settings.publishing.topics)
            if named in (topics, ()):
                return reply

    def close(self) -> None:
        self.requests.put(None)
        self.call.cancel()


def test_telemetry_echoes_settings_and_survives_a_stream_rebuild(
    broker: BrokerProcess, stub: Any
) -> None:
    """The official client rebuilds its stream (same client id) when a settings write fails,
    cancelling the old stream after opening the new one; the new one must keep working."""
    old = TelemetryStream(stub, "rebuilder")
    reply = old.settings(("t-rebuild",))
    assert reply.status.code == pb.OK
    assert [t.name for t in reply.settings.publishing.topics] == ["t-rebuild"]
    assert reply.settings.publishing.max_body_size == 4 * 1024 * 1024
    new = TelemetryStream(stub, "rebuilder")
    assert new.settings(("t-rebuild",)).status.code == pb.OK
    old.close()
    again = new.settings(("t-rebuild", "t-again"))
    assert again.status.code == pb.OK, "the new stream still answers after the old one ended"
    new.close()


def test_first_settings_reply_is_repeated(broker: BrokerProcess, stub: Any) -> None:
    """The Node.js client with several topics starts waiting for the Settings reply only after
    fetching every route and drops a prompt reply; a stream's first reply comes again
    at each of limits.SETTINGS_REPEAT_DELAYS_MS, later Settings are answered once."""
    stream = TelemetryStream(stub, "repeat")
    first = stream.settings(("t-repeat",))
    assert first.status.code == pb.OK
    started = time.monotonic()
    repeats = [stream.replies.get(timeout=TIMEOUT_S) for _ in limits.SETTINGS_REPEAT_DELAYS_MS]
    waited_s = time.monotonic() - started
    assert all(r == first for r in repeats), "the same reply, again"
    assert waited_s >= limits.SETTINGS_REPEAT_DELAYS_MS[-1] / 1000 * 0.9
    later = stream.settings(("t-repeat", "t-other"))
    assert [t.name for t in later.settings.publishing.topics] == ["t-repeat", "t-other"]
    with pytest.raises(queue.Empty):  # bounded wait for a repeat that must not come
        stream.replies.get(timeout=limits.SETTINGS_REPEAT_DELAYS_MS[0] / 1000 * 2)
    stream.close()


def test_concurrent_calls_on_one_channel_each_read_their_own_client_id(
    broker: BrokerProcess, stub: Any
) -> None:
    """The broker reads a call's metadata from the tuple gRPC built for its handler lookup
    (calls.call_metadata): calls in flight together on one connection, with and without a
    client id, each answer by their own headers."""
    calls = [
        stub.Heartbeat.future(
            sv.HeartbeatRequest(), metadata=meta(f"c{i}") if i % 2 else None, timeout=10
        )
        for i in range(40)
    ]
    codes = [c.result().status.code for c in calls]
    assert codes == [pb.OK if i % 2 else pb.CLIENT_ID_REQUIRED for i in range(40)]


def test_telemetry_without_client_id_is_refused(broker: BrokerProcess, stub: Any) -> None:
    call = stub.Telemetry(iter([sv.TelemetryCommand()]), timeout=10)
    replies = list(call)
    assert [r.status.code for r in replies] == [pb.CLIENT_ID_REQUIRED]


def test_metrics_endpoint_and_clean_shutdown(tmp_path: Path) -> None:
    port = free_port()  # prometheus_client cannot report a port it picked itself
    b = BrokerProcess(tmp_path / "m", [*FAST, "--metrics-port", str(port)])
    b.start()
    try:
        p = producer(b.endpoints, ("metered",))
        for i in range(3):
            p.send(message("metered", f"{i}".encode()))
        p.shutdown()
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        lines = text.decode().splitlines()
        assert 'txmq_messages_sent_total{type="normal"} 3.0' in lines
        assert any(line.startswith("txmq_store_append_seconds_count") for line in lines)
        assert any(line.startswith("txmq_transactions_pending") for line in lines)
    finally:
        assert b.stop() == 0, b.log_tail()
    assert not (tmp_path / "m" / "store" / "abort").exists(), "SIGTERM closes the store cleanly"
    assert "broker stopped cleanly" in b.log_tail()


def test_a_batched_send_answers_each_message_in_order(broker: BrokerProcess, stub: Any) -> None:
    """A request's normal messages share one append; refused ones get their own status and
    are not stored; a transactional one in the same request stays a half message."""
    batch = [
        wire("mix", b"a"),
        wire("mix", b""),
        wire("mix", b"b", message_type=pb.TRANSACTION),
        wire("mix", b"c", keys=["a\0b"]),
        wire("mix", b"d"),
    ]
    r = send(stub, *batch)
    codes = [e.status.code for e in r.entries]
    assert codes == [pb.OK, pb.BAD_REQUEST, pb.OK, pb.ILLEGAL_MESSAGE_KEY, pb.OK]
    assert r.status.code == pb.BAD_REQUEST, "the top status is the first refusal"
    assert [e.message_id for e in r.entries] == [m.system_properties.message_id for m in batch]
    assert r.entries[2].transaction_id
    from txmq.spark.client import BrokerClient

    with BrokerClient(broker.endpoints) as c:
        bodies = sorted(
            rec.body
            for q in range(c.queue_count("mix"))
            for rec in c.read_range("mix", q, 0, c.query_offset("mix", q, "latest"))
        )
    assert bodies == [b"a", b"d"], "refused and half messages are not in a queue"
    # FIFO messages of one request keep their order within their group's queue.
    fifo = [
        wire("fifo-mix", f"{i}".encode(), message_type=pb.FIFO, message_group="g") for i in range(5)
    ]
    r = send(stub, *fifo)
    assert [e.status.code for e in r.entries] == [pb.OK] * 5
    offsets = [e.offset for e in r.entries]
    assert offsets == sorted(offsets) and len(set(offsets)) == 5


def test_a_batch_shares_one_queue_and_batches_rotate(broker: BrokerProcess, stub: Any) -> None:
    """RocketMQ stores a batch in one queue: a request's messages without a message group go
    to one queue together, side by side in order; the next request goes to the next queue."""
    from txmq.spark.client import BrokerClient

    sent = [send(stub, *[wire("sticky", f"{b}-{i}".encode()) for i in range(6)]) for b in range(3)]
    with BrokerClient(broker.endpoints) as c:
        queues = {
            q: [
                rec.body
                for rec in c.read_range("sticky", q, 0, c.query_offset("sticky", q, "latest"))
            ]
            for q in range(c.queue_count("sticky"))
        }
    batches = [sorted(bodies) for bodies in queues.values() if bodies]
    assert sorted(batches) == [[f"{b}-{i}".encode() for i in range(6)] for b in range(3)]
    for r in sent:
        assert [e.offset for e in r.entries] == list(
            range(r.entries[0].offset, r.entries[0].offset + 6)
        )
