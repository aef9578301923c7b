"""A follower's forwarding (broker/replication/forward.py, ADR 0006) against a real gRPC server on
a real
socket standing in for the leader: bytes and metadata arrive as the client sent them, the
leader's answer and its gRPC errors come back, and a leader that is unknown or unreachable is
answered HA_NOT_AVAILABLE naming why, in the method's own response type.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from txmq.broker.node.replica import forwarding_channel
from txmq.broker.replication.forward import V2_SERVICE, Forwarder
from txmq.coordination.keys import Leader
from txmq.protocol.client_security import PLAINTEXT

CLIENT_META = (("x-mq-client-id", "client-1"), ("authorization", "MQv2-HMAC-SHA1 x"))


async def _leader() -> tuple[Any, str, list[bytes]]:
    """A stand-in leader: SendMessage answers OK with what it received in the status message;
    Telemetry answers each command with a Settings-less OK; nothing else is registered."""
    seen: list[bytes] = []

    async def send(body: bytes, context: Any) -> bytes:
        seen.append(body)
        meta = {k: v for k, v in context.invocation_metadata() if not k.startswith(":")}
        status = pb.Status(code=pb.OK, message=json.dumps(meta))
        out: bytes = sv.SendMessageResponse(status=status).SerializeToString()
        return out

    async def telemetry(requests: Any, context: Any) -> AsyncIterator[bytes]:
        async for raw in requests:
            seen.append(raw)
            yield sv.TelemetryCommand(status=pb.Status(code=pb.OK)).SerializeToString()

    handlers = {
        "SendMessage": grpc.unary_unary_rpc_method_handler(send),
        "Telemetry": grpc.stream_stream_rpc_method_handler(telemetry),
    }
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(V2_SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}", seen


class _Routes(grpc.GenericRpcHandler):  # type: ignore[misc]
    def __init__(self, forwarder: Forwarder) -> None:
        self.forwarder = forwarder

    def service(self, details: Any) -> Any:
        return self.forwarder.handler(str(details.method))


async def _follower(leader: list[Leader | None]) -> tuple[Any, str, Forwarder]:
    forwarder = Forwarder(lambda: leader[0], "me", PLAINTEXT, forwarding_channel)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((_Routes(forwarder),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}", forwarder


def _send() -> Any:
    props = pb.SystemProperties(message_id="01", body_encoding=pb.IDENTITY, message_type=pb.NORMAL)
    return sv.SendMessageRequest(
        messages=[pb.Message(topic=pb.Resource(name="t"), body=b"x", system_properties=props)]
    )


async def test_forwarded_calls_arrive_unchanged_and_answers_come_back() -> None:
    leader_server, leader_endpoint, seen = await _leader()
    follower_server, endpoint, forwarder = await _follower([Leader("L", leader_endpoint, 7)])
    try:
        async with grpc.aio.insecure_channel(endpoint) as ch:
            stub = sg.MessagingServiceStub(ch)
            reply = await stub.SendMessage(_send(), metadata=CLIENT_META, timeout=5)
            assert reply.status.code == pb.OK
            got = json.loads(reply.status.message)
            assert {k: got[k] for k, _ in CLIENT_META} == dict(CLIENT_META)
            assert seen == [_send().SerializeToString()]  # the client's bytes, not re-encoded
            # A method the leader does not serve: its gRPC error comes back as it is.
            try:
                await stub.AckMessage(sv.AckMessageRequest(), timeout=5)
                raised = None
            except grpc.aio.AioRpcError as exc:
                raised = exc.code()
            assert raised is grpc.StatusCode.UNIMPLEMENTED
            # The Telemetry stream both ways.
            call = stub.Telemetry(metadata=CLIENT_META, timeout=5)
            command = sv.TelemetryCommand(status=pb.Status(code=pb.OK, message="hello"))
            await call.write(command)
            answer = await call.read()
            assert answer.status.code == pb.OK
            await call.done_writing()
            assert await call.read() is grpc.aio.EOF  # the leader ended it: so does the relay
            assert seen[-1] == command.SerializeToString()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while forwarder.open_calls and loop.time() < deadline:
            await asyncio.sleep(0.02)  # sleep: poll interval of a bounded wait
        assert forwarder.forwarded == 3 and forwarder.open_calls == 0
    finally:
        await follower_server.stop(0)
        await leader_server.stop(0)
        forwarder.close()


async def test_an_unreachable_or_unknown_leader_is_ha_not_available_naming_why() -> None:
    leader: list[Leader | None] = [Leader("L", "127.0.0.1:1", 7)]  # nothing listens on port 1
    follower_server, endpoint, forwarder = await _follower(leader)
    try:
        async with grpc.aio.insecure_channel(endpoint) as ch:
            stub = sg.MessagingServiceStub(ch)
            # The forwarded call waits for the leader's port within the client's deadline.
            reply = await stub.SendMessage(_send(), timeout=1.5)
            assert reply.status.code == pb.HA_NOT_AVAILABLE
            assert "127.0.0.1:1 did not answer" in reply.status.message, reply.status.message
            leader[0] = None
            reply = await stub.SendMessage(_send(), timeout=10)
            assert reply.status.code == pb.HA_NOT_AVAILABLE
            assert "no leader is known yet" in reply.status.message, reply.status.message
    finally:
        await follower_server.stop(0)
        forwarder.close()
