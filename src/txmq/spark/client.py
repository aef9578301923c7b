"""A small synchronous client of the broker for the Spark connector, over gRPC only.

Owns: the v2 calls the connector needs (QueryRoute, QueryOffset, SendMessage, EndTransaction),
PrepareBundle (many messages as one transaction, for the sink; broker/data_channel/bundles.py),
the record pull of the data channel (txmq.data.v1, broker/data_channel/pull.py: many records per
reply,
where the v2 PullMessage streams one per item), one admin call (MessageFind, to read the sink
ledger by key: the v2 protocol has no lookup by key), the ``x-mq-*`` metadata, bounded
retries of transient failures, and turning every failure into a typed error. Runs on the
driver and inside executor tasks; nothing here is pickled (partitions carry only endpoints and
names), so each side opens its own channel.
Must not: import pyspark, keep state beyond the channel, or decide anything about offsets.

Retries are safe for every call here: reads and EndTransaction are idempotent, and a half
message sent twice (the first answer lost) is never listed in the sink ledger, so check-back
rolls the stray copy back.

A replica group (ADR 0006) is addressed as ``group_address(replicas)``, the replica believed to
lead first: each call goes to the replica believed to lead and, when that one does not answer
or answers that it does not lead (HA_NOT_AVAILABLE: a follower refuses the data and admin
channels, and forwards v2 calls only while it knows a live leader), to the next replica, until
one leads or SPARK_FAILOVER_S_MAX passes. Every other refusal is raised at once. Each attempt
there has its own deadline, addresses.ATTEMPT_S at first (doubled at a replica each time it runs
out there): a paused (SIGSTOPped) leader accepts the connection and never answers, and is left
after that instead of after the whole call deadline, while a leader that is only slow gets
longer attempts.
"""

from __future__ import annotations

import functools
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import grpc

from txmq import errors, limits
from txmq.errors import (
    BadRequestError,
    BrokerUnavailableError,
    NotLeaderError,
    RemoteProtocolError,
)
from txmq.format import record
from txmq.model import Record
from txmq.protocol import channels
from txmq.protocol.client_security import PLAINTEXT, ClientSecurity, open_channel
from txmq.spark.addresses import CALL_TIMEOUT_S, attempt_deadline, channel_target, replicas_of

T = TypeVar("T")

CLIENT_VERSION: Final = "txmq-spark/0.1.0"
RETRY_BACKOFF_S: Final = (0.2, 0.5, 1.0)
_TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# What a replica that stopped serving answers to a call in flight, besides _TRANSIENT.
_LEFT = (grpc.StatusCode.CANCELLED,)
_V2_SERVICE: Final = "apache.rocketmq.v2.MessagingService"


@functools.cache
def _v2() -> types.SimpleNamespace:
    """The RocketMQ v2 stubs, imported on first use. Why: importing them loads the whole
    rocketmq package (its client, OpenTelemetry: ~0.2 s), and a Spark reader, which only uses
    the data channel, pays that in every fresh Python process Spark starts for it."""
    from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

    return types.SimpleNamespace(pb=definition_pb2, sv=service_pb2, sg=service_pb2_grpc)


def raise_for_status(status: Any) -> None:
    """Turn a v2 Status into its typed error (``errors.from_code``); returns only for OK."""
    if int(status.code) != errors.CODE_OK:
        raise errors.from_code(int(status.code), str(status.message))


@dataclass(frozen=True, slots=True)
class Pulled:
    """One record pull's answer: ``count`` verified-on-broker records, back to back in
    ``blob`` (commit-log format), and where the next pull starts."""

    blob: memoryview
    count: int
    next_offset: int

    def records(self) -> list[Record]:
        records = list(record.split(self.blob))
        self._check(len(records))
        return records

    def _check(self, decoded: int) -> None:
        if decoded != self.count:
            raise RemoteProtocolError(f"PullRecords announced {self.count} records, sent {decoded}")


@dataclass(frozen=True, slots=True)
class SentHalf:
    """Where a transactional send went: what EndTransaction needs later."""

    topic: str
    message_id: str
    transaction_id: str
    endpoint: str = ""  # the broker that holds it, where it is decided ("": the client's own)


