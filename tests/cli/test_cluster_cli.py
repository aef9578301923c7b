"""``txmq cluster up`` / ``cluster status`` and the cluster views of the admin commands, with real
broker processes: one line per broker, the written cluster file, status of every member (and a
member down), per-broker topic and group views, one-line errors for a bad cluster file, and a
clean stop of every broker on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from tests.cli.test_cli import ok, txmq
from tests.cli.test_narrow_tables import assert_whole, narrow
from tests.integration.conftest import ROOT, BrokerProcess, wait_until
from tests.integration.test_cluster import free_ports
from tests.integration.test_data_modes import loose
from txmq.coordination.cluster_file import load


def _lines(proc: subprocess.Popen[str], n: int, timeout_s: float) -> list[str]:
    """The first ``n`` stdout lines, read by a thread (a selector on the pipe would miss lines
    already read ahead into the text buffer) and waited for at most ``timeout_s``."""
    assert proc.stdout is not None
    out: list[str] = []

    def read() -> None:
        for _ in range(n):
            line = proc.stdout.readline() if proc.stdout is not None else ""
            if not line:
                return
            out.append(line.strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    return list(out)


def _two_free_ports(n: int = 2) -> int:
    """A free port whose ``n - 1`` successors are free too (cluster up takes consecutive ports)."""
    for _ in range(50):
        port = free_ports(1)[0]
        try:
            for k in range(1, n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + k))
        except OSError:
            continue
        return port
    raise AssertionError(f"no {n} consecutive free ports in 50 tries")


def test_cluster_up_status_views_and_clean_stop(tmp_path: Path) -> None:
    port = _two_free_ports()
    # A directory others may read: cluster up makes it owner only, and says so.
    (tmp_path / "c").mkdir(mode=0o755)
    (tmp_path / "c").chmod(0o755)
    (tmp_path / "c" / "notes.txt").write_text("ops notes")
    (tmp_path / "c" / "notes.txt").chmod(0o644)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "txmq.cli", "cluster", "up", "--brokers", "2",
           "--data-dir", str(tmp_path / "c"), "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = _lines(proc, 2, 60)
        assert lines == [
            f"txmq broker broker-{i} listening on 127.0.0.1:{port + i}" for i in range(2)
        ], proc.stderr.read() if proc.poll() is not None and proc.stderr else lines
        cluster = load(tmp_path / "c" / "cluster.toml")
        assert [m.name for m in cluster.members] == ["broker-0", "broker-1"]
        ep = ["--endpoints", f"127.0.0.1:{port}"]
        status = json.loads(ok("cluster", "status", "--json", *ep))["members"]
        assert [(m["name"], m["up"]) for m in status] == [("broker-0", True), ("broker-1", True)]
        assert status[0]["data_dir"].endswith("broker-0")
        ok("topic", "create", "views", "--queues", "2", *ep)
        wait_until(
            lambda: (
                len(json.loads(ok("topic", "describe", "views", "--json", *ep))["brokers"]) == 2
            ),
            15,
            "the topic on both brokers",
        )
        ok("send", "views", "hello", "--endpoints", f"127.0.0.1:{port + 1}")
        described = json.loads(ok("topic", "describe", "views", "--json", *ep))
        assert described["brokers"] == ["broker-0", "broker-1"]
        assert len(described["queues"]) == 4
        assert sum(q["max"] for q in described["queues"]) == 1
        ok("consume", "views", "--group", "gv", "--max", "1", "--wait-s", "20", *ep)
        group = json.loads(ok("group", "describe", "gv", "--json", *ep))
        assert group["lag"] == 0 and {b["broker"] for b in group["brokers"]} <= {
            "broker-0", "broker-1"}  # fmt: skip
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    stderr = proc.stderr.read() if proc.stderr else ""
    assert code == 0, stderr
    said = "took group and other permissions away from 1 directory and 1 file"
    assert f"txmq cluster: {tmp_path / 'c'}: {said}" in stderr, stderr
    assert loose(tmp_path / "c") == []  # the brokers' data, their logs, the cluster file
    # Every broker stopped cleanly: its data directory is free and has no abort marker.
    r = txmq("cluster", "status", "--endpoints", f"127.0.0.1:{port}")
    assert r.returncode == 3 and r.stderr.startswith("txmq: ")


def test_broker_with_a_bad_cluster_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[cluster]\nname = "x"\n[[broker]]\nname = "a"\nendpoint = "nope"\n')
    r = txmq("broker", "--data-dir", str(tmp_path / "d"), "--cluster", str(bad))
    assert r.returncode == 2
    assert r.stderr.startswith("txmq: ") and "HOST:PORT" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = txmq("broker", "--data-dir", str(tmp_path / "d"), "--cluster", str(bad.with_name("no")))
    assert r.returncode == 2 and "cannot read cluster file" in r.stderr


def test_demo_on_a_two_broker_cluster_is_consistent(tmp_path: Path) -> None:
    """The demo's story (kill -9 of an order service, check-back, lost acks, DLQ) on an embedded
    cluster of 2 brokers: every consistency check holds across both brokers."""
    r = txmq("demo", "--brokers", "2", "--orders", "40", "--no-spark", "--work-dir", str(tmp_path))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "starting an embedded cluster of 2 brokers" in r.stdout
    assert "CONSISTENT" in r.stdout and "INCONSISTENT" not in r.stdout


def test_a_member_down_exits_1_in_status_and_at_the_stop(tmp_path: Path) -> None:
    """The exit codes `cluster status` and `cluster up` document: status answers 1 while a
    member is down (its table, at 80 columns, shows it DOWN with every name and endpoint whole);
    `cluster up` exits 1 at SIGTERM when one of its brokers died before."""
    port = _two_free_ports()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "txmq.cli", "cluster", "up", "--brokers", "2",
           "--data-dir", str(tmp_path / "c"), "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    endpoints = [f"127.0.0.1:{port + i}" for i in range(2)]
    try:
        assert len(_lines(proc, 2, 60)) == 2, proc.stderr.read() if proc.poll() else ""
        ep = ["--endpoints", endpoints[0]]
        assert_whole(narrow("cluster", "status", *ep), ["broker-0", "broker-1", *endpoints])
        # The lock file of a running broker holds its process id.
        pid = int((tmp_path / "c" / "broker-1" / "broker.lock").read_text())
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: txmq("cluster", "status", *ep).returncode == 1, 15, "broker-1 seen down")
        down = txmq("cluster", "status", *ep, env={"COLUMNS": "80"})
        assert down.returncode == 1 and "…" not in down.stdout
        assert_whole(down.stdout, ["broker-1", endpoints[1], "DOWN"])
        members = json.loads(txmq("cluster", "status", "--json", *ep).stdout)["members"]
        assert [(m["name"], m["up"]) for m in members] == [("broker-0", True), ("broker-1", False)]
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    stderr = proc.stderr.read() if proc.stderr else ""
    assert code == 1, stderr
    assert "txmq: broker broker-1 exited with code -9" in stderr


def test_cluster_up_refuses_a_single_brokers_data_directory(broker: BrokerProcess) -> None:
    """A directory holding one broker's store: `cluster up` there would serve none of its
    topics (its brokers live in broker-<i>/ beside it), so it refuses in one line, exit 2,
    and creates nothing."""
    ok("topic", "create", "orders", "--endpoints", broker.endpoints)
    broker.stop()
    single = broker.data_dir
    before = sorted(p.name for p in single.iterdir())
    r = txmq("cluster", "up", "--data-dir", str(single))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("txmq: "), r.stderr
    assert "single broker's data" in lines[0] and str(single) in lines[0]
    assert sorted(p.name for p in single.iterdir()) == before
