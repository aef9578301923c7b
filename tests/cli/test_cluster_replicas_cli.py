"""``txmq cluster up --brokers 2 --replicas 2`` (a local etcd, two groups of two replica
processes) and the replica view of ``txmq cluster status``: in each group one leader, one
follower, both in sync, the epoch and lags, every replica listed when one endpoint is given; a
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
from tests.cli.test_narrow_tables import assert_whole, narrow
from tests.integration.conftest import ROOT, wait_until
from tests.integration.test_data_modes import loose


def _replicas(port: int) -> list[dict[str, object]]:
    # One endpoint: the status finds every replica of every group through it.
    r = txmq("cluster", "status", "--json", "--endpoints", f"127.0.0.1:{port + 1}")
    if r.returncode != 0:
        return []
    rows: list[dict[str, object]] = json.loads(r.stdout)["replicas"]
    return rows


def test_cluster_up_with_replicas_and_status(etcd_binary: Path, tmp_path: Path) -> None:
    port = _two_free_ports(4)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "txmq.cli", "cluster", "up", "--brokers", "2", "--replicas",
           "2", "--data-dir", str(tmp_path / "c"), "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        # Bounded wait for etcd and four broker processes to listen: with other suites on the
        # same 2 cores (load 15-25) 60 s saw only etcd and one broker; idle, it takes ~10 s.
        lines = _lines(proc, 5, 150)
        assert lines[0].startswith("txmq etcd listening on 127.0.0.1:"), lines
        assert lines[1:] == [
            f"txmq broker replica-{k} listening on 127.0.0.1:{port + k}" for k in range(4)
        ], lines

        def settled() -> bool:
            rows = _replicas(port)
            roles = sorted((str(r.get("group")), str(r.get("role"))) for r in rows)
            leaders = [r for r in rows if r.get("role") == "leader"]
            return roles == [
                ("group-0", "follower"), ("group-0", "leader"),
                ("group-1", "follower"), ("group-1", "leader"),
            ] and all(len(r["in_sync"]) == 2 for r in leaders)  # type: ignore[arg-type]  # fmt: skip

        wait_until(settled, 30, "a leader with its follower in sync in each group")
        rows = _replicas(port)
        assert [r["name"] for r in rows] == [f"replica-{k}" for k in range(4)]
        # Each group's first replica (lowest port, where the Python client connects) leads.
        assert sorted(str(r["name"]) for r in rows if r["role"] == "leader") == [
            "replica-0",
            "replica-2",
        ], rows
        for group in ("group-0", "group-1"):
            leader = next(r for r in rows if r["role"] == "leader" and r["group"] == group)
            follower = next(r for r in rows if r["role"] == "follower" and r["group"] == group)
            assert follower["leader"] == leader["name"] and follower["epoch"] == leader["epoch"]
            assert int(str(leader["epoch"])) > 0
        leader = next(r for r in rows if r["role"] == "leader" and r["group"] == "group-0")
        follower = next(r for r in rows if r["role"] == "follower" and r["group"] == "group-0")
        refused = txmq("topic", "create", "t", "--endpoints", str(follower["endpoint"]))
        assert refused.returncode == 1
        assert f"the leader is {leader['name']} at {leader['endpoint']}" in refused.stderr
        every = ";".join(f"127.0.0.1:{port + k}" for k in range(4))
        ok("topic", "create", "t", "--queues", "2", "--endpoints", every)  # skips followers
        ok("send", "t", "hello", "--endpoints", str(leader["endpoint"]))  # SYNC: on both

        before = sum(int(str(r["end"])) for r in rows)

        def caught_up() -> bool:
            now = _replicas(port)
            ends = {g: {r["end"] for r in now if r["group"] == g} for g in ("group-0", "group-1")}
            moved = sum(int(str(r["end"])) for r in now) > before
            return moved and all(len(e) == 1 for e in ends.values())

        wait_until(caught_up, 10, "each follower at its leader's end")
        # At 80 columns every group, replica and endpoint is there whole.
        table = narrow("cluster", "status", "--endpoints", f"127.0.0.1:{port}")
        assert "leader" in table and "follower" in table and "in sync" in table
        assert_whole(table, ["group-0", "group-1", *(str(r["name"]) for r in rows)])
        assert_whole(table, [str(r["endpoint"]) for r in rows])
        # Each group's first replica is its preferred one (broker/leadership/preferred.py), said
        # by every replica of the group.
        assert {(r["name"], r.get("preferred")) for r in _replicas(port)} == {
            ("replica-0", "replica-0"), ("replica-1", "replica-0"),
            ("replica-2", "replica-2"), ("replica-3", "replica-2"),
        }  # fmt: skip
        wide = narrow("cluster", "status", "--endpoints", f"127.0.0.1:{port}", wide=True)
        assert "preferred" in wide and "epoch" in wide, wide
        assert_whole(wide, [str(r["endpoint"]) for r in rows])
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, proc.stderr.read() if proc.stderr else ""
    # Owner only: the replicas' data and logs, the cluster file, the local etcd's data and log.
    assert (tmp_path / "c" / "etcd" / "etcd.log").is_file()
    assert loose(tmp_path / "c") == []


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
