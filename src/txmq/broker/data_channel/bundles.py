"""PrepareBundle on the data channel (``txmq.data.v1.Data``): one transaction of many messages.

Why: see txn/bundle.py (a Spark sink batch was a transaction per row). The Spark sink prepares
each task's rows as bundles here and decides them with the ordinary EndTransaction (v2), and
the broker's check-back settles an undecided bundle from the sink ledger like any sink half.

Request: a 4-byte big-endian header length, a JSON header ``{"topic", "count", "properties"?}``
then ``count`` messages back to back in the record format (``txn.bundle.encode_message``).
``properties`` (user properties, e.g. the sink's tags) go on the half and on every committed
message. The topic must take transactional messages (and exist, unless the broker creates
topics on first use, as for SendMessage). The bundle's queue is chosen round robin.
Reply (data-channel framing, see broker/data_channel/pull.py): ``{"ok": true, "transaction_id",
"message_id", "count"}``, the half is then durable and invisible (in a replica group: on the
in-sync replicas, through the same gate as every v2 write, ``Replication.acknowledge``, which
also refuses it at a replica no longer leading by its own clock); or a refusal ``{"ok": false,
"code", "error", "retriable"}``: retriable refusals (disk above its watermark, too many pending
transactions) are back-pressure the sender retries after a pause.
Must not: make anything visible (only EndTransaction or check-back commits a bundle).
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any, Final

import grpc

from txmq import limits
from txmq.broker.data_channel.pull import SERVICE
from txmq.broker.rpc.json_channel import refusal
from txmq.broker.state.parts import Parts
from txmq.errors import BadRequestError, MessageBodyTooLargeError, MessageTypeConflictError
from txmq.model import MessageType, RecordDraft, is_internal_property
from txmq.protocol import channels, mapping
from txmq.txn import bundle

_METHOD: Final = "PrepareBundle"


def _split(body: bytes) -> tuple[dict[str, Any], memoryview]:
    return channels.split(
        body, _METHOD, header_max=limits.PULL_HEADER_SIZE_MAX, error=BadRequestError
    )


def _properties(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise BadRequestError("properties must be a JSON object of strings")
    props = {str(k): str(v) for k, v in raw.items()}
    if any(not k or is_internal_property(k) for k in props):
        raise BadRequestError(f"illegal or reserved property key in {sorted(props)}")
    return props


def prepare_bundle(parts: Parts, body: bytes, queue: int, client_id: str) -> dict[str, Any]:
    """Check and store one bundle as a half message. Blocking: run it in the executor."""
    header, blob = _split(body)
    topic = mapping.validate_topic(str(header.get("topic", "")))
    info = parts.topics.ensure(topic, MessageType.TRANSACTION, writing=True)  # as SendMessage
    if info.message_type is not MessageType.TRANSACTION and not info.accepts_all:
        raise MessageTypeConflictError(
            f"topic {topic!r} accepts {info.message_type.value} messages, not transaction"
        )
    body_size_max = parts.config.store.body_size_max
    if len(blob) > min(body_size_max, limits.SINK_BUNDLE_BYTES_MAX):
        raise MessageBodyTooLargeError(len(blob), min(body_size_max, limits.SINK_BUNDLE_BYTES_MAX))
    count = header.get("count")
    if isinstance(count, bool) or not isinstance(count, int):
        raise BadRequestError(f"count must be an integer, got {count!r}")
    bundle.check(blob, topic=topic, count=count, body_size_max=body_size_max)
    props = _properties(header.get("properties", {}))
    props[bundle.PROP_BUNDLE] = str(count)
    draft = RecordDraft(
        topic=topic,
        queue_id=queue % info.queue_count,
        body=bytes(blob),
        message_id=uuid.uuid4().hex.upper(),
        properties=props,
        born_timestamp_ms=parts.store.now_ms(),
    )
    tid, _ = parts.tx.prepare(draft, producer_group=topic, client_id=client_id)
    return {"ok": True, "transaction_id": tid, "message_id": draft.message_id, "count": count}


def add_bundles(server: Any, parts: Parts, service: Any) -> None:
    """Register PrepareBundle on ``server``; it runs through ``service.run`` (the executor)."""
    round_robin = itertools.count()

    async def prepare(body: bytes, context: Any) -> bytes:
        try:
            meta = dict(context.invocation_metadata() or ())
            client_id = str(meta.get("x-mq-client-id", ""))
            header = await service.run(prepare_bundle, parts, body, next(round_robin), client_id)
            if service.ack_gate is not None:  # a replica group's leader: SYNC, and fenced
                await service.ack_gate(context.time_remaining())
            return channels.frame(header)
        except Exception as exc:
            return channels.frame(refusal(exc, _METHOD))

    handlers = {_METHOD: grpc.unary_unary_rpc_method_handler(prepare)}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
