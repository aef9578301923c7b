"""The producer RPCs' handlers: SendMessage and EndTransaction, from request to reply.

Owns: mapping each request at the edge (txmq.protocol.mapping), storing it through
``produce.SendPath`` (written on the loop, awaiting the fsync through ``durable.drive``, or in
the executor when it may block), the replication gate (``ack_gate``), waking long polls of what
became deliverable, and the reply. Errors travel in the response's Status, never as gRPC
status codes (a TxmqError as its code, anything else as INTERNAL_ERROR, logged).
Why a module of its own: the servicer (node/messaging.py) binds every RPC; the producer's
handlers, from a request to the durable reply, belong with the send path they drive.
Must not: hold state beyond its collaborators, or block the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any, Final

from rocketmq.grpc_protocol import service_pb2 as sv

from txmq import errors, limits
from txmq.broker.produce import durable
from txmq.broker.produce.send_path import Decided, SendPath, Sent
from txmq.broker.rpc.replies import client_id, fail
from txmq.broker.rpc.sessions import Clients
from txmq.broker.topics.registry import TopicRegistry
from txmq.errors import BadRequestError, invariant
from txmq.model import Outcome, Outgoing
from txmq.protocol import mapping
from txmq.txn.steps import DecisionInFlightError

# Written into replies as they are (decode.py's serializer passes a reply's bytes through).
_OK_WIRE: Final[bytes] = mapping.status().SerializeToString()
_END_OK_WIRE: Final[bytes] = sv.EndTransactionResponse(status=mapping.status()).SerializeToString()


class ProduceRpcs:
    def __init__(
        self,
        *,
        topics: TopicRegistry,
        clients: Clients,
        sends: SendPath,
        executor: Executor,
        notify: Callable[[str, int], None],
    ) -> None:
        self.topics = topics
        self.clients = clients
        self.sends = sends
        self.executor = executor
        # Wakes the long polls on a queue (-1: on any queue of the topic).
        self.notify = notify
        # Replication (replication.py): every write passes this before it is acknowledged.
        # It takes what is left of the call's deadline (None: none): a refusal comes before it.
        self.ack_gate: Callable[[float | None], Awaitable[None]] | None = None

    async def SendMessage(self, request: Any, context: Any) -> Any:
        """Store each message; the top status is OK or the first entry's failure."""
        messages = request.messages  # a protobuf field: each read is a call into upb
        count = len(messages)
        if not count:
            return sv.SendMessageResponse(status=fail(BadRequestError("no messages to send")))
        if count > limits.SEND_BATCH_MAX:
            return sv.SendMessageResponse(
                status=fail(BadRequestError(f"at most {limits.SEND_BATCH_MAX} messages per send"))
            )
        cid: str = client_id(context)
        peer: str = context.peer() or ""
        # The wire mapped here, at the edge.
        items = [self._outgoing(m, peer) for m in messages]
        # Its normal messages share one write and one fsync, the others (FIFO ones included)
        # are stored one by one in request order. Written on the loop, which then awaits the
        # fsync (durable.py), unless storing may do more than that.
        outcomes: list[Sent | Exception]
        if SendPath.needs_thread(items, self.topics):
            sends = self.sends
            loop = asyncio.get_running_loop()
            outcomes = await loop.run_in_executor(
                self.executor, lambda: sends.send(items, client_id=cid)
            )
        else:
            steps = self.sends.send_steps(items, client_id=cid)
            outcomes = await durable.drive(steps, self.executor)
        if self.ack_gate is not None:
            try:
                await self.ack_gate(context.time_remaining())
            except errors.TxmqError as exc:
                return sv.SendMessageResponse(status=fail(exc))
        invariant(len(outcomes) == count, "an outcome per message")
        return self._send_reply(messages, outcomes, cid)

    def _send_reply(self, messages: Any, outcomes: list[Sent | Exception], cid: str) -> bytes:
        """The reply's bytes (mapping.send_reply_wire; decode.py's serializer passes them
        through): an entry per message, the top status OK or the first entry's failure.
        Written directly, not filled in as a protobuf message and serialized after.
        ``messages`` (the request's) is read only for a refused message's id."""
        entries: list[tuple[bytes, str, str, int]] = []
        top: bytes | None = None
        for i, got in enumerate(outcomes):
            if isinstance(got, Exception):
                status = fail(got).SerializeToString()
                entries.append((status, messages[i].system_properties.message_id, "", 0))
                if top is None:
                    top = status
                continue
            if got.deliverable:
                self.notify(got.topic, got.queue_id)
            if got.transaction_id and cid:
                self.clients.note_publisher(cid, got.topic)
            entries.append((_OK_WIRE, got.message_id, got.transaction_id, max(0, got.queue_offset)))
        return mapping.send_reply_wire(entries, _OK_WIRE if top is None else top)

    def _outgoing(self, msg: Any, peer: str) -> Outgoing | Exception:
        """One SendMessage entry as the send path takes it, or the error refusing it."""
        try:
            return mapping.outgoing_from_wire(
                msg, born_host=peer, body_size_max=self.sends.body_size_max
            )
        except Exception as exc:  # answered in this message's entry, as a refusal
            return exc

    async def EndTransaction(self, request: Any, context: Any) -> Any:
        try:
            end = mapping.end_request_from_wire(request)
            decided: Decided
            try:
                decided = await durable.drive(self.sends.end_steps(end, block=False), self.executor)
            except DecisionInFlightError:
                sends = self.sends
                loop = asyncio.get_running_loop()
                # waits for the other decision
                decided = await loop.run_in_executor(self.executor, lambda: sends.end(end))
            if self.ack_gate is not None:
                await self.ack_gate(context.time_remaining())
            if decided.outcome is Outcome.COMMITTED:
                # The commit record is the message entering its queue: wake that topic.
                self.notify(decided.topic, -1)
            return _END_OK_WIRE
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return sv.EndTransactionResponse(status=fail(exc))
