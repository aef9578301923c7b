"""Fixtures for the dashboard tests: a live broker with traffic, the dashboard process, and a
headless Chromium from Debian's packages driven by Playwright for Python.

The browser: Debian's ``chromium``, from the session's ``chromium_binary`` fixture
(tests/tools.py), never a browser build downloaded by ``playwright install``. Without Playwright
or a Chromium the browser tests skip with the reason (and fail under TXMQ_REQUIRE_TOOLS=1).
Screenshots go to ``$TXMQ_TEST_ARTIFACTS/dashboard`` (default ``build/test-artifacts/dashboard``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import FAST, ROOT, BrokerProcess
from txmq.dashboard.background import dashboard_process

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def artifacts_dir() -> Path:
    base = os.environ.get("TXMQ_TEST_ARTIFACTS") or str(ROOT / "build" / "test-artifacts")
    path = Path(base) / "dashboard"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser(chromium_binary: Path) -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright for Python is not installed (pip install -e '.[dev]')")
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=str(chromium_binary), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield b
        finally:
            b.close()


@dataclass
class Dashboard:
    url: str


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[BrokerProcess, Dashboard]]:
    """A broker whose transactions die after 2 unanswered checks, and a dashboard on it."""
    b = BrokerProcess(tmp_path / "broker", [*FAST, "--transaction-check-max", "2"])
    b.start()
    try:
        # --sample-ms 500: the charts fill in seconds instead of minutes.
        with dashboard_process(
            b.endpoints, log=tmp_path / "dashboard.log", extra_args=("--sample-ms", "500")
        ) as url:
            yield b, Dashboard(url)
    finally:
        b.stop()


class Traffic:
    """A producer thread sending plain messages until stopped (bounded by ``count``), and a
    consumer thread (group ``watchers``) receiving them, so both rate lines move."""

    def __init__(self, endpoints: str, topic: str, count: int) -> None:
        self.endpoints, self.topic, self.count = endpoints, topic, count
        self.sent = 0
        self.received = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.reader = threading.Thread(target=self.read, daemon=True)

    def read(self) -> None:
        from tests.integration import clients

        c = clients.consumer(self.endpoints, "watchers", self.topic)
        try:
            for _ in range(self.count):  # bounded: at most one receive per message sent
                if self.stopping.is_set():
                    break
                self.received += len(clients.drain(c, 1, 2))
        finally:
            c.shutdown()

    def run(self) -> None:
        from tests.integration import clients

        p = clients.producer(self.endpoints, (self.topic,))
        try:
            for i in range(self.count):
                if self.stopping.wait(0.05):  # ~20 messages per second, so the chart moves
                    break
                p.send(clients.message(self.topic, f'{{"n": {i}}}'.encode(), keys=f"t{i}"))
                self.sent += 1
        finally:
            p.shutdown()

    def __enter__(self) -> Traffic:
        self.thread.start()
        self.reader.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(timeout=30)
        self.reader.join(timeout=30)
