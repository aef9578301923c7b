"""The broker's metrics page is what prometheus_client's Counter, Gauge and Histogram exposed:
the same events counted by ``Metrics`` and by those classes (the broker's definitions before
counted in plain numbers) give the same text, line for line, but the ``_created``
timestamps, and every count stays exact under threads."""

from __future__ import annotations

import re
import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from txmq.broker.metrics.prometheus import LATENCY_BUCKETS, Metrics

CREATED = re.compile(r"^(\w+_created(?:\{[^}]*\})?) [0-9.e+]+$", re.MULTILINE)
LATENCIES = (0.0001, 0.0005, 0.0007, 0.003, 0.05, 1.0, 2.5)


def _reference() -> tuple[CollectorRegistry, dict[str, object]]:
    """prometheus_client's objects as metrics.py defined them before."""
    r = CollectorRegistry()
    m: dict[str, object] = {
        "sends": Counter(
            "txmq_messages_sent", "Messages accepted by SendMessage", ["type"], registry=r
        ),
        "receives": Counter("txmq_messages_received", "Messages handed to consumers", registry=r),
        "acks": Counter("txmq_messages_acked", "Messages acknowledged", registry=r),
        "dlq": Counter("txmq_messages_dead_lettered", "Messages moved to a DLQ", registry=r),
        "checks": Counter("txmq_transaction_checks", "Check-back commands sent", registry=r),
        "refusals": Counter(
            "txmq_calls_refused",
            "Calls refused by the ACL (status: unauthorized, forbidden, too_many_requests)",
            ["status"],
            registry=r,
        ),
        "outcomes": Counter(
            "txmq_transaction_outcomes", "Transaction decisions", ["outcome", "source"], registry=r
        ),
        "pending": Gauge("txmq_transactions_pending", "Undecided transactions", registry=r),
        "oldest_pending": Gauge(
            "txmq_transaction_oldest_pending_seconds",
            "Age of the oldest undecided transaction",
            registry=r,
        ),
        "dead": Gauge(
            "txmq_transactions_dead", "Transactions rolled back at max checks", registry=r
        ),
        "append_latency": Histogram(
            "txmq_store_append_seconds",
            "Durable append latency",
            registry=r,
            buckets=LATENCY_BUCKETS,
        ),
    }
    return r, m


def _events(m: object) -> None:
    """The same events on either side (both take these calls)."""
    get = getattr
    for _ in range(3):
        get(m, "sends").labels("normal").inc()
    get(m, "sends").labels("transaction").inc()
    get(m, "receives").inc(5)
    get(m, "receives").inc(2)
    get(m, "acks").inc()
    get(m, "dlq").inc()
    get(m, "checks").inc()
    get(m, "refusals").labels("unauthorized").inc()
    get(m, "outcomes").labels("committed", "producer").inc()
    get(m, "outcomes").labels("committed", "producer").inc()
    get(m, "outcomes").labels("rolled_back", "check_back").inc()
    get(m, "pending").set(3)
    get(m, "oldest_pending").set(1.5)
    get(m, "dead").set(1)
    for seconds in LATENCIES:
        get(m, "append_latency").observe(seconds)


class _Fields:
    def __init__(self, fields: dict[str, object]) -> None:
        self.__dict__.update(fields)


def _text(registry: CollectorRegistry) -> str:
    return CREATED.sub(r"\1 T", generate_latest(registry).decode())


def test_the_page_is_prometheus_clients_line_for_line() -> None:
    ref, fields = _reference()
    mine = Metrics()
    assert _text(mine.registry) == _text(ref)  # nothing counted yet: unlabelled series at 0
    _events(_Fields(fields))
    _events(mine)
    text = _text(mine.registry)
    assert text == _text(ref)
    assert 'txmq_messages_sent_total{type="normal"} 3.0' in text
    assert 'txmq_store_append_seconds_bucket{le="0.0005"} 2.0' in text  # le is inclusive
    assert "txmq_store_append_seconds_count 7.0" in text


def test_counts_stay_exact_under_threads() -> None:
    mine = Metrics()
    threads, each = 4, 5_000

    def count() -> None:
        sent = mine.sends.labels("normal")
        for _ in range(each):
            sent.inc()
            mine.acks.inc()
            mine.append_latency.observe(0.001)

    workers = [threading.Thread(target=count) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    text = _text(mine.registry)
    n = threads * each
    assert f'txmq_messages_sent_total{{type="normal"}} {float(n)}' in text
    assert f"txmq_messages_acked_total {float(n)}" in text
    assert f"txmq_store_append_seconds_count {float(n)}" in text
