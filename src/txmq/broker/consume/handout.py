"""What a ReceiveMessage answers: its filter and invisible time read from the request, and its
replies (``Handout``; ``Lone`` when it delivers nothing).

Owns: ``filter_of`` (a request's filter expression, tags or SQL92), ``invisible_ms``
(the request's invisible duration, within its bounds), and the replies of one receive, whose
message bytes go back to the stream's byte budget once gRPC has taken them.
"""

from __future__ import annotations

from typing import Any, Final

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv

from txmq import limits
from txmq.broker.consume.filter import Filter, parse_filter
from txmq.broker.consume.flow import ByteBudget
from txmq.broker.consume.positions import Delivery
from txmq.broker.metrics.prometheus import Metrics
from txmq.errors import IllegalInvisibleTimeError
from txmq.model import MessageType
from txmq.protocol import mapping

# Replies copy it (CopyFrom); nothing changes it.
_OK: Final = mapping.status()
# A receive's first reply, the same each time, as its bytes (decode.Serialize passes them on).
_FIRST: Final[bytes] = sv.ReceiveMessageResponse(status=_OK).SerializeToString()


def filter_of(expr: Any) -> Filter:
    """A request's FilterExpression as the filter the store applies: SQL92 when its type says
    so, tags otherwise (an unset type included). IllegalFilterExpressionError if malformed."""
    return parse_filter(expr.expression, sql=expr.type == pb.SQL)


def invisible_ms(request: Any, default_ms: int = 30_000) -> int:
    if not request.HasField("invisible_duration"):
        return default_ms
    ms = mapping.duration_ms(request.invisible_duration)
    if not limits.INVISIBLE_DURATION_MS_MIN <= ms <= limits.INVISIBLE_DURATION_MS_MAX:
        raise IllegalInvisibleTimeError(
            f"invisible duration must be {limits.INVISIBLE_DURATION_MS_MIN}.."
            f"{limits.INVISIBLE_DURATION_MS_MAX} ms, got {ms}"
        )
    return ms


class Handout:
    """The replies of a ReceiveMessage that found messages, each as its reply's bytes: the
    status, the delivery timestamp, then each message. Each record's bytes count against the
    flow-control budget until gRPC has taken its message (the stream asks for the next reply
    only once the previous one was taken: gRPC writes wait for the client's HTTP/2 window), and
    a record is dropped as soon as its reply exists, so a reader that stalls pins at most what
    is left of its own batch (broker/consume/flow.py). ``close`` gives back what is still held.
    ReceiveMessage (consume/rpcs.py) calls ``take`` until None."""

    def __init__(
        self,
        got: list[Delivery],
        invisible: int,
        message_type: MessageType,
        budget: ByteBudget,
        metrics: Metrics,
        now_ms: int,
    ) -> None:
        got.reverse()  # pop() from the end hands them out in order, dropping each record
        self._got = got
        self._metrics = metrics
        self._invisible = invisible
        self._message_type = message_type
        self._budget = budget
        self._now_ms = now_ms
        self._sent = 0  # replies handed out
        self._taken = 0  # the size of the record of the last reply handed out
        self.held = sum([d.record.size for d in got])
        budget.take(self.held)

    def take(self) -> bytes | None:
        """The next reply's bytes, or None after the last: what ReceiveMessage
        (consume/rpcs.py) loops on."""
        self._give(self._taken)
        self._taken = 0
        self._sent += 1
        if self._sent == 1:
            return _FIRST
        if self._sent == 2:
            self._metrics.receives.inc(len(self._got))
            return mapping.delivery_timestamp_wire(self._now_ms)
        if not self._got:
            return None
        d = self._got.pop()
        self._taken = d.record.size
        # The reply's bytes, written directly (no protobuf object; gRPC's serializer passes
        # bytes through: calls.Serialize).
        return mapping.received_message_wire(
            d.record,
            receipt_handle=d.receipt_handle,
            delivery_attempt=d.attempt,
            invisible_ms=self._invisible,
            message_type=self._message_type,
        )

    def _give(self, nbytes: int) -> None:
        if nbytes:
            self.held -= nbytes
            self._budget.give(nbytes)

    def close(self) -> None:
        """Give back what the replies not taken still hold; drop their records."""
        self._got.clear()
        self._give(self.held)


class Lone:
    """The one reply of a receive that delivers nothing (MESSAGE_NOT_FOUND or a refusal), as
    ``Handout`` hands out replies: ``take`` until None, and ``close``."""

    def __init__(self, reply: Any) -> None:
        self._reply = reply

    def take(self) -> Any:
        """The reply, then None (as ``Handout.take``)."""
        reply = self._reply
        self._reply = None
        return reply

    def close(self) -> None:
        self._reply = None
