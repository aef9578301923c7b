"""A follower's fetch rounds on one ``Replica.Follow`` stream (broker/replication/leader_link.py).

Against stand-in leaders (real grpc.aio servers on 127.0.0.1, each with only what the case
needs, or a socket that accepts and never answers): rounds share one stream; a leader without
``Follow`` (an older txmq) is fetched from with unary calls; a round cut short never answers
the next one; a leader that never answers ends the round within its bound; a slow round is
waited for; an abandoned round (the election saw the leader change) ends at once. Against a real
replica group (etcd, two broker processes): the leader answers a refused round on the stream
and then ends it, and a follower refuses ``Follow`` the same way.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from txmq import limits
from txmq.broker.replication.leader import SERVICE
from txmq.broker.replication.leader_link import ROUND_TIMEOUT_S, LeaderLink
from txmq.protocol.client_security import PLAINTEXT

from .etcd_fixtures import etcd_endpoint  # noqa: F401  (fixture)
from .test_replication import leader_of, replicas, status


async def _stand_in(handlers: dict[str, Any]) -> tuple[Any, str]:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def test_rounds_share_one_stream_and_an_older_leader_is_fetched_unary() -> None:
    opened: list[int] = []

    async def follow(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        opened.append(1)
        async for body in requests:
            yield b"stream " + body

    async def unary(body: bytes, context: Any) -> bytes:
        return b"unary " + body

    async def main() -> list[bytes | None]:
        new, new_ep = await _stand_in({"Follow": grpc.stream_stream_rpc_method_handler(follow)})
        old, old_ep = await _stand_in({"Fetch": grpc.unary_unary_rpc_method_handler(unary)})
        link = LeaderLink(PLAINTEXT)
        try:
            got = [await link.fetch(new_ep, {"n": n}) for n in range(3)]
            got += [await link.fetch(old_ep, {"n": n}) for n in range(2)]
            return got
        finally:
            link.close()
            await new.stop(0)
            await old.stop(0)

    got = asyncio.run(main())
    assert got == [b"stream " + json.dumps({"n": n}).encode() for n in range(3)] + [
        b"unary " + json.dumps({"n": n}).encode() for n in range(2)
    ]
    assert opened == [1], "three rounds, one stream"


def test_a_round_cut_short_never_answers_the_next_one() -> None:
    """A fetch cancelled while its reply is still coming (the follower stopping, or promoted)
    leaves that reply on the stream: the next round must not take it for its own (it would
    append the records of another offset). grpc.aio cancels a call whose read is cancelled,
    and the link drops the stream of a cut round as well: this fails if a cut round's stream
    were ever read again."""
    arrived, release = asyncio.Event(), asyncio.Event()

    async def follow(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for body in requests:
            if json.loads(body)["n"] == 1:
                arrived.set()
                await release.wait()
            yield body

    async def main() -> bytes | None:
        server, ep = await _stand_in({"Follow": grpc.stream_stream_rpc_method_handler(follow)})
        link = LeaderLink(PLAINTEXT)
        try:
            assert await link.fetch(ep, {"n": 0}) == b'{"n": 0}'
            cut = asyncio.create_task(link.fetch(ep, {"n": 1}))
            await arrived.wait()  # the request is at the leader, its reply not yet sent
            cut.cancel()
            await asyncio.gather(cut, return_exceptions=True)
            release.set()  # the cut round's reply goes out now, on the old stream
            return await link.fetch(ep, {"n": 2})
        finally:
            link.close()
            await server.stop(0)

    assert asyncio.run(main()) == b'{"n": 2}'


def test_a_slow_round_is_answered_not_cut() -> None:
    """A leader that takes seconds over a round (a loaded machine: at load 14-23 on 2 cores a
    catching-up follower's rounds ran past the 1.2 s bound of before, and each retry asked for
    the same MiB again, so it never caught up and SYNC acks timed out) must be waited for."""
    slow_s = 2.0  # past the old bound (1.2 s), well inside the new one

    async def follow(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for body in requests:
            await asyncio.sleep(slow_s)  # sleep: stands for a leader slow to ship its reply
            yield body

    assert asyncio.run(_one_round(follow, {"n": 0})) == b'{"n": 0}'


async def _one_round(follow: Any, args: dict[str, Any]) -> bytes | None:
    """One fetch round against a stand-in leader serving ``follow``."""
    server, ep = await _stand_in({"Follow": grpc.stream_stream_rpc_method_handler(follow)})
    link = LeaderLink(PLAINTEXT)
    try:
        return await link.fetch(ep, args)
    finally:
        link.close()
        await server.stop(0)


def test_an_abandoned_round_ends_at_once() -> None:
    """The follower abandons the round in flight when the election sees another leader (or
    none, or itself): a round to a leader that is gone ends then, not after its bound, so a
    follower promoted, or told of a new leader, does not wait out a paused leader's round."""
    arrived = asyncio.Event()

    async def follow(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for _ in requests:
            arrived.set()
            await asyncio.Event().wait()  # never answers
            yield b""

    async def main() -> tuple[bytes | None, float]:
        server, ep = await _stand_in({"Follow": grpc.stream_stream_rpc_method_handler(follow)})
        link = LeaderLink(PLAINTEXT)
        try:
            round_ = asyncio.create_task(link.fetch(ep, {"n": 0}))
            await arrived.wait()
            abandoned = time.monotonic()
            link.abandon()
            got = await asyncio.wait_for(round_, ROUND_TIMEOUT_S * 2)
            return got, time.monotonic() - abandoned
        finally:
            link.close()
            await server.stop(0)

    got, took = asyncio.run(main())
    assert got is None
    assert took < ROUND_TIMEOUT_S / 2, took


def test_a_leader_that_never_answers_ends_the_round_in_time() -> None:
    """A paused leader (SIGSTOP: the kernel still accepts its connections, nothing answers)
    must not hold a fetch round for good: the follower would never see a new leader, nor stop
    on SIGTERM. A cancelled call does not end a write waiting for the stream to start, so the
    round has its own bound; hung here with the call's cancel as the only bound."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)

    async def main() -> tuple[bytes | None, float]:
        link = LeaderLink(PLAINTEXT)
        started = time.monotonic()
        try:
            got = await asyncio.wait_for(
                link.fetch(f"127.0.0.1:{silent.getsockname()[1]}", {"n": 0}), 10
            )
        finally:
            link.close()
        return got, time.monotonic() - started

    try:
        got, took = asyncio.run(main())
    finally:
        silent.close()
    assert got is None
    assert took < ROUND_TIMEOUT_S + limits.REPLICA_OBSERVE_PERIOD_MS / 1000 + 2, took


def _header(reply: bytes) -> dict[str, Any]:
    (n,) = struct.unpack_from(">I", reply, 0)
    doc: dict[str, Any] = json.loads(reply[4 : 4 + n])
    return doc


def test_a_refused_round_ends_the_stream(tmp_path: Path, etcd_endpoint: str) -> None:  # noqa: F811
    group = replicas(tmp_path, etcd_endpoint, "--min-insync-replicas", "2")
    try:
        leader, follower = leader_of(group)
        epoch = int(status(leader.endpoints)["epoch"])  # type: ignore[call-overload]
        stale = json.dumps({"follower": "r9", "from": 0, "epoch": epoch - 1}).encode()
        for b in (leader, follower):
            with grpc.insecure_channel(b.endpoints) as ch:
                call = ch.stream_stream(f"/{SERVICE}/Follow")(iter([stale, stale]), timeout=10)
                replies = [_header(r) for r in call]
            assert len(replies) == 1, f"{b.name}: one refusal, then the stream ended"
            assert not replies[0]["ok"], replies
            assert "epoch" in replies[0]["error"] or "follows" in replies[0]["error"], replies
    finally:
        for b in group:
            if b.running:
                b.stop()
