"""Broker benchmark with the official RocketMQ Python client: transactional messages/s and
p50/p99 from send to consumer receipt, with 1 and 32 producer threads, next to a bare grpc.aio
echo service measured in the same run (the protocol ceiling on this machine).

A transaction costs two RPCs (SendMessage + EndTransaction), so the ratio compares 2 x txn/s
with echo calls/s. Goal (issue 4): >= 60 % of the echo ceiling for the same number of calls.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine, pct

ROOT = Path(__file__).parents[1]


def echo_server() -> tuple[int, threading.Event]:
    ready = threading.Event()
    stop = threading.Event()
    port_box: list[int] = []

    async def serve() -> None:
        server = grpc.aio.server()

        async def echo(body: bytes, context: object) -> bytes:
            return body

        handler = grpc.method_handlers_generic_handler(
            "bench.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
        )
        server.add_generic_rpc_handlers((handler,))
        port_box.append(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.1)
        await server.stop(0)

    threading.Thread(target=lambda: asyncio.run(serve()), daemon=True).start()
    ready.wait(10)
    return port_box[0], stop


def echo_rate(port: int, threads: int, seconds: float) -> float:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    call = channel.unary_unary("/bench.Echo/Echo")
    body = b"x" * 1024
    counts = [0] * threads
    stop = time.perf_counter() + seconds

    def worker(k: int) -> None:
        while time.perf_counter() < stop and counts[k] < 1_000_000:
            call(body, timeout=10)
            counts[k] += 1

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    channel.close()
    return sum(counts) / (time.perf_counter() - t0)


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "txmq.broker", "--data-dir", str(data_dir), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, line.strip().rsplit(" ", 1)[1]


def txn_rate(endpoints: str, threads: int, seconds: float) -> tuple[float, float, float]:
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        Message,
        Producer,
        SimpleConsumer,
        TransactionChecker,
        TransactionResolution,
    )

    class Commit(TransactionChecker):  # type: ignore[misc]
        def check(self, message: object) -> TransactionResolution:
            return TransactionResolution.COMMIT

    topic = f"bench-{threads}"
    cfg = ClientConfiguration(endpoints, Credentials())
    producer = Producer(cfg, (topic,), Commit())
    producer.startup()
    consumer = SimpleConsumer(cfg, f"bench-g-{threads}", {topic: FilterExpression()})
    consumer.startup()
    committed_at: dict[bytes, float] = {}
    latency: list[float] = []
    done = threading.Event()

    def consume() -> None:
        while not done.is_set():
            for m in consumer.receive(32, 1) or []:
                at = committed_at.get(m.body)
                if at is not None:
                    latency.append((time.perf_counter() - at) * 1000)
                consumer.ack(m)

    threading.Thread(target=consume, daemon=True).start()
    counts = [0] * threads
    stop = time.perf_counter() + seconds

    def produce(k: int) -> None:
        while time.perf_counter() < stop and counts[k] < 200_000:
            body = f"{k}-{counts[k]}".encode().ljust(1024, b".")
            tx = producer.begin_transaction()
            m = Message()
            m.topic = topic
            m.body = body
            producer.send(m, tx)
            tx.commit()
            committed_at[body] = time.perf_counter()
            counts[k] += 1

    ts = [threading.Thread(target=produce, args=(k,)) for k in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    rate = sum(counts) / (time.perf_counter() - t0)
    time.sleep(3)
    done.set()
    producer.shutdown()
    consumer.shutdown()
    return rate, pct(latency, 0.5), pct(latency, 0.99)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    print(f"# broker benchmark on {machine()} (official rocketmq-python-client)")
    port, stop = echo_server()
    with tempfile.TemporaryDirectory() as d:
        proc, endpoints = start_broker(Path(d))
        try:
            for n in (1, 32):
                echo = echo_rate(port, n, args.seconds)
                rate, p50, p99 = txn_rate(endpoints, n, args.seconds)
                print(
                    f"{n:2d} threads: grpc.aio echo {echo:7.0f} calls/s | txmq transactional "
                    f"{rate:6.0f} msg/s (= {2 * rate:6.0f} calls/s, "
                    f"{200 * rate / echo:4.0f}% of echo) send->receipt p50 {p50:.1f} ms "
                    f"p99 {p99:.1f} ms"
                )
        finally:
            proc.terminate()
            proc.wait(30)
            stop.set()


if __name__ == "__main__":
    main()
