"""Fixtures for the Spark connector tests: one local[2] SparkSession for the whole run (a
session costs ~7 s or more), one real broker subprocess per module, and helpers to produce
messages over raw gRPC and to run a Spark driver in a child process the test can kill."""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import FAST, ROOT, BrokerProcess
from tests.integration.etcd_fixtures import forget_clusters
from txmq.spark.client import BrokerClient, build_message

CHILD = Path(__file__).with_name("spark_child.py")

# Without the spark extra (pyspark, pyarrow) only the pure tests can run.
if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("pyarrow") is None:
    collect_ignore_glob = ["test_[!p]*.py", "test_pipeline.py", "spark_child.py"]


@pytest.fixture(autouse=True)
def _forget_clusters(request: pytest.FixtureRequest) -> None:
    forget_clusters(request)  # what earlier tests left in the session's etcd


@pytest.fixture(autouse=True)
def _java(request: pytest.FixtureRequest) -> None:
    """Every Spark test runs a JVM (in this process or a child driver), but a module that sets
    ``NEEDS_JAVA = False`` (the pure tests)."""
    if getattr(request.module, "NEEDS_JAVA", True):
        request.getfixturevalue("java_runtime")


@pytest.fixture(scope="session")
def spark(java_runtime: Path) -> Iterator[Any]:
    from txmq.spark.session import local_session

    session = local_session("txmq-tests")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("spark-broker") / "data", list(FAST))
    b.start()
    yield b
    b.stop()


@dataclass
class Produced:
    committed: set[str] = field(default_factory=set)
    rolled_back: set[str] = field(default_factory=set)
    pending: set[str] = field(default_factory=set)


def produce(endpoints: str, topic: str, n: int, seed: int, *, prefix: str = "") -> Produced:
    """N committed messages (transactional and plain) with rolled-back and never-decided
    transactions interleaved; bodies are unique strings."""
    rng = random.Random(seed)
    out = Produced()
    with BrokerClient(endpoints) as broker:
        for i in range(n):
            body = f"{prefix}c{i}"
            if rng.random() < 0.2:
                broker.send([build_message(topic, body.encode(), keys=[body])])
            else:
                [half] = broker.send([build_message(topic, body.encode(), transactional=True)])
                broker.end_transaction(half, commit=True)
            out.committed.add(body)
            if rng.random() < 0.3:
                body = f"{prefix}r{i}"
                [half] = broker.send([build_message(topic, body.encode(), transactional=True)])
                broker.end_transaction(half, commit=False)
                out.rolled_back.add(body)
            if rng.random() < 0.1:
                body = f"{prefix}p{i}"
                broker.send([build_message(topic, body.encode(), transactional=True)])
                out.pending.add(body)
    return out


def start_child(*args: str, failpoint: str = "") -> subprocess.Popen[str]:
    """A Spark driver in its own process group (a failpoint SIGKILLs that whole group)."""
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'src'}")
    env.pop("TXMQ_SPARK_FAILPOINT", None)
    if failpoint:
        env["TXMQ_SPARK_FAILPOINT"] = failpoint
    return subprocess.Popen(
        [sys.executable, str(CHILD), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def finish(child: subprocess.Popen[str], timeout_s: float = 240) -> tuple[int, str]:
    """Wait for a child driver; returns (exit code, the tail of its stderr)."""
    out, err = child.communicate(timeout=timeout_s)
    return child.returncode, "\n".join((out + err).splitlines()[-25:])
