"""Registering the v2 MessagingService with requests that fail to parse answered as BAD_REQUEST.

Owns: ``add_messaging_service``, the replacement for the generated
``add_MessagingServiceServicer_to_server``. Why: protobuf refuses a string field that is not
UTF-8 while gRPC decodes the request, before any handler runs, and gRPC then ends the call with
its own UNKNOWN status, which RocketMQ clients do not read as a refusal. Here each request
parses through a deserializer that turns a DecodeError into an ``Undecodable`` stand-in, and
the handler answers it with the RPC's own response and Status BAD_REQUEST (40000) naming what
was wrong. Also ``call_metadata``: gRPC builds a call's metadata tuple once, for the handler
lookup (``service``), and ``context.invocation_metadata()`` builds it again (a namedtuple per
header, ~18 on an official client's call); ``service`` keeps the first one for the call's task.
Must not: change a well-formed request's path beyond one isinstance check.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError
from rocketmq.grpc_protocol import service_pb2 as sv

from txmq.errors import BadRequestError
from txmq.protocol import mapping

SERVICE = sv.DESCRIPTOR.services_by_name["MessagingService"]

# The metadata gRPC handed ``_Service.service`` for the call running in this task: gRPC looks
# the handler up in the call's own task (each task runs in a copy of the context, so another
# call never sees it), then runs the handler there.
_METADATA: ContextVar[Any] = ContextVar("txmq_call_metadata", default=None)


def keep_metadata(handler_call_details: Any) -> None:
    """Keep the metadata of the call whose handler is being looked up, for ``call_metadata``."""
    _METADATA.set(handler_call_details.invocation_metadata)


def call_metadata(context: Any) -> Any:
    """The call's invocation metadata: the tuple gRPC built for the handler lookup, else
    (no lookup in this task: a handler called directly, another service) the context's."""
    metadata = _METADATA.get()
    if metadata is None:
        return context.invocation_metadata()
    return metadata


class Undecodable:
    """A request that did not parse; reads as an empty request (so an interceptor looking at
    its fields sees nothing), ``reason`` says why."""

    def __init__(self, cls: Any, reason: str) -> None:
        self._empty = cls()
        self.reason = reason

    def __getattr__(self, name: str) -> Any:
        return getattr(self._empty, name)


def _parse(cls: Any) -> Callable[[bytes], Any]:
    def parse(raw: bytes) -> Any:
        try:
            return cls.FromString(raw)
        except DecodeError as exc:
            return Undecodable(cls, str(exc))

    return parse


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


class _Service(grpc.ServiceRpcHandler):  # type: ignore[misc]
    """``method_handlers_generic_handler``'s lookup, keeping the call's metadata."""

    def __init__(self, handlers: dict[str, Any]) -> None:
        self._handlers = {f"/{SERVICE.full_name}/{k}": v for k, v in handlers.items()}

    def service_name(self) -> str:
        return str(SERVICE.full_name)

    def service(self, handler_call_details: Any) -> Any:
        _METADATA.set(handler_call_details.invocation_metadata)
        return self._handlers.get(handler_call_details.method)


def add_messaging_service(servicer: Any, server: Any) -> None:
    handlers: dict[str, Any] = {}
    for method in SERVICE.methods:
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        behavior = getattr(servicer, method.name)
        parse, serialize = _parse(request), response.SerializeToString
        if method.client_streaming and method.server_streaming:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                behavior, request_deserializer=parse, response_serializer=serialize
            )
        elif method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _server_stream(behavior, response), parse, serialize
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _unary(behavior, response), parse, serialize
            )
    server.add_generic_rpc_handlers((_Service(handlers),))
