"""Broker benchmark with the official RocketMQ Python client: transactional messages/s and
p50/p99 latency from the start of a transaction (half send) to the consumer's receipt, with 1
and 32 producer threads, next to a bare grpc.aio echo service measured in the same run (the
protocol ceiling on this machine).

Both servers run in their own process, so neither shares a GIL with the client threads; the
consumer (a SimpleConsumer receiving 32 at a time and acking each message asynchronously) runs
in a third process, as the consuming service would. A transaction costs the producer two RPCs
(SendMessage + EndTransaction), so the ratio compares 2 x txn/s with echo calls/s from the
same number of client threads; the broker also serves the consumer's receives and acks
meanwhile. CPU per transaction is printed for the broker, the producing and the consuming
process. A third baseline runs the same official Producer against a do-nothing RocketMQ stub
server (grpc.aio, canned OK replies, no storage): the ceiling of this client and protocol here,
which shows how much of the gap is the broker's own work. Goal (issue 4): >= 60 % of the echo
ceiling. Bounded: ``--seconds`` per phase
(default 5) and at most 200 000 operations per thread.

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
from peers._base import tree_cpu_seconds

ROOT = Path(__file__).parents[1]
OPS_PER_THREAD_MAX = 200_000
BODY = 1024
SETTLE_S = 3.0
# A body starts with its unique key (producer thread, sequence), padded to this many bytes.
KEY_BYTES = 24


def echo_server_main() -> None:
    """Child process: a grpc.aio server with one unary method that returns its request."""

    async def serve() -> None:
        server = grpc.aio.server()

        async def echo(body: bytes, context: object) -> bytes:
            return body

        handler = grpc.method_handlers_generic_handler(
            "bench.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
        )
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(f"echo listening on 127.0.0.1:{port}", flush=True)
        await server.wait_for_termination()

    asyncio.run(serve())


def stub_server_main() -> None:
    """Child process: a grpc.aio server of the RocketMQ v2 MessagingService that does no work
    (no storage, no fsync, no transaction book): QueryRoute, Heartbeat, the Telemetry settings
    handshake, SendMessage and EndTransaction answer OK at once. The official client's ceiling
    for a transactional send on this machine: the same client, the same RPCs, nothing behind."""
    import itertools

    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as sv
    from rocketmq.grpc_protocol import service_pb2_grpc as sg

    from txmq.protocol import mapping, telemetry

    server_settings = telemetry.ServerSettings(
        body_size_max=4 * 1024 * 1024,
        long_polling_timeout_ms=20_000,
        receive_batch_size=32,
        delivery_attempts_max=16,
        retry_backoff_initial_ms=1_000,
        retry_backoff_max_ms=60_000,
    )
    ids = itertools.count()

    class Stub(sg.MessagingServiceServicer):  # type: ignore[misc]
        def __init__(self, port: int) -> None:
            self.port = port

        async def QueryRoute(self, request: Any, context: Any) -> Any:
            broker = pb.Broker(name="stub", id=0)
            broker.endpoints.scheme = pb.IPv4
            broker.endpoints.addresses.add(host="127.0.0.1", port=self.port)
            queue = pb.MessageQueue(
                topic=request.topic,
                id=0,
                permission=pb.READ_WRITE,
                broker=broker,
                accept_message_types=[pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION],
            )
            return sv.QueryRouteResponse(status=mapping.status(), message_queues=[queue])

        async def Heartbeat(self, request: Any, context: Any) -> Any:
            return sv.HeartbeatResponse(status=mapping.status())

        async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
            return sv.NotifyClientTerminationResponse(status=mapping.status())

        async def Telemetry(self, request_iterator: Any, context: Any) -> Any:
            async for cmd in request_iterator:
                if cmd.HasField("settings"):
                    reply = telemetry.settings_reply(cmd.settings, server_settings, fifo=False)
                    yield sv.TelemetryCommand(status=mapping.status(), settings=reply)

        async def SendMessage(self, request: Any, context: Any) -> Any:
            entries = [
                sv.SendResultEntry(
                    status=mapping.status(),
                    message_id=m.system_properties.message_id,
                    transaction_id=f"stub-{next(ids)}",
                    offset=0,
                )
                for m in request.messages
            ]
            return sv.SendMessageResponse(status=mapping.status(), entries=entries)

        async def EndTransaction(self, request: Any, context: Any) -> Any:
            return sv.EndTransactionResponse(status=mapping.status())

    async def serve() -> None:
        server = grpc.aio.server()
        port = server.add_insecure_port("127.0.0.1:0")
        sg.add_MessagingServiceServicer_to_server(Stub(port), server)
        await server.start()
        print(f"stub listening on 127.0.0.1:{port}", flush=True)
        await server.wait_for_termination()

    asyncio.run(serve())


def start(cmd: list[str]) -> tuple[subprocess.Popen[str], str]:
    """Start a server process and read its "listening on HOST:PORT" line."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"server did not start: {cmd} -> {line!r}")
    return proc, line.strip().rsplit(" ", 1)[1]


def run_threads(threads: int, seconds: float, op: Callable[[int, int], object]) -> int:
    """Call ``op(thread, n)`` from ``threads`` threads until ``seconds`` pass (at most
    OPS_PER_THREAD_MAX each); returns the number of calls made."""
    counts = [0] * threads
    stop = time.perf_counter() + seconds

    def worker(k: int) -> None:
        while time.perf_counter() < stop and counts[k] < OPS_PER_THREAD_MAX:
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


