"""Prometheus metrics of one broker, in a private registry (so tests can run several brokers).

Owns: the metric objects (sends by type, receives, acks, dead letters, check-backs sent,
transaction outcomes by source, pending/dead/oldest-pending transaction gauges, durable append
latency). Every part updates them where the event happens; ``app.serve`` exposes the registry
on ``--metrics-port``. ``DiskCollector`` reads the store's disk usage and watermark when scraped
(``txmq_disk_used_ratio``, ``txmq_disk_watermark_ratio``) and its health
(``txmq_store_damaged_records``, ``txmq_store_queues_rebuilt``, ``txmq_store_scrub_passes``);
consumer lag has its collector in
lag.py. Must not: compute anything else or read other parts' state.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from txmq.store.store import Store


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


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sends = Counter(
            "txmq_messages_sent", "Messages accepted by SendMessage", ["type"], registry=r
        )
        self.receives = Counter(
            "txmq_messages_received", "Messages handed to consumers", registry=r
        )
        self.acks = Counter("txmq_messages_acked", "Messages acknowledged", registry=r)
        self.dlq = Counter("txmq_messages_dead_lettered", "Messages moved to a DLQ", registry=r)
        self.checks = Counter("txmq_transaction_checks", "Check-back commands sent", registry=r)
        self.refusals = Counter(
            "txmq_calls_refused",
            "Calls refused by the ACL (status: unauthorized, forbidden)",
            ["status"],
            registry=r,
        )
        self.outcomes = Counter(
            "txmq_transaction_outcomes", "Transaction decisions", ["outcome", "source"], registry=r
        )
        self.pending = Gauge("txmq_transactions_pending", "Undecided transactions", registry=r)
        self.oldest_pending = Gauge(
            "txmq_transaction_oldest_pending_seconds",
            "Age of the oldest undecided transaction",
            registry=r,
        )
        self.dead = Gauge(
            "txmq_transactions_dead", "Transactions rolled back at max checks", registry=r
        )
        self.append_latency = Histogram(
            "txmq_store_append_seconds",
            "Durable append latency",
            registry=r,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0),
        )
