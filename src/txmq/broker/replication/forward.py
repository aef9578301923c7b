"""A follower serves the data plane by forwarding each client call to its leader, bytes as is.

Owns: the follower's handler of every ``apache.rocketmq.v2.MessagingService`` method but
QueryRoute and QueryAssignment (answered from this replica's view): unary calls (SendMessage,
EndTransaction, AckMessage, Heartbeat, ...), the ReceiveMessage server stream and the Telemetry
bidi stream are sent to the current leader with the client's request bytes and metadata
(signature, date, client id) unchanged and its deadline (less FORWARD_DEADLINE_MARGIN_MS),
waiting for the leader's port within that deadline (a new leader opens it a moment after it
is elected), and the leader's answer is sent back unchanged; the one channel to the leader,
closed when the leader changes (so calls to a dead or paused leader end as soon as etcd names
another); a Telemetry stream whose leader went away is opened again to the next leader with
the client's last Settings, so check-backs of the new leader reach a producer connected here.
Why (ADR 0006): routes carry every
replica's address, the clients dial whichever answers, and after a failover they need no new
route.
Errors: no leader known within FORWARD_LEADER_WAIT_MS, a leader that does not answer, or too
many calls open: the call is answered in its own response type with HA_NOT_AVAILABLE and a
message naming the leader (the clients retry it); a gRPC error of the leader other than
unavailable travels back with its code and details.
Must not: decode or re-encode what it forwards (a Telemetry command is parsed only to recognise
Settings, and forwarded as received), acknowledge anything itself, or authorize: the leader
checks the forwarded signature and rights as for a direct call (the follower's own interceptor
authenticates first, broker/security/interceptor.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Final

import grpc
from rocketmq.grpc_protocol import service_pb2 as sv

from txmq import limits
from txmq.broker.rpc.replies import fail
from txmq.coordination.keys import Leader
from txmq.errors import NotLeaderError, invariant
from txmq.protocol.client_security import ClientSecurity

log = logging.getLogger(__name__)
V2_SERVICE: Final = "apache.rocketmq.v2.MessagingService"
SERVER_STREAMS: Final = frozenset({"ReceiveMessage", "PullMessage"})
BIDI_STREAMS: Final = frozenset({"Telemetry"})
# Answered by the follower itself from its copy of the topics (follower.py), forwarded only for
# a topic it does not hold.
LOCAL: Final = frozenset({"QueryRoute", "QueryAssignment"})
# gRPC's own headers: set by each hop's channel, never copied.
_HOP_HEADERS: Final = ("grpc-", ":")
_HOP_NAMES: Final = frozenset({"user-agent", "te", "content-type"})
_UNREACHABLE: Final = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})
_WAIT_STEP_S: Final = limits.REPLICA_OBSERVE_PERIOD_MS / 1000 / 5


def forwarded_metadata(context: Any) -> list[tuple[str, Any]]:
    """The client's metadata, less gRPC's per-hop headers."""
    out = [
        (k, v)
        for k, v in context.invocation_metadata() or ()
        if not k.startswith(_HOP_HEADERS) and k not in _HOP_NAMES
    ]
    return out[: limits.FORWARD_METADATA_MAX]


def refusal_bytes(name: str, exc: NotLeaderError) -> bytes:
    """``exc`` in method ``name``'s own response type, serialized (the handlers speak bytes)."""
    response = sv.TelemetryCommand if name == "Telemetry" else getattr(sv, f"{name}Response")
    raw: bytes = response(status=fail(exc)).SerializeToString()
    return raw


def _is_settings(raw: bytes) -> bool:
    try:
        return bool(sv.TelemetryCommand.FromString(raw).HasField("settings"))
    except Exception as exc:  # the leader answers a malformed command; we only look
        log.debug("telemetry command not parsed: %r", exc)
        return False


