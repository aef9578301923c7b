"""Replication benchmark: SYNC replication with 2 replicas next to a single broker, same run.

Goal: a group of 2 replicas with SYNC replication (a write acknowledged once it is
durable on both) keeps at least 60 % of a single broker's throughput. Each phase: ``--threads``
official Producer threads sending 1 KiB messages (``--txn``: begin, half message, commit) for
``--seconds``, at the single broker or at the group's leader; throughput and the p50/p99 of
one acknowledged send (or transaction). Phases alternate ``--rounds`` times, so the ratio holds
on a shared machine even when absolute figures do not. etcd (Debian's etcd-server) is started
for the run in a temporary directory. The official Python client dials a group's route (both
replicas) as one gRPC target with the addresses sorted, and gRPC's pick_first stays on the
first that accepts (ADR 0006): the group is started with r0 on the lower port and leading
before r1 starts (as ``txmq cluster up`` does), so the client talks to the leader.
Before
(2026-11-27), ports were the kernel's and a phase whose follower had the lower port, and whose
leader had read r1's registration before the client's first route query, went through the
follower, which forwarded every call (~3x its CPU per send). A phase the follower still
forwarded in prints its forwarded calls, and the ratios are printed again without those rounds.

Run: ``.venv/bin/python benchmarks/bench_replication.py [--seconds S] [--threads N] [--rounds R]
[--txn] [--baseline-src DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine
from _procstat import counters, machine_busy_s
from bench_broker import run_threads, sender

from txmq.coordination.etcd_server import start_local_etcd

ROOT = Path(__file__).parents[1]
START_TIMEOUT_S = 60.0
LEAD_TIMEOUT_S = 30.0


def _broker(
    data_dir: Path, *extra: str, src: Path = ROOT / "src", port: int = 0
) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "txmq.broker", "--data-dir", str(data_dir), "--port", str(port),
           "--auto-create-topics", *extra]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(src))
    log = data_dir.with_suffix(".log").open("a")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        raise SystemExit(f"broker did not start: {line!r} (see {log.name})")
    return proc, line.strip().rsplit(" ", 1)[1]


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free ports, ascending (held open together so none repeats)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return sorted(s.getsockname()[1] for s in socks)


def _status(endpoint: str) -> dict[str, object]:
    with grpc.insecure_channel(endpoint) as ch:
        try:
            reply = ch.unary_unary("/txmq.replica.v1.Replica/Status")(b"{}", timeout=2)
        except grpc.RpcError:
            return {}
    (n,) = struct.unpack_from(">I", reply, 0)
    return dict(json.loads(reply[4 : 4 + n]))


def _role(endpoint: str) -> str:
    return str(_status(endpoint).get("role", ""))


def _cpu(pids: list[int]) -> list[float]:
    """CPU seconds so far of each process (every thread, /proc), then of the machine."""
    return [counters(p).cpu_s for p in pids] + [machine_busy_s()]


def _await_roles(endpoints: list[str], roles: list[str]) -> None:
    """Return once each of ``endpoints`` has the role at the same place in ``roles``."""
    deadline = time.monotonic() + LEAD_TIMEOUT_S
    while time.monotonic() < deadline:
        if [_role(e) for e in endpoints] == roles:
            return
        time.sleep(0.2)  # polling the replicas' status; no event to wait on
    raise SystemExit(f"{endpoints} are not {roles} within the bound")


def _load(
    endpoint: str, args: argparse.Namespace, tag: str, pids: list[int]
) -> tuple[float, float, float, list[float]]:
    """(ops/s, p50 ms, p99 ms, CPU us per op of this client, of each of ``pids`` and busy
    cores of the machine) of ``args.threads`` producers for ``args.seconds``."""
    topic = f"bench-{tag}"
    senders = [sender(endpoint, topic, args.txn) for _ in range(args.threads)]
    lat: list[list[float]] = [[] for _ in senders]
    senders[0][1](b"warm-up")

    def op(k: int, n: int) -> None:
        t = time.perf_counter()
        senders[k][1](f"{k}-{n}".encode())
        lat[k].append(time.perf_counter() - t)

    watched = [os.getpid(), *pids]
    try:
        before = _cpu(watched)
        start = time.perf_counter()
        done = run_threads(args.threads, args.seconds, op)
        elapsed = time.perf_counter() - start
        after = _cpu(watched)
    finally:
        for producer, _ in senders:
            producer.shutdown()
    all_ms = sorted(x * 1000 for xs in lat for x in xs)
    p99 = all_ms[min(len(all_ms) - 1, int(len(all_ms) * 0.99))]
    used = [a - b for a, b in zip(after, before, strict=True)]
    cpu = [u * 1e6 / max(1, done) for u in used[:-1]] + [used[-1] / elapsed]
    return done / elapsed, statistics.median(all_ms), p99, cpu


def _phase(kind: str, tmp: Path, etcd: str, args: argparse.Namespace, rnd: int) -> tuple:  # type: ignore[type-arg]
    procs: list[subprocess.Popen[str]] = []
    try:
        if kind == "single":
            proc, endpoint = _broker(tmp / f"single-{rnd}")
            procs.append(proc)
        else:
            eps = []
            src = Path(args.baseline_src) / "src" if kind == "base2" else ROOT / "src"
            # As `txmq cluster up` starts a group: r0 on the lower port leads before r1 starts,
            # so the client's pick_first (sorted addresses, ADR 0006) dials the leader.
            for i, port in enumerate(_free_ports(2)):
                proc, ep = _broker(
                    tmp / f"{kind}-r{i}-{rnd}", "--etcd", etcd, "--replica-group",
                    f"{kind}-g{rnd}", "--broker-name", f"r{i}", "--min-insync-replicas", "2",
                    src=src, port=port,
                )  # fmt: skip
                procs.append(proc)
                eps.append(ep)
                _await_roles(eps, ["leader", "follower"][: i + 1])
            endpoint, follower = eps
            got = _load(endpoint, args, f"{kind}-{rnd}", [p.pid for p in procs])
            # Calls the follower forwarded to the leader (ADR 0006), a hop more per send:
            # counted, so a phase that went through the follower is seen.
            return (*got, int(str(_status(follower).get("forwarded", 0))))
        return (*_load(endpoint, args, f"{kind}-{rnd}", [p.pid for p in procs]), 0)
    finally:
        _stop(procs)


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    """Stop the phase's brokers (SIGTERM to all, then wait for each: they stop together)."""
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
    ap.add_argument(
        "--baseline-src",
        help="also run SYNC 2 with the brokers of this source tree (its src/) each round: an A/B"
        " of a change in the same run (phase base2)",
    )
    args = ap.parse_args()
    print(machine())
    what = "transactions" if args.txn else "sends"
    with tempfile.TemporaryDirectory(dir=os.environ.get("TXMQ_BENCH_DIR")) as d:
        tmp = Path(d)
        etcd_proc, etcd = start_local_etcd(tmp / "etcd")
        kinds = ("single", "sync2", "base2") if args.baseline_src else ("single", "sync2")
        results: dict[str, list[tuple[float, float, float]]] = {k: [] for k in kinds}
        forwarding: set[int] = set()  # rounds with a SYNC 2 phase the follower forwarded
        try:
            for rnd in range(args.rounds):
                # base2 before sync2 in odd rounds: neither always runs on a warmer machine
                for kind in kinds if rnd % 2 == 0 else (kinds[0], *reversed(kinds[1:])):
                    rate, p50, p99, cpu, forwarded = _phase(kind, tmp, etcd, args, rnd)
                    results[kind].append((rate, p50, p99))
                    if forwarded:
                        forwarding.add(rnd)
                    names = ["client", "broker"] if kind == "single" else [
                        "client", "leader", "follower"]  # fmt: skip
                    used = ", ".join(f"{n} {c:.0f}" for n, c in zip(names, cpu, strict=False))
                    print(f"round {rnd} {kind:<6} {rate:8.1f} {what}/s  p50 {p50:6.2f} ms"
                          f"  p99 {p99:6.2f} ms  CPU us/op: {used}; machine busy"
                          f" {cpu[-1]:.2f} cores"
                          + (f"; forwarded by the follower {forwarded}" if forwarded else ""),
                          flush=True)  # fmt: skip
        finally:
            etcd_proc.terminate()
            etcd_proc.wait(timeout=30)
    ratios = [s[0] / b[0] for s, b in zip(results["sync2"], results["single"], strict=True)]
    print(f"SYNC 2 replicas / single broker throughput: median {statistics.median(ratios):.2f}"
          f" (rounds {', '.join(f'{r:.2f}' for r in ratios)}; goal >= 0.60)")  # fmt: skip
    direct = [r for i, r in enumerate(ratios) if i not in forwarding]
    if forwarding and direct:
        print(f"  the same over the {len(direct)} rounds no follower forwarded in: median"
              f" {statistics.median(direct):.2f}")  # fmt: skip
    p99s = [s[2] / b[2] for s, b in zip(results["sync2"], results["single"], strict=True)]
    print(f"SYNC 2 replicas / single broker p99: median {statistics.median(p99s):.2f}")
    if args.baseline_src:
        base = [b[0] / s[0] for b, s in zip(results["base2"], results["single"], strict=True)]
        ab = [s[0] / b[0] for s, b in zip(results["sync2"], results["base2"], strict=True)]
        print(f"baseline SYNC 2 / single broker throughput: median {statistics.median(base):.2f}"
              f" (rounds {', '.join(f'{r:.2f}' for r in base)})")  # fmt: skip
        print(f"SYNC 2 / baseline SYNC 2 throughput: median {statistics.median(ab):.2f}"
              f" (rounds {', '.join(f'{r:.2f}' for r in ab)})")  # fmt: skip
        clean = [r for i, r in enumerate(ab) if i not in forwarding]
        if forwarding and clean:
            print(f"  the same over the {len(clean)} rounds no follower forwarded in: median"
                  f" {statistics.median(clean):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
