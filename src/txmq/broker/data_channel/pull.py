"""The data channel, ``txmq.data.v1.Data``: PullRecords, a bulk read of one queue by offset,
and QueueOffsets, every queue's retained range in one call.

Why: the v2 PullMessage streams one protobuf Message per item, and in Python gRPC each item
costs tens of microseconds on both ends, which capped the Spark connector far below what the
disk and Spark can do. A record pull answers one reply holding up to PULL_BYTES_MAX of records
in their commit-log format (docs/formats.md), verified by the broker as it reads them and again
by the client as it decodes them (``txmq.format.record.split``): no per-message encoding here.

Request: a JSON object ``{"topic", "queue_id", "offset", "max_count"?, "max_bytes"?}``.
Reply: a 4-byte big-endian header length, a JSON header, then the records back to back. The
header is ``{"ok": true, "next_offset", "min_offset", "max_offset", "count"}`` or
``{"ok": false, "code": <RocketMQ status code>, "error": str}`` (see admin.refusal).
QueueOffsets takes ``{"topic"}`` and answers the same framing with no records and the header
``{"ok": true, "queues": [[min_offset, max_offset], ...]}`` (one pair per queue, in queue order);
it never creates the topic. Only committed and normal messages are in a queue, as for every
queue read. An ``offset`` below
the queue's first retained offset is refused with ILLEGAL_OFFSET (retention deleted it): the
reader decides whether that is data loss. No long polling: readers ask for ranges the broker
already reported.
Must not: decode records (that is the reader's work) or change anything.
"""

from __future__ import annotations

from typing import Any, Final

import grpc

from txmq import limits
from txmq.broker.rpc.json_channel import int_arg, json_args, refusal
from txmq.broker.state.parts import Parts
from txmq.errors import BadRequestError, IllegalOffsetError, IllegalTopicError
from txmq.protocol import channels, mapping

SERVICE: Final = channels.DATA_SERVICE


def pull_records(
    parts: Parts, args: dict[str, Any]
) -> tuple[dict[str, Any], list[bytes | memoryview]]:
    """(header, records) for one PullRecords request. Blocking: run it in the executor."""
    topic = mapping.validate_topic(str(args.get("topic", "")), allow_system=True)
    info = parts.topics.get(topic)
    queue_id, offset = int_arg(args, "queue_id"), int_arg(args, "offset")
    if not 0 <= queue_id < info.queue_count:
        raise IllegalTopicError(f"topic {topic!r} has no queue {queue_id}")
    if offset < 0:
        raise IllegalOffsetError(f"offset must be >= 0, got {offset}")
    max_count = int_arg(args, "max_count", limits.PULL_COUNT_MAX)
    max_bytes = int_arg(args, "max_bytes", limits.PULL_BYTES_MAX)
    if not 1 <= max_count <= limits.PULL_COUNT_MAX:
        raise BadRequestError(f"max_count must be 1..{limits.PULL_COUNT_MAX}, got {max_count}")
    if not 1 <= max_bytes <= limits.PULL_BYTES_MAX:
        raise BadRequestError(f"max_bytes must be 1..{limits.PULL_BYTES_MAX}, got {max_bytes}")
    read = parts.store.read_queue_bytes(topic, queue_id, offset, max_count, max_bytes=max_bytes)
    if offset < read.min_offset:
        raise IllegalOffsetError(
            f"offset {offset} is below the queue's first retained offset {read.min_offset}"
        )
    header = {
        "ok": True,
        "next_offset": read.next_offset,
        "min_offset": read.min_offset,
        "max_offset": read.max_offset,
        "count": len(read.records),
    }
    return header, read.records


def queue_offsets(parts: Parts, args: dict[str, Any]) -> dict[str, Any]:
    """The header for one QueueOffsets request. Memory only: runs on the event loop."""
    topic = mapping.validate_topic(str(args.get("topic", "")), allow_system=True)
    info = parts.topics.get(topic)
    return {
        "ok": True,
        "queues": [list(parts.store.queue_offsets(topic, q)) for q in range(info.queue_count)],
    }


def add_data(server: Any, parts: Parts, service: Any) -> None:
    """Register the data channel on ``server``; calls run through ``service.run``."""

    async def pull(body: bytes, context: Any) -> bytes:
        try:
            header, records = await service.run(pull_records, parts, json_args(body))
            return channels.frame(header, records)
        except Exception as exc:
            return channels.frame(refusal(exc, "PullRecords"))

    async def offsets(body: bytes, context: Any) -> bytes:
        try:
            return channels.frame(queue_offsets(parts, json_args(body)))
        except Exception as exc:
            return channels.frame(refusal(exc, "QueueOffsets"))

    handlers = {
        "PullRecords": grpc.unary_unary_rpc_method_handler(pull),
        "QueueOffsets": grpc.unary_unary_rpc_method_handler(offsets),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
