"""Fetch rounds on a plain TCP connection beside the gRPC port (both sides), for plaintext groups.

Owns: the leader's wire listener (``serve_wire``: one per leading replica, on its own port,
published in its Replica ``Status`` as ``wire_port``) and the follower's connection to it
(``WireLink``). A round is the ``Follow`` stream's round (leader_link.py) in other framing:
the same request bytes and the same reply bytes (``Replication.fetch``'s frame), each preceded
by its 4-byte big-endian length, one request in flight, in lockstep. The leader closes the
connection after a refusal, as it ends a ``Follow`` stream, and when it stops leading.
Must not: be offered by a broker that serves TLS or checks an ACL (the gRPC port's TLS, ACL
and peer-name checks, ADR 0005, are not on this port: such a group keeps the ``Follow``
stream), or decide what a reply means (follower.py does, as for the stream's).

Why: a round is on the path of every SYNC acknowledgement; on a grpc.aio stream a round trip
costs each side ~105-129 us of CPU, on uvloop's TCP streams 23-35 us (docs/benchmarks.md).
Both ends are a small ``asyncio.Protocol`` (``_Frames``) rather than
asyncio's StreamReader/StreamWriter, whose Python (feed_data, readexactly twice, the waiter,
drain) ran per round on each side, and a follower's round waits on one future with one timer
(``waiters.wait``) rather than inside ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final, cast

from txmq import limits
from txmq.broker.rpc.waiters import wait, wake
from txmq.errors import RemoteProtocolError

log = logging.getLogger(__name__)

# Each frame's length; a frame is bounded as the gRPC port bounds a message
# (limits.GRPC_MESSAGE_SIZE_MAX): a reply carries at most a fetch's records and header.
LENGTH: Final = struct.Struct(">I")
# A follower that cannot connect within this (a firewall dropping the port, a host it cannot
# reach) fetches on the Follow stream from that leader instead (leader_link.py).
CONNECT_TIMEOUT_S: Final = 1.0

Answer = Callable[[bytes], Awaitable[tuple[bytes, bool]]]


class _Frames(asyncio.Protocol):
    """One connection's length-prefixed frames, either end: ``next`` returns the next whole
    frame (None once the connection is closed); a frame over ``most`` closes it, as does
    ``close``. Reading pauses while two frames wait, and the answering side waits for the
    transport to drain (``writable``) before it answers another."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.transport: asyncio.Transport | None = None
        self.frames: deque[bytes] = deque()
        self.buf = bytearray()
        self.closed = False
        self.error: RemoteProtocolError | None = None
        self.waiter: asyncio.Future[None] | None = None
        self._paused_reading = False
        self._drained: asyncio.Future[None] | None = None  # set while writing is paused

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass of it
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        if not buf and len(data) >= LENGTH.size:  # the usual case: one whole frame, alone
            (n,) = LENGTH.unpack_from(data)
            if n + LENGTH.size == len(data) and n <= self.most:
                self._arrived(data[LENGTH.size :])
                return
        buf += data
        while len(buf) >= LENGTH.size:
            (n,) = LENGTH.unpack_from(buf)
            if n > self.most:
                self.error = RemoteProtocolError(
                    f"replica wire frame of {n} bytes, over {self.most}"
                )
                self.close()
                return
            if len(buf) < LENGTH.size + n:
                return
            frame = bytes(buf[LENGTH.size : LENGTH.size + n])
            del buf[: LENGTH.size + n]
            self._arrived(frame)

    def _arrived(self, frame: bytes) -> None:
        self.frames.append(frame)
        # Rounds are in lockstep: a second frame waiting is a peer that does not wait for its
        # replies (broken or hostile), so stop reading until the first is taken.
        if len(self.frames) > 1 and self.transport is not None:
            self.transport.pause_reading()
            self._paused_reading = True
        if self.waiter is not None:
            wake(self.waiter)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None:
            wake(self.waiter)
        if self._drained is not None:
            wake(self._drained)

    def pause_writing(self) -> None:
        self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._drained is not None:
            wake(self._drained)
            self._drained = None

    def send(self, body: bytes) -> None:
        assert self.transport is not None  # connection_made ran
        self.transport.writelines((LENGTH.pack(len(body)), body))

    def take(self) -> bytes | None:
        """The next frame if one arrived, else None (closed: check ``closed``)."""
        if not self.frames:
            return None
        frame = self.frames.popleft()
        if self._paused_reading and not self.closed and self.transport is not None:
            self._paused_reading = False
            self.transport.resume_reading()
        return frame

    async def next(self, bound_s: float | None = None) -> bytes | None:
        """The next frame; None once closed (or ``bound_s`` passed, or ``stop`` woke it: the
        caller tells these apart by ``closed``).

        Raises:
            RemoteProtocolError: a frame was over ``most`` (the connection is closed).
        """
        while True:
            frame = self.take()
            if frame is not None or self.closed:
                if frame is None and self.error is not None:
                    raise self.error
                return frame
            waiter = self.waiter = asyncio.get_running_loop().create_future()
            try:
                if bound_s is None:
                    await waiter
                else:
                    await wait(waiter, bound_s)
                    if not self.frames and not self.closed:
                        return None  # the bound passed, or ``stop``
            finally:
                self.waiter = None

    def stop(self) -> None:
        """End a ``next`` in flight now (it returns None)."""
        if self.waiter is not None:
            wake(self.waiter)

    async def writable(self) -> None:
        """Return once the transport takes more (at once unless it paused writing)."""
        while self._drained is not None and not self.closed:
            await self._drained

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        self.stop()


