"""The gRPC servicer for ``apache.rocketmq.v2.MessagingService``: all 17 RPCs.

Owns: routes (QueryRoute), client sessions (Heartbeat, Telemetry, NotifyClientTermination), and
answers for what txmq does not do (RecallMessage, SyncLiteSubscription: UNSUPPORTED). The
producer RPCs (SendMessage, EndTransaction) are ``produce.rpcs.ProduceRpcs``'s handlers
and the consumer RPCs the consumer side's (``consume.ConsumeRpcs``), both bound on the
servicer.
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
from txmq.broker.cluster import routes
from txmq.broker.cluster.membership import Membership
from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.consume.handout import filter_of
from txmq.broker.consume.rpcs import ConsumeRpcs
from txmq.broker.produce.rpcs import ProduceRpcs
from txmq.broker.produce.send_path import SendPath
from txmq.broker.rpc.replies import client_id, fail
from txmq.broker.rpc.sessions import Clients, Session, Stream
from txmq.broker.topics.registry import TopicRegistry
from txmq.errors import ClientIdRequiredError, UnsupportedError
from txmq.model import MessageType
from txmq.protocol import mapping, telemetry

log = logging.getLogger("txmq.broker")
T = TypeVar("T")


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
        # frame (or, for a stream, a re-yielding generator) per call.
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
        # The producer RPCs are produce/rpcs.py's handlers, bound here the same way.
        self.produce = ProduceRpcs(
            topics=topics,
            clients=clients,
            sends=sends,
            executor=executor,
            notify=consume.notify_appended,
        )
        self.SendMessage = self.produce.SendMessage
        # Replication (replication.py): an operator's change of consumer positions passes this
        # before it is answered OK (admin/service.py). None: a broker alone.
        self.positions_gate: Callable[[float | None], Awaitable[None]] | None = None
        self.EndTransaction = self.produce.EndTransaction

    @property
    def ack_gate(self) -> Callable[[float | None], Awaitable[None]] | None:
        """Replication (replication.py): every write passes this before it is acknowledged."""
        return self.produce.ack_gate

    @ack_gate.setter
    def ack_gate(self, gate: Callable[[float | None], Awaitable[None]] | None) -> None:
        self.produce.ack_gate = gate

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
        session.settings += 1
        session.last_seen_ms = max(session.last_seen_ms, self.now_ms())
        agent = settings.user_agent
        session.language, session.version = int(agent.language), agent.version
        session.hostname = agent.hostname
        if telemetry.is_publisher(settings):
            session.topics.update(r.name for r in settings.publishing.topics)
        if settings.subscription.group.name:
            try:
                # A malformed filter is refused here already (RocketMQ's proxy refuses an empty
                # SQL92 one here): a PushConsumer then fails its start instead of running on
                # and receiving nothing.
                for entry in settings.subscription.subscriptions:
                    filter_of(entry.expression)
            except errors.IllegalFilterExpressionError as exc:
                # The client shows no reason (a PushConsumer's start times out): the log does.
                log.warning("settings of client %s refused: %s", session.client_id, exc)
                return sv.TelemetryCommand(status=fail(exc))
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
        session.address = str(context.peer() or "")
        self.clients.streams_changed()
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
            self.clients.streams_changed()
            session.last_seen_ms = self.now_ms()

    # --- Not supported. -------------------------------------------------------------------------

    async def RecallMessage(self, request: Any, context: Any) -> Any:
        return sv.RecallMessageResponse(status=_unsupported("RecallMessage"))

    async def SyncLiteSubscription(self, request: Any, context: Any) -> Any:
        return sv.SyncLiteSubscriptionResponse(status=_unsupported("SyncLiteSubscription"))
