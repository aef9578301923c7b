"""The consumer RPCs' work per message: a receive up to its replies, AckMessage,
ChangeInvisibleDuration, and the long polls' wake-ups.

Owns: ``ConsumeCalls``: ``receive`` (a ReceiveMessageRequest to its replies: a ``Handout`` of
the deliveries, or one reply saying why there are none; the long poll included), the unary
handlers ``AckMessage`` and ``ChangeInvisibleDuration`` (grpc.aio servicer signatures; errors
travel in the reply's Status), and per topic the long polls waiting for an append
(``notify_appended``, ``waiting``, ``wait_for``).
Why a module of its own: rpcs.py holds every consumer RPC's gRPC face (ReceiveMessage is an
async generator there, re-yielding the replies ``receive`` returns); this module holds the work
a receive, an ack and an invisibility change do, against the delivery book and the store.
Must not: block the event loop (a receive that reads more than records written lately runs in
the executor; acks and invisibility changes touch only memory), or append to the store (the
dead letters go through the ``dead_letter`` it is given, in the executor).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, Final

from rocketmq.grpc_protocol import service_pb2 as sv

from txmq import errors, limits
from txmq.broker.consume.book import DeadLetter
from txmq.broker.consume.filter import Filter
from txmq.broker.consume.flow import ByteBudget
from txmq.broker.consume.handout import Handout, Lone, filter_of, invisible_ms
from txmq.broker.consume.positions import Ask, ConsumerPositions, Delivery
from txmq.broker.metrics.prometheus import Metrics
from txmq.broker.rpc.replies import fail
from txmq.broker.rpc.waiters import wait, wake
from txmq.broker.topics.registry import TopicRegistry
from txmq.errors import BadRequestError
from txmq.model import MessageType
from txmq.protocol import mapping

log = logging.getLogger("txmq.broker.consume.rpcs")
# Long polls also wake this often, because expired leases become due without any append.
REDELIVERY_POLL_S: Final = 0.5
# An OK Status's bytes (an ack's reply and its entries carry it).
_OK_WIRE: Final[bytes] = mapping.status().SerializeToString()


class ConsumeCalls:
    def __init__(
        self,
        *,
        positions: ConsumerPositions,
        topics: TopicRegistry,
        metrics: Metrics,
        executor: Executor,
        now_ms: Callable[[], int],
        long_polling_timeout_ms: int,
        budget: ByteBudget,
        dead_letter: Callable[[DeadLetter], None],
    ) -> None:
        self.positions = positions
        self.topics = topics
        self.metrics = metrics
        self.executor = executor
        self.now_ms = now_ms
        self.long_polling_timeout_ms = long_polling_timeout_ms
        self.budget = budget
        self.dead_letter = dead_letter  # blocking: appends the DLQ copy (run in the executor)
        # Per topic, the futures of the long polls waiting for an append to it.
        self._wakeups: dict[str, set[asyncio.Future[None]]] = {}

    # --- Long polls' wake-ups. -------------------------------------------------------------------

    def notify_appended(self, topic: str, queue_id: int = -1) -> None:
        """A message became deliverable in ``topic``: wake the long polls waiting on it."""
        waiters = self._wakeups.pop(topic, None)
        if waiters:
            for waiter in waiters:
                wake(waiter)

    def waiting(self, topic: str) -> int:
        """How many long polls wait for an append to ``topic`` now (tests wait on it)."""
        return len(self._wakeups.get(topic, ()))

    async def wait_for(self, topic: str, timeout_s: float) -> None:
        """Until an append to ``topic`` or ``timeout_s``. A bare future and a timer (waiters.py);
        a waiter that is cancelled cancels only its own future."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._wakeups.setdefault(topic, set())
        waiters.add(waiter)
        try:
            await wait(waiter, timeout_s)
        finally:
            waiters.discard(waiter)
            if not waiters and self._wakeups.get(topic) is waiters:
                del self._wakeups[topic]

    def poll_s(self, request: Any) -> float:
        """The long poll a request asks for, within the broker's bound, in seconds."""
        if not request.HasField("long_polling_timeout"):
            return 0.0
        asked = mapping.duration_ms(request.long_polling_timeout)
        return max(0, min(asked, self.long_polling_timeout_ms)) / 1000.0

    # --- ReceiveMessage up to its replies. -------------------------------------------------------

    async def receive(self, request: Any) -> Handout | Lone:
        """The replies of a ReceiveMessage: its deliveries once some came (a long poll of up to
        ``poll_s``, woken by ``notify_appended`` or every REDELIVERY_POLL_S for what becomes due
        without an append), MESSAGE_NOT_FOUND when none did, or the refusal."""
        try:
            group = request.group.name
            if not group:
                raise errors.IllegalConsumerGroupError("consumer group is required")
            mq = request.message_queue
            topic = mapping.validate_topic(mq.topic.name, allow_system=True)
            info = self.topics.ensure(topic)
            wanted = filter_of(request.filter_expression)
            batch = max(1, min(request.batch_size or 1, limits.RECEIVE_BATCH_MAX))
            invisible = invisible_ms(request)
            # Start at the queue the client named, so consumers of one group spread out.
            count = info.queue_count
            start = mq.id % count
            queue_ids = [(start + i) % count for i in range(count)]
            fifo = info.message_type is MessageType.FIFO
            deadline = time.monotonic() + self.poll_s(request)
            sql = wanted.where is not None
            while True:
                left = deadline - time.monotonic()
                before = self.positions.scanned(group, topic, queue_ids) if sql else 0
                got = await self._attempt(
                    group, topic, queue_ids, wanted, batch, invisible, fifo, left
                )
                remaining = deadline - time.monotonic()
                if got or remaining <= 0:
                    break
                if sql and self.positions.scanned(group, topic, queue_ids) > before:
                    continue  # a SQL92 look is one bounded read per queue: the next one now
                await self.wait_for(topic, min(remaining, REDELIVERY_POLL_S))
        except Exception as exc:
            return Lone(sv.ReceiveMessageResponse(status=fail(exc)))
        if not got:
            none = mapping.status(errors.CODE_MESSAGE_NOT_FOUND, "no new message")
            return Lone(sv.ReceiveMessageResponse(status=none))
        # Each record's bytes go back to the budget once gRPC has taken its message.
        return Handout(got, invisible, info.message_type, self.budget, self.metrics, self.now_ms())

    async def _attempt(
        self,
        group: str,
        topic: str,
        queue_ids: list[int],
        wanted: Filter,
        batch: int,
        invisible: int,
        fifo: bool,
        remaining_s: float,
    ) -> list[Delivery]:
        """One look for deliveries (none while the budget has no room within ``remaining_s``);
        dead letters it finds are appended before it returns."""
        room = await self.budget.room(remaining_s)
        if not room:
            return []
        positions = self.positions
        ask = Ask(
            tags=wanted.tags, where=wanted.where, batch=batch, invisible_ms=invisible,
            now_ms=self.now_ms(), fifo=fifo, max_bytes=room,
        )  # fmt: skip
        # Records written lately are in the page cache: read them on the loop, unless a SQL92
        # filter would decode and evaluate each of them (up to READ_FILTER_RECORDS_MAX a queue).
        done = (
            None
            if ask.where is not None
            else positions.receive_recent(group, topic, queue_ids, ask)
        )
        loop = asyncio.get_running_loop()
        if done is None:
            receive = functools.partial(positions.receive, group, topic, queue_ids, ask)
            done = await loop.run_in_executor(self.executor, receive)
        got, dead = done
        for letter in dead:
            try:
                await loop.run_in_executor(self.executor, self.dead_letter, letter)
            except errors.DiskFullError as exc:
                # Held, not lost (the book re-leases it; the sweep retries once there is room):
                # a full disk must not stop deliveries, which only read.
                log.warning("dead letter of %s postponed: %s", group, exc)
        return got

    # --- Unary handlers. -------------------------------------------------------------------------

    async def AckMessage(self, request: Any, context: Any) -> Any:
        """The reply as its bytes (mapping.ack_reply_wire; decode.py's serializer passes them
        through): an AckMessageResponse built field by field costs a upb call per field."""
        entries = request.entries
        if len(entries) > limits.ACK_ENTRIES_MAX:
            too_many = BadRequestError(f"at most {limits.ACK_ENTRIES_MAX} entries per AckMessage")
            return mapping.ack_reply_wire([], fail(too_many).SerializeToString())
        top: bytes | None = None  # the first entry's failure, the reply's status then
        done: list[tuple[str, str, bytes]] = []
        group = request.group.name
        positions, acks = self.positions, self.metrics.acks
        for e in entries:
            handle = e.receipt_handle
            try:
                # In memory only (a receipt check and the delivery book), so it runs on the
                # loop: an executor round trip costs more CPU than the ack itself.
                positions.ack(group, handle)
                status = _OK_WIRE
                acks.inc()
            except Exception as exc:
                status = fail(exc).SerializeToString()
                if top is None:
                    top = status
            done.append((e.message_id, handle, status))
        return mapping.ack_reply_wire(done, _OK_WIRE if top is None else top)

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
