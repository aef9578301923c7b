"""Samples of a broker's metrics over time, and the rates and series the overview charts draw.

Owns: parsing one Prometheus text exposition (the broker's own metrics, fetched through the admin
channel's Status method) into a ``Sample``; a bounded ring of samples per broker; the per-second
rates between consecutive samples. Pure: no I/O, no clock (times are arguments).
Must not: call the broker (sampler.py does) or render anything (charts.py does).
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from txmq import limits
from txmq.errors import invariant

# Counter and gauge names the overview reads (see txmq/broker/metrics/prometheus.py); counters are
# summed
# over their labels.
SENT = "txmq_messages_sent"
RECEIVED = "txmq_messages_received"
ACKED = "txmq_messages_acked"
PENDING = "txmq_transactions_pending"
DEAD = "txmq_transactions_dead"


@dataclass(frozen=True, slots=True)
class Sample:
    time_ms: int
    up: bool
    error: str = ""
    # Up, but it refused the Status call (ACL without the dashboard's admin keys): no metrics.
    refused: bool = False
    sent: float = 0.0
    received: float = 0.0
    acked: float = 0.0
    pending: float = 0.0
    dead: float = 0.0
    disk_used_ratio: float = 0.0
    disk_watermark: float = 1.0

    @property
    def measured(self) -> bool:
        """True when the values came from the broker's metrics."""
        return self.up and not self.refused


def parse_sample(text: str, time_ms: int, disk_used: float, watermark: float) -> Sample:
    """One sample from a broker's metrics text; unknown families are ignored."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            # Counters expose name_total and name_created; only the totals count.
            if s.name.endswith("_created"):
                continue
            name = s.name.removesuffix("_total")
            totals[name] = totals.get(name, 0.0) + s.value
    return Sample(
        time_ms=time_ms,
        up=True,
        sent=totals.get(SENT, 0.0),
        received=totals.get(RECEIVED, 0.0),
        acked=totals.get(ACKED, 0.0),
        pending=totals.get(PENDING, 0.0),
        dead=totals.get(DEAD, 0.0),
        disk_used_ratio=disk_used,
        disk_watermark=watermark,
    )


@dataclass(frozen=True, slots=True)
class Rate:
    time_ms: int
    in_per_s: float  # messages accepted by SendMessage
    out_per_s: float  # messages handed to consumers


def rates(samples: list[Sample]) -> list[Rate]:
    """Per-second rates between consecutive samples of a broker that was up for both.

    A counter that went down means the broker restarted: that interval is skipped rather than
    drawn as a negative rate.
    """
    out = []
    for a, b in itertools.pairwise(samples):
        if not (a.measured and b.measured) or b.time_ms <= a.time_ms:
            continue
        if b.sent < a.sent or b.received < a.received:
            continue
        dt = (b.time_ms - a.time_ms) / 1000.0
        out.append(Rate(b.time_ms, (b.sent - a.sent) / dt, (b.received - a.received) / dt))
    return out


class Ring:
    """The newest ``DASHBOARD_SAMPLES_MAX`` samples of one broker, oldest first."""

    def __init__(self, size: int = limits.DASHBOARD_SAMPLES_MAX) -> None:
        invariant(size >= 2, "a ring needs two samples to make a rate")
        self._samples: deque[Sample] = deque(maxlen=size)

    def add(self, sample: Sample) -> None:
        if self._samples:
            invariant(sample.time_ms >= self._samples[-1].time_ms, "samples arrive in time order")
        self._samples.append(sample)

    @property
    def samples(self) -> list[Sample]:
        return list(self._samples)

    @property
    def latest(self) -> Sample | None:
        return self._samples[-1] if self._samples else None
