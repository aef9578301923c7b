"""A MessagingService call's metadata, kept from the handler lookup for the handler.

Owns: ``Lookup``, the generic handler ``decode.add_messaging_service`` registers (gRPC calls its
``service`` with the call's details), and ``keep_metadata`` / ``call_metadata``: gRPC builds a
call's metadata tuple once, for the handler lookup, and ``context.invocation_metadata()`` builds
it again (a namedtuple per header, ~18 on an official client's call), so the lookup keeps the
first one for the call's task, where the interceptor and the handlers read it.
Must not: change a call's path.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Final

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
