"""Broker benchmark with the official RocketMQ Python client: broker CPU per message against its
floor, throughput and latency, with 1 and 32 producer threads.

The floor is a do-nothing grpc.aio RocketMQ server (``floor_servers.py stub``:
canned replies, committed messages handed from SendMessage/EndTransaction to ReceiveMessage in
memory, no storage, no fsync) answering the same calls, driven the same way: the same official
Producer threads and the same SimpleConsumer process. For each workload the script prints the
server's CPU per message (every thread of its process tree, from /proc) for txmq and for the
floor, and their ratio (goal: <= 1.3):
- transactional: begin, send the half message, commit (SendMessage + EndTransaction), then the
  consumer's receive and ack;
- plain: one 1 KiB normal message sent, received and acked.
The floor runs twice: driven like txmq (as fast as the clients go), and paced to the rate txmq
reached, because at a lower rate fewer calls share each wake-up and every call costs more; the
second ratio compares the work per message at the same load.
Beside each figure, the server's CPU per message by thread (µs: the event loop, the
group-commit flusher, gRPC's own threads, the executor; the broker names its threads for this,
txmq.thread_names), for txmq, the floor and the baseline broker.
It also prints the single producer's send+commit p50/p99 (goal p99 <= 10 ms), the transaction
start -> consumer receipt latency, the producing and consuming processes' CPU, and two rate
ceilings: a bare grpc.aio echo (sync client threads, and an asyncio client like the official
one's). The floor and txmq phases alternate in one run, so their ratio holds on a shared machine
even when absolute figures do not; the load average is printed at the start.

Every server and the consumer run in their own process (no GIL shared with the producer
threads). CPU is read from the start of sending until the consumer has received every message
sent (at most DRAIN_S_MAX later). Bounded: ``--seconds`` per phase (default 5) and at most
200 000 operations per thread.

Run: ``.venv/bin/python benchmarks/bench_broker.py [--seconds S] [--threads 1,32]``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine, pct
from _procstat import THREAD_KINDS, thread_cpu_s
from peers._base import tree_cpu_seconds

ROOT = Path(__file__).parents[1]
OPS_PER_THREAD_MAX = 200_000
BODY = 1024
# After the last send, how long the consumer may take to receive what is still in flight.
DRAIN_S_MAX = 15.0
# A body starts with its unique key (producer thread, sequence), padded to this many bytes.
KEY_BYTES = 24


def start(cmd: list[str], src: str = str(ROOT / "src")) -> tuple[subprocess.Popen[str], str]:
    """Start a server process (importing txmq from ``src``) and read its "listening on
    HOST:PORT" line."""
    # Benchmarks send to topics they never create: turn on auto-creation (off by default), by
    # environment so that a baseline broker from an older tree takes it too.
    env = dict(os.environ, PYTHONPATH=src, TXMQ_AUTO_CREATE_TOPICS="true")
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"server did not start: {cmd} -> {line!r}")
    return proc, line.strip().rsplit(" ", 1)[1]


def run_threads(
    threads: int,
    seconds: float,
    op: Callable[[int, int], object],
    rate: float | None = None,
    *,
    spread: bool = False,
) -> int:
    """Call ``op(thread, n)`` from ``threads`` threads until ``seconds`` pass (at most
    OPS_PER_THREAD_MAX each), at most ``rate`` calls/s in all when given; returns the number
    of calls made. Paced threads start their n-th call at the same instant (bursts of
    ``threads``) unless ``spread``: then thread k's n-th call is due at (n + k / threads) *
    threads / rate, so calls arrive one at a time, as from many independent clients."""
    counts = [0] * threads
    start = time.perf_counter()
    stop = start + seconds
    interval = threads / rate if rate else 0.0

    def worker(k: int) -> None:
        phase = k / threads if spread else 0.0
        while time.perf_counter() < stop and counts[k] < OPS_PER_THREAD_MAX:
            wait = start + (counts[k] + phase) * interval - time.perf_counter()
            if wait > 0:
                time.sleep(wait)  # pacing: this thread's share of ``rate``, at its phase
            op(k, counts[k])
            counts[k] += 1

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts)


def echo_rate(endpoint: str, threads: int, seconds: float) -> float:
    channel = grpc.insecure_channel(endpoint)
    call = channel.unary_unary("/bench.Echo/Echo")
    body = b"x" * BODY
    call(body, timeout=10)  # connect before timing
    t0 = time.perf_counter()
    done = run_threads(threads, seconds, lambda k, n: call(body, timeout=10))
    channel.close()
    return done / (time.perf_counter() - t0)