class Forwarder:
    """Forward calls to ``leader()`` (None while no leader is known) over ``security``."""

    def __init__(
        self,
        leader: Callable[[], Leader | None],
        me: str,
        security: ClientSecurity,
        open_channel: Callable[[str, ClientSecurity], Any],
    ) -> None:
        self.leader = leader
        self.me = me
        self.security = security
        self.open_channel = open_channel
        self._channel: tuple[str, Any] | None = None
        self.open_calls = 0
        self.forwarded = 0

    # --- The leader and the channel to it. ---------------------------------------------------

    def _refusal(self, why: str) -> NotLeaderError:
        leader = self.leader()
        where = f"; the leader is {leader.name} at {leader.endpoint}" if leader else ""
        return NotLeaderError(f"this replica follows and {why}{where}")

    def _target(self) -> str | None:
        leader = self.leader()
        if leader is None or leader.name == self.me:
            return None
        return leader.endpoint

    async def _wait_target(self) -> str | None:
        """The leader's endpoint, waiting up to FORWARD_LEADER_WAIT_MS for one to be chosen."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limits.FORWARD_LEADER_WAIT_MS / 1000
        while (target := self._target()) is None and loop.time() < deadline:
            await asyncio.sleep(_WAIT_STEP_S)
        return target

    def channel(self, endpoint: str) -> Any:
        if self._channel is not None and self._channel[0] != endpoint:
            self.drop()
        if self._channel is None:
            self._channel = (endpoint, self.open_channel(endpoint, self.security))
        return self._channel[1]

    def drop(self) -> None:
        """Close the channel to a leader no longer leading: every call on it ends at once."""
        if self._channel is not None:
            log.info("closing the forwarding channel to %s", self._channel[0])
            asyncio.get_running_loop().create_task(self._channel[1].close())
            self._channel = None

    async def watch(self, stop: asyncio.Event) -> None:
        """Until ``stop``: drop the channel once its endpoint is no longer the leader's."""
        while not stop.is_set():
            if self._channel is not None and self._channel[0] != self._target():
                self.drop()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), limits.REPLICA_OBSERVE_PERIOD_MS / 1000)

    def close(self) -> None:
        self.drop()

    # --- Handlers. ---------------------------------------------------------------------------

    def handler(self, method: str) -> Any:
        """The raw-bytes handler forwarding ``method`` (a full ``/service/Name``), or None."""
        service, _, name = method.lstrip("/").partition("/")
        if service != V2_SERVICE or name in LOCAL or not name:
            return None
        if name in BIDI_STREAMS:
            return grpc.stream_stream_rpc_method_handler(self._bidi(method, name))
        if name in SERVER_STREAMS:
            return grpc.unary_stream_rpc_method_handler(self._server_stream(method, name))
        return grpc.unary_unary_rpc_method_handler(self.unary(method, name))

    async def _start(self, name: str, context: Any) -> tuple[str, float] | bytes:
        """(leader endpoint, timeout s) for a new call, or the refusal to answer it with."""
        if self.open_calls >= limits.FORWARD_CALLS_MAX:
            return refusal_bytes(name, self._refusal("has too many calls open"))
        target = await self._wait_target()
        if target is None:
            return refusal_bytes(name, self._refusal("no leader is known yet"))
        remaining = context.time_remaining()
        if remaining is None:
            return target, limits.FORWARD_CALL_TIMEOUT_MS / 1000
        # A little less than the client's deadline: the refusal must reach it in time.
        return target, max(0.0, remaining - limits.FORWARD_DEADLINE_MARGIN_MS / 1000)

    async def _failed(
        self, name: str, target: str, exc: grpc.aio.AioRpcError, context: Any
    ) -> bytes:
        """A leader's gRPC error: unreachable is HA_NOT_AVAILABLE in-band; others go back."""
        if exc.code() in _UNREACHABLE or exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
            why = f"its leader at {target} did not answer ({exc.code().name})"
            return refusal_bytes(name, self._refusal(why))
        await context.abort(exc.code(), exc.details() or "")
        raise AssertionError("unreachable: abort raises")  # pragma: no cover

    def unary(self, method: str, name: str) -> Callable[[bytes, Any], Any]:
        async def forward(body: bytes, context: Any) -> bytes:
            started = await self._start(name, context)
            if isinstance(started, bytes):
                return started
            target, timeout = started
            call = self.channel(target).unary_unary(method)
            self.open_calls += 1
            self.forwarded += 1
            try:
                reply: bytes = await call(
                    body, metadata=forwarded_metadata(context), timeout=timeout, wait_for_ready=True
                )
                return reply
            except grpc.aio.AioRpcError as exc:
                return await self._failed(name, target, exc, context)
            finally:
                self.open_calls -= 1

        return forward

    def _server_stream(self, method: str, name: str) -> Callable[[bytes, Any], Any]:
        async def forward(body: bytes, context: Any) -> AsyncIterator[bytes]:
            started = await self._start(name, context)
            if isinstance(started, bytes):
                yield started
                return
            target, timeout = started
            call = self.channel(target).unary_stream(method)(
                body, metadata=forwarded_metadata(context), timeout=timeout, wait_for_ready=True
            )
            self.open_calls += 1
            self.forwarded += 1
            try:
                async for item in call:
                    yield item
            except grpc.aio.AioRpcError as exc:
                yield await self._failed(name, target, exc, context)
            finally:
                call.cancel()
                self.open_calls -= 1

        return forward

    def _bidi(self, method: str, name: str) -> Callable[[Any, Any], Any]:
        async def forward(requests: Any, context: Any) -> AsyncIterator[bytes]:
            if self.open_calls >= limits.FORWARD_CALLS_MAX:
                yield refusal_bytes(name, self._refusal("has too many calls open"))
                return
            self.open_calls += 1
            self.forwarded += 1
            try:
                async with contextlib.aclosing(self._relay(method, name, requests, context)) as out:
                    async for item in out:
                        yield item
            finally:
                self.open_calls -= 1

        return forward

    async def _relay(
        self, method: str, name: str, requests: Any, context: Any
    ) -> AsyncGenerator[bytes, None]:
        """One client Telemetry stream over as many leader streams as failovers need."""
        inbox: asyncio.Queue[bytes | None] = asyncio.Queue(limits.FORWARD_STREAM_BUFFER_MAX)
        settings: list[bytes] = []  # the client's last Settings, replayed to a new leader
        metadata = forwarded_metadata(context)

        async def read_client() -> None:
            try:
                async for raw in requests:
                    if _is_settings(raw):
                        settings[:] = [raw]
                    await inbox.put(raw)
            finally:
                with contextlib.suppress(asyncio.QueueFull):
                    inbox.put_nowait(None)  # full: the pump sees the end after the rest

        reader = asyncio.create_task(read_client())
        try:
            for _ in range(limits.FORWARD_STREAM_REOPENS_MAX):
                target = await self._wait_target()
                if target is None:
                    yield refusal_bytes(name, self._refusal("no leader is known"))
                    return
                call = self.channel(target).stream_stream(method)(
                    metadata=metadata, wait_for_ready=True
                )
                pump = asyncio.create_task(_pump(call, list(settings), inbox))
                try:
                    async for item in call:
                        yield item
                    return  # the leader ended it: the client stopped writing
                except grpc.aio.AioRpcError as exc:
                    if exc.code() not in _UNREACHABLE:
                        await context.abort(exc.code(), exc.details() or "")
                    log.info("telemetry stream to %s ended (%s): reopening", target, exc.code())
                finally:
                    pump.cancel()
                    call.cancel()
                    await asyncio.gather(pump, return_exceptions=True)
                if reader.done() and inbox.empty():
                    return
            yield refusal_bytes(name, self._refusal("reopened this stream too often"))
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


async def _pump(call: Any, replay: list[bytes], inbox: asyncio.Queue[bytes | None]) -> None:
    """Write ``replay`` then the client's commands to one leader stream; end when they end."""
    invariant(len(replay) <= 1, "only the last Settings is replayed")
    for raw in replay:
        await call.write(raw)
    while (item := await inbox.get()) is not None:
        if item not in replay:  # the Settings just replayed is not sent twice
            await call.write(item)
        replay = []
    await call.done_writing()
