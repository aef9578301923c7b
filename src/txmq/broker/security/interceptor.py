"""The authorization interceptor: every RPC passes ``Guard`` before its handler runs.

Owns: wrapping each registered method handler once (cached by method name, so a call costs a
dictionary lookup, not a new handler) with a check of the caller's credentials and rights, and
the shape of a refusal in each service's own response type: a v2 RPC answers its own response
message with Status UNAUTHORIZED (40100), FORBIDDEN (40300) or, for a new client id the
bindings have no room for, TOO_MANY_REQUESTS (42900), and a message naming what was refused;
the admin channel answers ``{"ok": false, "code", "error"}``; the data channel the same header
in its framing. Telemetry is checked once, when the stream opens. A follower's forwarding
handlers take raw bytes (broker/replication/forward.py): their request is decoded once here
for the check only, and a refusal is answered serialized; the leader checks the same call
again. Must not: hold rules (txmq/broker/security/auth.py) or touch the handlers' logic.
Installed only with an ACL file: an open broker pays nothing for it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import grpc
from rocketmq.grpc_protocol import service_pb2 as sv

from txmq import limits
from txmq.broker.rpc.metadata import call_metadata, keep_metadata
from txmq.broker.security.auth import (
    ADMIN_RULES,
    DATA_RULES,
    RULES,
    Guard,
    Rule,
    drop_unpublishable,
    need_admin,
)
from txmq.errors import (
    ForbiddenError,
    TooManyRequestsError,
    TxmqError,
    UnauthorizedError,
    invariant,
)
from txmq.protocol import channels, mapping

log = logging.getLogger("txmq.broker")

V2_SERVICE: Final = "apache.rocketmq.v2.MessagingService"
Refusal = Callable[[TxmqError], Any]
# What the checks refuse a call with: bad credentials, missing rights, and a new client id the
# bindings have no room for (client_ids.py).
Refused = (UnauthorizedError, ForbiddenError, TooManyRequestsError)
_STATUS_LABELS: Final = {
    UnauthorizedError: "unauthorized",
    ForbiddenError: "forbidden",
    TooManyRequestsError: "too_many_requests",
}


def _v2_refusal(name: str) -> Refusal:
    response = sv.TelemetryCommand if name == "Telemetry" else getattr(sv, f"{name}Response")

    def refuse(exc: TxmqError) -> Any:
        return response(status=mapping.error_status(exc))

    return refuse


def _channel_refusal(exc: TxmqError) -> bytes:
    """The admin and the data channel answer a refusal in the same frame."""
    return channels.frame({"ok": False, "code": exc.code, "error": str(exc)})


def _raw(name: str, rule: Rule, refuse: Refusal) -> tuple[Rule, Refusal]:
    """The rule and refusal of a v2 method served as raw bytes (a follower forwarding it): the
    request decoded for the rule only, the refusal serialized."""
    request_type = getattr(sv, f"{name}Request", None)

    def check(guard: Guard, user: Any, request: Any) -> None:
        if isinstance(request, bytes) and request_type is not None:
            request = request_type.FromString(request)
        rule(guard, user, request)

    def refuse_raw(exc: TxmqError) -> bytes:
        raw: bytes = refuse(exc).SerializeToString()
        return raw

    return check, refuse_raw


def _plan(method: str, raw: bool = False) -> tuple[Rule, Refusal | None]:
    """The rule and the refusal shape of a full method name ``/service/Method`` (``raw``: its
    handler takes and answers bytes)."""
    service, _, name = method.lstrip("/").partition("/")
    if service == V2_SERVICE:
        if raw:
            return _raw(name, RULES.get(name, need_admin), _v2_refusal(name))
        return RULES.get(name, need_admin), _v2_refusal(name)
    if service == channels.ADMIN_SERVICE:
        return ADMIN_RULES.get(name, need_admin), _channel_refusal
    if service == channels.DATA_SERVICE:
        return DATA_RULES.get(name, need_admin), _channel_refusal
    return need_admin, None  # e.g. health or reflection services: admins only


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, guard: Guard, now_ms: Callable[[], int], refusals: Any = None) -> None:
        self.guard = guard
        self.now_ms = now_ms
        # A labelled Prometheus counter (Metrics.refusals), or None.
        self.refusals = refusals
        self._handlers: dict[str, Any] = {}
        self._log_second = -1
        self._log_lines = 0
        self._log_suppressed = 0

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        method = details.method
        keep_metadata(details)  # the call's metadata, built once by gRPC, for check/client_id
        wrapped = self._handlers.get(method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(details)
        if handler is None:  # not a registered method: gRPC answers UNIMPLEMENTED
            return None
        wrapped = self._wrap(handler, method)
        self._handlers[method] = wrapped
        invariant(
            len(self._handlers) <= limits.SERVER_METHODS_MAX, "only registered methods are cached"
        )
        return wrapped

    def check(self, context: Any, rule: Rule, request: Any) -> Any:
        """The authenticated user, after ``rule`` allowed ``request``; raises the refusal."""
        user = self.guard.authenticate(call_metadata(context), self.now_ms())
        rule(self.guard, user, request)
        return user

    def _wrap(self, handler: Any, method: str) -> Any:
        rule, refuse = _plan(method, raw=handler.request_deserializer is None)
        kinds = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(
                self._stream_stream(handler.stream_stream, method, rule, refuse), **kinds
            )
        invariant(not handler.request_streaming, f"{method}: no client-streaming RPCs")
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(
                self._unary_stream(handler.unary_stream, method, rule, refuse), **kinds
            )
        return grpc.unary_unary_rpc_method_handler(
            self._unary_unary(handler.unary_unary, method, rule, refuse), **kinds
        )

    def _log_refusal(self, method: str, peer: str, exc: TxmqError) -> None:
        """At most REFUSAL_LOG_LINES_PER_SECOND_MAX lines a second; the rest are counted."""
        second = self.now_ms() // 1000
        if second != self._log_second:
            self._log_second, self._log_lines = second, 0
        if self._log_lines >= limits.REFUSAL_LOG_LINES_PER_SECOND_MAX:
            self._log_suppressed += 1
            return
        self._log_lines += 1
        more = f" ({self._log_suppressed} more refusals not logged)" if self._log_suppressed else ""
        self._log_suppressed = 0
        log.warning("refused %s from %s: %s%s", method, peer, exc, more)

    async def _refused(self, context: Any, method: str, exc: TxmqError, refuse: Any) -> Any:
        self._log_refusal(method, context.peer(), exc)
        if self.refusals is not None:
            label = next(v for kind, v in _STATUS_LABELS.items() if isinstance(exc, kind))
            self.refusals.labels(label).inc()
        if refuse is None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
        return refuse(exc)

    def _unary_unary(
        self, behavior: Any, method: str, rule: Rule, refuse: Refusal | None
    ) -> Callable[[Any, Any], Awaitable[Any]]:
        async def call(request: Any, context: Any) -> Any:
            try:
                self.check(context, rule, request)
            except Refused as exc:
                return await self._refused(context, method, exc, refuse)
            return await behavior(request, context)

        return call

    def _unary_stream(
        self, behavior: Any, method: str, rule: Rule, refuse: Refusal | None
    ) -> Callable[[Any, Any], AsyncIterator[Any]]:
        async def call(request: Any, context: Any) -> AsyncIterator[Any]:
            try:
                self.check(context, rule, request)
            except Refused as exc:
                yield await self._refused(context, method, exc, refuse)
                return
            # aclosing: a cancelled stream closes the handler's generator now, so its own
            # cleanup (a receive's bookkeeping) runs at once, not when garbage is collected.
            async with contextlib.aclosing(behavior(request, context)) as items:
                async for item in items:
                    yield item

        return call

    def _stream_stream(
        self, behavior: Any, method: str, rule: Rule, refuse: Refusal | None
    ) -> Callable[[Any, Any], AsyncIterator[Any]]:
        async def call(requests: Any, context: Any) -> AsyncIterator[Any]:
            try:
                user = self.check(context, rule, None)
            except Refused as exc:
                yield await self._refused(context, method, exc, refuse)
                return

            async def allowed() -> AsyncIterator[Any]:
                async for command in requests:
                    # Raw bytes (a follower forwarding): the leader filters the Settings.
                    if (
                        method.endswith("/Telemetry")
                        and not isinstance(command, bytes)
                        and command.HasField("settings")
                    ):
                        dropped = drop_unpublishable(user, command.settings)
                        if dropped:
                            log.warning(
                                "telemetry of %r: not a publisher of %s; no check-backs for those",
                                user.access_key,
                                dropped,
                            )
                    yield command

            # aclosing: the servicer's Telemetry cleanup (closing the session's stream, so
            # check-backs go to a live one) runs as soon as this stream ends.
            async with contextlib.aclosing(behavior(allowed(), context)) as items:
                async for item in items:
                    yield item

        return call
