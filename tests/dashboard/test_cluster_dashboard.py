"""The dashboard on a cluster: given one member, it finds the others (ClusterInfo), shows each
up on the overview, and reads a page from the member chosen with ``?member=``.

Method: ``txmq cluster up --brokers 2``, a dashboard given broker-0 only, Debian's Chromium.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.cli.test_cluster_cli import _lines, _two_free_ports
from tests.dashboard.conftest import artifacts_dir
from tests.dashboard.test_browser import reload_until
from tests.integration.conftest import ROOT
from txmq.client.admin import call
from txmq.dashboard.background import dashboard_process


def test_one_member_given_every_member_shown(tmp_path: Path, browser: Any) -> None:
    port = _two_free_ports()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "txmq.cli", "cluster", "up", "--brokers", "2"]
    cmd += ["--data-dir", str(tmp_path / "c"), "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert len(_lines(proc, 2, 60)) == 2, "the cluster did not start"
        first, second = f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"
        call(first, "TopicCreate", {"name": "spread", "queues": 2})
        log = tmp_path / "dashboard.log"
        with dashboard_process(first, log=log, extra_args=("--sample-ms", "500")) as url:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            reload_until(page, url + "/", f"section[data-member='{second}']", "broker-1 found")
            reload_until(page, url + "/", "[data-state=up] >> nth=1", "both members up")
            page.screenshot(path=str(artifacts_dir() / "overview-cluster.png"), full_page=True)
            page.goto(f"{url}/topics?member={second}")
            assert "spread" in page.inner_text("#topics")
            assert page.locator("#member-choice option[selected]").inner_text() == second
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