def build_message(
    topic: str,
    body: bytes,
    *,
    keys: Sequence[str] = (),
    tag: str = "",
    properties: Mapping[str, str] | None = None,
    transactional: bool = False,
) -> Any:
    """A wire Message with a fresh id, as the official client builds one."""
    pb = _v2().pb
    msg = pb.Message(topic=pb.Resource(name=topic), body=body)
    for k, v in (properties or {}).items():
        msg.user_properties[k] = v
    sp = msg.system_properties
    sp.message_id = uuid.uuid4().hex.upper()
    sp.message_type = pb.TRANSACTION if transactional else pb.NORMAL
    sp.keys.extend(keys)
    if tag:
        sp.tag = tag
    sp.born_timestamp.GetCurrentTime()
    return msg


def _queue(topic: str, queue_id: int) -> Any:
    pb = _v2().pb
    return pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id)


class BrokerClient:
    """One gRPC channel to one broker. Use as a context manager; thread-safe.

    Raises (every method): BrokerUnavailableError when nothing answers at ``endpoints`` after
    the retries; for a refusal, the error ``errors.from_code`` types by its status code.
    """

    def __init__(
        self,
        endpoints: str,
        *,
        timeout_s: float = CALL_TIMEOUT_S,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.endpoints = endpoints
        self.timeout_s = timeout_s
        self.security = security
        self.client_id = f"txmq-spark@{uuid.uuid4().hex[:16]}"
        # One channel per replica of a group (one for a broker alone); calls go to _leading.
        self.replicas = replicas_of(endpoints)
        self._channels = [
            open_channel(
                channel_target(replica),
                security,
                options=[
                    ("grpc.max_receive_message_length", limits.GRPC_MESSAGE_SIZE_MAX),
                    ("grpc.max_send_message_length", limits.GRPC_MESSAGE_SIZE_MAX),
                ],
            )
            for replica in self.replicas
        ]
        self._stubs: dict[Any, Any] = {}  # v2 stubs by channel, made on first use (see _v2)
        self._leading = 0
        self._lock = threading.Lock()

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def channel(self) -> Any:
        """The channel to the replica believed to lead (the only one of a broker alone)."""
        return self._channels[self._leading]

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    def metadata(self) -> list[tuple[str, str]]:
        # What the official client sends; the broker reads x-mq-client-id (check-back routing,
        # sessions), the rest identifies us in its logs.
        return [
            ("x-mq-client-id", self.client_id),
            ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "v2"),
            ("x-mq-client-version", CLIENT_VERSION),
            ("x-mq-request-id", uuid.uuid4().hex),
            # The signature headers when the job has credentials (accessKey/secretKey).
            *self.security.metadata(time.time_ns() // 1_000_000),
        ]

    def _retrying(
        self, call: str, fn: Callable[[Any, float], T], *, service: str = _V2_SERVICE
    ) -> T:
        """``fn(channel, timeout_s)``, retried: transient transport failures on a broker alone;
        on a replica group, failover (``_failing_over``)."""
        if len(self._channels) > 1:
            return self._failing_over(call, fn, service)
        for attempt in range(limits.SPARK_CALL_ATTEMPTS_MAX):
            try:
                return fn(self._channels[0], self.timeout_s)
            except grpc.RpcError as exc:
                code = exc.code() if callable(getattr(exc, "code", None)) else None
                if code in _TRANSIENT and attempt + 1 < limits.SPARK_CALL_ATTEMPTS_MAX:
                    time.sleep(RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)])
                    continue
                raise channels.transport_error(exc, self.endpoints, service, call) from exc
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _failing_over(self, call: str, fn: Callable[[Any, float], T], service: str) -> T:
        """``fn`` on the replica believed to lead; while replicas do not answer or answer that
        they do not lead, the next one, with a pause after each round (a new leader is elected
        through etcd: lease TTL + an observe period, ADR 0005), for at least one round and up
        to SPARK_FAILOVER_S_MAX. Any other error is raised at once.

        Each attempt's deadline is ``attempt_deadline``: a replica that does not answer in
        time (paused, or slow) is left for the next one, and asked again with twice the time.

        Raises BrokerUnavailableError (retriable) when no replica led in that time."""
        deadline = time.monotonic() + limits.SPARK_FAILOVER_S_MAX
        rounds = 0
        timed_out = [0] * len(self._channels)  # attempts that ran out, per replica
        for turn in range(1, limits.SPARK_FAILOVER_TURNS_MAX + 1):
            index = self._leading
            left = deadline - time.monotonic()
            timeout = attempt_deadline(self.timeout_s, timed_out[index], left)
            try:
                return fn(self._channels[index], timeout)
            except grpc.RpcError as exc:
                failed = channels.transport_error(exc, self.replicas[index], service, call)
                code = exc.code() if isinstance(exc, grpc.Call) else None
                # CANCELLED: we never cancel, the replica did as it stopped serving (a paused
                # leader that resumed to find its lease gone, a follower being promoted).
                if not isinstance(failed, BrokerUnavailableError) and code not in _LEFT:
                    raise failed from exc
                if code is grpc.StatusCode.DEADLINE_EXCEEDED:
                    timed_out[index] += 1
            except NotLeaderError as exc:
                failed = exc
            with self._lock:
                if self._leading == index:  # another thread may have moved on already
                    self._leading = (index + 1) % len(self._channels)
            pause = 0.0
            if turn % len(self._channels) == 0:
                pause = RETRY_BACKOFF_S[min(rounds, len(RETRY_BACKOFF_S) - 1)]
                rounds += 1
            if turn >= len(self._channels) and time.monotonic() + pause > deadline:
                break
            time.sleep(pause)  # the group elects through etcd: no event here to wait on
        raise BrokerUnavailableError(
            self.endpoints,
            f"no replica answered {call} as the group's leader within "
            f"{limits.SPARK_FAILOVER_S_MAX:.0f} s; last: {failed}",
        ) from failed

    def _unary(self, method: str, request: Any) -> Any:
        def once(channel: Any, timeout_s: float) -> Any:
            stub = self._stubs.get(channel)
            if stub is None:
                stub = self._stubs[channel] = _v2().sg.MessagingServiceStub(channel)
            reply = getattr(stub, method)(request, metadata=self.metadata(), timeout=timeout_s)
            if int(reply.status.code) == errors.CODE_HA_NOT_AVAILABLE:
                raise NotLeaderError(str(reply.status.message))  # a follower with no leader
            return reply

        return self._retrying(method, once)

    # --- Topics and offsets. ------------------------------------------------------------------

    def query_offset(self, topic: str, queue_id: int, policy: str, *, timestamp_ms: int = 0) -> int:
        """``policy``: "earliest" (first retained), "latest" (next to be written) or
        "timestamp" (first message stored at or after ``timestamp_ms``)."""
        pb, sv = _v2().pb, _v2().sv
        wire = {"earliest": pb.BEGINNING, "latest": pb.END, "timestamp": pb.TIMESTAMP}
        if policy not in wire:
            raise BadRequestError(f"unknown offset policy {policy!r}")
        req = sv.QueryOffsetRequest(message_queue=_queue(topic, queue_id))
        req.query_offset_policy = wire[policy]
        if policy == "timestamp":
            req.timestamp.FromMilliseconds(timestamp_ms)
        reply = self._unary("QueryOffset", req)
        raise_for_status(reply.status)
        return int(reply.offset)

    def queue_count(self, topic: str) -> int:
        """Queues of an existing topic (QueueOffsets, which never creates one)."""
        return len(self.queue_ranges(topic))

    def queue_ranges(self, topic: str) -> list[tuple[int, int]]:
        """(first retained, next to be written) offset of each queue of an existing topic, in
        one call on the data channel (txmq.data.v1.Data/QueueOffsets)."""
        header, _ = self._data("QueueOffsets", {"topic": topic})
        queues = header.get("queues")
        if not isinstance(queues, list) or not queues:
            raise RemoteProtocolError(f"QueueOffsets listed no queues for topic {topic!r}")
        try:
            return [(int(lo), int(hi)) for lo, hi in queues]
        except (TypeError, ValueError) as exc:
            raise RemoteProtocolError(f"QueueOffsets answered {queues!r}") from exc

    def offsets(self, topic: str, queues: int, policy: str, *, timestamp_ms: int = 0) -> list[int]:
        return [
            self.query_offset(topic, q, policy, timestamp_ms=timestamp_ms) for q in range(queues)
        ]

    # --- Reading committed messages. ----------------------------------------------------------

    def pull(self, topic: str, queue_id: int, offset: int, max_count: int) -> Pulled:
        """Up to ``max_count`` records from ``offset`` in one record pull (txmq.data.v1): only
        committed and normal messages are in a queue (half and rolled-back ones never are).
        Each record is verified again when the caller decodes it (size, magic, CRC, field
        lengths): ``Pulled.records`` or ``columnar.to_batch``.

        Raises:
            IllegalOffsetError: ``offset`` is below the queue's first retained offset.
            CorruptRecordError: a record in the reply fails verification.
        """
        args = {
            "topic": topic,
            "queue_id": queue_id,
            "offset": offset,
            "max_count": max(1, min(max_count, limits.PULL_COUNT_MAX)),
        }
        header, blob = self._data("PullRecords", args)
        return Pulled(blob, int(header["count"]), int(header["next_offset"]))

    def _pull_some(self, topic: str, queue_id: int, offset: int, max_count: int) -> Pulled:
        """``pull``; on a replica group, an answer without records is asked again, with pauses,
        for up to SPARK_FAILOVER_S_MAX: a new leader shows what its log holds past the end it
        knows was acknowledged only once its in-sync followers have it (ADR 0005), so right
        after a failover a queue can end for a while before an offset the old leader showed."""
        deadline = time.monotonic() + limits.SPARK_FAILOVER_S_MAX
        for attempt in range(limits.SPARK_FAILOVER_TURNS_MAX):
            got = self.pull(topic, queue_id, offset, max_count)
            pause = RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)]
            alone = len(self._channels) == 1
            if got.next_offset > offset or alone or time.monotonic() + pause > deadline:
                return got
            time.sleep(pause)  # published once the followers confirm it: no event to wait on
        return got

    def _data(self, method: str, args: dict[str, Any]) -> tuple[dict[str, Any], memoryview]:
        """Call the data channel: (the reply's JSON header, the bytes after it). A refusal
        raises its typed error (``protocol.channels``)."""
        return self._data_raw(method, channels.encode(args))

    def _data_raw(self, method: str, body: bytes) -> tuple[dict[str, Any], memoryview]:
        """``_data`` with the request body as given. A refusal the broker marks retriable
        (back-pressure: disk above its watermark, too many pending transactions) raises an
        error whose ``retriable`` is true, whatever its class says."""
        path = channels.method_path(channels.DATA_SERVICE, method)

        def once(channel: Any, timeout_s: float) -> tuple[dict[str, Any], memoryview]:
            rpc = channel.unary_unary(path)
            raw = rpc(body, metadata=self.metadata(), timeout=timeout_s)
            return channels.data_reply(raw, method)  # a follower's refusal: NotLeaderError

        return self._retrying(method, once, service=channels.DATA_SERVICE)

    def _admin(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        """Call the admin channel; a refusal raises its typed error (``protocol.channels``)."""
        path = channels.method_path(channels.ADMIN_SERVICE, method)
        body = channels.encode(args)

        def once(channel: Any, timeout_s: float) -> dict[str, Any]:
            raw = channel.unary_unary(path)(body, metadata=self.metadata(), timeout=timeout_s)
            return channels.admin_reply(raw, method)  # a follower's refusal: NotLeaderError

        return self._retrying(method, once, service=channels.ADMIN_SERVICE)

    def read_range(self, topic: str, queue_id: int, start: int, end: int) -> Iterator[Record]:
        """Every message with ``start <= queue_offset < end``, in order, as Records."""
        for got in self.pulls(topic, queue_id, start, end):
            yield from (rec for rec in got.records() if rec.queue_offset < end)

    def pulls(self, topic: str, queue_id: int, start: int, end: int) -> Iterator[Pulled]:
        """The pulls covering ``start <= queue_offset < end``, in order (the last one may
        hold records past ``end``).

        The next pull is in flight while the caller consumes the current one, so the broker
        serves it while the caller converts rows.

        Raises IllegalOffsetError when ``start`` is below the retained range, and
        RemoteProtocolError when the queue ends before ``end`` (a range is only ever built
        from offsets the broker reported, so a short queue means lost data, never "done"; on a
        replica group, once it stayed short for SPARK_FAILOVER_S_MAX: ``_pull_some``).
        """
        if start >= end:
            return
        with ThreadPoolExecutor(1, thread_name_prefix="txmq-pull") as pool:
            offset = start
            ahead = pool.submit(self._pull_some, topic, queue_id, offset, end - offset)
            while True:
                got = ahead.result()
                if got.next_offset <= offset:
                    raise RemoteProtocolError(
                        f"queue {topic}/{queue_id} ends at {offset}, before offset {end} it "
                        "reported"
                    )
                offset = got.next_offset
                if offset < end:
                    ahead = pool.submit(self._pull_some, topic, queue_id, offset, end - offset)
                yield got
                if offset >= end:
                    return

    # --- Sending and deciding. ----------------------------------------------------------------

    def send(self, messages: Sequence[Any]) -> list[SentHalf]:
        """Send up to limits.SEND_BATCH_MAX messages in one request; raises if any was refused."""
        if not 0 < len(messages) <= limits.SEND_BATCH_MAX:
            raise BadRequestError(f"send takes 1..{limits.SEND_BATCH_MAX} messages")
        sv = _v2().sv
        reply = self._unary("SendMessage", sv.SendMessageRequest(messages=list(messages)))
        for entry in reply.entries:
            raise_for_status(entry.status)
        raise_for_status(reply.status)
        if len(reply.entries) != len(messages):
            raise RemoteProtocolError("SendMessage answered a different number of entries")
        return [
            SentHalf(m.topic.name, e.message_id, e.transaction_id, self.endpoints)
            for m, e in zip(messages, reply.entries, strict=True)
        ]

    def prepare_bundle(
        self, topic: str, messages: Sequence[bytes], properties: Mapping[str, str]
    ) -> SentHalf:
        """Store ``messages`` (each from ``txn.bundle.encode_message``) as ONE transaction, a
        half message that EndTransaction decides as a whole (PrepareBundle,
        broker/data_channel/bundles.py).

        A refusal with ``retriable`` true is the broker pushing back (disk watermark, too many
        pending transactions): the caller pauses and retries."""
        head = {"topic": topic, "count": len(messages), "properties": dict(properties)}
        body = channels.frame(head, messages)
        header, _ = self._data_raw("PrepareBundle", body)
        if header.get("count") != len(messages) or not header.get("transaction_id"):
            raise RemoteProtocolError(f"PrepareBundle answered {header!r}")
        return SentHalf(
            topic, str(header["message_id"]), str(header["transaction_id"]), self.endpoints
        )

    def end_transaction(self, half: SentHalf, *, commit: bool) -> None:
        """Commit or roll back one half message. Idempotent; a contradicting earlier decision
        (say check-back rolled it back after its maximum checks) raises
        TransactionConflictError (PRECONDITION_FAILED)."""
        pb, sv = _v2().pb, _v2().sv
        req = sv.EndTransactionRequest(
            topic=pb.Resource(name=half.topic),
            message_id=half.message_id,
            transaction_id=half.transaction_id,
            resolution=pb.COMMIT if commit else pb.ROLLBACK,
            source=pb.SOURCE_CLIENT,
        )
        reply = self._unary("EndTransaction", req)
        raise_for_status(reply.status)

    # --- Admin channel: lookup by key, topic creation. ----------------------------------------

    def create_topic(self, name: str, queues: int, kind: str) -> None:
        """Create ``name`` (admin TopicCreate) unless it exists: for the sink's own ledger
        topic, on a broker that does not create topics on first use."""
        try:
            self._admin("TopicCreate", {"name": name, "queues": queues, "type": kind})
        except errors.TxmqError:
            if name not in self.topics_named(name):
                raise

    def topics_named(self, name: str) -> set[str]:
        """{name} if the topic exists, else the empty set (QueueOffsets never creates one)."""
        try:
            self.queue_ranges(name)
        except errors.TopicNotFoundError:
            return set()
        return {name}

    def topic_routed(self, topic: str) -> bool:
        """Whether the broker routes ``topic`` as it does for the official clients (QueryRoute):
        a topic that exists, or one the broker creates on first use (``--auto-create-topics``)."""
        pb, sv = _v2().pb, _v2().sv
        reply = self._unary("QueryRoute", sv.QueryRouteRequest(topic=pb.Resource(name=topic)))
        try:
            raise_for_status(reply.status)
        except errors.TopicNotFoundError:
            return False
        return True

    def cluster_info(self) -> list[dict[str, Any]]:
        """ClusterInfo's members (name, endpoint: where the group leads, live, endpoints: every
        replica), in cluster-file order (a broker without a cluster file is a cluster of one)."""
        members: list[dict[str, Any]] = self._admin("ClusterInfo", {})["members"]
        return members

    def find_by_key(self, topic: str, key: str, max_count: int) -> list[tuple[list[str], str]]:
        """(keys, body text) of the newest messages of ``topic`` with ``key``."""
        try:
            reply = self._admin("MessageFind", {"topic": topic, "key": key, "max": max_count})
        except errors.NotFoundError as exc:
            if exc.code in (errors.CODE_TOPIC_NOT_FOUND, errors.CODE_NOT_FOUND):
                return []
            raise
        return [(list(m["keys"]), str(m["body"])) for m in reply["messages"]]
