"""Consumer-side RPC handlers: POP receive, ack, invisibility, DLQ, assignments, offset pull.

Owns: ``ConsumeRpcs``, the async handlers with grpc.aio servicer signatures for QueryAssignment,
ReceiveMessage (long polling; a status item, a delivery_timestamp item, then messages),
AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue, PullMessage, UpdateOffset,
GetOffset and QueryOffset; appending dead letters to ``%DLQ%<group>``; waking long polls on
``notify_appended``; the background sweep that dead-letters abandoned last attempts and saves
positions.
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
from txmq.broker import routes
from txmq.broker.config import BrokerConfig
from txmq.broker.delivery import DeadLetter
from txmq.broker.filter import parse_tags
from txmq.broker.flow import ByteBudget
from txmq.broker.membership import Membership
from txmq.broker.metrics import Metrics
from txmq.broker.offsets import ConsumerPositions, Delivery
from txmq.broker.replies import Handout, fail, invisible_ms
from txmq.broker.topics import TopicRegistry
from txmq.broker.waiters import wait, wake
from txmq.errors import BadRequestError, IllegalFilterExpressionError, IllegalOffsetError
from txmq.model import (
    DLQ_PREFIX,
    PROP_DELIVERY_ATTEMPT,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_REAL_TOPIC,
    MessageType,
    QueueRead,
    message_draft,
)
from txmq.protocol import mapping
from txmq.store.store import Store

log = logging.getLogger("txmq.broker.consume")
T = TypeVar("T")
# Long polls also wake this often, because expired leases become due without any append.
REDELIVERY_POLL_S = 0.5
_OK = mapping.status()  # replies copy it (CopyFrom); nothing changes it
SWEEP_PERIOD_S = 1.0


def _tags(expr: Any) -> frozenset[str] | None:
    if expr.type == pb.SQL:
        raise IllegalFilterExpressionError("SQL filter expressions are not supported; use tags")
    return parse_tags(expr.expression)


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
        # Per topic, the futures of the long polls waiting for an append to it.
        self._wakeups: dict[str, set[asyncio.Future[None]]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self.budget = ByteBudget()

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

    def notify_appended(self, topic: str, queue_id: int = -1) -> None:
        """A message became deliverable in ``topic``: wake the long polls waiting on it."""
        for waiter in self._wakeups.pop(topic, ()):
            wake(waiter)

    def waiting(self, topic: str) -> bool:
        """Whether a long poll waits for an append to ``topic`` now (tests wait on it)."""
        return bool(self._wakeups.get(topic))

    async def _wait_for(self, topic: str, timeout_s: float) -> None:
        """Until an append to ``topic`` or ``timeout_s``. A bare future and a timer: what
        ``asyncio.wait_for(event.wait())`` did with a task, an event and ~15 Python frames per
        wait (issue 17); a waiter that is cancelled cancels only its own future."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        waiters = self._wakeups.setdefault(topic, set())
        waiters.add(waiter)
        try:
            await wait(waiter, timeout_s)
        finally:
            waiters.discard(waiter)
            if not waiters and self._wakeups.get(topic) is waiters:
                del self._wakeups[topic]

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
            await self._wait_for(topic, min(remaining, recheck_s))

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
        draft = message_draft(
            rec, topic=topic, queue_id=0, properties=props, reconsume_times=dead.attempts
        )
        self.store.append(draft)
        self.positions.settle(dead)
        self.metrics.dlq.inc()

    # --- POP consumption. ------------------------------------------------------------------------

    def _poll_s(self, request: Any) -> float:
        if not request.HasField("long_polling_timeout"):
            return 0.0
        asked = mapping.duration_ms(request.long_polling_timeout)
        return max(0, min(asked, self.config.long_polling_timeout_ms)) / 1000.0

    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            group = request.group.name
            if not group:
                raise errors.IllegalConsumerGroupError("consumer group is required")
            topic = mapping.validate_topic(request.message_queue.topic.name, allow_system=True)
            info = self.topics.ensure(topic)
            wanted = _tags(request.filter_expression)
            batch = max(1, min(request.batch_size or 1, limits.RECEIVE_BATCH_MAX))
            invisible = invisible_ms(request)
            # Start at the queue the client named, so consumers of one group spread out.
            start = request.message_queue.id % info.queue_count
            queue_ids = [(start + i) % info.queue_count for i in range(info.queue_count)]
            fifo = info.message_type is MessageType.FIFO

            async def attempt(remaining_s: float) -> list[Delivery]:
                room = await self.budget.room(remaining_s)
                if not room:
                    return []
                ask: dict[str, Any] = {
                    "tags": wanted,
                    "batch": batch,
                    "invisible_ms": invisible,
                    "now_ms": self.now_ms(),
                    "fifo": fifo,
                    "max_bytes": room,
                }
                # Records written lately are in the page cache: read them on the loop.
                done = self.positions.receive_recent(group, topic, queue_ids, **ask)
                if done is None:
                    done = await self.run(self.positions.receive, group, topic, queue_ids, **ask)
                got, dead = done
                for letter in dead:
                    try:
                        await self.run(self.dead_letter, letter)
                    except errors.DiskFullError as exc:
                        # Held, not lost (the book re-leases it; the sweep retries once there
                        # is room): a full disk must not stop deliveries, which only read.
                        log.warning("dead letter of %s postponed: %s", group, exc)
                return got

            got = await self._long_poll(
                topic, self._poll_s(request), attempt, bool, recheck_s=REDELIVERY_POLL_S
            )
        except Exception as exc:
            yield sv.ReceiveMessageResponse(status=fail(exc))
            return
        if not got:
            yield sv.ReceiveMessageResponse(
                status=mapping.status(errors.CODE_MESSAGE_NOT_FOUND, "no new message")
            )
            return
        # The replies, built by a compiled iterator that gives each record's bytes back to the
        # budget once gRPC has taken its message (replies.Handout).
        replies = Handout(
            got, invisible, info.message_type, self.budget, self.metrics, self.now_ms()
        )
        del got
        try:
            for reply in replies:
                yield reply
        finally:
            replies.close()  # now, not at garbage collection: it gives budget back

    async def AckMessage(self, request: Any, context: Any) -> Any:
        if len(request.entries) > limits.ACK_ENTRIES_MAX:
            too_many = BadRequestError(f"at most {limits.ACK_ENTRIES_MAX} entries per AckMessage")
            return sv.AckMessageResponse(status=fail(too_many))
        # Filled in place (entries.add, statuses copied from one OK), not built from keyword
        # arguments, which copy every entry once more (issue 17).
        reply = sv.AckMessageResponse()
        top = None
        group = request.group.name
        for e in request.entries:
            entry = reply.entries.add()
            entry.message_id = e.message_id
            entry.receipt_handle = e.receipt_handle
            try:
                # In memory only (a receipt check and the delivery book), so it runs on the
                # loop: an executor round trip costs more CPU than the ack itself.
                self.positions.ack(group, e.receipt_handle)
                entry.status.CopyFrom(_OK)
                self.metrics.acks.inc()
            except Exception as exc:
                entry.status.CopyFrom(fail(exc))
                if top is None:
                    top = entry.status
        reply.status.CopyFrom(_OK if top is None else top)
        return reply

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        try:
            # PushConsumer nacks with its backoff delay in whole seconds, which is 0 for a
            # sub-second backoff: read that as "as soon as allowed", not as an error.
            asked = mapping.duration_ms(request.invisible_duration)
            if asked > limits.INVISIBLE_DURATION_MS_MAX:
                invisible_ms(request)  # raises IllegalInvisibleTimeError with the bounds
            wait_ms = max(asked, limits.INVISIBLE_DURATION_MS_MIN)
            # In memory only, like an ack: on the loop.
            handle = self.positions.change_invisible(
                request.group.name, request.receipt_handle, wait_ms, self.now_ms()
            )
            return sv.ChangeInvisibleDurationResponse(
                status=mapping.status(), receipt_handle=handle
            )
        except Exception as exc:
            return sv.ChangeInvisibleDurationResponse(status=fail(exc))

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
            wanted = _tags(request.filter_expression)
            batch = max(1, min(request.batch_size or 32, limits.READ_BATCH_MAX))

            async def attempt(remaining_s: float) -> QueueRead:
                return await self.run(
                    self.store.read_queue, topic, qid, request.offset, batch, tags=wanted
                )

            def answered(read: QueueRead) -> bool:
                return bool(read.records) or read.next_offset != request.offset

            read = await self._long_poll(topic, self._poll_s(request), attempt, answered)
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
