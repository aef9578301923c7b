"""The producer RPCs' handlers: SendMessage and EndTransaction, from request to reply.

Owns: mapping each request at the edge (txmq.protocol.mapping), storing it through
``produce.SendPath`` (written on the loop, awaiting the fsync through ``durable.drive``, or in
the executor when it may block), the replication gate (``ack_gate``), waking long polls of what
became deliverable, and the reply. Errors travel in the response's Status, never as gRPC
status codes (a TxmqError as its code, anything else as INTERNAL_ERROR, logged).
Why a module of its own: the servicer (server.py) stays interpreted, since gRPC inspects what
it registers (decode.py registers a Python coroutine wrapping each unary handler); these
handlers are plain coroutines that wrapper awaits, so they are compiled with mypyc
(docs/adr/0007) and a send or a commit runs no interpreted frame of txmq's but decode's.
Must not: hold state beyond its collaborators, or block the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any

from rocketmq.grpc_protocol import service_pb2 as sv

from txmq import errors, limits
from txmq.broker import durable
from txmq.broker.clients import Clients
from txmq.broker.produce import Decided, SendPath
from txmq.broker.replies import client_id, fail
from txmq.broker.topics import TopicRegistry
from txmq.errors import BadRequestError
from txmq.model import Outcome, Outgoing
from txmq.protocol import mapping
from txmq.txn.steps import DecisionInFlightError

# Replies copy these (CopyFrom) or return them as they are: gRPC only serializes a reply, and
# nothing here changes one after it is returned.
_OK = mapping.status()
_END_OK = sv.EndTransactionResponse(status=_OK)


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
        self.ack_gate: Callable[[], Awaitable[None]] | None = None

    async def SendMessage(self, request: Any, context: Any) -> Any:
        """Store each message; the top status is OK or the first entry's failure."""
        if not request.messages:
            return sv.SendMessageResponse(status=fail(BadRequestError("no messages to send")))
        if len(request.messages) > limits.SEND_BATCH_MAX:
            return sv.SendMessageResponse(
                status=fail(BadRequestError(f"at most {limits.SEND_BATCH_MAX} messages per send"))
            )
        cid: str = client_id(context)
        peer: str = context.peer() or ""
        msgs = list(request.messages)
        items = [self._outgoing(m, peer) for m in msgs]  # the wire mapped here, at the edge
        # Its normal messages share one write and one fsync, the others (FIFO ones included)
        # are stored one by one in request order. Written on the loop, which then awaits the
        # fsync (durable.py), unless storing may do more than that.
        outcomes: list[Any]
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
                self.notify(got.topic, got.queue_id)
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
                await self.ack_gate()
            if decided.outcome is Outcome.COMMITTED:
                # The commit record is the message entering its queue: wake that topic.
                self.notify(decided.topic, -1)
            return _END_OK
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return sv.EndTransactionResponse(status=fail(exc))
