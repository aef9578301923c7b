"""What gRPC runs for each call before a MessagingService handler: the handler lookup, which
keeps the call's metadata, and the request deserializer.

Owns: ``Lookup``, the generic handler ``decode.add_messaging_service`` registers (gRPC calls its
``service`` with the call's details); ``Parse``, a request deserializer that turns a
DecodeError into the stand-in it is given (decode.py's ``Undecodable``); ``Serialize``, the
server streams' reply serializer, which passes a reply written as bytes already through;
``keep_metadata`` and ``call_metadata``: gRPC builds a call's metadata tuple once, for the
handler lookup, and ``context.invocation_metadata()`` builds it again (a namedtuple per
header, ~18 on an official client's call), so the lookup keeps the first one for the call's
task.
Why a module of its own: gRPC calls these as plain callables and inspects only the handlers,
so they are compiled (docs/adr/0007) and run no Python frame (four lookups and four parses
per transaction; issue 17, eleventh pass); decode.py, whose handler wrappers gRPC inspects,
stays interpreted.
Must not: change a well-formed request's path.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Final

from google.protobuf.message import DecodeError

# The metadata gRPC handed ``Lookup.service`` for the call running in this task: gRPC looks
# the handler up in the call's own task (each task runs in a copy of the context, so another
# call never sees it), then runs the handler there.
_METADATA: Final[ContextVar[Any]] = ContextVar("txmq_call_metadata", default=None)


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


class Lookup:
    """A service's generic RPC handler (what ``grpc.method_handlers_generic_handler`` builds),
    keeping the call's metadata. ``handlers`` by full method path."""

    def __init__(self, name: str, handlers: dict[str, Any]) -> None:
        self._name = name
        self._handlers = handlers

    def service_name(self) -> str:
        return self._name

    def service(self, handler_call_details: Any) -> Any:
        _METADATA.set(handler_call_details.invocation_metadata)
        return self._handlers.get(handler_call_details.method)


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
