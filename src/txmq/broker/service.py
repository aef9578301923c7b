"""The gRPC servicer for ``apache.rocketmq.v2.MessagingService``.

Owns: decoding requests, running blocking work in the executor, encoding responses, and turning
every failure into a response Status (the protocol carries errors in Status, not in gRPC codes).
A handler never lets an exception reach grpc: a TxmqError becomes its code, anything else
INTERNAL_ERROR with the message, logged with its traceback.
Must not: hold state of its own beyond the long-poll wake-up events; the parts own the state.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from txmq import errors, limits
from txmq.broker.clients import Session
from txmq.broker.consume import ConsumeHandlers
from txmq.broker.parts import Parts, wall_ms
from txmq.broker.replies import client_id, fail
from txmq.errors import (
    BadRequestError,
    ClientIdRequiredError,
    UnsupportedError,
)
from txmq.model import DecisionSource, MessageType
from txmq.protocol import mapping, telemetry

log = logging.getLogger("txmq.broker")
T = TypeVar("T")


class Service(ConsumeHandlers, sg.MessagingServiceServicer):  # type: ignore[misc]
    def __init__(self, parts: Parts, executor: ThreadPoolExecutor, endpoint: tuple[str, int]):
        self.parts = parts
        self.executor = executor
        self.endpoint = endpoint
        self._wakeups: dict[str, asyncio.Event] = {}

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: fn(*args, **kwargs))

    def notify_appended(self, topic: str) -> None:
        ev = self._wakeups.pop(topic, None)
        if ev is not None:
            ev.set()

    async def _wait_for(self, topic: str, timeout_s: float) -> None:
        ev = self._wakeups.setdefault(topic, asyncio.Event())
        try:
            await asyncio.wait_for(ev.wait(), timeout=max(0.0, timeout_s))
        except TimeoutError:
            return

    # --- Routing. ------------------------------------------------------------------------------

    def _broker(self) -> Any:
        host, port = self.endpoint
        b = pb.Broker(name="txmq", id=0)
        try:
            socket.inet_aton(host)
            b.endpoints.scheme = pb.IPv4
        except OSError:
            b.endpoints.scheme = pb.DOMAIN_NAME
        b.endpoints.addresses.add(host=host, port=port)
        return b

    def _queues(self, topic: str) -> list[Any]:
        info = self.parts.topics.ensure(mapping.validate_topic(topic, allow_system=True))
        types = (
            list(mapping.WIRE_TYPES.values())
            if info.accepts_all
            else [mapping.WIRE_TYPES[info.message_type]]
        )
        return [
            pb.MessageQueue(
                topic=pb.Resource(name=topic),
                id=i,
                permission=pb.READ_WRITE,
                broker=self._broker(),
                accept_message_types=types,
            )
            for i in range(info.queue_count)
        ]

    async def QueryRoute(self, request: Any, context: Any) -> Any:
        try:
            return sv.QueryRouteResponse(
                status=mapping.status(), message_queues=self._queues(request.topic.name)
            )
        except Exception as exc:
            return sv.QueryRouteResponse(status=fail(exc))

    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        try:
            queues = self._queues(request.topic.name)
            return sv.QueryAssignmentResponse(
                status=mapping.status(),
                assignments=[pb.Assignment(message_queue=q) for q in queues],
            )
        except Exception as exc:
            return sv.QueryAssignmentResponse(status=fail(exc))

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        try:
            cid = client_id(context)
            if not cid:
                raise ClientIdRequiredError("x-mq-client-id metadata is required")
            session = self.parts.clients.touch(cid, wall_ms())
            if request.group.name:
                session.groups.add(request.group.name)
            session.client_type = int(request.client_type)
            return sv.HeartbeatResponse(status=mapping.status())
        except Exception as exc:
            return sv.HeartbeatResponse(status=fail(exc))

    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        self.parts.clients.remove(client_id(context))
        return sv.NotifyClientTerminationResponse(status=mapping.status())

    # --- Telemetry: settings handshake and the check-back channel. --------------------------------

    def _settings_reply(self, settings: Any) -> Any:
        cfg = self.parts.config
        server = telemetry.ServerSettings(
            body_size_max=cfg.store.body_size_max,
            # Capped below the client's own receive deadline, so a long poll answers
            # "no message" before the client gives up on the call.
            long_polling_timeout_ms=min(cfg.long_polling_timeout_ms, 20_000),
            receive_batch_size=limits.RECEIVE_BATCH_MAX,
            delivery_attempts_max=cfg.delivery_attempts_max,
            retry_backoff_initial_ms=cfg.retry_backoff_initial_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms,
        )
        fifo = not telemetry.is_publisher(settings) and any(
            self.parts.topics.ensure(e.topic.name).message_type is MessageType.FIFO
            for e in settings.subscription.subscriptions
        )
        return telemetry.settings_reply(settings, server, fifo=fifo)

    def _on_settings(self, session: Session, settings: Any) -> Any:
        """Record what the client declared and build the reply command."""
        if telemetry.is_publisher(settings):
            session.topics.update(r.name for r in settings.publishing.topics)
        if settings.subscription.group.name:
            session.groups.add(settings.subscription.group.name)
        session.client_type = int(settings.client_type)
        try:
            reply = self._settings_reply(settings)
        except Exception as exc:
            return sv.TelemetryCommand(status=fail(exc))
        return sv.TelemetryCommand(status=mapping.status(), settings=reply)

    async def Telemetry(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:
        """The client's Settings handshake, then the check-back channel, kept open until the
        client closes it. Reading and writing run concurrently: a reader task puts replies in
        this stream's outbox, where the check-back loop puts its commands too."""
        cid = client_id(context)
        if not cid:
            yield sv.TelemetryCommand(
                status=mapping.error_status(ClientIdRequiredError("x-mq-client-id is required"))
            )
            return
        try:
            session = self.parts.clients.touch(cid, wall_ms())
        except Exception as exc:
            yield sv.TelemetryCommand(status=fail(exc))
            return
        stream = session.open_stream()

        async def read() -> None:
            try:
                async for cmd in request_iterator:
                    session.last_seen_ms = wall_ms()
                    if cmd.HasField("settings"):
                        stream.outbox.put_nowait(self._on_settings(session, cmd.settings))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a broken stream ends this stream only, logged
                log.warning("telemetry stream of %s failed: %r", cid, exc)
            finally:
                # This stream's own outbox: ending it cannot end a newer stream of the client.
                stream.outbox.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            while True:
                item = await stream.outbox.get()
                if item is None:
                    break
                yield item
        finally:
            reader.cancel()
            session.close_stream(stream)
            session.last_seen_ms = wall_ms()

    # --- Producing. ----------------------------------------------------------------------------

    async def SendMessage(self, request: Any, context: Any) -> Any:
        entries = []
        top = mapping.status()
        cid = client_id(context)
        if not request.messages:
            return sv.SendMessageResponse(status=fail(BadRequestError("no messages to send")))
        for msg in request.messages:
            try:
                entry = await self._send_one(msg, cid, context)
            except Exception as exc:
                st = fail(exc)
                if top.code == errors.CODE_OK:
                    top = st
                entry = sv.SendResultEntry(status=st, message_id=msg.system_properties.message_id)
            entries.append(entry)
        return sv.SendMessageResponse(status=top, entries=entries)

    async def _send_one(self, msg: Any, cid: str, context: Any) -> Any:
        mtype = mapping.wire_message_type(msg)
        topic = mapping.validate_topic(msg.topic.name)
        info = self.parts.topics.ensure(topic, mtype)
        self.parts.check_type(info, mtype)
        draft = mapping.draft_from_wire(msg, queue_id=0, born_host=context.peer() or "")
        if not draft.message_id:
            raise BadRequestError("message_id is required")
        qid = self.parts.pick_queue(info, draft)
        draft = mapping.with_queue(draft, qid)
        sp = msg.system_properties
        immunity = None
        if sp.HasField("orphaned_transaction_recovery_duration"):
            immunity = mapping.duration_ms(sp.orphaned_transaction_recovery_duration)
        sent = await self.run(self.parts.send, draft, mtype, client_id=cid, immunity_ms=immunity)
        if mtype is not MessageType.TRANSACTION:
            self.notify_appended(topic)
        return sv.SendResultEntry(
            status=mapping.status(),
            message_id=sent.message_id,
            transaction_id=sent.transaction_id,
            offset=max(0, sent.queue_offset),
        )

    async def EndTransaction(self, request: Any, context: Any) -> Any:
        try:
            if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
                raise BadRequestError("resolution must be COMMIT or ROLLBACK")
            if not request.transaction_id:
                raise errors.InvalidTransactionIdError("", "transaction_id is empty")
            source = (
                DecisionSource.CHECK_BACK
                if request.source == pb.SOURCE_SERVER_CHECK
                else DecisionSource.PRODUCER
            )
            commit = request.resolution == pb.COMMIT
            outcome = await self.run(
                self.parts.tx.end, request.transaction_id, commit=commit, source=source
            )
            self.parts.metrics.outcomes.labels(outcome.value, source.value).inc()
            if commit:
                self.notify_appended(request.topic.name)
            return sv.EndTransactionResponse(status=mapping.status())
        except Exception as exc:
            return sv.EndTransactionResponse(status=fail(exc))

    # --- Unsupported. ---------------------------------------------------------------------------

    async def RecallMessage(self, request: Any, context: Any) -> Any:
        return sv.RecallMessageResponse(
            status=mapping.error_status(UnsupportedError("RecallMessage is not supported"))
        )

    async def SyncLiteSubscription(self, request: Any, context: Any) -> Any:
        return sv.SyncLiteSubscriptionResponse(
            status=mapping.error_status(UnsupportedError("lite topics are not supported"))
        )
