"""Replicas while etcd is down: no busy retries, a quiet log, leadership back when it returns.

Three replicas (SYNC, min_insync_replicas 2) on an etcd of this test's own, which is stopped
(connections refused: the case that made a replica call lease/grant again at once, forever)
and later restarted on the same port and data. While it is down, every replica's CPU time
(/proc/PID/stat, all threads) over a window stays under a small share of one core, and its
log grows by a few lines only (repeated identical errors are logged once per interval, with
a count). Once etcd is back a replica leads again and the official producer is acknowledged.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from rocketmq.grpc_protocol import definition_pb2 as pb

from tests.integration.conftest import wait_until
from tests.integration.faults import cpu_seconds, line_count
from tests.integration.test_replication import _send_raw, leader_of, replica_group, status
from txmq.coordination.etcd_server import start_local_etcd, wait_ready

NAMES = ("r0", "r1", "r2")
WINDOW_S = 5.0
# An idle replica here spends ~1-2 % of a core (its timers); a busy retry loop spent 70-78 %.
CPU_SHARE_MAX = 0.15
LOG_LINES_MAX = 15  # per replica over the window (7 at most, seen)
BACK_S = 20.0


def test_replicas_stay_idle_while_etcd_is_down_and_lead_again_when_it_returns(
    etcd_binary: Path, tmp_path: Path
) -> None:
    etcd_proc, endpoint = start_local_etcd(tmp_path / "etcd")
    group = replica_group(tmp_path, endpoint, "outage", NAMES, 2)
    try:
        leader, _ = leader_of(group)
        wait_until(lambda: _send_raw(leader.endpoints, "o", b"before", "0A")[0] == pb.OK, 20,
                   "an ack before the outage")  # fmt: skip
        etcd_proc.terminate()
        etcd_proc.wait(timeout=30)
        # The leader's lease lapses by its own clock (2.25 s): then no replica leads.
        wait_until(lambda: all(status(b.endpoints).get("role") != "leader" for b in group),
                   10, "no leader while etcd is down")  # fmt: skip
        pids = {b.data_dir.name: b.proc.pid for b in group if b.proc is not None}
        cpu0 = {n: cpu_seconds(p) for n, p in pids.items()}
        lines0 = {b.data_dir.name: line_count(b.log_path) for b in group}
        start = time.monotonic()
        time.sleep(WINDOW_S)  # sleep: the measurement window itself
        took = time.monotonic() - start
        share = {n: (cpu_seconds(p) - cpu0[n]) / took for n, p in pids.items()}
        grown = {b.data_dir.name: line_count(b.log_path) - lines0[b.data_dir.name] for b in group}
        print(f"etcd down {took:.1f} s: CPU share {share}, log lines {grown}")
        with open(tmp_path / "etcd" / "etcd.log", "ab") as log:
            etcd_proc = subprocess.Popen(etcd_proc.args, stdout=log, stderr=log)
        wait_ready(endpoint, etcd_proc)
        back = time.monotonic()
        wait_until(lambda: any(status(b.endpoints).get("role") == "leader" for b in group),
                   BACK_S, "a leader once etcd is back")  # fmt: skip
        leader, _ = leader_of(group)
        wait_until(lambda: _send_raw(leader.endpoints, "o", b"after", "0B")[0] == pb.OK, 20,
                   "an ack after the outage")  # fmt: skip
        print(f"acknowledging again {time.monotonic() - back:.1f} s after etcd returned")
        assert max(share.values()) < CPU_SHARE_MAX, share
        assert max(grown.values()) <= LOG_LINES_MAX, (grown, group[0].log_tail(30))
    finally:
        for b in group:
            if b.running:
                b.stop()
        if etcd_proc.poll() is None:
            etcd_proc.terminate()
            etcd_proc.wait(timeout=30)
