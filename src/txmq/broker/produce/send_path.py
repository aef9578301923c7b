"""The send path: SendMessage and EndTransaction below the gRPC layer. Blocking.

Takes model values only (``Outgoing``, ``EndRequest``): the server maps the wire at the edge
(txmq.protocol.mapping), h11's rule, so this path and its tests never see protobuf.
Owns: checking a message against its topic (message type vs topic type), choosing its queue
(FIFO: a hash of the message group, so one group stays in one queue and in order; otherwise
round robin), and storing it durably as a normal message, a delay message (held in the delay
topic until due) or a transaction half message (through the coordinator). EndTransaction hands
the decision to the coordinator, which makes it idempotent and refuses a contradicting one.
Must not: import protobuf or speak gRPC streams, touch the event loop, or wake consumers (the
server does, with what ``Sent``/``Decided`` return). ``send`` and ``end`` block on the store's
fsync (run them in a thread); ``send_steps`` and ``end_steps`` are the same work as
``txn.steps`` generators, which the event loop drives without blocking (txmq.broker.produce.durable)
when ``needs_thread`` is false.
"""

from __future__ import annotations

import itertools
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from txmq import limits
from txmq.broker.metrics.prometheus import Count, Metrics
from txmq.broker.produce.delay import DelaySchedule, due_later
from txmq.broker.topics.registry import TopicInfo, TopicRegistry
from txmq.errors import (
    InvalidTransactionIdError,
    MessageTypeConflictError,
    invariant,
)
from txmq.format.record import validate_draft
from txmq.model import (
    PROP_DELIVERY_TIMESTAMP_MS,
    PROP_MESSAGE_GROUP,
    DecisionSource,
    EndRequest,
    MessageType,
    Outcome,
    Outgoing,
    RecordDraft,
)
from txmq.store.store import Store
from txmq.txn.coordinator import Transactions
from txmq.txn.steps import Steps, run_blocking


@dataclass(frozen=True, slots=True)
class Sent:
    message_id: str
    transaction_id: str
    topic: str
    queue_id: int
    # -1 when the message is not in its topic's consume queue yet (half or delayed).
    queue_offset: int

    @property
    def deliverable(self) -> bool:
        return self.queue_offset >= 0


@dataclass(frozen=True, slots=True)
class Decided:
    outcome: Outcome
    topic: str


_PENDING = Exception("not stored yet")  # a placeholder send() replaces for every message


def _chunks(items: list[tuple[int, RecordDraft]]) -> Iterator[list[tuple[int, RecordDraft]]]:
    chunk: list[tuple[int, RecordDraft]] = []
    size = 0
    for item in items:
        body = len(item[1].body)
        if chunk and size + body > limits.SEND_BATCH_BODY_BYTES_MAX:
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += body
    if chunk:
        yield chunk


