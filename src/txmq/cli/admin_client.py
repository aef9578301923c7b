"""Client of the broker's admin channel (``txmq.admin.v1.Admin``, JSON bodies) and of the v2
protocol for data-plane commands. Maps failures to typed errors the CLI turns into exit codes."""

from __future__ import annotations

import json
from typing import Any

import grpc

from txmq.errors import (
    CODE_BAD_REQUEST,
    BadRequestError,
    BrokerUnavailableError,
    NotFoundError,
    TxmqError,
)

SERVICE = "txmq.admin.v1.Admin"


class RemoteError(TxmqError):
    """The broker refused a request; carries the broker's status code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def call(endpoints: str, method: str, args: dict[str, Any], *, timeout_s: float = 10.0) -> Any:
    """Call one admin method; returns the decoded result.

    Raises:
        BrokerUnavailableError: nothing answers at ``endpoints``.
        NotFoundError / BadRequestError / RemoteError: the broker refused the request.
    """
    channel = grpc.insecure_channel(endpoints)
    try:
        stub = channel.unary_unary(f"/{SERVICE}/{method}")
        raw = stub(json.dumps(args).encode(), timeout=timeout_s)
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        raise BrokerUnavailableError(endpoints, str(code)) from exc
    finally:
        channel.close()
    reply = json.loads(raw)
    if reply.get("ok"):
        return reply
    code = int(reply.get("code", CODE_BAD_REQUEST))
    message = str(reply.get("error", "request refused"))
    if 40400 <= code < 40500:
        raise NotFoundError(message)
    if 40000 <= code < 40100:
        raise BadRequestError(message)
    raise RemoteError(code, message)
