"""Integration fixtures: the REAL broker as a subprocess on 127.0.0.1.

Reuse these in any integration test (other test directories may import them too):

- ``broker``: a started broker (``python -m txmq.broker --data-dir D --port 0`` plus ``FAST``
  flags: short transaction timeout and check interval, 3 delivery attempts). It is stopped with
  SIGTERM after the test. ``broker.endpoints`` is what the official client's
  ``ClientConfiguration`` takes.
- ``start_broker(*extra_args)``: a factory for brokers with other flags (each in its own data
  directory under tmp_path); all are stopped after the test.
- ``BrokerProcess`` methods: ``start()`` (same data dir and, after the first start, the same
  port, so clients can reconnect), ``stop()`` (SIGTERM, clean shutdown), ``kill9()`` (SIGKILL,
  a crash), ``log_tail()`` (the broker's stderr, kept in ``<data_dir>.log``).

How the port is found: the broker binds port 0 (a free port picked at run time) and prints
``txmq broker listening on 127.0.0.1:PORT`` as its first stdout line, flushed; ``start`` reads
that line (bounded by ``START_TIMEOUT_S``).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.integration.etcd_fixtures import forget_clusters

ROOT = Path(__file__).parents[2]
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0

# Transaction and delivery timings short enough for tests to see check-back and redelivery.
FAST = [
    "--transaction-timeout-ms",
    "800",
    "--transaction-check-interval-ms",
    "1000",
    "--delivery-attempts-max",
    "3",
    "--retry-backoff-initial-ms",
    "1000",
]


@dataclass
class BrokerProcess:
    data_dir: Path
    args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None
    port: int = 0
    host: str = "127.0.0.1"  # the address it binds (another loopback address: behind a proxy)

    @property
    def endpoints(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.with_name(self.data_dir.name + ".log")

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def start(self) -> None:
        """Start (or restart) the broker and wait for its "listening on" line."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        cmd = [
            sys.executable,
            "-m",
            "txmq.broker",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            *(["--host", self.host] if self.host != "127.0.0.1" else []),
            # Test brokers create topics on first use (off by default); a test of the default
            # passes --no-auto-create-topics, which wins as the later flag.
            "--auto-create-topics",
            *self.args,
        ]
        with self.log_path.open("a") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env
            )
        line = self._first_line()
        assert "listening on" in line, f"broker did not start: {line!r}\n{self.log_tail()}"
        self.port = int(line.rsplit(":", 1)[1])

    def _first_line(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            if not sel.select(timeout=START_TIMEOUT_S):
                self.proc.kill()
                self.proc.wait()
                return ""
            return self.proc.stdout.readline()
        finally:
            sel.close()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=STOP_TIMEOUT_S)

    def stop(self) -> int | None:
        """SIGTERM and wait; returns the exit code (None if it was not running)."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"broker ignored SIGTERM\n{self.log_tail()}") from None


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", list(FAST))
    b.start()
    yield b
    b.stop()


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    started: list[BrokerProcess] = []

    def start(*args: str) -> BrokerProcess:
        b = BrokerProcess(tmp_path / f"broker-{len(started)}", list(args))
        started.append(b)
        b.start()
        return b

    yield start
    for b in started:
        b.stop()


@pytest.fixture(autouse=True)
def _forget_clusters(request: pytest.FixtureRequest) -> None:
    forget_clusters(request)  # what earlier tests left in the session's etcd


def wait_until(predicate: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)  # sleep: poll interval of this bounded wait
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


# The security tests' session-wide CA and ACL + TLS broker, registered once here: gRPC core
# reads GRPC_DEFAULT_SSL_ROOTS_FILE_PATH once per process, so two CAs in one session would break
# the second module's official clients.
from tests.integration.security_fixtures import pki, secure  # noqa: E402, F401
