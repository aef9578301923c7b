"""A dashboard in a child process for as long as a ``with`` block runs: how ``txmq demo
--dashboard`` keeps one up while the story plays, and how the browser tests start one.

Owns: starting ``python -m txmq.cli dashboard`` with ``--port`` (0 picks a free one), reading
its ``txmq dashboard on http://HOST:PORT/`` line (bounded wait), and stopping it (SIGTERM, then
SIGKILL after a bounded wait). Must not: run the dashboard in this process (the demo's own
event loops and threads stay separate from uvicorn's).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from txmq.errors import TxmqError

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


class DashboardStartError(TxmqError):
    """The dashboard child process did not print its address in time."""


def _first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        return proc.stdout.readline() if sel.select(timeout=START_TIMEOUT_S) else ""
    finally:
        sel.close()


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def dashboard_process(
    endpoints: str,
    *,
    log: Path,
    port: int = 0,
    host: str = "127.0.0.1",
    extra_args: tuple[str, ...] = (),
) -> Iterator[str]:
    """Run a dashboard on ``endpoints`` for the block; yields its URL (no trailing slash).

    Raises:
        DashboardStartError: it did not start within START_TIMEOUT_S (its log says why).
    """
    src = str(Path(__file__).parents[2])
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
    )
    cmd = [sys.executable, "-m", "txmq.cli", "dashboard", "--endpoints", endpoints]
    cmd += ["--port", str(port), "--host", host, *extra_args]
    with log.open("a") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    try:
        line = _first_line(proc)
        if "txmq dashboard on" not in line:
            raise DashboardStartError(f"the dashboard did not start (see {log}): {line!r}")
        yield line.split(" on ", 1)[1].split()[0].rstrip("/")
    finally:
        _stop(proc)


@contextlib.contextmanager
def maybe_dashboard(endpoints: str, *, port: int | None, log: Path) -> Iterator[str | None]:
    """``dashboard_process`` when ``port`` is given (0: any free port), else nothing; yields
    the URL or None. How ``txmq demo --dashboard`` wraps the story."""
    if port is None:
        yield None
        return
    with dashboard_process(endpoints, log=log, port=port) as url:
        yield url
