"""The baselines bench_broker.py measures txmq against, each a grpc.aio server in its own process.

- ``echo``: one unary method that returns its request (the protocol ceiling on this machine).
- ``stub``: the RocketMQ v2 MessagingService with do-nothing handlers: the *floor*. It answers
  every call the official Producer and SimpleConsumer make (QueryRoute, Heartbeat, the Telemetry
  settings handshake, SendMessage, EndTransaction, ReceiveMessage, AckMessage) with the replies
  a broker gives, and keeps no more than it must to give them: committed messages wait in an
  in-memory deque per topic until a ReceiveMessage takes them (no storage, no fsync, no
  transaction book, no redelivery; an ack is answered OK). Driven by the same clients as the
  broker, its CPU per message is what the gRPC calls alone cost here, so the broker's CPU per
  message divided by it is the broker's own overhead (ratio <= 1.3).

Run: ``python benchmarks/floor_servers.py echo|stub``; prints ``... listening on HOST:PORT``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import sys
from collections.abc import Callable
from typing import Any

import grpc
import uvloop
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from txmq.errors import CODE_MESSAGE_NOT_FOUND
from txmq.protocol import mapping, telemetry

# Queued committed messages per topic; beyond this the stub drops the oldest (a consumer that
# falls this far behind has failed the run anyway).
STUB_QUEUE_MAX = 1_000_000
STUB_LONG_POLL_S_MAX = 20.0


def echo_main() -> None:
    async def serve() -> None:
        server = grpc.aio.server()

        async def echo(body: bytes, context: object) -> bytes:
            return body

        handler = grpc.method_handlers_generic_handler(
            "bench.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
        )
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(f"echo listening on 127.0.0.1:{port}", flush=True)
        await server.wait_for_termination()

    asyncio.run(serve())


SERVER_SETTINGS = telemetry.ServerSettings(
    body_size_max=4 * 1024 * 1024,
    long_polling_timeout_ms=20_000,
    receive_batch_size=32,
    delivery_attempts_max=16,
    retry_backoff_initial_ms=1_000,
    retry_backoff_max_ms=60_000,
)


class Stub(sg.MessagingServiceServicer):  # type: ignore[misc]
    """The do-nothing MessagingService (see the module docstring)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.ids = itertools.count()
        self.queues: dict[str, collections.deque[Any]] = {}
        self.half: dict[str, Any] = {}  # transaction id -> its half message
        self.wakeups: dict[str, asyncio.Event] = {}

    def _append(self, msg: Any) -> None:
        topic = msg.topic.name
        q = self.queues.setdefault(topic, collections.deque(maxlen=STUB_QUEUE_MAX))
        q.append(msg)
        ev = self.wakeups.pop(topic, None)
        if ev is not None:
            ev.set()

    async def QueryRoute(self, request: Any, context: Any) -> Any:
        broker = pb.Broker(name="stub", id=0)
        broker.endpoints.scheme = pb.IPv4
        broker.endpoints.addresses.add(host="127.0.0.1", port=self.port)
        queue = pb.MessageQueue(
            topic=request.topic,
            id=0,
            permission=pb.READ_WRITE,
            broker=broker,
            accept_message_types=[pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION],
        )
        return sv.QueryRouteResponse(status=mapping.status(), message_queues=[queue])

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        return sv.HeartbeatResponse(status=mapping.status())

    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        return sv.NotifyClientTerminationResponse(status=mapping.status())

    async def Telemetry(self, request_iterator: Any, context: Any) -> Any:
        async for cmd in request_iterator:
            if cmd.HasField("settings"):
                reply = telemetry.settings_reply(cmd.settings, SERVER_SETTINGS, fifo=False)
                yield sv.TelemetryCommand(status=mapping.status(), settings=reply)

    async def SendMessage(self, request: Any, context: Any) -> Any:
        entries = []
        for m in request.messages:
            txn = ""
            if m.system_properties.message_type == pb.TRANSACTION:
                txn = f"stub-{next(self.ids)}"
                self.half[txn] = m
            else:
                self._append(m)
            entries.append(
                sv.SendResultEntry(
                    status=mapping.status(),
                    message_id=m.system_properties.message_id,
                    transaction_id=txn,
                    offset=0,
                )
            )
        return sv.SendMessageResponse(status=mapping.status(), entries=entries)

    async def EndTransaction(self, request: Any, context: Any) -> Any:
        m = self.half.pop(request.transaction_id, None)
        if m is not None and request.resolution == pb.COMMIT:
            self._append(m)
        return sv.EndTransactionResponse(status=mapping.status())

    async def ReceiveMessage(self, request: Any, context: Any) -> Any:
        topic = request.message_queue.topic.name
        q = self.queues.setdefault(topic, collections.deque(maxlen=STUB_QUEUE_MAX))
        if not q:
            poll_s = mapping.duration_ms(request.long_polling_timeout) / 1000.0
            ev = self.wakeups.setdefault(topic, asyncio.Event())
            # An empty long poll is answered below.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ev.wait(), timeout=min(poll_s, STUB_LONG_POLL_S_MAX))
        got = [q.popleft() for _ in range(min(len(q), max(1, request.batch_size)))]
        if not got:
            yield sv.ReceiveMessageResponse(
                status=mapping.status(CODE_MESSAGE_NOT_FOUND, "no new message")
            )
            return
        yield sv.ReceiveMessageResponse(status=mapping.status())
        stamp = sv.ReceiveMessageResponse()
        mapping.set_timestamp(stamp.delivery_timestamp, 0)
        yield stamp
        for m in got:
            sp = m.system_properties
            sp.receipt_handle = f"r{next(self.ids)}"
            sp.delivery_attempt = 1
            sp.body_encoding = pb.IDENTITY
            sp.body_digest.type = pb.MD5  # the digest txmq sends, computed the same way
            sp.body_digest.checksum = mapping.body_digest(m.body)
            yield sv.ReceiveMessageResponse(message=m)

    async def AckMessage(self, request: Any, context: Any) -> Any:
        entries = [
            sv.AckMessageResultEntry(
                message_id=e.message_id,
                receipt_handle=e.receipt_handle,
                status=mapping.status(),
            )
            for e in request.entries
        ]
        return sv.AckMessageResponse(status=mapping.status(), entries=entries)


def stub_main(
    loop_factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop,
) -> None:
    """Serve the stub on the broker's own event loop (uvloop, txmq.broker.node.serve.run), so the
    floor's gRPC calls cost what the broker's would with no work behind them."""

    async def serve() -> None:
        server = grpc.aio.server()
        port = server.add_insecure_port("127.0.0.1:0")
        sg.add_MessagingServiceServicer_to_server(Stub(port), server)
        await server.start()
        print(f"stub listening on 127.0.0.1:{port}", flush=True)
        await server.wait_for_termination()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve())


if __name__ == "__main__":
    {
        "echo": echo_main,
        "stub": stub_main,
        # The floor on asyncio's own loop, to see what uvloop changes.
        "stub-asyncio": lambda: stub_main(asyncio.new_event_loop),
    }[sys.argv[1]]()
