"""Consumer-side RPC handlers: POP receive, ack, invisibility, DLQ, and offset-based pull.

Owns: the gRPC shapes of ReceiveMessage (long polling, a status item, a delivery_timestamp item,
then messages), AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue,
PullMessage, GetOffset, UpdateOffset and QueryOffset. A mixin of ``Service``: it uses the
service's ``parts``, ``run`` and ``_wait_for``. Must not: keep state (Deliveries owns it).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv

from txmq import errors, limits
from txmq.broker.parts import Parts, wall_ms
from txmq.broker.replies import fail, invisible_ms, tags
from txmq.errors import BadRequestError, IllegalOffsetError, IllegalTopicError, TxmqError
from txmq.model import MessageType, Record
from txmq.protocol import mapping

T = TypeVar("T")


class ConsumeHandlers:
    parts: Parts
    run: Callable[..., Awaitable[Any]]
    _wait_for: Callable[[str, float], Awaitable[None]]

    def _poll_s(self, request: Any) -> float:
        cap = self.parts.config.long_polling_timeout_ms
        if not request.HasField("long_polling_timeout"):
            return 0.0
        return min(mapping.duration_ms(request.long_polling_timeout), cap) / 1000.0

    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            group = request.group.name
            if not group:
                raise errors.IllegalConsumerGroupError("consumer group is required")
            topic = request.message_queue.topic.name
            info = self.parts.topics.ensure(mapping.validate_topic(topic, allow_system=True))
            wanted = tags(request.filter_expression)
            batch = max(1, min(request.batch_size or 1, limits.RECEIVE_BATCH_MAX))
            invisible = invisible_ms(request)
            start = request.message_queue.id % info.queue_count if info.queue_count else 0
            queue_ids = [(start + i) % info.queue_count for i in range(info.queue_count)]
            deadline = time.monotonic() + self._poll_s(request)
            fifo = info.message_type is MessageType.FIFO
            while True:
                got, dead = await self.run(
                    self.parts.deliveries.receive,
                    group,
                    topic,
                    queue_ids,
                    tags=wanted,
                    batch=batch,
                    invisible_ms=invisible,
                    now_ms=wall_ms(),
                    fifo=fifo,
                )
                for d in dead:
                    await self.run(self.parts.dead_letter, d)
                if got:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    yield sv.ReceiveMessageResponse(
                        status=mapping.status(errors.CODE_MESSAGE_NOT_FOUND, "no new message")
                    )
                    return
                # Wake on a new message, or within a second to redeliver expired ones.
                await self._wait_for(topic, min(remaining, 1.0))
        except Exception as exc:
            yield sv.ReceiveMessageResponse(status=fail(exc))
            return
        yield sv.ReceiveMessageResponse(status=mapping.status())
        ts = sv.ReceiveMessageResponse()
        mapping.set_timestamp(ts.delivery_timestamp, wall_ms())
        yield ts
        self.parts.metrics.receives.inc(len(got))
        for d in got:
            yield sv.ReceiveMessageResponse(
                message=mapping.message_from_record(
                    d.record,
                    receipt_handle=d.receipt_handle,
                    delivery_attempt=d.attempt,
                    invisible_ms=invisible,
                    message_type=info.message_type,
                )
            )

    async def AckMessage(self, request: Any, context: Any) -> Any:
        top = mapping.status()
        results = []
        for e in request.entries:
            try:
                await self.run(self.parts.deliveries.ack, request.group.name, e.receipt_handle)
                st = mapping.status()
                self.parts.metrics.acks.inc()
            except Exception as exc:
                st = fail(exc)
                if top.code == errors.CODE_OK:
                    top = st
            results.append(
                sv.AckMessageResultEntry(
                    message_id=e.message_id, receipt_handle=e.receipt_handle, status=st
                )
            )
        return sv.AckMessageResponse(status=top, entries=results)

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        try:
            handle = await self.run(
                self.parts.deliveries.change_invisible,
                request.group.name,
                request.receipt_handle,
                invisible_ms(request),
                wall_ms(),
            )
            return sv.ChangeInvisibleDurationResponse(
                status=mapping.status(), receipt_handle=handle
            )
        except Exception as exc:
            return sv.ChangeInvisibleDurationResponse(status=fail(exc))

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        try:
            dead = await self.run(
                self.parts.deliveries.take_for_dead_letter,
                request.group.name,
                request.receipt_handle,
            )
            await self.run(self.parts.dead_letter, dead)
            return sv.ForwardMessageToDeadLetterQueueResponse(status=mapping.status())
        except Exception as exc:
            return sv.ForwardMessageToDeadLetterQueueResponse(status=fail(exc))

    # --- Offset-based access (the Spark connector uses these). ------------------------------------

    def _queue(self, mq: Any) -> tuple[str, int]:
        topic = mq.topic.name
        info = self.parts.topics.get(mapping.validate_topic(topic, allow_system=True))
        if not 0 <= mq.id < info.queue_count:
            raise IllegalTopicError(f"topic {topic!r} has no queue {mq.id}")
        return topic, mq.id

    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            topic, qid = self._queue(request.message_queue)
            if request.offset < 0:
                raise IllegalOffsetError(f"offset must be >= 0, got {request.offset}")
            wanted = tags(request.filter_expression)
            batch = max(1, min(request.batch_size or 32, limits.READ_BATCH_MAX))
            deadline = time.monotonic() + self._poll_s(request)
            while True:
                read = await self.run(
                    self.parts.store.read_queue, topic, qid, request.offset, batch, tags=wanted
                )
                remaining = deadline - time.monotonic()
                if read.records or read.next_offset != request.offset or remaining <= 0:
                    break
                await self._wait_for(topic, min(remaining, 1.0))
            if request.offset < read.min_offset and not read.records:
                raise IllegalOffsetError(
                    f"offset {request.offset} is below the queue's first retained offset "
                    f"{read.min_offset}"
                )
        except Exception as exc:
            yield sv.PullMessageResponse(status=fail(exc))
            return
        yield sv.PullMessageResponse(status=mapping.status())
        for rec in read.records:
            yield sv.PullMessageResponse(message=_pulled(rec))
        yield sv.PullMessageResponse(next_offset=read.next_offset)

    async def GetOffset(self, request: Any, context: Any) -> Any:
        try:
            topic, qid = self._queue(request.message_queue)
            off = await self.run(self.parts.deliveries.offset, request.group.name, topic, qid)
            return sv.GetOffsetResponse(status=mapping.status(), offset=off)
        except Exception as exc:
            return sv.GetOffsetResponse(status=fail(exc))

    async def UpdateOffset(self, request: Any, context: Any) -> Any:
        try:
            topic, qid = self._queue(request.message_queue)
            if not request.group.name:
                raise errors.IllegalConsumerGroupError("consumer group is required")
            lo, hi = self.parts.store.queue_offsets(topic, qid)
            if not lo <= request.offset <= hi:
                raise IllegalOffsetError(f"offset must be within [{lo}, {hi}]")
            await self.run(
                self.parts.deliveries.set_offset, request.group.name, topic, qid, request.offset
            )
            return sv.UpdateOffsetResponse(status=mapping.status())
        except Exception as exc:
            return sv.UpdateOffsetResponse(status=fail(exc))

    async def QueryOffset(self, request: Any, context: Any) -> Any:
        try:
            topic, qid = self._queue(request.message_queue)
            lo, hi = self.parts.store.queue_offsets(topic, qid)
            policy = request.query_offset_policy
            if policy == pb.BEGINNING:
                off = lo
            elif policy == pb.END:
                off = hi
            elif policy == pb.TIMESTAMP:
                at = mapping.timestamp_ms(request.timestamp)
                off = await self.run(self.parts.store.offset_for_timestamp, topic, qid, at)
            else:
                raise BadRequestError(f"unknown query_offset_policy {policy}")
            return sv.QueryOffsetResponse(status=mapping.status(), offset=off)
        except TxmqError as exc:
            return sv.QueryOffsetResponse(status=fail(exc))


def _pulled(rec: Record) -> Any:
    return mapping.message_from_record(rec)
