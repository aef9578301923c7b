"""txmq's own gRPC channels, both sides: ``txmq.admin.v1.Admin`` and ``txmq.data.v1.Data``
(served by broker/admin/service.py and broker/data_channel/pull.py).

Owns: the service names, the one encoding of a plain request (a JSON object), the one framing
of every reply on both channels and of a request that carries records (``frame``: a 4-byte
big-endian header length, a JSON header, then payload bytes; an admin reply is the degenerate
frame, header and no payload), its decoding (``split``) into a result or the typed error of a
refusal (``errors.from_code``), and the mapping of a gRPC transport failure to a typed error.
Used by the broker (its channels, its peers in a cluster, a follower's fetches), the CLI's
admin client (so the dashboard too) and the Spark client.
Must not: open channels, retry or choose credentials: each caller has its own policy.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Final

import grpc

from txmq import errors
from txmq.errors import BrokerUnavailableError, RemoteProtocolError, TxmqError

ADMIN_SERVICE: Final = "txmq.admin.v1.Admin"
DATA_SERVICE: Final = "txmq.data.v1.Data"
REPLICA_SERVICE: Final = "txmq.replica.v1.Replica"
# The data channel frame: this header length (big-endian u32), the JSON header, the payload.
HEADER_LENGTH: Final = struct.Struct(">I")
_UNREACHABLE: Final = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def frame(header: Mapping[str, Any], payload: Sequence[bytes | memoryview] = ()) -> bytes:
    """The frame of every reply on both channels, and of a request that carries records:
    header length, JSON header, then ``payload`` back to back (none for an admin reply)."""
    head = json.dumps(dict(header)).encode()
    return b"".join([HEADER_LENGTH.pack(len(head)), head, *payload])


def split(
    raw: bytes,
    method: str,
    *,
    header_max: int | None = None,
    error: type[TxmqError] = RemoteProtocolError,
) -> tuple[dict[str, Any], memoryview]:
    """(JSON header, payload) of a frame. ``error`` is what a broken frame raises: the
    client's RemoteProtocolError by default, BadRequestError for a server reading a request.

    Raises:
        TxmqError: ``error``, the framing is broken or the header is not a JSON object (or is
            longer than ``header_max``).
    """
    view = memoryview(raw)
    start = HEADER_LENGTH.size
    if len(view) < start:
        raise error(f"{method}: frame shorter than its {start}-byte header length")
    (n,) = HEADER_LENGTH.unpack_from(view)
    if n > len(view) - start or (header_max is not None and n > header_max):
        raise error(f"{method}: frame header runs past the frame or its bound")
    try:
        header = json.loads(view[start : start + n].tobytes())
    except ValueError as exc:
        raise error(f"{method}: frame header is not JSON") from exc
    if not isinstance(header, dict):
        raise error(f"{method}: frame header is not a JSON object")
    return header, view[start + n :]


def method_path(service: str, method: str) -> str:
    return f"/{service}/{method}"


def encode(args: Mapping[str, Any]) -> bytes:
    return json.dumps(dict(args)).encode()


def _answer(header: dict[str, Any], method: str) -> dict[str, Any]:
    if header.get("ok"):
        return header
    code = int(header.get("code", errors.CODE_OK))
    if code == errors.CODE_OK:
        raise RemoteProtocolError(f"{method} refused without an error code")
    exc = errors.from_code(code, str(header.get("error", "request refused")))
    # Back-pressure the broker marks retriable (disk above its watermark, too many pending
    # transactions) is, whatever the class says.
    exc.retriable = bool(header.get("retriable")) or exc.retriable
    raise exc


def data_reply(raw: bytes, method: str) -> tuple[dict[str, Any], memoryview]:
    """The data channel's answer to ``method``: (its JSON header, the bytes after it).

    Raises:
        TxmqError: the broker refused the request (the class its status code names).
        RemoteProtocolError: the framing is broken, or a refusal has no code.
    """
    header, payload = split(raw, method)
    return _answer(header, method), payload


def admin_reply(raw: bytes, method: str) -> dict[str, Any]:
    """The admin channel's answer to ``method``: the header of a frame without payload.

    Raises:
        TxmqError: the broker refused the request (the class its status code names).
        RemoteProtocolError: the framing is broken, a refusal has no code, or bytes follow.
    """
    header, payload = split(raw, method)
    if len(payload):
        raise RemoteProtocolError(f"{method}: {len(payload)} bytes after an admin reply")
    return _answer(header, method)


def _status(exc: grpc.RpcError) -> grpc.StatusCode | None:
    return exc.code() if isinstance(exc, grpc.Call) else None


def transport_error(exc: grpc.RpcError, endpoints: str, service: str, method: str) -> TxmqError:
    """The typed error for a call that failed below txmq's framing: nothing answering ->
    BrokerUnavailableError; a server without the service -> RemoteProtocolError saying so;
    anything else -> RemoteProtocolError with gRPC's status and details."""
    status = _status(exc)
    details = exc.details() if isinstance(exc, grpc.Call) else ""
    if status in (*_UNREACHABLE, None):
        return BrokerUnavailableError(endpoints, f"{status}: {details}" if details else str(status))
    if status is grpc.StatusCode.UNIMPLEMENTED:
        return RemoteProtocolError(f"{endpoints} has no {service} channel (is it a txmq broker?)")
    return RemoteProtocolError(f"{method} to {endpoints} failed: {status}: {details}")