def echo_rate_aio_client(endpoint: str, threads: int, seconds: float) -> float:
    """The echo driven the way the official client drives its calls: a grpc.aio channel on
    its own event-loop thread, each caller thread waiting on a concurrent future. A second
    baseline, not the goal's: it shows how much of the gap is the client's call pattern."""
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()

    async def connect() -> tuple[Any, Any]:
        channel = grpc.aio.insecure_channel(endpoint)
        return channel, channel.unary_unary("/bench.Echo/Echo")

    channel, call = asyncio.run_coroutine_threadsafe(connect(), loop).result(10)
    body = b"x" * BODY

    async def one() -> bytes:
        reply: bytes = await call(body, timeout=10)
        return reply

    asyncio.run_coroutine_threadsafe(one(), loop).result(10)
    t0 = time.perf_counter()
    done = run_threads(
        threads, seconds, lambda k, n: asyncio.run_coroutine_threadsafe(one(), loop).result(10)
    )
    rate = done / (time.perf_counter() - t0)
    asyncio.run_coroutine_threadsafe(channel.close(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    runner.join(10)
    return rate


def consumer_main(endpoints: str, topic: str, ready: Any, stop: Any, count: Any, out: Any) -> None:
    """Child process: a SimpleConsumer that receives, timestamps (CLOCK_MONOTONIC, shared by
    every process on the machine) and acks until told to stop, then reports its receipts;
    ``count`` tells the parent how many it has received so far.

    Why its own process: the consumer is another service (the inventory service of the
    example); in the producer's process its threads would compete with the producer threads
    for one GIL and the latency measured would be the client's queueing, not the broker's.
    """
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    cfg = ClientConfiguration(endpoints, Credentials())
    consumer = SimpleConsumer(cfg, f"{topic}-g", {topic: FilterExpression()}, await_duration=1)
    consumer.startup()
    receipts: list[tuple[bytes, float]] = []
    ready.set()
    while not stop.is_set():
        for m in consumer.receive(32, 30) or []:
            receipts.append((bytes(m.body[:KEY_BYTES]), time.monotonic()))
            # Sent on the client's own event loop; receiving does not wait for it (as in
            # benchmarks/compare.py). Its outcome is not needed: a lost ack only redelivers.
            # Main thread only: 5.1.2's ack_async wants an asyncio loop in the calling thread.
            consumer.ack_async(m)
        count.value = len(receipts)
    consumer.shutdown()
    out.put(receipts)


@dataclass
class Phase:
    rate: float  # messages (transactions) sent per second
    send_p50_ms: float  # the producer's call: send, or begin + send + commit
    send_p99_ms: float
    p50_ms: float  # send start -> consumer receipt
    p99_ms: float
    receipts: int
    server_ms: float  # CPU per message of the server's process tree
    producer_ms: float  # the producing process's CPU per message
    consumer_ms: float  # the consuming process's CPU per message
    threads_us: dict[str, float]  # the server's CPU per message by thread kind (_procstat), µs


def sender(endpoints: str, topic: str, transactional: bool) -> tuple[Any, Callable[[bytes], None]]:
    """(started official Producer, send): ``send(key)`` sends one 1 KiB body that starts with
    ``key``; transactional: begin, send the half message, commit."""
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        Message,
        Producer,
        TransactionChecker,
        TransactionResolution,
    )

    class Commit(TransactionChecker):  # type: ignore[misc]
        def check(self, message: object) -> TransactionResolution:
            return TransactionResolution.COMMIT

    cfg = ClientConfiguration(endpoints, Credentials())
    producer = Producer(cfg, (topic,), Commit()) if transactional else Producer(cfg, (topic,))
    producer.startup()

    def send(key: bytes) -> None:
        m: Any = Message()
        m.topic = topic
        m.body = key.ljust(BODY, b".")
        if not transactional:
            producer.send(m)
            return
        tx = producer.begin_transaction()
        producer.send(m, tx)
        tx.commit()

    return producer, send


def phase(
    endpoints: str,
    server_pid: int,
    threads: int,
    seconds: float,
    *,
    transactional: bool,
    rate: float | None = None,
) -> Phase:
    """Producer threads and a consumer process against one server, at most ``rate`` sends/s
    when given; see the module docstring."""
    paced = "-paced" if rate else ""
    topic = f"bench-{'txn' if transactional else 'plain'}-{threads}{paced}"
    ctx = mp.get_context("spawn")  # gRPC does not survive fork
    ready, stop, count, out = ctx.Event(), ctx.Event(), ctx.Value("l", 0), ctx.Queue()
    reader = ctx.Process(target=consumer_main, args=(endpoints, topic, ready, stop, count, out))
    reader.start()
    producer, send = sender(endpoints, topic, transactional)
    if not ready.wait(60):
        reader.kill()
        raise SystemExit("the consumer process did not start")
    started_at: dict[bytes, float] = {}
    calls: list[float] = []

    def produce(k: int, n: int) -> None:
        key = f"{k}-{n}|".encode().ljust(KEY_BYTES, b".")
        t = started_at[key] = time.monotonic()
        send(key)
        calls.append((time.monotonic() - t) * 1000)

    assert reader.pid is not None
    cpu0 = (tree_cpu_seconds(server_pid), time.process_time(), tree_cpu_seconds(reader.pid))
    by_thread0 = thread_cpu_s(server_pid)
    t0 = time.perf_counter()
    sent = run_threads(threads, seconds, produce, rate)
    rate = sent / (time.perf_counter() - t0)
    drain_end = time.monotonic() + DRAIN_S_MAX
    while count.value < sent and time.monotonic() < drain_end:
        time.sleep(0.05)  # polling the consumer's count, bounded by DRAIN_S_MAX
    cpu1 = (tree_cpu_seconds(server_pid), time.process_time(), tree_cpu_seconds(reader.pid))
    by_thread1 = thread_cpu_s(server_pid)
    stop.set()
    receipts: list[tuple[bytes, float]] = out.get(timeout=60)
    reader.join(30)
    producer.shutdown()
    latency = [(at - started_at[k]) * 1000 for k, at in receipts if k in started_at]
    per_msg = [(b - a) * 1000 / max(1, sent) for a, b in zip(cpu0, cpu1, strict=True)]
    threads_us = {k: (by_thread1[k] - by_thread0[k]) * 1e6 / max(1, sent) for k in THREAD_KINDS}
    return Phase(
        rate,
        pct(calls, 0.5),
        pct(calls, 0.99),
        pct(latency, 0.5),
        pct(latency, 0.99),
        len(latency),
        *per_msg,
        threads_us,
    )


def report(threads: int, echo: tuple[float, float], runs: dict[str, list[Phase]]) -> str:
    """The lines printed for one thread count: ``runs`` maps a workload to its phases (txmq,
    the floor, the floor paced to txmq's rate, and the baseline broker when there is one)."""
    echo_sync, echo_aio = echo
    lines = [
        f"{threads:2d} threads: grpc.aio echo {echo_sync:6.0f} calls/s, through an asyncio "
        f"client like the official one's {echo_aio:6.0f} calls/s"
    ]
    if "transactional" in runs:
        t, ft, fpaced, *base = runs["transactional"]
        lines += [
            f"  transactional: txmq {t.rate:6.0f} txn/s (= {2 * t.rate:6.0f} calls/s, "
            f"{200 * t.rate / echo_sync:3.0f}% of echo), floor {ft.rate:6.0f} txn/s "
            f"(txmq = {100 * t.rate / max(ft.rate, 1e-9):3.0f}% of it)",
            f"    send+commit p50 {t.send_p50_ms:.1f} ms p99 {t.send_p99_ms:.1f} ms (floor p99 "
            f"{ft.send_p99_ms:.1f}) | start->receipt p50 {t.p50_ms:.1f} ms p99 {t.p99_ms:.1f} "
            f"ms ({t.receipts} receipts)",
            f"    CPU per transaction: broker {t.server_ms:.3f} ms, floor {ft.server_ms:.3f} ms, "
            f"ratio {t.server_ms / max(ft.server_ms, 1e-9):.2f} (goal <= 1.3) | producer "
            f"process {t.producer_ms:.2f} ms, consumer process {t.consumer_ms:.2f} ms",
            _paced_line(t, fpaced),
            *(_baseline_line(t, ft, b) for b in base),
            _threads_line(t, ft, fpaced, base),
        ]
    if "plain" in runs:
        p, fp, fpaced, *base = runs["plain"]
        lines += [
            f"  plain 1 KiB (send, receive, ack): txmq {p.rate:6.0f} msg/s, floor "
            f"{fp.rate:6.0f} msg/s | send p50 {p.send_p50_ms:.1f} ms p99 {p.send_p99_ms:.1f} ms",
            f"    CPU per plain message: broker {p.server_ms:.3f} ms, floor {fp.server_ms:.3f} "
            f"ms, ratio {p.server_ms / max(fp.server_ms, 1e-9):.2f}",
            _paced_line(p, fpaced),
            *(_baseline_line(p, fp, b) for b in base),
            _threads_line(p, fp, fpaced, base),
        ]
    return "\n".join(lines)


def _threads_line(this: Phase, floor: Phase, paced: Phase, base: list[Phase]) -> str:
    """The server's CPU per message by thread (µs): the event loop (main thread), the
    group-commit flusher, gRPC's own threads (poller, event engine, timer) and the executor."""

    def split(p: Phase) -> str:
        return "/".join(f"{p.threads_us[k]:.0f}" for k in THREAD_KINDS)

    rest = "".join(f", baseline {split(b)}" for b in base)
    return (
        f"    per thread, {'/'.join(THREAD_KINDS)} µs: txmq {split(this)}, floor {split(floor)}, "
        f"floor paced {split(paced)}{rest}"
    )


def _paced_line(this: Phase, paced: Phase) -> str:
    """The floor driven at txmq's own rate: at a lower rate fewer calls share a wake-up, so
    each costs more; this isolates the work per message from the load level."""
    return (
        f"    floor paced to txmq's rate ({paced.rate:6.0f}/s): CPU {paced.server_ms:.3f} ms, "
        f"ratio {this.server_ms / max(paced.server_ms, 1e-9):.2f}"
    )


def _baseline_line(this: Phase, floor: Phase, base: Phase) -> str:
    return (
        f"    baseline broker (--baseline-src): {base.rate:6.0f}/s, CPU {base.server_ms:.3f} ms, "
        f"ratio {base.server_ms / max(floor.server_ms, 1e-9):.2f}, send p99 "
        f"{base.send_p99_ms:.1f} ms; this tree's CPU = "
        f"{100 * this.server_ms / max(base.server_ms, 1e-9):.0f}% of it"
    )


def alternating(
    targets: list[tuple[str, int]], rounds: int, threads: int, seconds: float, txn: bool
) -> list[list[Phase]]:
    """Each target's phases over ``rounds`` rounds, the order reversed every other round (a
    position bias: whichever server ran first read 7-10 % dearer in some runs, 2026-11-27)."""
    per: list[list[Phase]] = [[] for _ in targets]
    for r in range(rounds):
        order = range(len(targets)) if r % 2 == 0 else reversed(range(len(targets)))
        for i in order:
            ep, pid = targets[i]
            per[i].append(phase(ep, pid, threads, seconds, transactional=txn))
    return per


def broker_cmd(data_dir: str) -> list[str]:
    return [sys.executable, "-m", "txmq.broker", "--data-dir", data_dir, "--port", "0"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", default="1,32")
    ap.add_argument("--workloads", default="transactional,plain")
    ap.add_argument(
        "--baseline-src",
        help="also run a broker from this directory (another checkout's src/), alternating "
        "with this tree's, for an A/B in one run",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="phases per server and workload, in alternating order (this, floor, baseline, "
        "then the reverse, ...) so that none always runs first; each server's median round by "
        "CPU per operation is reported, and every round's broker/floor ratio listed",
    )
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# broker benchmark on {machine()}, load average {load} (official client)")
    floors = Path(__file__).with_name("floor_servers.py")
    echo, echo_endpoint = start([sys.executable, str(floors), "echo"])
    stub, stub_endpoint = start([sys.executable, str(floors), "stub"])
    servers = [echo, stub]
    with tempfile.TemporaryDirectory(dir=os.environ.get("TXMQ_BENCH_DIR")) as d:
        try:
            broker, endpoints = start(broker_cmd(f"{d}/this"))
            servers.append(broker)
            targets = [(endpoints, broker.pid), (stub_endpoint, stub.pid)]
            if args.baseline_src:
                base, base_endpoints = start(broker_cmd(f"{d}/base"), src=args.baseline_src)
                servers.append(base)
                targets.append((base_endpoints, base.pid))
            for n in (int(x) for x in args.threads.split(",")):
                rates = (
                    echo_rate(echo_endpoint, n, args.seconds),
                    echo_rate_aio_client(echo_endpoint, n, args.seconds),
                )
                runs: dict[str, list[Phase]] = {k: [] for k in args.workloads.split(",")}
                rounds_lines = []
                for kind, done in runs.items():
                    txn = kind == "transactional"
                    per = alternating(targets, args.rounds, n, args.seconds, txn)
                    done.extend(sorted(p, key=lambda x: x.server_ms)[len(p) // 2] for p in per)
                    if args.rounds > 1:
                        mine, floor = per[0], per[1]
                        ratios = [
                            t.server_ms / max(f.server_ms, 1e-9)
                            for t, f in zip(mine, floor, strict=True)
                        ]
                        listed = ", ".join(f"{r:.2f}" for r in ratios)
                        rounds_lines.append(f"  {kind}: broker/floor CPU by round {listed}")
                    # The floor again, at the rate txmq reached (see _paced_line).
                    paced = phase(
                        stub_endpoint,
                        stub.pid,
                        n,
                        args.seconds,
                        transactional=txn,
                        rate=done[0].rate,
                    )
                    done.insert(2, paced)
                print(report(n, rates, runs), *rounds_lines, sep="\n", flush=True)
        finally:
            for server in servers:
                server.terminate()
                server.wait(30)


if __name__ == "__main__":
    main()