async def serve_wire(answer: Answer, host: str, published: Callable[[int | None], None]) -> None:
    """Serve fetch rounds on a port of ``host`` until cancelled: ``published(port)`` once
    listening, ``published(None)`` when it closes; each connection's requests are answered by
    ``answer`` (reply, not a refusal) in order. Cancelled (the lead ends): the listener and
    every connection are closed."""
    loop = asyncio.get_running_loop()
    conns: set[_Frames] = set()
    tasks: set[asyncio.Task[None]] = set()

    def accepted() -> _Frames:
        conn = _Frames(limits.GRPC_MESSAGE_SIZE_MAX)
        conns.add(conn)
        task = loop.create_task(serve_one(conn))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return conn

    async def serve_one(conn: _Frames) -> None:
        try:
            await _rounds(answer, conn)
        except RemoteProtocolError as exc:
            log.warning("replica wire connection closed: %s", exc)
        finally:
            conns.discard(conn)
            conn.close()

    server = await loop.create_server(accepted, host, 0)
    try:
        published(int(server.sockets[0].getsockname()[1]))
        await asyncio.Event().wait()  # until cancelled
    finally:
        published(None)
        server.close()
        for c in list(conns):
            c.close()
        for t in list(tasks):
            t.cancel()


async def _rounds(answer: Answer, conn: _Frames) -> None:
    while True:
        body = await conn.next()
        if body is None:
            log.info("replica wire connection ended")  # the follower went or moved
            return
        reply, ok = await answer(body)
        await conn.writable()
        if conn.closed:
            return
        conn.send(reply)
        if not ok:  # as a refused Follow stream ends: the follower connects again
            return


class WireLink:
    """A follower's connection to its leader's wire port (at most one; reopened after any
    failure by the next round)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._conn: _Frames | None = None
        self.busy = False  # a round is in flight
        self._abandoned = False  # ... and ``abandon`` ended it

    async def round(self, body: bytes, bound_s: float | None = None) -> bytes | None:
        """The leader's reply to ``body`` (None: it closed or reset the connection, as after a
        refusal or when it stopped leading). Within ``bound_s`` when given (and until
        ``abandon``), else the caller bounds the round; a round cut short, or any error, closes
        the connection, so a late reply never answers the next request.

        Raises:
            OSError: no connection could be made (refused, unreachable, or none within
                CONNECT_TIMEOUT_S).
            RemoteProtocolError: the reply's length is over limits.GRPC_MESSAGE_SIZE_MAX.
            TimeoutError: ``bound_s`` passed, or ``abandon`` ended the round.
        """
        self.busy, self._abandoned = True, False
        try:
            conn = self._conn
            if conn is None or conn.closed:
                conn = self._conn = await self._connect()
            if self._abandoned:
                raise TimeoutError(f"the round to {self.host}:{self.port} was abandoned")
            conn.send(body)
            reply = await conn.next(bound_s)
            if reply is None and not conn.closed:
                raise TimeoutError(f"no reply from {self.host}:{self.port} in the round's bound")
        except BaseException:
            self.close()
            raise
        finally:
            self.busy = False
        if reply is None:  # the leader closed it
            self.close()
        return reply

    async def _connect(self) -> _Frames:
        loop = asyncio.get_running_loop()
        most = limits.GRPC_MESSAGE_SIZE_MAX
        try:
            opening = loop.create_connection(lambda: _Frames(most), self.host, self.port)
            _transport, conn = await asyncio.wait_for(opening, CONNECT_TIMEOUT_S)
        except TimeoutError as exc:  # a port a firewall drops: not a round that ran late
            raise ConnectionError(
                f"no connection to {self.host}:{self.port} in {CONNECT_TIMEOUT_S} s"
            ) from exc
        return conn

    def abandon(self) -> None:
        """End the round in flight now (it raises TimeoutError); nothing when none is."""
        if self.busy:
            self._abandoned = True
            if self._conn is not None:
                self._conn.stop()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
