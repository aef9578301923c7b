"""The leader's Replica channel on gRPC and the wire: the handlers around ``Replication``.

Owns: ``add_replica``, the ``txmq.replica.v1.Replica`` service's handlers (replication.py's
docstring has the calls and their framing), and ``answerer``, what answers one fetch request
on any transport (Fetch, Follow, replica_wire.py).
Must not: hold replication state (leader.py does).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from txmq.broker.replication.leader import SERVICE, Replication
from txmq.broker.rpc.json_channel import json_args, refusal
from txmq.protocol import channels


def answerer(
    replication: Replication, service: Any
) -> Callable[[bytes], Awaitable[tuple[bytes, bool]]]:
    """What answers a fetch request, on any transport (Fetch, Follow, replica_wire.py)."""

    async def answer(body: bytes) -> tuple[bytes, bool]:
        """A fetch request's reply, and whether it was not a refusal."""
        try:
            header, data = await replication.fetch(json_args(body), service.run)
            return channels.frame(header, [data]), True
        except Exception as exc:
            return channels.frame(refusal(exc, "Fetch")), False

    return answer


def add_replica(server: Any, replication: Replication, service: Any) -> None:
    """Register the Replica channel (leader side) on ``server``."""
    answer = answerer(replication, service)

    async def fetch(body: bytes, context: Any) -> bytes:
        return (await answer(body))[0]

    async def follow(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        """Fetch rounds on one stream (leader_link.py): each request answered as ``Fetch``
        answers it, in lockstep. A refusal ends the stream (the follower opens another when it
        fetches again), so a replica that stopped leading is not held by its followers."""
        async for body in requests:
            reply, ok = await answer(body)
            yield reply
            if not ok:
                return

    async def status(body: bytes, context: Any) -> bytes:
        return channels.frame(replication.status())

    async def epochs(body: bytes, context: Any) -> bytes:
        try:
            return channels.frame(replication.epochs_of(json_args(body)))
        except Exception as exc:
            return channels.frame(refusal(exc, "Epochs"))

    register(server, fetch, follow, epochs, status)


Unary = Callable[[bytes, Any], Awaitable[bytes]]


def register(
    server: Any,
    fetch: Unary,
    follow: Callable[[AsyncIterator[bytes], Any], AsyncIterator[bytes]],
    epochs: Unary,
    status: Unary,
) -> None:
    """The Replica channel's four calls on ``server`` (a leader's, or a follower's refusals)."""
    handlers = {
        "Fetch": grpc.unary_unary_rpc_method_handler(fetch),
        "Follow": grpc.stream_stream_rpc_method_handler(follow),
        "Epochs": grpc.unary_unary_rpc_method_handler(epochs),
        "Status": grpc.unary_unary_rpc_method_handler(status),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
