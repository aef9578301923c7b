"""Small shared pieces of the RPC handlers: client id, error -> Status, filters, durations."""

from __future__ import annotations

import logging
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb

from txmq import errors, limits
from txmq.broker.calls import call_metadata
from txmq.errors import IllegalFilterExpressionError, IllegalInvisibleTimeError, TxmqError
from txmq.protocol import mapping

log = logging.getLogger("txmq.broker")


def client_id(context: Any) -> str:
    for key, value in call_metadata(context) or ():
        if key == "x-mq-client-id":
            return str(value)
    return ""


def fail(exc: BaseException) -> Any:
    if isinstance(exc, OSError) and errors.is_disk_full(exc):
        # A state file (topics, positions, snapshot) did not fit: the same refusal as the log's.
        exc = errors.DiskFullError(str(exc))
    if isinstance(exc, TxmqError):
        return mapping.error_status(exc)
    log.exception("unexpected error in a handler", exc_info=exc)
    return mapping.status(errors.CODE_INTERNAL_ERROR, f"internal error: {exc!r}")


def tags(expr: Any) -> frozenset[str] | None:
    if expr.type == pb.SQL:
        raise IllegalFilterExpressionError("SQL filter expressions are not supported; use tags")
    text = expr.expression.strip()
    if text in ("", "*"):
        return None
    found = frozenset(t.strip() for t in text.split("||") if t.strip())
    if not found:
        raise IllegalFilterExpressionError(f"illegal tag expression {text!r}")
    return found


def invisible_ms(request: Any, default_ms: int = 30_000) -> int:
    if not request.HasField("invisible_duration"):
        return default_ms
    ms = mapping.duration_ms(request.invisible_duration)
    if not limits.INVISIBLE_DURATION_MS_MIN <= ms <= limits.INVISIBLE_DURATION_MS_MAX:
        raise IllegalInvisibleTimeError(
            f"invisible duration must be {limits.INVISIBLE_DURATION_MS_MIN}.."
            f"{limits.INVISIBLE_DURATION_MS_MAX} ms, got {ms}"
        )
    return ms
