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
costs each side ~105-129 us of CPU, on uvloop's TCP streams 23-35 us (docs/benchmarks.md,
issue 19, 2026-11-27).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Final

from txmq import limits
from txmq.errors import RemoteProtocolError

log = logging.getLogger(__name__)

# Each frame's length; a frame is bounded as the gRPC port bounds a message
# (limits.GRPC_MESSAGE_SIZE_MAX): a reply carries at most a fetch's records and header.
LENGTH: Final = struct.Struct(">I")
# A follower that cannot connect within this (a firewall dropping the port, a host it cannot
# reach) fetches on the Follow stream from that leader instead (leader_link.py).
CONNECT_TIMEOUT_S: Final = 1.0

Answer = Callable[[bytes], Awaitable[tuple[bytes, bool]]]


async def serve_wire(answer: Answer, host: str, published: Callable[[int | None], None]) -> None:
    """Serve fetch rounds on a port of ``host`` until cancelled: ``published(port)`` once
    listening, ``published(None)`` when it closes; each connection's requests are answered by
    ``answer`` (reply, not a refusal) in order. Cancelled (the lead ends): the listener and
    every connection are closed."""
    conns: set[asyncio.StreamWriter] = set()

    async def serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.add(writer)
        try:
            await _rounds(answer, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            log.info("replica wire connection ended: %r", exc)  # the follower went or moved
        except RemoteProtocolError as exc:
            log.warning("replica wire connection closed: %s", exc)
        finally:
            conns.discard(writer)
            writer.close()

    server = await asyncio.start_server(serve_one, host, 0)
    try:
        published(int(server.sockets[0].getsockname()[1]))
        await asyncio.Event().wait()  # until cancelled
    finally:
        published(None)
        server.close()
        for w in list(conns):
            w.close()


async def _rounds(
    answer: Answer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    while True:
        body = await _read_frame(reader, limits.GRPC_MESSAGE_SIZE_MAX)
        reply, ok = await answer(body)
        writer.writelines((LENGTH.pack(len(reply)), reply))
        await writer.drain()
        if not ok:  # as a refused Follow stream ends: the follower connects again
            return


async def _read_frame(reader: asyncio.StreamReader, most: int) -> bytes:
    """One length-prefixed frame.

    Raises:
        RemoteProtocolError: the length is over ``most``.
        asyncio.IncompleteReadError: the connection ended first.
    """
    (n,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
    if n > most:
        raise RemoteProtocolError(f"replica wire frame of {n} bytes, over {most}")
    return await reader.readexactly(n)


class WireLink:
    """A follower's connection to its leader's wire port (at most one; reopened after any
    failure by the next round)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def round(self, body: bytes) -> bytes | None:
        """The leader's reply to ``body`` (None: it closed or reset the connection, as after a
        refusal or when it stopped leading). The caller bounds the round; a round cut short, or
        any error, closes the connection, so a late reply never answers the next request.

        Raises:
            OSError: no connection could be made (refused, unreachable, or none within
                CONNECT_TIMEOUT_S).
            RemoteProtocolError: the reply's length is over limits.GRPC_MESSAGE_SIZE_MAX.
        """
        if self._conn is None:
            try:
                opening = asyncio.open_connection(self.host, self.port)
                self._conn = await asyncio.wait_for(opening, CONNECT_TIMEOUT_S)
            except TimeoutError as exc:  # a port a firewall drops: not a round that ran late
                raise ConnectionError(
                    f"no connection to {self.host}:{self.port} in {CONNECT_TIMEOUT_S} s"
                ) from exc
            sock = self._conn[1].get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader, writer = self._conn
        try:
            writer.writelines((LENGTH.pack(len(body)), body))
            return await _read_frame(reader, limits.GRPC_MESSAGE_SIZE_MAX)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.close()
            return None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None
