"""Consumer-group lag: how many retained messages each group has not consumed, queue by queue.

Owns: the one definition of lag that the admin channel (``txmq group list|describe``, the
dashboard) and the Prometheus metrics share. A group's topics are those it holds a position on
(any queue; the positions file keeps them across restarts) plus those a live consumer of the
group declared in its Telemetry subscription. Every queue of each such topic counts: a queue the
group never read lags from its earliest retained offset, because that is where a new group
starts reading it (``ConsumerPositions._open``). Counting only the queues a group has touched
under-reports: a group that read 5 messages from one queue of a 4-queue topic holding 20
messages lags 15, not 0.
Must not: change positions, read records, or speak gRPC. ``group_lags`` is pure; ``LagSource``
gathers its inputs from the broker's parts (blocking calls: run it in the executor or a
Prometheus scrape thread, never on the event loop).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from txmq.errors import TopicNotFoundError, invariant


@dataclass(frozen=True, slots=True)
class QueueLag:
    topic: str
    queue: int
    acked_to: int  # the group's ack offset, or the queue's first retained offset if never read
    max: int  # the queue's next offset
    lag: int
    inflight: int
    read: bool  # False: the group holds no position on this queue yet


@dataclass(frozen=True, slots=True)
class GroupLag:
    group: str
    lag: int
    inflight: int
    queues: tuple[QueueLag, ...]

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["queues"] = [asdict(q) for q in self.queues]
        return out


# (group, topic, queue, ack offset, in flight): ``ConsumerPositions.positions()``.
PositionRow = tuple[str, str, int, int, int]


def group_lags(
    positions: Iterable[PositionRow],
    subscribed: Iterable[tuple[str, str]],
    queue_count: Callable[[str], int],
    queue_range: Callable[[str, int], tuple[int, int]],
) -> list[GroupLag]:
    """Lag of every group over every queue of every topic it consumes, sorted by group.

    Args:
        positions: the groups' positions on the queues they have read.
        subscribed: (group, topic) pairs declared by live consumers, read or not.
        queue_count: a topic's number of queues (0 if the topic is gone).
        queue_range: (first retained offset, next offset) of a queue.
    """
    held: dict[tuple[str, str, int], tuple[int, int]] = {}
    topics: dict[str, set[str]] = {}
    for group, topic, queue, ack, inflight in positions:
        held[(group, topic, queue)] = (ack, inflight)
        topics.setdefault(group, set()).add(topic)
    for group, topic in subscribed:
        topics.setdefault(group, set()).add(topic)
    out = []
    for group in sorted(topics):
        rows = []
        for topic in sorted(topics[group]):
            read_queues = {q for g, t, q in held if g == group and t == topic}
            count = max([queue_count(topic), *(q + 1 for q in read_queues)])
            for queue in range(count):
                rows.append(_queue_lag(topic, queue, held.get((group, topic, queue)), queue_range))
        lag = sum(r.lag for r in rows)
        inflight = sum(r.inflight for r in rows)
        out.append(GroupLag(group, lag, inflight, tuple(rows)))
    return out


def _queue_lag(
    topic: str,
    queue: int,
    position: tuple[int, int] | None,
    queue_range: Callable[[str, int], tuple[int, int]],
) -> QueueLag:
    lo, hi = queue_range(topic, queue)
    invariant(lo <= hi, "a queue's first retained offset is past its next offset")
    if position is None:
        return QueueLag(topic, queue, lo, hi, hi - lo, 0, False)
    ack, inflight = position
    # Retention may have removed messages below the ack offset's successor; they are gone,
    # not lagging, so the lag counts from the later of the two.
    start = max(ack, lo)
    return QueueLag(topic, queue, ack, hi, max(0, hi - start), inflight, True)


class LagSource:
    """Reads the inputs of ``group_lags`` from a running broker's parts."""

    def __init__(
        self,
        positions: Callable[[], list[PositionRow]],
        subscribed: Callable[[], Iterable[tuple[str, str]]],
        topic_queues: Callable[[str], int],
        queue_range: Callable[[str, int], tuple[int, int]],
    ) -> None:
        self.positions = positions
        self.subscribed = subscribed
        self.topic_queues = topic_queues
        self.queue_range = queue_range

    def queue_count(self, topic: str) -> int:
        try:
            return self.topic_queues(topic)
        except TopicNotFoundError:
            return 0  # deleted: only the queues the group holds positions on are shown

    def lags(self) -> list[GroupLag]:
        return group_lags(
            self.positions(), list(self.subscribed()), self.queue_count, self.queue_range
        )


class LagCollector(Collector):
    """``txmq_consumer_lag{group,topic,queue}`` and ``txmq_consumer_group_lag{group}``, computed
    at scrape time from the same ``group_lags`` the admin channel answers with."""

    def __init__(self, source: LagSource) -> None:
        self.source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        per_queue = GaugeMetricFamily(
            "txmq_consumer_lag",
            "Messages a consumer group has not consumed, per queue (never-read queues included)",
            labels=["group", "topic", "queue"],
        )
        per_group = GaugeMetricFamily(
            "txmq_consumer_group_lag",
            "Messages a consumer group has not consumed over every queue it consumes",
            labels=["group"],
        )
        for g in self.source.lags():
            per_group.add_metric([g.group], g.lag)
            for q in g.queues:
                per_queue.add_metric([g.group, q.topic, str(q.queue)], q.lag)
        yield per_queue
        yield per_group


def subscribed_pairs(subscriptions: Mapping[str, frozenset[str]]) -> list[tuple[str, str]]:
    """{group: topics} -> sorted (group, topic) pairs."""
    return sorted((g, t) for g, topics in subscriptions.items() for t in topics)
