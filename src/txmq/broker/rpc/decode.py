"""Registering the v2 MessagingService with requests that fail to parse answered as BAD_REQUEST.

Owns: ``add_messaging_service``, the replacement for the generated
``add_MessagingServiceServicer_to_server``. Why: protobuf refuses a string field that is not
UTF-8 while gRPC decodes the request, before any handler runs, and gRPC then ends the call with
its own UNKNOWN status, which RocketMQ clients do not read as a refusal. Here each request
parses through a deserializer that turns a DecodeError into an ``Undecodable`` stand-in, and
the handler answers it with the RPC's own response and Status BAD_REQUEST (40000) naming what
was wrong. ``Parse`` is that deserializer; ``Serialize`` passes a reply its handler wrote as bytes
already through; the lookup keeps the call's metadata (metadata.py).
Must not: change a well-formed request's path beyond one isinstance check.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError
from rocketmq.grpc_protocol import service_pb2 as sv

from txmq.broker.rpc.metadata import Lookup
from txmq.errors import BadRequestError
from txmq.protocol import mapping

SERVICE = sv.DESCRIPTOR.services_by_name["MessagingService"]
# Unary RPCs whose handler may return its reply's bytes (Serialize passes them through).
_BYTES_REPLIES = frozenset({"AckMessage", "SendMessage", "EndTransaction"})


class Parse:
    """``cls.FromString``, or ``refuse(cls, why)`` for bytes that do not parse."""

    def __init__(self, cls: Any, refuse: Callable[[Any, str], Any]) -> None:
        self._cls = cls
        self._from_string = cls.FromString
        self._refuse = refuse

    def __call__(self, raw: bytes) -> Any:
        try:
            return self._from_string(raw)
        except DecodeError as exc:
            return self._refuse(self._cls, str(exc))


class Serialize:
    """A server stream's reply serializer: a protobuf reply's ``SerializeToString``, or a reply
    its handler wrote as bytes already (replies.Handout's messages) as it is."""

    def __call__(self, reply: Any) -> Any:
        if isinstance(reply, bytes):
            return reply
        return reply.SerializeToString()


class Undecodable:
    """A request that did not parse; reads as an empty request (so an interceptor looking at
    its fields sees nothing), ``reason`` says why."""

    def __init__(self, cls: Any, reason: str) -> None:
        self._empty = cls()
        self.reason = reason

    def __getattr__(self, name: str) -> Any:
        return getattr(self._empty, name)


def _refusal(response: Any, request: Undecodable) -> Any:
    exc = BadRequestError(f"the request is not a valid {SERVICE.name} message: {request.reason}")
    return response(status=mapping.error_status(exc))


def _unary(behavior: Any, response: Any) -> Any:
    async def handle(request: Any, context: Any) -> Any:
        if isinstance(request, Undecodable):
            return _refusal(response, request)
        return await behavior(request, context)

    return handle


def _server_stream(behavior: Any, response: Any) -> Any:
    async def handle(request: Any, context: Any) -> AsyncIterator[Any]:
        if isinstance(request, Undecodable):
            yield _refusal(response, request)
            return
        async for item in behavior(request, context):
            yield item

    return handle


def add_messaging_service(servicer: Any, server: Any) -> None:
    handlers: dict[str, Any] = {}
    for method in SERVICE.methods:
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        behavior = getattr(servicer, method.name)
        parse, serialize = Parse(request, Undecodable), response.SerializeToString
        if method.client_streaming and method.server_streaming:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                behavior, request_deserializer=parse, response_serializer=serialize
            )
        elif method.server_streaming:
            # ReceiveMessage's messages come as their replies' bytes (replies.Handout).
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _server_stream(behavior, response), parse, Serialize()
            )
        else:
            # AckMessage, SendMessage and EndTransaction answer with their replies' bytes
            # (consume_rpcs.py, produce_rpcs.py).
            out = Serialize() if method.name in _BYTES_REPLIES else serialize
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _unary(behavior, response), parse, out
            )
    paths = {f"/{SERVICE.full_name}/{k}": v for k, v in handlers.items()}
    server.add_generic_rpc_handlers((Lookup(str(SERVICE.full_name), paths),))
