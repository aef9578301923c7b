"""Replica groups benchmark: how long ``txmq cluster up --brokers N --replicas R`` takes to start,
and how long a failover inside a multi-group cluster takes to show in every route.

Goal: a follower leads within 10 s of its leader's death, and every live member
knows the current leaders. Each run: ``cluster up`` (a local etcd and N x R
replicas) in a fresh directory; times to its last "listening" line and until every group has a
leader (``cluster status``); then the leader of group-0 is killed with SIGKILL and the time
until every live replica of both groups names another replica as group-0's leader (ClusterInfo,
the view admin calls and the Spark source use; routes list every replica of a group, ADR 0006)
is measured; last, the cluster is stopped with SIGTERM (the killed replica makes its exit code 1).

Run: ``.venv/bin/python benchmarks/bench_groups.py [--runs K] [--brokers N] [--replicas R]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine

from txmq.client.admin import call
from txmq.errors import TxmqError

ROOT = Path(__file__).parents[1]
WAIT_S_MAX = 60.0
POLL_S = 0.05


def consecutive_ports(n: int) -> int:
    """A base port such that base..base+n-1 are all free now (cluster up takes them in a row)."""
    for base in random.sample(range(20_000, 60_000, 64), 50):
        held: list[socket.socket] = []
        try:
            for k in range(n):
                held.append(socket.socket())
                held[-1].bind(("127.0.0.1", base + k))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports in 50 tries")


def leader_seen(endpoint: str, group: str) -> str | None:
    """The endpoint where the replica at ``endpoint`` says ``group`` is served now (its
    ClusterInfo: the leader it read from etcd), or None when it does not answer."""
    try:
        info = call(endpoint, "ClusterInfo", {}, timeout_s=1.0)
    except TxmqError:
        return None
    return next((str(m["endpoint"]) for m in info["members"] if m["name"] == group), None)


def txmq(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "txmq.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)


def leaders(endpoint: str, groups: int) -> dict[str, str]:
    """Group -> its leader's endpoint once every group has one (bounded by WAIT_S_MAX)."""
    deadline = time.monotonic() + WAIT_S_MAX
    while time.monotonic() < deadline:
        r = txmq("cluster", "status", "--json", "--endpoints", endpoint)
        rows = json.loads(r.stdout)["replicas"] if r.stdout.strip() else []
        found = {str(x["group"]): str(x["endpoint"]) for x in rows if x.get("role") == "leader"}
        if len(found) == groups:
            return found
    raise RuntimeError("not every group got a leader")


def wait(condition: object, what: str) -> float:
    """Seconds until ``condition()`` holds (bounded by WAIT_S_MAX)."""
    start = time.monotonic()
    while time.monotonic() - start < WAIT_S_MAX:
        if condition():  # type: ignore[operator]
            return time.monotonic() - start
        time.sleep(POLL_S)  # sleep: polling other processes' routes; no event to wait on
    raise RuntimeError(f"timed out waiting for {what}")


def one_run(groups: int, replicas: int, root: Path) -> dict[str, float]:
    port = consecutive_ports(groups * replicas)
    endpoints = [f"127.0.0.1:{port + k}" for k in range(groups * replicas)]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "txmq.cli", "cluster", "up", "--brokers", str(groups),
           "--replicas", str(replicas), "--data-dir", str(root), "--port", str(port)]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        for _ in range(groups * replicas + 1):  # etcd's line, then one per replica
            proc.stdout.readline()
        out = {"listening_s": time.monotonic() - t0}
        led = leaders(endpoints[0], groups)
        out["led_s"] = time.monotonic() - t0
        old = led["group-0"]
        others = [e for e in endpoints if e != old]
        wait(lambda: all(leader_seen(e, "group-0") == old for e in others), "every view")
        port = old.rsplit(":", 1)[1]
        pid = subprocess.run(["pgrep", "-f", "--", f"--port {port} "], capture_output=True,
                             text=True, check=True).stdout.split()[0]  # fmt: skip
        os.kill(int(pid), signal.SIGKILL)
        out["failover_s"] = wait(
            lambda: all(leader_seen(e, "group-0") not in (None, old) for e in others),
            "every live replica to name group-0's new leader",
        )
    finally:
        stopping = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=WAIT_S_MAX)
    out["stop_s"] = time.monotonic() - stopping
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--brokers", type=int, default=2, help="groups")
    ap.add_argument("--replicas", type=int, default=2)
    a = ap.parse_args()
    print(f"# {machine()}, load {os.getloadavg()[0]:.2f}")
    for i in range(a.runs):
        with tempfile.TemporaryDirectory(prefix="bench-groups-") as tmp:
            r = one_run(a.brokers, a.replicas, Path(tmp) / "c")
        print(
            f"{a.brokers}x{a.replicas} run {i}: listening lines {r['listening_s']:.2f} s, "
            f"every group led {r['led_s']:.2f} s, every live replica names group-0's new "
            f"leader {r['failover_s']:.2f} s after kill -9, stop {r['stop_s']:.2f} s",
            flush=True,
        )
    print(f"# load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
