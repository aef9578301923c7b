"""Small shared pieces of the MessagingService handlers: the caller's client id, and an
exception as the Status a reply carries."""

from __future__ import annotations

import logging
from typing import Any

from txmq import errors
from txmq.broker.rpc.metadata import call_metadata
from txmq.errors import TxmqError
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
