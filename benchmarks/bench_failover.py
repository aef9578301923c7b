"""Failover benchmark: how long the official client stops committing when a group's leader dies.

Goal (ADR 0006): the official Python client given every replica's endpoint commits
transactions again well within 10 s of a kill -9 of the leader (before routes carried every
replica and followers forwarded, it waited for its next route refresh: up to ~30 s).
Method: a local etcd and ``--replicas`` replica processes of one group, SYNC with
``--min-insync-replicas 2``, on free ports; ``--connected leader`` gives the leader the lowest
port (the client's channel dials it first, so its connection dies with it), ``follower`` the
highest (the client is connected to a follower, which forwards). One producer thread begins,
sends and commits transactions back to back; after ``--warmup`` commits the leader gets
``--fault`` (``kill``: SIGKILL; ``stop``: SIGSTOP for ``--pause-s`` seconds, then SIGCONT). Figure:
seconds from the fault to the first commit acknowledged after it, per run, and the failed
calls in between. Every committed body is then looked for with a consumer (lost => reported).

Run: ``.venv/bin/python benchmarks/bench_failover.py [--runs N] [--fault kill|stop]
[--connected leader|follower] [--replicas R]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import grpc
from _common import machine
from bench_replication import _broker, _free_ports, _role
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
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg

from txmq.coordination.etcd_server import start_local_etcd

FAST = ["--transaction-timeout-ms", "800", "--transaction-check-interval-ms", "1000"]
WAIT_S = 30.0


class Rollback(TransactionChecker):  # type: ignore[misc]
    def check(self, message: Message) -> TransactionResolution:
        return TransactionResolution.ROLLBACK


def _wait(predicate, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)  # sleep: poll interval of a bounded wait
    raise SystemExit(f"timed out waiting for {what}")


def _group(
    tmp: Path, etcd: str, name: str, ports: list[int]
) -> list[tuple[subprocess.Popen[str], str]]:
    out = []
    for i, port in enumerate(ports):
        data = tmp / f"{name}-r{i}"
        data.mkdir()
        args = [*FAST, "--port", str(port), "--etcd", etcd, "--replica-group", name,
                "--broker-name", f"r{i}", "--min-insync-replicas", "2"]  # fmt: skip
        proc, endpoint = _broker(data, *args)
        out.append((proc, endpoint))
        if i == 0:
            _wait(lambda e=endpoint: _role(e) == "leader", "the first replica to lead")
    for _, endpoint in out[1:]:
        _wait(lambda e=endpoint: _role(e) == "follower", "a follower")
    # A client routes by what QueryRoute said when it asked (and again every 30 s): start it
    # once every replica is in every replica's route.
    every = sorted(e for _, e in out)
    for _, endpoint in out:
        _wait(lambda e=endpoint: _routed(e) == every, "every replica in the routes")
    return out


def _routed(endpoint: str) -> list[str]:
    with grpc.insecure_channel(endpoint) as ch:
        r = sg.MessagingServiceStub(ch).QueryRoute(
            sv.QueryRouteRequest(topic=pb.Resource(name="fo")), timeout=2
        )
    found = {f"{a.host}:{a.port}" for q in r.message_queues for a in q.broker.endpoints.addresses}
    return sorted(found)


def _message(topic: str, body: bytes) -> Message:
    m = Message()
    m.topic, m.body = topic, body
    return m


def _run(tmp: Path, etcd: str, args: argparse.Namespace, n: int) -> dict[str, object]:
    ports = _free_ports(args.replicas)
    if args.connected == "follower":
        ports = [ports[-1], *ports[:-1]]  # r0 leads at the highest port
    group = _group(tmp, etcd, f"run{n}", ports)
    every = ";".join(e for _, e in group)
    committed: list[tuple[float, bytes]] = []
    failures: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        p = Producer(ClientConfiguration(every, Credentials()), ("fo",), Rollback())
        p.startup()
        try:
            for i in range(1_000_000):
                if stop.is_set():
                    return
                try:
                    tx = p.begin_transaction()
                    p.send(_message("fo", f"tx-{i}".encode()), tx)
                    tx.commit()
                    committed.append((time.monotonic(), f"tx-{i}".encode()))
                except Exception as exc:  # not acknowledged: counted
                    failures.append(f"{type(exc).__name__}: {str(exc)[:400]}")
                    stop.wait(0.05)
        finally:
            p.shutdown()

    worker = threading.Thread(target=produce)
    worker.start()
    leader = group[0][0]
    try:
        _wait(lambda: len(committed) >= args.warmup, "warm-up commits")
        before = len(failures)
        if args.fault == "kill":
            leader.send_signal(signal.SIGKILL)
        else:
            leader.send_signal(signal.SIGSTOP)
            # Resumed after --pause-s whatever happens: a client stuck on it shows here.
            threading.Timer(args.pause_s, leader.send_signal, (signal.SIGCONT,)).start()
        fault = time.monotonic()
        _wait(lambda: committed[-1][0] > fault, "a commit after the fault")
        took = next(t for t, _ in committed if t > fault) - fault
        failed = len(failures) - before
        kinds = sorted({f[:300] for f in failures[before:]})[:4]
        time.sleep(1.0)  # sleep: a little load after the failover, for the consumer check
    finally:
        stop.set()
        if args.fault == "stop":
            leader.send_signal(signal.SIGCONT)
        worker.join(30)
    survivors = ";".join(e for _, e in group[1:])
    c = SimpleConsumer(ClientConfiguration(survivors, Credentials()), f"check{n}",
                       {"fo": FilterExpression("*")}, await_duration=2)  # fmt: skip
    c.startup()
    want, got = {b for _, b in committed}, set()
    deadline = time.monotonic() + WAIT_S
    try:
        while not want <= got and time.monotonic() < deadline:
            for m in c.receive(32, 15):
                got.add(bytes(m.body))
                c.ack(m)
    finally:
        c.shutdown()
    for proc, _ in group:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return {"run": n, "fault_to_commit_s": round(took, 2), "failed_calls": failed,
            "failures": kinds, "committed": len(want), "lost": len(want - got)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--fault", choices=["kill", "stop"], default="kill")
    ap.add_argument("--connected", choices=["leader", "follower"], default="leader")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--pause-s", type=float, default=15.0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    etcd_proc, etcd = start_local_etcd(tmp / "etcd")
    try:
        rows = [_run(tmp, etcd, args, n) for n in range(args.runs)]
    finally:
        etcd_proc.terminate()
        etcd_proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    took = [r["fault_to_commit_s"] for r in rows]
    print(json.dumps({"bench": "failover", "fault": args.fault, "connected": args.connected,
                      "replicas": args.replicas, "runs": rows, "max_s": max(took),  # type: ignore[type-var]
                      "load": os.getloadavg(), "machine": machine()}))  # fmt: skip


if __name__ == "__main__":
    main()
