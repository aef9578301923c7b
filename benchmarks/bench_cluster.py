"""Cluster benchmark: broker CPU per transaction with 1 and with 2 brokers (``txmq cluster up``),
throughput on this machine, and a projection for a 16-core machine.

Goal (issue 18): a cluster must not make a transaction dearer. Broker CPU per transaction with 2
brokers must stay within 10 % of 1 broker's, so throughput scales with the cores given to
brokers. Each phase: official Producer threads (begin, send the half message, commit) given every
member's endpoint (``H:P1;H:P2``), and a SimpleConsumer process receiving and acking everything
(bench_broker.consumer_main). CPU is every process of the ``cluster up`` tree (the brokers and
their supervisor), from the first send after a warm-up (every producer thread sending for
WARMUP_S, received by the consumer, not counted) until the consumer has everything (bounded).
The 1- and 2-broker phases alternate ``--rounds`` times in one run, so their ratio holds on a
shared machine even when absolute figures do not.

Projection (printed, labelled as such, not measured): with B brokers on B free cores, each
broker spends the measured CPU per transaction, so the brokers' ceiling is
B x 1000 / (broker ms per transaction) txn/s; with the clients on the same machine each
transaction also costs the producer's and consumer's measured CPU.

Run: ``.venv/bin/python benchmarks/bench_cluster.py [--seconds S] [--threads N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine
from bench_broker import KEY_BYTES, consumer_main, run_threads, sender
from peers._base import tree_cpu_seconds

ROOT = Path(__file__).parents[1]
DRAIN_S_MAX = 15.0
START_TIMEOUT_S = 60.0
PROJECTED_CORES = 16
# Window over which the idle cluster's CPU is measured (consumer polling, background loops).
IDLE_S = 3.0
# Load before the measured window (not counted), so both phases start warm.
WARMUP_S = 1.5


@dataclass
class Phase:
    brokers: int
    rate: float  # transactions per second
    broker_ms: float  # CPU per transaction, all brokers together
    producer_ms: float
    consumer_ms: float
    received: int
    sent: int
    idle_ms_per_s: float = 0.0  # the cluster's CPU with no traffic (background loops, probes)


def free_port_run(n: int) -> int:
    """A port P with P..P+n-1 free (cluster up takes consecutive ports)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + n > 65535:
            continue
        try:
            for p in range(port, port + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise SystemExit(f"no {n} consecutive free ports")


def cluster_up(n: int, data_dir: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``txmq cluster up --brokers n``; (process, "H:P1;H:P2...")."""
    port = free_port_run(n)
    cmd = [sys.executable, "-m", "txmq.cli", "cluster", "up", "--brokers", str(n),
           "--data-dir", data_dir, "--port", str(port)]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    endpoints: list[str] = []

    def read() -> None:  # a thread: a selector would miss lines read ahead into the buffer
        for _ in range(n):
            line = proc.stdout.readline() if proc.stdout is not None else ""
            if "listening on" not in line:
                return
            endpoints.append(line.strip().rsplit(" ", 1)[1])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(START_TIMEOUT_S)
    if len(endpoints) < n:
        proc.kill()
        raise SystemExit(f"cluster up --brokers {n} did not start ({endpoints})")
    return proc, ";".join(endpoints)


def phase(n: int, threads: int, seconds: float, base_dir: str) -> Phase:
    with tempfile.TemporaryDirectory(dir=base_dir) as d:
        up, endpoints = cluster_up(n, d)
        try:
            return _measure(n, up.pid, endpoints, threads, seconds)
        finally:
            up.send_signal(signal.SIGTERM)
            up.wait(60)


def create_topic(endpoints: str, topic: str) -> None:
    """A transaction topic with 4 queues per broker, present on every member before sending."""
    from txmq.client.admin import call

    first = endpoints.split(";")[0]
    call(first, "TopicCreate", {"name": topic, "queues": 4, "type": "transaction"})
    deadline = time.monotonic() + START_TIMEOUT_S
    for member in endpoints.split(";"):
        while time.monotonic() < deadline:
            names = {t["name"] for t in call(member, "TopicDefinitions", {})["topics"]}
            if topic in names:
                break
            time.sleep(0.1)  # polling the member's topic list, bounded by START_TIMEOUT_S
        else:
            raise SystemExit(f"topic {topic} did not reach {member}")


def _measure(n: int, up_pid: int, endpoints: str, threads: int, seconds: float) -> Phase:
    topic = f"bench-cluster-{n}"
    create_topic(endpoints, topic)
    ctx = mp.get_context("spawn")  # gRPC does not survive fork
    ready, stop, count, out = ctx.Event(), ctx.Event(), ctx.Value("l", 0), ctx.Queue()
    reader = ctx.Process(target=consumer_main, args=(endpoints, topic, ready, stop, count, out))
    reader.start()
    producer, send = sender(endpoints, topic, True)
    if not ready.wait(60):
        reader.kill()
        raise SystemExit("the consumer process did not start")

    def produce(k: int, i: int) -> None:
        send(f"{k}-{i}|".encode().ljust(KEY_BYTES, b"."))

    # Warm-up, not measured: every producer thread sends for WARMUP_S, so every queue of every
    # broker has been written, read and acked (routes, channels, sessions, first-call code
    # paths and the first segment of each broker), not only the broker a single send reached.
    warm = run_threads(threads, WARMUP_S, lambda k, i: produce(k, -1 - i))
    _wait_count(count, warm)
    idle0, t_idle = tree_cpu_seconds(up_pid), time.perf_counter()
    time.sleep(IDLE_S)  # sleep: measuring the idle cluster's CPU over a fixed window
    idle_ms_per_s = (tree_cpu_seconds(up_pid) - idle0) * 1000 / (time.perf_counter() - t_idle)

    assert reader.pid is not None
    cpu0 = (tree_cpu_seconds(up_pid), time.process_time(), tree_cpu_seconds(reader.pid))
    t0 = time.perf_counter()
    sent = run_threads(threads, seconds, produce)
    rate = sent / (time.perf_counter() - t0)
    _wait_count(count, warm + sent)
    cpu1 = (tree_cpu_seconds(up_pid), time.process_time(), tree_cpu_seconds(reader.pid))
    stop.set()
    received = len(out.get(timeout=60)) - warm
    reader.join(30)
    producer.shutdown()
    per = [(b - a) * 1000 / max(1, sent) for a, b in zip(cpu0, cpu1, strict=True)]
    return Phase(n, rate, *per, received=received, sent=sent, idle_ms_per_s=idle_ms_per_s)


def _wait_count(count: Any, n: int) -> None:
    """Until the consumer has received ``n`` messages, bounded by DRAIN_S_MAX."""
    drain_end = time.monotonic() + DRAIN_S_MAX
    while count.value < n and time.monotonic() < drain_end:
        time.sleep(0.05)  # polling the consumer's count, bounded by DRAIN_S_MAX


def line(p: Phase) -> str:
    return (
        f"  {p.brokers} broker{'s' if p.brokers > 1 else ' '}: {p.rate:6.0f} txn/s | CPU per "
        f"transaction: brokers {p.broker_ms:.3f} ms, producer {p.producer_ms:.3f} ms, consumer "
        f"{p.consumer_ms:.3f} ms | received {p.received}/{p.sent} | idle cluster "
        f"{p.idle_ms_per_s:.1f} ms CPU/s"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    cores = len(os.sched_getaffinity(0))
    print(f"# cluster benchmark on {machine()}, {cores} cores, load average {load}")
    print(f"# {args.threads} producer threads (transactions), 1 consumer process, {args.seconds} s")
    base = os.environ.get("TXMQ_BENCH_DIR")
    one, two = [], []
    for r in range(args.rounds):
        one.append(phase(1, args.threads, args.seconds, base))
        two.append(phase(2, args.threads, args.seconds, base))
        print(f"round {r + 1}:\n{line(one[-1])}\n{line(two[-1])}", flush=True)
    b1 = sum(p.broker_ms for p in one) / len(one)
    b2 = sum(p.broker_ms for p in two) / len(two)
    clients = sum(p.producer_ms + p.consumer_ms for p in two) / len(two)
    ratio = b2 / max(b1, 1e-9)
    verdict = "met" if ratio <= 1.10 else "missed"
    print(
        f"broker CPU per transaction, 2 brokers / 1 broker: {ratio:.2f} (goal <= 1.10: {verdict})"
    )
    # The same with each phase's idle CPU (what the brokers burn with no traffic) taken out:
    # what a transaction itself costs, which a fixed per-broker cost hides at low rates.
    net = [
        sum(p.broker_ms - p.idle_ms_per_s / max(p.rate, 1e-9) for p in ps) / len(ps)
        for ps in (one, two)
    ]
    print(
        f"  net of idle CPU: 1 broker {net[0]:.3f} ms, 2 brokers {net[1]:.3f} ms, "
        f"ratio {net[1] / max(net[0], 1e-9):.2f}"
    )
    print(
        f"throughput here: 1 broker {sum(p.rate for p in one) / len(one):.0f} txn/s, "
        f"2 brokers {sum(p.rate for p in two) / len(two):.0f} txn/s ({cores} cores shared with "
        "the clients)"
    )
    print(
        f"PROJECTION (not measured) for {PROJECTED_CORES} cores: {PROJECTED_CORES} brokers at "
        f"{b2:.3f} ms of broker CPU per transaction = {PROJECTED_CORES * 1000 / b2:.0f} txn/s "
        f"with the clients on other machines; with the clients on the same cores (another "
        f"{clients:.3f} ms per transaction) {PROJECTED_CORES * 1000 / (b2 + clients):.0f} txn/s"
    )


if __name__ == "__main__":
    main()
