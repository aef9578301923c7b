"""Consumer-side RPC handlers: POP receive, ack, invisibility, DLQ, assignments, offset pull.

Owns: ``ConsumeRpcs``, the async handlers with grpc.aio servicer signatures for QueryAssignment,
ReceiveMessage (long polling; a status item, a delivery_timestamp item, then messages),
AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue, PullMessage, UpdateOffset,
GetOffset and QueryOffset; appending dead letters to ``%DLQ%<group>``; the background sweep that
dead-letters abandoned last attempts and saves positions. The per-message work (a receive up to
its replies, AckMessage, ChangeInvisibleDuration, the long polls' wake-ups on
``notify_appended``) is receive.py's ``ConsumeCalls``, bound here.
Must not: keep delivery state (``ConsumerPositions`` in offsets.py does) or block the event loop
(store calls run in the executor, except a receive that reads only records written lately,
which are in the page cache; acks and invisibility changes, which touch only memory, run on the
loop).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv

from txmq import errors, limits
from txmq.broker.cluster import routes
from txmq.broker.cluster.membership import Membership
from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.consume.book import DeadLetter
from txmq.broker.consume.flow import ByteBudget
from txmq.broker.consume.handout import filter_of
from txmq.broker.consume.positions import ConsumerPositions
from txmq.broker.consume.receive import ConsumeCalls
from txmq.broker.metrics.prometheus import Metrics
from txmq.broker.rpc.replies import fail
from txmq.broker.topics.registry import TopicRegistry
from txmq.errors import BadRequestError, IllegalOffsetError
from txmq.model import (
    DLQ_PREFIX,
    PROP_DELIVERY_ATTEMPT,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_REAL_TOPIC,
    MessageType,
    QueueRead,
    copy_to_topic,
)
from txmq.protocol import mapping
from txmq.store.store import Store

log = logging.getLogger("txmq.broker.consume.rpcs")
T = TypeVar("T")
SWEEP_PERIOD_S = 1.0


class ConsumeRpcs:
    def __init__(
        self,
        *,
        store: Store,
        topics: TopicRegistry,
        config: BrokerConfig,
        now_ms: Callable[[], int],
        executor: ThreadPoolExecutor,
        metrics: Metrics,
        positions: ConsumerPositions,
        endpoint: tuple[str, int],
        membership: Membership | None = None,
    ) -> None:
        self.store = store
        self.topics = topics
        self.config = config
        self.now_ms = now_ms
        self.executor = executor
        self.metrics = metrics
        self.positions = positions  # the broker's one (Parts.deliveries)
        # Whose queues QueryAssignment hands out: every live member's (this one alone
        # when not in a cluster, at the endpoint the server bound).
        self.membership = membership or Membership.solo(*endpoint, now_ms=now_ms)
        self._sweeper: asyncio.Task[None] | None = None
        self.budget = ByteBudget()
        self.calls = ConsumeCalls(
            positions=positions,
            topics=topics,
            metrics=metrics,
            executor=executor,
            now_ms=now_ms,
            long_polling_timeout_ms=config.long_polling_timeout_ms,
            budget=self.budget,
            dead_letter=self.dead_letter,
        )
        # The per-message handlers and wake-ups (receive.py), bound: the servicer binds these in
        # turn, so a call goes straight to them.
        self.AckMessage = self.calls.AckMessage
        self.ChangeInvisibleDuration = self.calls.ChangeInvisibleDuration
        self.notify_appended = self.calls.notify_appended
        self.waiting = self.calls.waiting

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    # --- Lifecycle and wake-ups. -----------------------------------------------------------------

    async def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever())

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None
        await self.run(self.positions.save, force=True)

    async def _long_poll(
        self,
        topic: str,
        poll_s: float,
        attempt: Callable[[float], Awaitable[T]],
        answered: Callable[[T], bool],
        *,
        recheck_s: float = math.inf,
    ) -> T:
        """The one long-poll loop: ``attempt(seconds left)`` until ``answered`` accepts its
        result or ``poll_s`` has passed, waiting between attempts until an append to ``topic``
        wakes it (``notify_appended``) or ``recheck_s`` passes (for what becomes due without an
        append, such as expired leases). Bounded by the deadline; each wait is at least one
        event-loop turn."""
        deadline = time.monotonic() + poll_s
        while True:
            got = await attempt(deadline - time.monotonic())
            remaining = deadline - time.monotonic()
            if answered(got) or remaining <= 0:
                return got
            await self.calls.wait_for(topic, min(remaining, recheck_s))

    async def sweep(self) -> None:
        """Dead-letter last attempts nobody will receive again, then save positions."""
        for dead in await self.run(
            self.positions.sweep_dead, self.now_ms(), limits.DEAD_LETTERS_PER_SWEEP_MAX
        ):
            await self.run(self.dead_letter, dead)
        await self.run(self.positions.save)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_PERIOD_S)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                # One failed sweep (say a full disk) must not end dead-lettering for good.
                log.exception("consumer sweep failed; retrying next period")

    def dead_letter(self, dead: DeadLetter) -> None:
        """Append the DLQ copy durably, then count the original as consumed. Blocking."""
        topic = DLQ_PREFIX + dead.group
        self.topics.create(topic, 1, MessageType.NORMAL, exist_ok=True)
        rec = dead.record
        props = dict(rec.properties)
        props[PROP_ORIGIN_MESSAGE_ID] = rec.message_id
        props[PROP_REAL_TOPIC] = rec.topic
        props[PROP_DELIVERY_ATTEMPT] = str(dead.attempts)
        draft = copy_to_topic(
            rec, topic=topic, queue_id=0, properties=props, reconsume_times=dead.attempts
        )
        self.store.append(draft)
        self.positions.settle(dead)
        self.metrics.dlq.inc()

    # --- POP consumption. ------------------------------------------------------------------------

    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        # Everything up to the replies is ConsumeCalls.receive (receive.py); the replies come
        # from a Handout that gives each record's bytes back to the budget once gRPC has taken
        # its message (handout.py).
        replies = await self.calls.receive(request)
        try:
            while (reply := replies.take()) is not None:
                yield reply
        finally:
            replies.close()  # now, not at garbage collection: it gives budget back

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        try:
            dead = await self.run(
                self.positions.take_for_dead_letter,
                request.group.name,
                request.receipt_handle,
                self.now_ms(),
            )
            await self.run(self.dead_letter, dead)
            return sv.ForwardMessageToDeadLetterQueueResponse(status=mapping.status())
        except Exception as exc:
            return sv.ForwardMessageToDeadLetterQueueResponse(status=fail(exc))

    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        try:
            topic = mapping.validate_topic(request.topic.name, allow_system=True)
            info = self.topics.ensure(topic)
            assignments = [
                pb.Assignment(message_queue=q)
                for q in routes.message_queues(info, self.membership.route_targets())
            ]
            return sv.QueryAssignmentResponse(status=mapping.status(), assignments=assignments)
        except Exception as exc:
            return sv.QueryAssignmentResponse(status=fail(exc))

    # --- Offset-based access (the Spark connector uses these). ----------------------------------

    def _queue(self, mq: Any) -> tuple[str, int]:
        topic = mapping.validate_topic(mq.topic.name, allow_system=True)
        info = self.topics.get(topic)
        if not 0 <= mq.id < info.queue_count:
            raise errors.IllegalTopicError(f"topic {topic!r} has no queue {mq.id}")
        return topic, mq.id

    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            topic, qid = self._queue(request.message_queue)
            if request.offset < 0:
                raise IllegalOffsetError(f"offset must be >= 0, got {request.offset}")
            wanted = filter_of(request.filter_expression)
            batch = max(1, min(request.batch_size or 32, limits.READ_BATCH_MAX))

            async def attempt(remaining_s: float) -> QueueRead:
                return await self.run(
                    self.store.read_queue,
                    topic,
                    qid,
                    request.offset,
                    batch,
                    tags=wanted.tags,
                    where=wanted.where,
                )

            def answered(read: QueueRead) -> bool:
                return bool(read.records) or read.next_offset != request.offset

            read = await self._long_poll(topic, self.calls.poll_s(request), attempt, answered)
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
            yield sv.PullMessageResponse(message=mapping.message_from_record(rec))
        yield sv.PullMessageResponse(next_offset=read.next_offset)

    async def GetOffset(self, request: Any, context: Any) -> Any:
        try:
            topic, qid = self._queue(request.message_queue)
            off = await self.run(self.positions.offset, request.group.name, topic, qid)
            return sv.GetOffsetResponse(status=mapping.status(), offset=off)
        except Exception as exc:
            return sv.GetOffsetResponse(status=fail(exc))

    async def UpdateOffset(self, request: Any, context: Any) -> Any:
        try:
            topic, qid = self._queue(request.message_queue)
            if not request.group.name:
                raise errors.IllegalConsumerGroupError("consumer group is required")
            lo, hi = await self.run(self.store.queue_offsets, topic, qid)
            if not lo <= request.offset <= hi:
                raise IllegalOffsetError(f"offset must be within [{lo}, {hi}]")
            await self.run(
                self.positions.set_offset, request.group.name, topic, qid, request.offset
            )
            return sv.UpdateOffsetResponse(status=mapping.status())
        except Exception as exc:
            return sv.UpdateOffsetResponse(status=fail(exc))

    async def QueryOffset(self, request: Any, context: Any) -> Any:
        try:
            topic, qid = self._queue(request.message_queue)
            lo, hi = await self.run(self.store.queue_offsets, topic, qid)
            policy = request.query_offset_policy
            if policy == pb.BEGINNING:
                off = lo
            elif policy == pb.END:
                off = hi
            elif policy == pb.TIMESTAMP:
                at = mapping.timestamp_ms(request.timestamp)
                off = await self.run(self.store.offset_for_timestamp, topic, qid, at)
            else:
                raise BadRequestError(f"unknown query_offset_policy {policy}")
            return sv.QueryOffsetResponse(status=mapping.status(), offset=off)
        except Exception as exc:
            return sv.QueryOffsetResponse(status=fail(exc))
