"""Replication benchmark: SYNC replication with 2 replicas next to a single broker, same run.

Goal (issue 19): a group of 2 replicas with SYNC replication (a write acknowledged once it is
durable on both) keeps at least 60 % of a single broker's throughput. Each phase: ``--threads``
official Producer threads sending 1 KiB messages (``--txn``: begin, half message, commit) for
``--seconds``, at the single broker or at the group's leader; throughput and the p50/p99 of
one acknowledged send (or transaction). Phases alternate ``--rounds`` times, so the ratio holds
on a shared machine even when absolute figures do not. etcd (Debian's etcd-server) is started
for the run in a temporary directory.

Run: ``.venv/bin/python benchmarks/bench_replication.py [--seconds S] [--threads N] [--rounds R]
[--txn]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine
from bench_broker import run_threads, sender

from txmq.broker.etcd_server import start_local_etcd

ROOT = Path(__file__).parents[1]
START_TIMEOUT_S = 60.0
LEAD_TIMEOUT_S = 30.0


def _broker(data_dir: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "txmq.broker", "--data-dir", str(data_dir), "--port", "0",
           "--auto-create-topics", *extra]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    log = data_dir.with_suffix(".log").open("a")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        raise SystemExit(f"broker did not start: {line!r} (see {log.name})")
    return proc, line.strip().rsplit(" ", 1)[1]


def _role(endpoint: str) -> str:
    with grpc.insecure_channel(endpoint) as ch:
        try:
            reply = ch.unary_unary("/txmq.replica.v1.Replica/Status")(b"{}", timeout=2)
        except grpc.RpcError:
            return ""
    (n,) = struct.unpack_from(">I", reply, 0)
    return str(json.loads(reply[4 : 4 + n]).get("role", ""))


def _leader_of(endpoints: list[str]) -> str:
    deadline = time.monotonic() + LEAD_TIMEOUT_S
    while time.monotonic() < deadline:
        roles = {e: _role(e) for e in endpoints}
        if sorted(roles.values()) == ["follower", "leader"]:
            return next(e for e, r in roles.items() if r == "leader")
        time.sleep(0.2)  # polling the replicas' status; no event to wait on
    raise SystemExit("no leader with a follower within the bound")


def _load(endpoint: str, args: argparse.Namespace, tag: str) -> tuple[float, float, float]:
    """(ops/s, p50 ms, p99 ms) of ``args.threads`` producers for ``args.seconds``."""
    topic = f"bench-{tag}"
    senders = [sender(endpoint, topic, args.txn) for _ in range(args.threads)]
    lat: list[list[float]] = [[] for _ in senders]
    senders[0][1](b"warm-up")

    def op(k: int, n: int) -> None:
        t = time.perf_counter()
        senders[k][1](f"{k}-{n}".encode())
        lat[k].append(time.perf_counter() - t)

    try:
        start = time.perf_counter()
        done = run_threads(args.threads, args.seconds, op)
        elapsed = time.perf_counter() - start
    finally:
        for producer, _ in senders:
            producer.shutdown()
    all_ms = sorted(x * 1000 for xs in lat for x in xs)
    p99 = all_ms[min(len(all_ms) - 1, int(len(all_ms) * 0.99))]
    return done / elapsed, statistics.median(all_ms), p99


def _phase(kind: str, tmp: Path, etcd: str, args: argparse.Namespace, rnd: int) -> tuple:  # type: ignore[type-arg]
    procs: list[subprocess.Popen[str]] = []
    try:
        if kind == "single":
            proc, endpoint = _broker(tmp / f"single-{rnd}")
            procs.append(proc)
        else:
            eps = []
            for i in range(2):
                proc, ep = _broker(
                    tmp / f"r{i}-{rnd}", "--etcd", etcd, "--replica-group", f"g{rnd}",
                    "--broker-name", f"r{i}", "--min-insync-replicas", "2",
                )  # fmt: skip
                procs.append(proc)
                eps.append(ep)
            endpoint = _leader_of(eps)
        return _load(endpoint, args, f"{kind}-{rnd}")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--txn", action="store_true", help="transactions instead of plain sends")
    args = ap.parse_args()
    print(machine())
    what = "transactions" if args.txn else "sends"
    with tempfile.TemporaryDirectory(dir=os.environ.get("TXMQ_BENCH_DIR")) as d:
        tmp = Path(d)
        etcd_proc, etcd = start_local_etcd(tmp / "etcd")
        results: dict[str, list[tuple[float, float, float]]] = {"single": [], "sync2": []}
        try:
            for rnd in range(args.rounds):
                for kind in ("single", "sync2"):
                    rate, p50, p99 = _phase(kind, tmp, etcd, args, rnd)
                    results[kind].append((rate, p50, p99))
                    print(f"round {rnd} {kind:<6} {rate:8.1f} {what}/s  p50 {p50:6.2f} ms"
                          f"  p99 {p99:6.2f} ms", flush=True)  # fmt: skip
        finally:
            etcd_proc.terminate()
            etcd_proc.wait(timeout=30)
    ratios = [s[0] / b[0] for s, b in zip(results["sync2"], results["single"], strict=True)]
    print(f"SYNC 2 replicas / single broker throughput: median {statistics.median(ratios):.2f}"
          f" (rounds {', '.join(f'{r:.2f}' for r in ratios)}; goal >= 0.60)")  # fmt: skip
    p99s = [s[2] / b[2] for s, b in zip(results["sync2"], results["single"], strict=True)]
    print(f"SYNC 2 replicas / single broker p99: median {statistics.median(p99s):.2f}")


if __name__ == "__main__":
    main()
