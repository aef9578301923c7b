"""Prometheus metrics of one broker, in a private registry (so tests can run several brokers).

Owns: the broker's own metrics (sends by type, receives, acks, dead letters, check-backs sent,
refusals by status, transaction outcomes by source, pending/dead/oldest-pending transaction
gauges, durable append latency). Every part updates them where the event happens; ``app.serve``
exposes the registry on ``--metrics-port``. ``DiskCollector`` reads the store's disk usage and
watermark when scraped (``txmq_disk_used_ratio``, ``txmq_disk_watermark_ratio``) and its health
(``txmq_store_damaged_records``, ``txmq_store_queues_rebuilt``, ``txmq_store_scrub_passes``);
consumer lag has its collector in lag.py.
Why counted here and not by prometheus_client's Counter/Histogram: their ``inc``/``observe``
cost four to six Python calls each, several per transaction. Here a count is a
plain number behind one lock, and ``Metrics.collect`` turns them
into the same series prometheus_client's classes expose (names, HELP, types, labels, ``_total``,
``_bucket``/``_count``/``_sum`` and ``_created`` samples) when scraped. A labelled series
appears when first counted, as a prometheus_client child does.
Must not: compute anything else or read other parts' state.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import INF, floatToGoString

from txmq.store.store import Store

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)


class DiskCollector(Collector):
    """The store's disk usage against its write watermark, read when scraped."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        used = self.store.disk.used_ratio(self.store.data_dir)
        yield GaugeMetricFamily(
            "txmq_disk_used_ratio", "Used fraction of the data directory's file system", value=used
        )
        yield GaugeMetricFamily(
            "txmq_disk_watermark_ratio",
            "Disk usage above which writes are refused",
            value=self.store.config.disk_watermark,
        )
        health = self.store.health.report()
        yield GaugeMetricFamily(
            "txmq_store_damaged_records",
            "Damaged commit-log records found by reads or the scrub (readers skip them)",
            value=health["damaged_records"],
        )
        yield GaugeMetricFamily(
            "txmq_store_queues_rebuilt",
            "Consume queues rebuilt from the log because an entry disagreed with it",
            value=health["queues_rebuilt"],
        )
        yield GaugeMetricFamily(
            "txmq_store_scrub_passes",
            "Completed scrubs of the whole log",
            value=health["scrub_passes"],
        )


class Count:
    """One counter series: a number under the broker's metrics lock, read when scraped."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self.value = 0
        self.created = time.time()

    def inc(self, amount: int = 1) -> None:
        # acquire/release, not ``with``: half the instructions (no __enter__/__exit__ calls).
        self._lock.acquire()
        try:
            self.value += amount
        finally:
            self._lock.release()


class Counts:
    """A counter with labels: one ``Count`` per label values, made when first asked for."""

    def __init__(
        self, name: str, documentation: str, labels: tuple[str, ...], lock: threading.Lock
    ):
        self.name, self.documentation, self.labelnames = name, documentation, labels
        self._lock = lock
        self.children: dict[tuple[str, ...], Count] = {}

    def labels(self, *values: str) -> Count:
        child = self.children.get(values)
        if child is None:
            with self._lock:
                child = self.children.get(values)
                if child is None:
                    child = self.children[values] = Count(self._lock)
        return child


class Level:
    """A gauge: the last value set."""

    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = value


class Latency:
    """A histogram of seconds with fixed bucket bounds (each ``le``, then +Inf)."""

    def __init__(self, bounds: tuple[float, ...], lock: threading.Lock) -> None:
        self._lock = lock
        self.bounds = [*bounds, INF]
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, seconds: float) -> None:
        # The first bound >= seconds: prometheus_client's ``amount <= bound`` bucket.
        i = bisect_left(self.bounds, seconds)
        self._lock.acquire()
        try:
            self.counts[i] += 1
            self.sum += seconds
        finally:
            self._lock.release()


def _counter(name: str, documentation: str, series: list[tuple[dict[str, str], Count]]) -> Metric:
    metric = Metric(name, documentation, "counter")
    for labels, count in series:
        metric.add_sample(name + "_total", labels, float(count.value))
        metric.add_sample(name + "_created", labels, count.created)
    return metric


class Metrics:
    """The broker's metrics; its registry reads them through ``collect`` when scraped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        lock = self._lock
        self.sends = Counts(
            "txmq_messages_sent", "Messages accepted by SendMessage", ("type",), lock
        )
        self.receives = Count(lock)
        self.acks = Count(lock)
        self.dlq = Count(lock)
        self.checks = Count(lock)
        self.refusals = Counts(
            "txmq_calls_refused",
            "Calls refused by the ACL (status: unauthorized, forbidden, too_many_requests)",
            ("status",),
            lock,
        )
        self.outcomes = Counts(
            "txmq_transaction_outcomes", "Transaction decisions", ("outcome", "source"), lock
        )
        self.pending = Level()
        self.oldest_pending = Level()
        self.dead = Level()
        self.append_latency = Latency(LATENCY_BUCKETS, lock)
        self.registry = CollectorRegistry()
        self.registry.register(_Collector(self))

    def _labelled(self, counts: Counts) -> Metric:
        with self._lock:
            children = list(counts.children.items())
        series = [(dict(zip(counts.labelnames, k, strict=True)), c) for k, c in children]
        return _counter(counts.name, counts.documentation, series)

    def _histogram(self) -> Metric:
        latency = self.append_latency
        with self._lock:
            counts, total = list(latency.counts), latency.sum
        name = "txmq_store_append_seconds"
        metric = Metric(name, "Durable append latency", "histogram")
        acc = 0.0
        for bound, n in zip(latency.bounds, counts, strict=True):
            acc += n
            le = floatToGoString(bound)  # type: ignore[no-untyped-call]
            metric.add_sample(name + "_bucket", {"le": le}, acc)
        metric.add_sample(name + "_count", {}, acc)
        metric.add_sample(name + "_sum", {}, total)
        metric.add_sample(name + "_created", {}, latency.created)
        return metric

    def collect(self) -> list[Metric]:
        """The series prometheus_client's Counter, Gauge and Histogram exposed, in the order
        they were registered before. A list, not a generator: scrapes may run in several
        threads, and a list is built under the lock once, whatever thread reads it."""
        return [
            self._labelled(self.sends),
            _counter(
                "txmq_messages_received", "Messages handed to consumers", [({}, self.receives)]
            ),
            _counter("txmq_messages_acked", "Messages acknowledged", [({}, self.acks)]),
            _counter("txmq_messages_dead_lettered", "Messages moved to a DLQ", [({}, self.dlq)]),
            _counter("txmq_transaction_checks", "Check-back commands sent", [({}, self.checks)]),
            self._labelled(self.refusals),
            self._labelled(self.outcomes),
            GaugeMetricFamily(
                "txmq_transactions_pending", "Undecided transactions", value=self.pending.value
            ),
            GaugeMetricFamily(
                "txmq_transaction_oldest_pending_seconds",
                "Age of the oldest undecided transaction",
                value=self.oldest_pending.value,
            ),
            GaugeMetricFamily(
                "txmq_transactions_dead",
                "Transactions rolled back at max checks",
                value=self.dead.value,
            ),
            self._histogram(),
        ]


class _Collector(Collector):
    """``Metrics.collect`` as the registry's collector (Metrics itself is no Collector subclass)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self.metrics.collect())
