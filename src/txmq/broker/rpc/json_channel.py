"""Our own JSON channels (admin, data, replica): reading a request's arguments, and the
``{"ok": false, ...}`` answer of a method that raised.

Owns: ``json_args`` and ``int_arg`` (a request body is a JSON object; integers are integers,
never booleans), and ``refusal``, which turns an exception into the answer every txmq channel
gives: a ``TxmqError`` as its RocketMQ status code, message and whether a retry may help; a
malformed request as BAD_REQUEST; anything else, a bug, as INTERNAL_ERROR with its traceback
logged here.
Must not: know any one channel's methods.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from txmq.errors import (
    CODE_BAD_REQUEST,
    CODE_INTERNAL_ERROR,
    BadRequestError,
    DiskFullError,
    TxmqError,
    is_disk_full,
)

log = logging.getLogger("txmq.broker")


def int_arg(args: dict[str, Any], name: str, default: int | None = None) -> int:
    value = args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequestError(f"{name} must be an integer, got {value!r}")
    return value


def json_args(body: bytes) -> dict[str, Any]:
    args = json.loads(body or b"{}")
    if not isinstance(args, dict):
        raise BadRequestError("request body must be a JSON object")
    return args


def refusal(exc: Exception, method: str) -> dict[str, Any]:
    """The ``{"ok": false, ...}`` answer of a txmq-service method that raised ``exc``."""
    if isinstance(exc, OSError) and is_disk_full(exc):
        exc = DiskFullError(str(exc))  # a state file did not fit: the log's refusal
    if isinstance(exc, TxmqError):
        # "retriable": the caller may try again after a pause (back-pressure, e.g. the disk
        # watermark), which the wire code alone does not say.
        return {"ok": False, "code": exc.code, "error": str(exc), "retriable": exc.retriable}
    if isinstance(exc, (KeyError, ValueError, TypeError)):
        return {"ok": False, "code": CODE_BAD_REQUEST, "error": f"bad request: {exc!r}"}
    # A bug, not a refusal: logged with its traceback here, and reported to the caller as an
    # internal error instead of a dropped call it would read as "broker unreachable".
    log.exception("%s failed", method)
    return {"ok": False, "code": CODE_INTERNAL_ERROR, "error": f"internal error: {exc!r}"}
