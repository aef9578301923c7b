"""A follower's calls to its leader's Replica channel (replication.py serves them).

Owns: the channel to the current leader (one per leader endpoint: a new leader, or a leader
that went UNAVAILABLE, gets a fresh one), the unary calls (``Epochs``), and the fetch rounds:
each one request and its reply, in lockstep, on one long-lived ``Follow`` stream per channel
(the same request and reply bytes as a unary ``Fetch``), or unary ``Fetch`` calls to a leader
that has no ``Follow`` (an older txmq).
Must not: decide what a reply means, or retry beyond one pause after a failure (follower.py's
fetch loop calls again).

Why a stream: a fetch round is on the path of every SYNC acknowledgement, and a unary gRPC call
costs its setup on both sides each time (a call object, HTTP/2 stream and headers, deadline,
signature, the server's handler dispatch). In isolation (grpc.aio on uvloop, a 3 KiB reply,
2026-11-27): a unary round trip ~440 us and ~500 us of CPU on both sides together, a message
each way on an open stream ~160 us and ~215 us. The stream keeps the unary call's rounds (no
push, no second request in flight: what the reverted streaming Fetch of 2026-11-23 changed),
so the rounds per acknowledged write stay as they were (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable
from typing import Any, Final, TypeVar

import grpc

from txmq import limits
from txmq.broker.leadership.backoff import Repeats
from txmq.broker.replication.leader import SERVICE
from txmq.broker.replication.wire import WireLink
from txmq.errors import RemoteProtocolError
from txmq.protocol import channels
from txmq.protocol.client_security import ClientSecurity, open_aio_channel

log = logging.getLogger(__name__)
# One round's bound, for a stream that hangs while its leader still leads: as long as a write
# waits for its acks. A slow round must finish: at load 14-23 on 2 cores a catching-up
# follower's rounds ran past the bound of before (the long poll + an etcd call, 1.2 s), and
# each retry asked for the same MiB again, so it never caught up and SYNC acks timed out. A
# round to a leader that is gone ends sooner, when the election sees the change (``abandon``).
ROUND_TIMEOUT_S = limits.REPLICA_ACK_TIMEOUT_MS / 1000
_ASK: Final = object()  # a leader's wire port not asked for yet
WIRE_ASK_AGAIN_S: Final = 5.0
T = TypeVar("T")


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class LeaderLink:
    """The follower's channel to its leader and the fetch stream on it (one per follower)."""

    def __init__(self, security: ClientSecurity) -> None:
        # How the leader is called: TLS and the signature of cluster_access_key when secured.
        self.security = security
        self._channel: tuple[str, Any] | None = None
        self._stream: Any = None  # the open Follow call on _channel, or None
        self._unary_only = False  # _channel's leader has no Follow: fetch with unary calls
        self._bound: asyncio.Timeout | None = None  # the bound of the round in flight
        self._abandoned = False  # ... which abandon() ended
        # _channel's leader's wire port (replica_wire.py): _ASK until its Status was read,
        # None when it has none (or this follower calls it over TLS or signed).
        self._wire: WireLink | object | None = _ASK
        self._ask_at = 0.0  # when a leader without a wire port is asked again
        # Failed rounds, logged once per period while the same failure repeats (a leader that
        # is gone while etcd, unreachable, still names it: every observe period).
        self.failures = Repeats(log, "fetch round", _monotonic_ms, level=logging.INFO)

    @property
    def transport(self) -> str:
        """What the fetch rounds go on now: "wire", "stream" (Follow) or "unary" (Fetch)."""
        if isinstance(self._wire, WireLink):
            return "wire"
        return "unary" if self._unary_only else "stream"

    def abandon(self) -> None:
        """End the round in flight now, as its bound would (follower.py: the election sees
        another leader, none, or this replica)."""
        if isinstance(self._wire, WireLink) and self._wire.busy:
            self._abandoned = True
            self._wire.abandon()
        if self._bound is not None:
            self._abandoned = True
            self._bound.reschedule(asyncio.get_running_loop().time())

    def close(self) -> None:
        self._drop_stream()
        self._drop_wire()
        if self._channel is not None:
            asyncio.get_running_loop().create_task(self._channel[1].close())
            self._channel = None

    def _open(self, endpoint: str) -> Any:
        if self._channel is None or self._channel[0] != endpoint:
            self.close()
            self._channel = (endpoint, open_aio_channel(endpoint, self.security))
            self._unary_only = False
            self._wire = _ASK
        return self._channel[1]

    def _metadata(self) -> list[tuple[str, str]]:
        # Signed with the wall clock: the lease clock is monotonic, not a date.
        return self.security.metadata(time.time_ns() // 1_000_000)

    def _drop_wire(self) -> None:
        if isinstance(self._wire, WireLink):
            self._wire.close()
        self._wire = _ASK

    def _wire_due(self) -> bool:
        """Whether to ask the leader for its wire port before this round: once per channel,
        and again now and then while it had none (a leader publishes its port a moment after
        its gRPC port opens). Never over TLS or signed: the wire has neither."""
        if self.security.tls or self.security.access_key:
            self._wire = None
            return False
        return self._wire is _ASK or (self._wire is None and time.monotonic() >= self._ask_at)

    async def _ask_wire(self, endpoint: str) -> None:
        """Read the leader's ``wire_port`` from its Status (within a round's bound).

        Raises:
            TimeoutError: the bound passed or the round was abandoned (as a round's).
        """
        self._wire, self._ask_at = None, time.monotonic() + WIRE_ASK_AGAIN_S
        call = self._open(endpoint).unary_unary(f"/{SERVICE}/Status")
        try:
            reply = await self._bounded(
                call(b"{}", timeout=ROUND_TIMEOUT_S, metadata=self._metadata())
            )
        except grpc.aio.AioRpcError as exc:  # the Follow round reports a leader gone
            self.failures.failed(f"Status of {endpoint}: {exc.code()}; fetching on Follow")
            return
        try:
            doc = channels.split(reply, "Status")[0]
        except RemoteProtocolError as exc:
            log.warning("Status of %s unreadable (%s): fetching on Follow", endpoint, exc)
            return
        port = doc.get("wire_port")
        if isinstance(port, int) and port > 0:
            self._wire = WireLink(endpoint.rpartition(":")[0].strip("[]"), port)
        elif doc.get("role") != "leader":
            # Asked before it leads (etcd named it a moment before it took over): its fetch
            # refuses this round, and the next round asks again rather than WIRE_ASK_AGAIN_S on.
            self._wire = _ASK

    async def _wire_round(self, endpoint: str, wire: WireLink, body: bytes) -> bytes | None:
        """One round on the wire; None (logged; after a pause unless the leader closed it) on
        failure, the wire then asked for again by the next round."""
        self._abandoned = False
        try:  # bounded by the wire itself: one timer, no asyncio.timeout per round
            reply = await wire.round(body, ROUND_TIMEOUT_S)
        except TimeoutError:
            self._drop_wire()
            await self._timed_out("wire round", endpoint)
            return None
        except (OSError, RemoteProtocolError) as exc:
            # No connection (or a broken reply): this round and every next one to this leader
            # go on the Follow stream (a leader gone is reported there, as without a wire); a
            # new channel (another leader, or this one after UNAVAILABLE) asks again.
            log.warning("wire to %s unusable (%r): fetching on the Follow stream", endpoint, exc)
            wire.close()
            self._wire, self._ask_at = None, math.inf
            return await self._stream_fetch(endpoint, body)
        if reply is None:  # the leader closed it (after a refusal, or it stopped leading)
            self._drop_wire()
        return reply

    def _drop_stream(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
            self._stream = None

    async def call(self, endpoint: str, method: str, args: dict[str, Any]) -> bytes | None:
        """One unary call to the leader's Replica channel; None (logged, after a pause) on
        failure."""
        return await self._unary(endpoint, method, json.dumps(args).encode())

    async def _unary_fetch(self, endpoint: str, body: bytes) -> bytes | None:
        return await self._unary(endpoint, "Fetch", body)

    async def _unary(self, endpoint: str, method: str, body: bytes) -> bytes | None:
        call = self._open(endpoint).unary_unary(f"/{SERVICE}/{method}")
        try:
            reply: bytes = await call(body, timeout=ROUND_TIMEOUT_S, metadata=self._metadata())
        except grpc.aio.AioRpcError as exc:
            await self._failed(method, endpoint, exc.code())
            return None
        return reply

    async def fetch(self, endpoint: str, args: dict[str, Any]) -> bytes | None:
        """One fetch round: the leader's reply to ``args``; None (logged, after a pause) on
        failure, the stream then dropped (the next round opens another)."""
        self._open(endpoint)
        if self._wire_due():
            try:
                await self._ask_wire(endpoint)
            except TimeoutError:
                await self._timed_out("Status", endpoint)
                return None
        body = json.dumps(args).encode()
        if isinstance(self._wire, WireLink):
            reply = await self._wire_round(endpoint, self._wire, body)
        else:
            reply = await self._stream_fetch(endpoint, body)
        if reply is not None:
            self.failures.succeeded()
        return reply

    async def _stream_fetch(self, endpoint: str, body: bytes) -> bytes | None:
        if self._unary_only:
            return await self._unary_fetch(endpoint, body)
        try:
            return await self._round(body)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                log.info("%s has no Follow stream: fetching with unary calls", endpoint)
                self._unary_only = True
                return await self._unary_fetch(endpoint, body)
            await self._failed("Follow", endpoint, exc.code())
        except TimeoutError:  # a leader paused or cut off: no deadline of gRPC's ends a stream
            await self._timed_out("Follow", endpoint)
        except asyncio.InvalidStateError:  # the leader ended the stream as we wrote to it
            log.info("Follow stream to %s ended by the leader: opening another", endpoint)
        return None

    async def _round(self, body: bytes) -> bytes | None:
        stream = self._stream
        if stream is None or stream.done():
            assert self._channel is not None  # _open made it
            method = self._channel[1].stream_stream(f"/{SERVICE}/Follow")
            stream = self._stream = method(metadata=self._metadata())
        try:
            # Our own bound, not the call's cancel: a write to a leader that never answered
            # the stream's start (SIGSTOP) does not return when the call is cancelled.
            reply = await self._bounded(_exchange(stream, body))
        except BaseException:
            self._drop_stream()  # a round cut short: its reply must not answer the next one
            raise
        if reply is grpc.aio.EOF:  # the leader ended the stream (it refused a round before)
            self._drop_stream()
            return None
        return bytes(reply)

    async def _bounded(self, work: Awaitable[T]) -> T:
        """``work`` within a round's bound (ROUND_TIMEOUT_S), which ``abandon`` ends early.

        Raises:
            TimeoutError: the bound passed, or the round was abandoned (``_abandoned``).
        """
        self._abandoned = False
        try:
            async with asyncio.timeout(ROUND_TIMEOUT_S) as self._bound:
                return await work
        finally:
            self._bound = None

    async def _timed_out(self, method: str, endpoint: str) -> None:
        if self._abandoned:
            log.info("%s to %s abandoned: the leader changed", method, endpoint)
        else:
            await self._failed(method, endpoint, grpc.StatusCode.DEADLINE_EXCEEDED)

    async def _failed(self, method: str, endpoint: str, code: grpc.StatusCode) -> None:
        self.failures.failed(f"{method} from {endpoint} failed: {code}")
        if code is grpc.StatusCode.UNAVAILABLE and self._channel is not None:
            # A fresh channel next time: a leader restarted on the same port is reached at
            # once, not after the old channel's reconnect backoff (which grows to minutes,
            # during which this follower stays eligible by its last successful fetch).
            self.close()
        await asyncio.sleep(limits.REPLICA_OBSERVE_PERIOD_MS / 1000)


async def _exchange(stream: Any, body: bytes) -> Any:
    """One Follow round: write the request, read the reply (grpc.aio.EOF: the leader ended)."""
    await stream.write(body)
    return await stream.read()
