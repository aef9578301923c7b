"""``txmq demo --dashboard``: a dashboard runs while the story plays and stops with it.

Method: run the demo (10 orders, no Spark, embedded broker) with ``--dashboard-port 0``; read
its output until it prints the dashboard's address; while the story runs, the overview shows
the embedded broker up; the demo ends consistent, and the dashboard is gone with it.
"""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import time
import urllib.error
import urllib.request

from tests.integration.conftest import ROOT

DEMO_TIMEOUT_S = 240.0


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


def read_until_url(proc: subprocess.Popen[str], deadline: float) -> tuple[str, list[str]]:
    assert proc.stdout is not None
    seen: list[str] = []
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        while time.monotonic() < deadline and sel.select(timeout=deadline - time.monotonic()):
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            found = re.search(r"dashboard at (http://\S+?)/? ", line)
            if found:
                return found.group(1), seen
    finally:
        sel.close()
    raise AssertionError("the demo printed no dashboard address:\n" + "".join(seen[-40:]))


def test_demo_keeps_a_dashboard_running_during_the_story() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200")
    cmd = [sys.executable, "-m", "txmq.cli", "demo", "--orders", "10", "--no-spark"]
    cmd += ["--dashboard", "--dashboard-port", "0"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        deadline = time.monotonic() + DEMO_TIMEOUT_S
        url, _ = read_until_url(proc, deadline)
        while 'data-state="up"' not in fetch(url + "/"):
            assert time.monotonic() < deadline, "the overview never showed the broker up"
            time.sleep(0.5)  # sleep: polling the page with a bounded deadline
        assert "Transactions" in fetch(url + "/transactions")
        out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out[-3000:]
    assert "CONSISTENT" in out and "INCONSISTENT" not in out
    try:
        fetch(url + "/")
        raise AssertionError("the dashboard outlived the demo")
    except urllib.error.URLError:
        pass  # refused: the dashboard stopped with the demo
