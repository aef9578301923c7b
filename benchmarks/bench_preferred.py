"""After a failover and the old leader's return: throughput with the preferred replica's
hand-back (ADR 0005) against a group that has none, same run.

Each phase: a group of 2 (SYNC 2 of 2, etcd started for the run), r0 on the lower port started
first and leading, then r1; kill -9 of r0, r1 leads, r0 restarted on its data directory. Then
``--threads`` official producers, given both endpoints, send 1 KiB messages for ``--seconds``.
``preferred``: the replicas are named in a cluster file, r0 first, so r0 takes the lead back
once in sync, and the clients (whose pick_first dials the lower, sorted-first address) talk to
the leader. ``none``: the same replicas with ``--replica-group`` alone (no preferred replica,
as before 2026-11-27 late evening): r1 keeps the lead and every call goes through r0, which
forwards it (ADR 0006, "Cost"). Phases alternate ``--rounds`` times; printed per phase:
sends/s, p50/p99 ms, CPU us per send (client, r0, r1), calls forwarded, who led.

Run: ``.venv/bin/python benchmarks/bench_preferred.py [--seconds S] [--threads N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine
from bench_replication import _await_roles, _broker, _free_ports, _load, _status, _stop

from txmq.coordination.cluster_file import ClusterFile, Group, Member, write
from txmq.coordination.etcd_server import start_local_etcd

SETTLE_S = 4.0  # after the roles settled: the old leader's closed port, clients' reconnects


def _args(kind: str, tmp: Path, etcd: str, ports: list[int], rnd: int) -> list[list[str]]:
    """Each replica's flags: named in a cluster file (``preferred``) or by group alone."""
    common = ["--min-insync-replicas", "2"]
    if kind == "none":
        return [
            ["--etcd", etcd, "--replica-group", f"g{rnd}", "--broker-name", f"r{i}", *common]
            for i in range(2)
        ]
    members = tuple(Member(f"r{i}", "127.0.0.1", p) for i, p in enumerate(ports))
    path = tmp / f"cluster-{rnd}.toml"
    write(path, ClusterFile.of_groups(f"c{rnd}", (Group("g", members),), etcd))
    return [["--cluster", str(path), "--broker-name", f"r{i}", *common] for i in range(2)]


def _phase(kind: str, tmp: Path, etcd: str, args: argparse.Namespace, rnd: int) -> tuple:  # type: ignore[type-arg]
    ports = _free_ports(2)
    flags = _args(kind, tmp, etcd, ports, rnd)
    dirs = [tmp / f"{kind}-r{i}-{rnd}" for i in range(2)]
    procs: list[subprocess.Popen[str]] = []
    try:
        eps = []
        for i in range(2):
            proc, ep = _broker(dirs[i], *flags[i], port=ports[i])
            procs.append(proc)
            eps.append(ep)
            _await_roles(eps, ["leader", "follower"][: i + 1])
        _load(eps[0], argparse.Namespace(threads=1, seconds=0.5, txn=False), f"w{rnd}", [])
        procs[0].kill()
        procs[0].wait()
        _await_roles(eps[1:], ["leader"])
        procs[0], _ = _broker(dirs[0], *flags[0], port=ports[0])
        want = ["leader", "follower"] if kind == "preferred" else ["follower", "leader"]
        _await_roles(eps, want)
        time.sleep(SETTLE_S)  # let the clients of the hand-back's closed port settle (see above)
        before = [int(str(_status(e).get("forwarded", 0))) for e in eps]
        got = _load(";".join(eps), args, f"{kind}-{rnd}", [p.pid for p in procs])
        after = [int(str(_status(e).get("forwarded", 0))) for e in eps]
        forwarded = sum(a - b for a, b in zip(after, before, strict=True))
        return (*got, forwarded, want.index("leader"))
    finally:
        _stop(procs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    args.txn = False
    print(machine())
    rates: dict[str, list[float]] = {"preferred": [], "none": []}
    with tempfile.TemporaryDirectory(prefix="txmq-bench-pref-") as d:
        tmp = Path(d)
        etcd_proc, etcd = start_local_etcd(tmp / "etcd")
        try:
            for rnd in range(args.rounds):
                for kind in ("preferred", "none"):
                    ops, p50, p99, cpu, fwd, led = _phase(kind, tmp, etcd, args, rnd)
                    rates[kind].append(ops)
                    us = ", ".join(f"{x:.0f}" for x in cpu[:-1])
                    print(
                        f"round {rnd} {kind:9s} {ops:7.1f} sends/s  p50 {p50:.1f} ms"
                        f"  p99 {p99:.1f} ms  CPU us/send (client, r0, r1) {us}"
                        f"  busy cores {cpu[-1]:.2f}  forwarded {fwd}  leader r{led}",
                        flush=True,
                    )
        finally:
            etcd_proc.terminate()
            etcd_proc.wait(timeout=30)
    ratio = statistics.median(rates["preferred"]) / statistics.median(rates["none"])
    print(f"median sends/s: preferred {statistics.median(rates['preferred']):.1f},"
          f" none {statistics.median(rates['none']):.1f}, ratio {ratio:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