class SendPath:
    def __init__(
        self,
        *,
        store: Store,
        tx: Transactions,
        topics: TopicRegistry,
        delay: DelaySchedule,
        metrics: Metrics,
        now_ms: Callable[[], int],
        body_size_max: int,
    ) -> None:
        invariant(0 < body_size_max <= limits.BODY_SIZE_MAX_LIMIT, "body size limit in range")
        self.store = store
        self.tx = tx
        self.topics = topics
        self.delay = delay
        self.metrics = metrics
        self.now_ms = now_ms
        self.body_size_max = body_size_max
        self._round_robin = itertools.count()
        # Label children kept once used (a series appears when first counted, as before):
        # ``labels()`` costs a lock and a few frames per call.
        self._sent: dict[MessageType, Count] = {}
        self._decided: dict[tuple[Outcome, DecisionSource], Count] = {}

    def pick_queue(
        self, info: TopicInfo, draft: RecordDraft, chosen: dict[str, int] | None = None
    ) -> int:
        """The queue for ``draft``. With ``chosen`` (one request's picks by topic), the
        messages of one request without a message group share one queue, as RocketMQ stores a
        batch: a bulk reader then finds them side by side in the log (one read, not one per
        message), and round robin across requests still spreads the load."""
        # ``in`` first: ``properties`` is a Mapping, whose ``get`` is a generic method call.
        group = (
            draft.properties.get(PROP_MESSAGE_GROUP)
            if PROP_MESSAGE_GROUP in draft.properties
            else None
        )
        if group:
            # One message group always maps to one queue, which is what keeps it ordered.
            return zlib.crc32(group.encode()) % info.queue_count
        if chosen is not None and info.name in chosen:
            return chosen[info.name]
        queue = next(self._round_robin) % info.queue_count
        if chosen is not None:
            chosen[info.name] = queue
        return queue

    def _sent_counter(self, mtype: MessageType) -> Count:
        sent = self._sent.get(mtype)
        if sent is None:
            sent = self._sent[mtype] = self.metrics.sends.labels(mtype.value)
        return sent

    @staticmethod
    def check_type(info: TopicInfo, mtype: MessageType) -> None:
        if info.message_type is not mtype and not info.accepts_all:
            raise MessageTypeConflictError(
                f"topic {info.name!r} accepts {info.message_type.value} messages, not {mtype.value}"
            )

    def validate(self, out: Outgoing, *, chosen: dict[str, int] | None = None) -> int:
        """Check one message against its topic; returns the queue chosen for it
        (``pick_queue``). Raises typed errors and stores nothing when the message is refused."""
        info = self.topics.ensure(out.draft.topic, out.message_type, writing=True)
        self.check_type(info, out.message_type)
        return self.pick_queue(info, out.draft, chosen)

    def send(
        self, msgs: Sequence[Outgoing | Exception], *, client_id: str
    ) -> list[Sent | Exception]:
        """``send_steps`` run to the end in this thread."""
        return run_blocking(self.send_steps(msgs, client_id=client_id))

    @staticmethod
    def needs_thread(msgs: Sequence[Outgoing | Exception], topics: TopicRegistry) -> bool:
        """Whether storing ``msgs`` may do more than wait for the store's fsync: create a topic
        (a file write) or hold a delay message (the delay schedule's lock and reads). Such a
        request runs ``send`` in a thread; the others can run ``send_steps`` on the loop."""
        return any(
            not topics.settled(m.draft.topic) or PROP_DELIVERY_TIMESTAMP_MS in m.draft.properties
            for m in msgs
            if isinstance(m, Outgoing)
        )

    def send_steps(
        self, msgs: Sequence[Outgoing | Exception], *, client_id: str
    ) -> Steps[list[Sent | Exception]]:
        """Store a request's messages (mapped at the edge: an error there stands in for its
        message); per message, in order, where it went or the error that refused it.

        Why: the normal messages that pass validation are stored with one append per
        SEND_BATCH_BODY_BYTES_MAX (one write, one fsync), not one durable append each in turn; the
        others (FIFO, transactional, delayed) go one by one, in request order, which keeps a
        FIFO group's messages in order in their queue.
        """
        out: list[Sent | Exception] = []
        plain: list[tuple[int, RecordDraft]] = []
        chosen: dict[str, int] = {}
        for i, msg in enumerate(msgs):
            if isinstance(msg, Exception):
                out.append(msg)
                continue
            try:
                queue_id = self.validate(msg, chosen=chosen)
                if msg.message_type is MessageType.NORMAL:
                    draft = msg.draft.in_queue(queue_id)
                    # The store's own checks, per message, so one bad message cannot fail the
                    # append it would share with the good ones.
                    validate_draft(draft, body_size_max=self.body_size_max)
                    plain.append((i, draft))
                    out.append(_PENDING)
                else:
                    out.append((yield from self._store(msg, queue_id, client_id=client_id)))
            except Exception as exc:
                out.append(exc)
        if plain:
            for chunk in _chunks(plain):
                started = time.perf_counter()
                try:
                    pending = self.store.append_many_nowait([d for _, d in chunk])
                    yield pending
                    results = self.store.durable(pending)
                except Exception as exc:
                    for i, _ in chunk:
                        out[i] = exc
                    continue
                self.metrics.append_latency.observe(time.perf_counter() - started)
                sent = self._sent_counter(MessageType.NORMAL)
                for (i, d), res in zip(chunk, results, strict=True):
                    invariant(res.queue_offset >= 0, "a normal append enters the consume queue")
                    sent.inc()
                    out[i] = Sent(d.message_id, "", d.topic, d.queue_id, res.queue_offset)
            invariant(all(o is not _PENDING for o in out), "every message has an answer")
        return out

    def _store(self, msg: Outgoing, queue_id: int, *, client_id: str) -> Steps[Sent]:
        started = time.perf_counter()
        tid = ""
        mtype = msg.message_type
        draft = msg.draft
        if mtype is MessageType.TRANSACTION:
            # RocketMQ 5 producers name no group on the wire: the topic is the group (see
            # clients.py), which is also what check-back uses to find a live producer.
            tid, res = yield from self.tx.prepare_steps(
                draft,
                queue_id=queue_id,
                producer_group=draft.topic,
                client_id=client_id,
                check_immunity_ms=msg.check_immunity_ms,
            )
            queue_offset = -1
            invariant(bool(tid), "a prepared transaction has an id")
        elif mtype is MessageType.DELAY and due_later(draft, self.now_ms()):
            # blocking: needs_thread sends such requests to a thread
            self.delay.schedule(draft.in_queue(queue_id))
            queue_offset = -1
        else:
            pending = self.store.append_many_nowait([draft.in_queue(queue_id)])
            yield pending
            (res,) = self.store.durable(pending)
            queue_offset = res.queue_offset
            invariant(queue_offset >= 0, "a normal append enters the consume queue")
        self.metrics.append_latency.observe(time.perf_counter() - started)
        self._sent_counter(mtype).inc()
        return Sent(draft.message_id, tid, draft.topic, queue_id, queue_offset)

    def end(self, request: EndRequest) -> Decided:
        """``end_steps`` run to the end in this thread."""
        return run_blocking(self.end_steps(request, block=True))

    def end_steps(self, request: EndRequest, *, block: bool) -> Steps[Decided]:
        """Decide a transaction. Idempotent: the same decision again answers OK; the opposite
        one raises TransactionConflictError. With ``block`` false, a decision of the same
        transaction in flight raises DecisionInFlightError (see ``Transactions.end_steps``)."""
        if not request.transaction_id:
            raise InvalidTransactionIdError("", "transaction_id is empty")
        outcome = yield from self.tx.end_steps(
            request.transaction_id,
            commit=request.commit,
            source=request.source,
            message_id=request.message_id,
            block=block,
        )
        decided = self._decided.get((outcome, request.source))
        if decided is None:
            labels = (outcome.value, request.source.value)
            decided = self._decided[outcome, request.source] = self.metrics.outcomes.labels(*labels)
        decided.inc()
        return Decided(outcome, request.topic)
