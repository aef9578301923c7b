"""A small synchronous client of the broker's v2 gRPC protocol for the Spark connector.

Owns: offset queries, pulls by queue offset, transactional sends and decisions, ledger lookups
through the admin channel. Runs on the driver and inside executor tasks, so it holds nothing that
cannot be rebuilt from (endpoints, topic): partitions carry only those.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from txmq import errors
from txmq.cli.admin_client import call
from txmq.errors import BrokerUnavailableError, TopicNotFoundError, TxmqError


class BrokerStatusError(TxmqError):
    """The broker answered with a non-OK status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"broker refused: {message} (code {code})")
        self.code = code


class Broker:
    def __init__(self, endpoints: str, *, timeout_s: float = 30.0) -> None:
        self.endpoints = endpoints
        self.timeout_s = timeout_s
        self.client_id = f"txmq-spark-{uuid.uuid4().hex[:12]}"
        self.channel = grpc.insecure_channel(endpoints)
        self.stub = sg.MessagingServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def _md(self) -> list[tuple[str, str]]:
        return [("x-mq-client-id", self.client_id), ("x-mq-protocol", "GRPC_V2")]

    def _rpc(self, method: str, request: Any) -> Any:
        try:
            return getattr(self.stub, method)(request, metadata=self._md(), timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise BrokerUnavailableError(self.endpoints, str(exc.code())) from exc

    @staticmethod
    def _check(status: Any) -> None:
        if status.code != errors.CODE_OK:
            if status.code == errors.CODE_TOPIC_NOT_FOUND:
                raise TopicNotFoundError(status.message)
            raise BrokerStatusError(int(status.code), status.message)

    def queue_count(self, topic: str) -> int:
        try:
            r = call(self.endpoints, "TopicDescribe", {"name": topic}, timeout_s=self.timeout_s)
        except errors.NotFoundError as exc:
            raise TopicNotFoundError(topic) from exc
        return len(r["queues"])

    def query_offset(self, topic: str, queue_id: int, policy: str, ts_ms: int = 0) -> int:
        req = sv.QueryOffsetRequest(
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id),
            query_offset_policy={
                "earliest": pb.BEGINNING,
                "latest": pb.END,
                "timestamp": pb.TIMESTAMP,
            }[policy],
        )
        if policy == "timestamp":
            req.timestamp.seconds, ms = divmod(ts_ms, 1000)
            req.timestamp.nanos = ms * 1_000_000
        r = self._rpc("QueryOffset", req)
        self._check(r.status)
        return int(r.offset)

    def pull(self, topic: str, queue_id: int, offset: int, batch: int) -> tuple[list[Any], int]:
        req = sv.PullMessageRequest(
            group=pb.Resource(name="txmq-spark"),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id),
            offset=offset,
            batch_size=batch,
        )
        messages: list[Any] = []
        next_offset = offset
        try:
            for item in self.stub.PullMessage(req, metadata=self._md(), timeout=self.timeout_s):
                if item.HasField("status"):
                    self._check(item.status)
                elif item.HasField("message"):
                    messages.append(item.message)
                else:
                    next_offset = int(item.next_offset)
        except grpc.RpcError as exc:
            raise BrokerUnavailableError(self.endpoints, str(exc.code())) from exc
        return messages, next_offset

    def read_range(self, topic: str, queue_id: int, start: int, end: int) -> Iterator[Any]:
        offset = start
        while offset < end:
            messages, nxt = self.pull(topic, queue_id, offset, min(512, end - offset))
            for m in messages:
                if m.system_properties.queue_offset < end:
                    yield m
            if nxt <= offset:
                break
            offset = nxt

    def send_half(
        self, topic: str, body: bytes, *, keys: list[str], tag: str, properties: Mapping[str, str]
    ) -> tuple[str, str]:
        msg = pb.Message(topic=pb.Resource(name=topic), body=body)
        for k, v in properties.items():
            msg.user_properties[k] = v
        sp = msg.system_properties
        sp.message_id = uuid.uuid4().hex.upper()
        sp.message_type = pb.TRANSACTION
        sp.keys.extend(keys)
        if tag:
            sp.tag = tag
        r = self._rpc("SendMessage", sv.SendMessageRequest(messages=[msg]))
        self._check(r.status)
        e = r.entries[0]
        return e.message_id, e.transaction_id

    def send_normal(self, topic: str, body: bytes, *, keys: list[str]) -> None:
        msg = pb.Message(topic=pb.Resource(name=topic), body=body)
        msg.system_properties.message_id = uuid.uuid4().hex.upper()
        msg.system_properties.message_type = pb.NORMAL
        msg.system_properties.keys.extend(keys)
        r = self._rpc("SendMessage", sv.SendMessageRequest(messages=[msg]))
        self._check(r.status)

    def end(self, topic: str, message_id: str, transaction_id: str, commit: bool) -> None:
        r = self._rpc(
            "EndTransaction",
            sv.EndTransactionRequest(
                topic=pb.Resource(name=topic),
                message_id=message_id,
                transaction_id=transaction_id,
                resolution=pb.COMMIT if commit else pb.ROLLBACK,
                source=pb.SOURCE_CLIENT,
            ),
        )
        if r.status.code == errors.CODE_PRECONDITION_FAILED:
            return  # already decided the other way by check-back; the ledger made that call
        self._check(r.status)

    def find_by_key(self, topic: str, key: str) -> list[dict[str, Any]]:
        try:
            r = call(self.endpoints, "MessageFind", {"topic": topic, "key": key})
        except errors.NotFoundError:
            return []
        return list(r["messages"])
