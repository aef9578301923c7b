"""Integration fixtures: the REAL broker as a subprocess on 127.0.0.1 with a port picked at run
time (``--port 0``, the port is read from its first line), and official-client helpers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@dataclass
class BrokerProcess:
    data_dir: Path
    args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None
    port: int = 0

    @property
    def endpoints(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        cmd = [
            sys.executable,
            "-m",
            "txmq.broker",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            *self.args,
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "listening on" in line, f"broker did not start: {line!r}"
        self.port = int(line.rsplit(":", 1)[1])

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


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


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", FAST)
    b.start()
    yield b
    b.stop()


def wait_until(predicate: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