def consumer_main(endpoints: str, topic: str, ready: Any, stop: Any, out: Any) -> None:
    """Child process: a SimpleConsumer that receives, timestamps (CLOCK_MONOTONIC, shared by
    every process on the machine) and acks until told to stop, then reports its receipts.

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
    consumer.shutdown()
    out.put(receipts)


@dataclass
class TxnPhase:
    rate: float  # transactions/s
    p50_ms: float  # transaction start -> consumer receipt
    p99_ms: float
    receipts: int
    broker_ms: float  # broker CPU per transaction
    producer_ms: float  # the producing process's CPU per transaction
    consumer_ms: float  # the consuming process's CPU per transaction


def transactional_sender(endpoints: str, topic: str) -> tuple[Any, Callable[[bytes], None]]:
    """(started official Producer, send): ``send(key)`` runs one transaction of a 1 KiB body
    that starts with ``key``: begin, send the half message, commit."""
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

    producer = Producer(ClientConfiguration(endpoints, Credentials()), (topic,), Commit())
    producer.startup()

    def send(key: bytes) -> None:
        m: Any = Message()
        m.topic = topic
        m.body = key.ljust(BODY, b".")
        tx = producer.begin_transaction()
        producer.send(m, tx)
        tx.commit()

    return producer, send


def stub_rate(endpoints: str, threads: int, seconds: float) -> float:
    """Transactions/s of the official client against the do-nothing stub server."""
    producer, send = transactional_sender(endpoints, f"bench-{threads}")
    send(b"warm-up")
    t0 = time.perf_counter()
    sent = run_threads(threads, seconds, lambda k, n: send(f"{k}-{n}|".encode()))
    rate = sent / (time.perf_counter() - t0)
    producer.shutdown()
    return rate


def txn_rate(endpoints: str, broker_pid: int, threads: int, seconds: float) -> TxnPhase:
    topic = f"bench-{threads}"
    ctx = mp.get_context("spawn")  # gRPC does not survive fork
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    reader = ctx.Process(target=consumer_main, args=(endpoints, topic, ready, stop, out))
    reader.start()
    producer, send = transactional_sender(endpoints, topic)
    if not ready.wait(60):
        reader.kill()
        raise SystemExit("the consumer process did not start")
    started_at: dict[bytes, float] = {}

    def produce(k: int, n: int) -> None:
        key = f"{k}-{n}|".encode().ljust(KEY_BYTES, b".")
        started_at[key] = time.monotonic()
        send(key)

    assert reader.pid is not None
    cpu0 = (tree_cpu_seconds(broker_pid), time.process_time(), tree_cpu_seconds(reader.pid))
    t0 = time.perf_counter()
    sent = run_threads(threads, seconds, produce)
    rate = sent / (time.perf_counter() - t0)
    cpu1 = (tree_cpu_seconds(broker_pid), time.process_time(), tree_cpu_seconds(reader.pid))
    time.sleep(SETTLE_S)  # what is still in flight reaches the consumer
    stop.set()
    receipts: list[tuple[bytes, float]] = out.get(timeout=60)
    reader.join(30)
    producer.shutdown()
    latency = [(at - started_at[k]) * 1000 for k, at in receipts if k in started_at]
    per_txn = [(b - a) * 1000 / max(1, sent) for a, b in zip(cpu0, cpu1, strict=True)]
    return TxnPhase(rate, pct(latency, 0.5), pct(latency, 0.99), len(latency), *per_txn)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", default="1,32")
    ap.add_argument("--echo-server", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--stub-server", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.echo_server:
        echo_server_main()
        return
    if args.stub_server:
        stub_server_main()
        return
    print(f"# broker benchmark on {machine()} (official rocketmq-python-client)")
    echo, echo_endpoint = start([sys.executable, __file__, "--echo-server"])
    stub, stub_endpoint = start([sys.executable, __file__, "--stub-server"])
    with tempfile.TemporaryDirectory(dir=os.environ.get("TXMQ_BENCH_DIR")) as d:
        cmd = [sys.executable, "-m", "txmq.broker", "--data-dir", d, "--port", "0"]
        broker, endpoints = start(cmd)
        try:
            for n in (int(x) for x in args.threads.split(",")):
                echo_per_s = echo_rate(echo_endpoint, n, args.seconds)
                echo_aio = echo_rate_aio_client(echo_endpoint, n, args.seconds)
                stub_per_s = stub_rate(stub_endpoint, n, args.seconds)
                t = txn_rate(endpoints, broker.pid, n, args.seconds)
                print(
                    f"{n:2d} threads: grpc.aio echo {echo_per_s:7.0f} calls/s | txmq "
                    f"transactional {t.rate:6.0f} msg/s (= {2 * t.rate:6.0f} calls/s, "
                    f"{200 * t.rate / echo_per_s:3.0f}% of echo) | transaction start->receipt "
                    f"p50 {t.p50_ms:.1f} ms p99 {t.p99_ms:.1f} ms ({t.receipts} receipts)\n"
                    f"           echo through an asyncio client like the official one's "
                    f"{echo_aio:7.0f} calls/s (txmq = {200 * t.rate / echo_aio:3.0f}% of it)\n"
                    f"           the official client against a do-nothing RocketMQ stub server "
                    f"{stub_per_s:6.0f} txn/s (txmq = {100 * t.rate / stub_per_s:3.0f}% of it)\n"
                    f"           CPU per transaction: broker {t.broker_ms:.2f} ms, producer "
                    f"process {t.producer_ms:.2f} ms, consumer process {t.consumer_ms:.2f} ms",
                    flush=True,
                )
        finally:
            broker.terminate()
            broker.wait(30)
            for server in (echo, stub):
                server.terminate()
                server.wait(30)


if __name__ == "__main__":
    main()
