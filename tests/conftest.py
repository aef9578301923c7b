"""Shared fixtures: a seeded RNG (replay with TXMQ_SEED=...), a manual clock, small store config,
one session fixture per external tool (tests/tools.py); how `make test` spreads modules over
pytest-xdist workers; and TXMQ_REQUIRE_TOOLS=1 (set by `make test`, so by CI), under which a
test that skips fails instead."""

from __future__ import annotations

import importlib.util
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import tools
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


# The external tools, each found or installed once per session (tests/tools.py).
@pytest.fixture(scope="session")
def node_client() -> Path:
    """``node_modules`` holding the official Node.js client (NODE_PATH for ``node``)."""
    return tools.install_node_client()


@pytest.fixture(scope="session")
def chromium_binary() -> Path:
    return tools.install_chromium()


@pytest.fixture(scope="session")
def etcd_binary() -> Path:
    return tools.install_etcd()


@pytest.fixture(scope="session")
def postgres_bin() -> Path:
    """The directory holding PostgreSQL's ``initdb`` and ``pg_ctl``."""
    return tools.install_postgres()


@pytest.fixture(scope="session")
def mariadb_bin() -> dict[str, Path]:
    """MariaDB's programs: "server" (``mariadbd``), "install_db", "client" (``mariadb``)."""
    return tools.install_mariadb()


@pytest.fixture(scope="session")
def java_runtime() -> Path:
    """The ``java`` a Spark session runs (Java 17+)."""
    return tools.install_java()


@pytest.fixture(scope="session")
def jdbc_jars() -> dict[str, Path]:
    """Database name ("postgresql", "sqlite", "mariadb") -> its JDBC driver jar."""
    return tools.install_jdbc_jars()


# TXMQ_REQUIRE_TOOLS=1: the default suite is meant to run every test it collects, so a skip
# there (a tool that could not be installed, no Java for Spark, a Python extra missing) fails
# the test with the skip's reason instead of hiding in a green run. A skip declared with a
# skip/skipif marker (the platform decides, e.g. Linux only) stays a skip.
REQUIRE_TOOLS = "TXMQ_REQUIRE_TOOLS"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if not report.skipped or os.environ.get(REQUIRE_TOOLS) != "1" or hasattr(report, "wasxfail"):
        return
    if any(m.name in ("skip", "skipif") for m in item.iter_markers()):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = f"{REQUIRE_TOOLS}=1, so this skip fails: {reason}"


# `make test` runs -n 3 --dist loadfile: each test module stays on one worker (its module-scoped
# brokers and clusters are built once), and the modules that use the session-wide Spark session
# share one, so the run starts one Spark session (a JVM, ~15-25 s on 2 cores), not one per
# worker. A module missing here still passes, in a second session on another worker.
SPARK_SESSION_MODULES = frozenset(
    f"tests/spark/test_{name}.py"
    for name in (
        "batch_and_errors",
        "cluster_sink",
        "cluster_source",
        "failover",
        "grown_topic",
        "newcomer_errors",
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
