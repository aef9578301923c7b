"""The gRPC servicer for ``apache.rocketmq.v2.MessagingService``: all 17 RPCs.

Owns: routes (QueryRoute), client sessions (Heartbeat, Telemetry, NotifyClientTermination), the
producer RPCs (SendMessage, EndTransaction: ``produce.SendPath``, written on the loop and
awaiting the fsync through ``durable.drive``, or in the executor when they may block), and
answers for what txmq does not do (RecallMessage, SyncLiteSubscription: UNSUPPORTED). The
consumer RPCs are the consumer side's handlers (``consume.ConsumeRpcs``), bound on the servicer.
Errors travel in each response's Status, never as gRPC status codes: every handler turns a
TxmqError into its code and anything else into INTERNAL_ERROR with a message, logged with its
traceback, so a malformed request cannot crash the server.
Must not: hold state beyond sessions (clients.py) or block the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from txmq import errors, limits
from txmq.broker import durable, routes
from txmq.broker.clients import Clients, Session, Stream
from txmq.broker.config import BrokerConfig
from txmq.broker.consume import ConsumeRpcs
from txmq.broker.membership import Membership
from txmq.broker.produce import SendPath
from txmq.broker.replies import client_id, fail
from txmq.broker.topics import TopicRegistry
from txmq.errors import BadRequestError, ClientIdRequiredError, UnsupportedError
from txmq.model import MessageType, Outcome, Outgoing
from txmq.protocol import mapping, telemetry
from txmq.txn.steps import DecisionInFlightError

log = logging.getLogger("txmq.broker")
T = TypeVar("T")
# Replies copy these (CopyFrom) or return them as they are: gRPC only serializes a reply, and
# nothing here changes one after it is returned.
_OK = mapping.status()
_END_OK = sv.EndTransactionResponse(status=_OK)


async def answer(response: Callable[..., Any], work: Callable[[], Awaitable[Any]]) -> Any:
    """Run a unary handler body; any failure becomes ``response(status=...)``."""
    try:
        return await work()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return response(status=fail(exc))


def _unsupported(what: str) -> Any:
    return mapping.error_status(UnsupportedError(f"{what} is not supported by this broker"))


async def _repeat_settings(stream: Stream, reply: Any) -> None:
    """Queue a stream's first Settings reply again at each of limits.SETTINGS_REPEAT_DELAYS_MS
    after the first (a harmless repeat; the limit's comment says which client needs it)."""
    waited_ms = 0
    for at_ms in limits.SETTINGS_REPEAT_DELAYS_MS:
        await asyncio.sleep((at_ms - waited_ms) / 1000)
        waited_ms = at_ms
        stream.outbox.put_nowait(reply)


class MessagingServicer(sg.MessagingServiceServicer):  # type: ignore[misc]
    def __init__(
        self,
        *,
        config: BrokerConfig,
        topics: TopicRegistry,
        clients: Clients,
        sends: SendPath,
        executor: Executor,
        endpoint: tuple[str, int],
        now_ms: Callable[[], int],
        consume: ConsumeRpcs,
        membership: Membership | None = None,
    ) -> None:
        self.config = config
        self.topics = topics
        self.clients = clients
        self.sends = sends
        self.executor = executor
        self.endpoint = endpoint
        self.now_ms = now_ms
        self.consume = consume
        # The consumer RPCs are the consumer side's own handlers, bound here: no delegating
        # frame (or, for a stream, a re-yielding generator) per call (issue 17).
        self.QueryAssignment = consume.QueryAssignment
        self.ReceiveMessage = consume.ReceiveMessage
        self.AckMessage = consume.AckMessage
        self.ChangeInvisibleDuration = consume.ChangeInvisibleDuration
        self.ForwardMessageToDeadLetterQueue = consume.ForwardMessageToDeadLetterQueue
        self.PullMessage = consume.PullMessage
        self.UpdateOffset = consume.UpdateOffset
        self.GetOffset = consume.GetOffset
        self.QueryOffset = consume.QueryOffset
        self.membership = membership or Membership.solo(*endpoint, now_ms=now_ms)
        # Replication (replication.py): every write passes this before it is acknowledged.
        self.ack_gate: Callable[[], Awaitable[None]] | None = None

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking work (store, coordinator) in the executor."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: fn(*args, **kwargs))

    def notify_appended(self, topic: str, queue_id: int | None = None) -> None:
        """Wake long polls on a queue (on any queue of the topic when ``queue_id`` is None:
        ``ConsumeRpcs.notify_appended``'s -1, one call, not one per queue)."""
        self.consume.notify_appended(topic, -1 if queue_id is None else queue_id)

    # --- Routing and sessions. ----------------------------------------------------------------

    def route(self, topic: str) -> list[Any]:
        """The topic's queues on every live member of the cluster (routes.py says how)."""
        info = self.topics.ensure(mapping.validate_topic(topic, allow_system=True))
        return routes.message_queues(info, self.membership.route_targets())

    async def QueryRoute(self, request: Any, context: Any) -> Any:
        async def work() -> Any:
            name = request.topic.name
            # Creating a topic writes topics.json, so that runs off the loop; a known topic's
            # route is memory only, and an executor round trip would cost more than it.
            if self.topics.exists(name):
                queues = self.route(name)
            else:
                queues = await self.run(self.route, name)
            return sv.QueryRouteResponse(status=mapping.status(), message_queues=queues)

        return await answer(sv.QueryRouteResponse, work)

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        async def work() -> Any:
            cid = client_id(context)
            if not cid:
                raise ClientIdRequiredError("x-mq-client-id metadata is required")
            session = self.clients.touch(cid, self.now_ms())
            if request.group.name:
                session.groups.add(mapping.validate_group(request.group.name))
            session.client_type = int(request.client_type)
            return sv.HeartbeatResponse(status=mapping.status())

        return await answer(sv.HeartbeatResponse, work)

    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        self.clients.remove(client_id(context))
        return sv.NotifyClientTerminationResponse(status=mapping.status())

    # --- Telemetry: settings handshake and the check-back channel. ------------------------------

    def _settings_reply(self, settings: Any) -> Any:
        cfg = self.config
        server = telemetry.ServerSettings(
            body_size_max=cfg.store.body_size_max,
            long_polling_timeout_ms=min(
                cfg.long_polling_timeout_ms, limits.LONG_POLLING_TIMEOUT_REPLY_MS_MAX
            ),
            receive_batch_size=limits.RECEIVE_BATCH_MAX,
            delivery_attempts_max=cfg.delivery_attempts_max,
            retry_backoff_initial_ms=cfg.retry_backoff_initial_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms,
        )
        fifo = False
        if not telemetry.is_publisher(settings):
            for entry in settings.subscription.subscriptions:
                try:
                    info = self.topics.get(entry.topic.name)
                except errors.TopicNotFoundError:
                    continue
                fifo = fifo or info.message_type is MessageType.FIFO
        return telemetry.settings_reply(settings, server, fifo=fifo)

    def _on_settings(self, session: Session, settings: Any) -> Any:
        """Record what the client declared and build the reply command."""
        if telemetry.is_publisher(settings):
            session.topics.update(r.name for r in settings.publishing.topics)
        if settings.subscription.group.name:
            group = mapping.validate_group(settings.subscription.group.name)
            session.groups.add(group)
            topics = {e.topic.name for e in settings.subscription.subscriptions}
            self.clients.note_subscriptions(session, group, topics)
        session.client_type = int(settings.client_type)
        try:
            reply = self._settings_reply(settings)
        except Exception as exc:
            return sv.TelemetryCommand(status=fail(exc))
        return sv.TelemetryCommand(status=mapping.status(), settings=reply)

    async def Telemetry(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:
        """The client's Settings handshake, then the check-back channel, kept open until the
        client closes it. A reader task puts replies in this stream's own outbox, where the
        check-back loop puts its commands too; this generator writes them out."""
        cid = client_id(context)
        try:
            if not cid:
                raise ClientIdRequiredError("x-mq-client-id metadata is required")
            session = self.clients.touch(cid, self.now_ms())
        except Exception as exc:
            yield sv.TelemetryCommand(status=fail(exc))
            return
        stream = session.open_stream()
        repeats: list[asyncio.Task[None]] = []

        async def read() -> None:
            try:
                async for cmd in request_iterator:
                    session.last_seen_ms = self.now_ms()
                    if cmd.HasField("settings"):
                        reply = self._on_settings(session, cmd.settings)
                        stream.outbox.put_nowait(reply)
                        if not repeats and reply.HasField("settings"):
                            repeats.append(asyncio.create_task(_repeat_settings(stream, reply)))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a broken stream ends this stream only
                log.warning("telemetry stream of %s failed: %r", cid, exc)
            finally:
                # This stream's own outbox: ending it cannot end a newer stream of the client.
                stream.outbox.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            while (item := await stream.outbox.get()) is not None:
                yield item
        finally:
            reader.cancel()
            for task in repeats:
                task.cancel()
            session.close_stream(stream)
            session.last_seen_ms = self.now_ms()

    # --- Producing. ---------------------------------------------------------------------------

    async def SendMessage(self, request: Any, context: Any) -> Any:
        """Store each message; the top status is OK or the first entry's failure."""
        if not request.messages:
            return sv.SendMessageResponse(status=fail(BadRequestError("no messages to send")))
        if len(request.messages) > limits.SEND_BATCH_MAX:
            return sv.SendMessageResponse(
                status=fail(BadRequestError(f"at most {limits.SEND_BATCH_MAX} messages per send"))
            )
        cid, peer = client_id(context), context.peer() or ""

        msgs = list(request.messages)
        items = [self._outgoing(m, peer) for m in msgs]  # the wire mapped here, at the edge
        # Its normal messages share one write and one fsync, the others (FIFO ones included)
        # are stored one by one in request order. Written on the loop, which then awaits the
        # fsync (durable.py), unless storing may do more than that.
        if SendPath.needs_thread(items, self.topics):
            outcomes = await self.run(self.sends.send, items, client_id=cid)
        else:
            steps = self.sends.send_steps(items, client_id=cid)
            outcomes = await durable.drive(steps, self.executor)
        if self.ack_gate is not None:
            try:
                await self.ack_gate()
            except errors.TxmqError as exc:
                return sv.SendMessageResponse(status=fail(exc))
        return self._send_reply(msgs, outcomes, cid)

    def _send_reply(self, msgs: list[Any], outcomes: list[Any], cid: str) -> Any:
        """The reply: an entry per message, the top status OK or the first entry's failure.
        Filled in place (``entries.add``, statuses copied from one OK), not built from
        keyword arguments, which copy every nested message once more (issue 17)."""
        reply = sv.SendMessageResponse()
        top = None
        for msg, got in zip(msgs, outcomes, strict=True):
            entry = reply.entries.add()
            if isinstance(got, Exception):
                entry.status.CopyFrom(fail(got))
                entry.message_id = msg.system_properties.message_id
                if top is None:
                    top = entry.status
                continue
            if got.deliverable:
                self.notify_appended(got.topic, got.queue_id)
            if got.transaction_id and cid:
                self.clients.note_publisher(cid, got.topic)
            entry.status.CopyFrom(_OK)
            entry.message_id = got.message_id
            entry.transaction_id = got.transaction_id
            entry.offset = max(0, got.queue_offset)
        reply.status.CopyFrom(_OK if top is None else top)
        return reply

    def _outgoing(self, msg: Any, peer: str) -> Outgoing | Exception:
        """One SendMessage entry as the send path takes it, or the error refusing it."""
        try:
            return mapping.outgoing_from_wire(
                msg, born_host=peer, body_size_max=self.sends.body_size_max
            )
        except Exception as exc:  # answered in this message's entry, as a refusal
            return exc

    async def EndTransaction(self, request: Any, context: Any) -> Any:
        # ``answer``'s body inline: no closure and inner coroutine per call (issue 17).
        try:
            end = mapping.end_request_from_wire(request)
            try:
                decided = await durable.drive(self.sends.end_steps(end, block=False), self.executor)
            except DecisionInFlightError:
                decided = await self.run(self.sends.end, end)  # waits for the other one
            if self.ack_gate is not None:
                await self.ack_gate()
            if decided.outcome is Outcome.COMMITTED:
                # The commit record is the message entering its queue: wake that topic.
                self.notify_appended(decided.topic)
            return _END_OK
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return sv.EndTransactionResponse(status=fail(exc))

    # --- Not supported. -------------------------------------------------------------------------

    async def RecallMessage(self, request: Any, context: Any) -> Any:
        return sv.RecallMessageResponse(status=_unsupported("RecallMessage"))

    async def SyncLiteSubscription(self, request: Any, context: Any) -> Any:
        return sv.SyncLiteSubscriptionResponse(status=_unsupported("SyncLiteSubscription"))
