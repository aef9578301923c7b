"""Shared fixtures: a seeded RNG (replay with TXMQ_SEED=...), a manual clock, small store config;
and how `make test` spreads modules over pytest-xdist workers."""

from __future__ import annotations

import importlib.util
import os
import random
import time
from collections.abc import Iterator

import pytest

from txmq.store.config import StoreConfig

SMALL = StoreConfig(segment_size_bytes=256 * 1024, body_size_max=64 * 1024)

# rocketmq-python-client 5.1.2 signs its local time as UTC, and a broker with an ACL accepts a
# date within 15 minutes of UTC (docs/security.md): the suite's official clients, in this
# process and the ones it starts, run in UTC whatever the machine's zone. A test of another
# zone sets TZ for the process it starts.
os.environ["TZ"] = "UTC"
time.tzset()


class Clock:
    def __init__(self, start_ms: int = 1_000_000) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def seed() -> Iterator[int]:
    value = int(os.environ.get("TXMQ_SEED", random.randrange(1 << 30)))
    print(f"TXMQ_SEED={value}")
    yield value


# `make test` runs -n 2 --dist loadfile: each test module stays on one worker (its module-scoped
# brokers and clusters are built once), and the modules that use the session-wide Spark session
# share one, so the run starts one Spark session (a JVM, ~15-25 s on 2 cores), not one per
# worker. A module missing here still passes, in a second session on the other worker.
SPARK_SESSION_MODULES = frozenset(
    f"tests/spark/test_{name}.py"
    for name in (
        "batch_and_errors",
        "cluster_sink",
        "cluster_source",
        "failover",
        "grown_topic",
        "pipeline",
        "stream_crash",
    )
)

if importlib.util.find_spec("xdist") is not None:
    from xdist.scheduler import LoadFileScheduling

    class _SparkTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return "spark-session" if module in SPARK_SESSION_MODULES else module

    def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
        return _SparkTogether(config, log) if config.getvalue("dist") == "loadfile" else None
