"""``txmq cluster up --replicas 2`` (a local etcd and two replica processes) and the replica view
of ``txmq cluster status``: one leader, one follower, both in sync, the epoch and lags; a
missing etcd binary is one line naming Debian's package."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.cli.test_cli import ok, txmq
from tests.cli.test_cluster_cli import _lines, _two_free_ports
from tests.integration.conftest import ROOT, wait_until
from tests.integration.etcd_fixtures import ensure_etcd


def _replicas(port: int) -> list[dict[str, object]]:
    eps = f"127.0.0.1:{port};127.0.0.1:{port + 1}"
    r = txmq("cluster", "status", "--json", "--endpoints", eps)
    if r.returncode != 0:
        return []
    rows: list[dict[str, object]] = json.loads(r.stdout)["replicas"]
    return rows


def test_cluster_up_with_replicas_and_status(tmp_path: Path) -> None:
    ensure_etcd()
    port = _two_free_ports()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "txmq.cli", "cluster", "up", "--brokers", "1", "--replicas",
           "2", "--data-dir", str(tmp_path / "c"), "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = _lines(proc, 3, 60)
        assert lines[0].startswith("txmq etcd listening on 127.0.0.1:"), lines
        assert lines[1:] == [
            f"txmq broker replica-{i} listening on 127.0.0.1:{port + i}" for i in range(2)
        ], lines

        def settled() -> bool:
            rows = _replicas(port)
            roles = sorted(str(r.get("role")) for r in rows)
            leaders = [r for r in rows if r.get("role") == "leader"]
            return roles == ["follower", "leader"] and len(leaders[0]["in_sync"]) == 2  # type: ignore[arg-type]

        wait_until(settled, 30, "a leader with its follower in sync")
        rows = _replicas(port)
        leader = next(r for r in rows if r["role"] == "leader")
        follower = next(r for r in rows if r["role"] == "follower")
        assert follower["leader"] == leader["name"] and follower["epoch"] == leader["epoch"]
        assert int(str(leader["epoch"])) > 0
        at_leader = ["--endpoints", str(leader["endpoint"])]
        refused = txmq("topic", "create", "t", "--endpoints", str(follower["endpoint"]))
        assert refused.returncode == 1
        assert f"the leader is {leader['name']} at {leader['endpoint']}" in refused.stderr
        ok("topic", "create", "t", "--queues", "2", *at_leader)
        ok("send", "t", "hello", *at_leader)  # SYNC: acknowledged once on both replicas

        def caught_up() -> bool:
            ends = {str(r["name"]): r["end"] for r in _replicas(port)}
            return len(set(ends.values())) == 1 and ends[str(leader["name"])] != leader["end"]

        wait_until(caught_up, 10, "the follower at the leader's end")
        table = ok("cluster", "status", "--endpoints", f"127.0.0.1:{port};127.0.0.1:{port + 1}")
        assert "leader" in table and "follower" in table and "in sync" in table
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, proc.stderr.read() if proc.stderr else ""


def test_cluster_up_replicas_without_etcd_names_the_package(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    r = txmq(
        "cluster", "up", "--replicas", "2", "--data-dir", str(tmp_path / "c"),
        env={"PATH": str(bindir)},
    )  # fmt: skip
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("txmq: etcd is not installed"), r.stderr
    assert "etcd-server" in lines[0]
