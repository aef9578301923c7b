"""Fetch rounds on plain TCP (broker/replication/wire.py) beside the gRPC port.

Real sockets on 127.0.0.1: the wire answers requests in lockstep with the leader's answer
function, closes a connection after a refusal or an oversized frame, and closes every
connection when the lead ends; a follower's LeaderLink asks the leader's Status for the wire
port and fetches on it, and falls back to the Follow stream when the port does not answer.
Against a real plaintext replica group (etcd, two broker processes) the follower fetches on the
wire and SYNC sends are acknowledged; a group over TLS keeps the stream
(test_security_replicas.py).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import grpc
import pytest

from txmq import limits
from txmq.broker.replication.leader import SERVICE
from txmq.broker.replication.leader_link import ROUND_TIMEOUT_S, LeaderLink
from txmq.broker.replication.wire import CONNECT_TIMEOUT_S, WireLink, serve_wire
from txmq.protocol import channels
from txmq.protocol.client_security import PLAINTEXT

from .clients import message, producer
from .conftest import wait_until
from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)
from .test_replication import create_topic, leader_of, replicas, status

BIG = b"r" * 3_000_000  # a reply larger than a socket buffer


async def _answer(body: bytes) -> tuple[bytes, bool]:
    """Echo (BIG for b"big"), refusing (and so closing) on b"no"."""
    return (BIG if body == b"big" else b"re " + body), body != b"no"


async def _wire(answer: Callable[..., Any] = _answer) -> tuple[asyncio.Task[None], list[Any]]:
    ports: list[Any] = []
    listening = asyncio.Event()

    def published(port: int | None) -> None:
        ports.append(port)
        listening.set()

    task = asyncio.create_task(serve_wire(answer, "127.0.0.1", published))
    await listening.wait()
    return task, ports


def test_rounds_in_lockstep_and_a_refusal_closes_the_connection() -> None:
    async def main() -> list[bytes | None]:
        task, ports = await _wire()
        link = WireLink("127.0.0.1", ports[0])
        try:
            got = [await link.round(b) for b in (b"a", b"big", b"no", b"late")]
            got.append(await link.round(b"again"))  # the next round connects again
            return got
        finally:
            link.close()
            task.cancel()

    got = asyncio.run(main())
    assert got == [b"re a", BIG, b"re no", None, b"re again"]


def test_an_oversized_request_closes_the_connection_and_the_end_closes_all() -> None:
    async def main() -> tuple[bytes, list[Any], bytes | None]:
        task, ports = await _wire()
        reader, writer = await asyncio.open_connection("127.0.0.1", ports[0])
        writer.write(struct.pack(">I", limits.GRPC_MESSAGE_SIZE_MAX + 1))
        oversized = await reader.read()  # EOF: the leader closed it
        writer.close()
        link = WireLink("127.0.0.1", ports[0])
        assert await link.round(b"x") == b"re x"
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        after = await link.round(b"y")  # the open connection was closed by the lead's end
        link.close()
        return oversized, ports, after

    oversized, ports, after = asyncio.run(main())
    assert oversized == b""
    assert ports[1:] == [None], "the port is unpublished when the wire closes"
    assert after is None


def test_a_round_past_its_bound_or_abandoned_ends_and_no_late_reply_answers_the_next() -> None:
    """A round the leader does not answer ends with TimeoutError at its bound, or at once when
    abandoned (follower.py: the leader changed); the connection is closed, so the late reply
    never answers the next round, which connects again."""
    arrived = asyncio.Event()
    release = asyncio.Event()

    async def answer(body: bytes) -> tuple[bytes, bool]:
        if body.startswith(b"hang"):
            arrived.set()
            await release.wait()  # answered only after the round gave up
        return b"re " + body, True

    async def main() -> tuple[float, float, list[bytes | None]]:
        task, ports = await _wire(answer)
        link = WireLink("127.0.0.1", ports[0])
        try:
            start = time.monotonic()
            with pytest.raises(TimeoutError):
                await link.round(b"hang 1", 0.3)
            bounded = time.monotonic() - start
            arrived.clear()
            pending = asyncio.create_task(link.round(b"hang 2", ROUND_TIMEOUT_S))
            await arrived.wait()
            start = time.monotonic()
            link.abandon()
            with pytest.raises(TimeoutError):
                await pending
            abandoned = time.monotonic() - start
            release.set()
            return bounded, abandoned, [await link.round(b"a", 5), await link.round(b"b", 5)]
        finally:
            link.close()
            task.cancel()

    bounded, abandoned, got = asyncio.run(main())
    assert 0.3 <= bounded < ROUND_TIMEOUT_S
    assert abandoned < 1.0
    assert got == [b"re a", b"re b"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _silent_port(stack: ExitStack) -> int:
    """A port whose connects hang, as behind a firewall that drops them: a listener that never
    accepts, its accept queue (backlog 0) filled by one connection, so the kernel drops SYNs."""
    server = stack.enter_context(socket.socket())
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port: int = server.getsockname()[1]
    stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=2))
    return port


def test_a_connect_that_hangs_ends_within_the_connect_timeout() -> None:
    async def main() -> float:
        with ExitStack() as stack:
            link = WireLink("127.0.0.1", _silent_port(stack))
            start = time.monotonic()
            with pytest.raises(ConnectionError, match="no connection"):
                await link.round(b"x")
            return time.monotonic() - start

    took = asyncio.run(main())
    assert CONNECT_TIMEOUT_S <= took < ROUND_TIMEOUT_S, "the connect's bound, not the round's"


@pytest.mark.parametrize("wire", ["up", "refused", "silent"])
def test_a_follower_fetches_on_the_wire_the_status_names(wire: str) -> None:
    """A stand-in leader (grpc.aio: Status and Follow) whose Status names a wire port: the
    rounds go on the wire; when nothing listens there, or connects hang, on the Follow stream
    (one connect timeout, then not tried again for that leader)."""
    streamed: list[bytes] = []
    stack = ExitStack()

    async def follow(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for body in requests:
            streamed.append(body)
            yield b"stream " + body

    async def main() -> tuple[list[bytes | None], str]:
        task, ports = await _wire()
        port = {"up": ports[0], "refused": _closed_port(), "silent": _silent_port(stack)}[wire]

        async def status_of(body: bytes, context: Any) -> bytes:
            return channels.frame({"ok": True, "wire_port": port})

        server = grpc.aio.server()
        handlers = {
            "Follow": grpc.stream_stream_rpc_method_handler(follow),
            "Status": grpc.unary_unary_rpc_method_handler(status_of),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        grpc_port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        link = LeaderLink(PLAINTEXT)
        try:
            got = [await link.fetch(f"127.0.0.1:{grpc_port}", {"n": n}) for n in range(3)]
            return got, link.transport
        finally:
            link.close()
            task.cancel()
            await server.stop(0)

    with stack:
        start = time.monotonic()
        got, transport = asyncio.run(main())
        took = time.monotonic() - start
    bodies = [json.dumps({"n": n}).encode() for n in range(3)]
    if wire == "silent":
        assert took < 3 * CONNECT_TIMEOUT_S, "one connect timeout, not one per round"
    if wire == "up":
        assert got == [b"re " + b for b in bodies] and transport == "wire"
        assert streamed == []
    else:
        assert got == [b"stream " + b for b in bodies] and transport == "stream"


def test_a_plaintext_group_replicates_on_the_wire(tmp_path: Path, etcd_endpoint: str) -> None:  # noqa: F811
    group = replicas(tmp_path, etcd_endpoint, "--min-insync-replicas", "2")
    try:
        leader, follower = leader_of(group)
        wait_until(lambda: status(follower.endpoints).get("role") == "follower", 20, "a follower")
        assert isinstance(status(leader.endpoints).get("wire_port"), int)
        # The follower asks its leader for the wire port once it leads (a round after a
        # refused fetch) and within WIRE_ASK_AGAIN_S of it publishing the port.
        on_wire = lambda: status(follower.endpoints).get("fetching_on") == "wire"  # noqa: E731
        wait_until(on_wire, 10, "the follower fetching on the wire")
        create_topic(leader, follower, "wire-t")
        p = producer(leader.endpoints, ("wire-t",))
        try:  # each acknowledged with SYNC 2 of 2: on the follower, shipped on the wire
            for i in range(20):
                p.send(message("wire-t", f"m{i}".encode()))
        finally:
            p.shutdown()
        got = status(follower.endpoints)
        assert got.get("fetching_on") == "wire", got
        assert int(got["end"]) >= 20 * 100, got  # type: ignore[call-overload]
    finally:
        for b in group:
            if b.running:
                b.stop()
