"""What authentication costs per RPC: the same calls against an open broker, one with an ACL
file, and one with an ACL file and TLS, in the same run.

Two measures:
- In process, the broker's check alone (``Guard.authenticate`` on the official client's
  headers): a cached signature (the common case: a client signs a new date once a second) and
  an uncached one (parse the date, one HMAC-SHA1, compare), in microseconds per call.
- Over the wire, three brokers started side by side (``open``, ``acl``, ``acl+tls``) answer the
  same calls from one client thread: QueryRoute of an existing topic (memory only, so the auth
  share is at its largest) and SendMessage of one 1 KiB message (a write and an fsync). For
  each: the broker's CPU per RPC (its process tree, from /proc) and the client's wall time per
  RPC, and the difference to the open broker. The client sends the official client's headers
  to all three (it does so even without credentials), so only the broker's work differs.
  Phases alternate between the brokers for ``--rounds`` rounds, each round starting with the
  next broker; the figures are the medians of the rounds, so a shared machine's noise hits
  every broker alike.

Run: ``.venv/bin/python benchmarks/bench_auth.py [--calls N] [--rounds R]`` (defaults 2000, 3;
bounded by CALLS_MAX).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as sv
from rocketmq.grpc_protocol import service_pb2_grpc as sg
from rocketmq.v5.util.signature import Signature

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine
from bench_broker import start
from peers._base import tree_cpu_seconds

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "src"))
from txmq.broker.security.auth import Guard  # noqa: E402
from txmq.demo.certs import make_bundle  # noqa: E402
from txmq.protocol.acl import parse_acl  # noqa: E402

CALLS_MAX = 200_000
TOPIC = "bench-auth"
ACCESS_KEY, SECRET = "bench", "bench-secret-0123456789"
ACL = f"""
[[users]]
access_key = "{ACCESS_KEY}"
secret_key = "{SECRET}"
publish = ["{TOPIC}"]
subscribe = ["{TOPIC}"]

[[users]]
access_key = "bench-ops"
secret_key = "bench-ops-secret-0123456789"
admin = true
"""


def official_metadata() -> list[tuple[str, str]]:
    cfg = SimpleNamespace(credentials=SimpleNamespace(ak=ACCESS_KEY, sk=SECRET), namespace="")
    return list(Signature.metadata(cfg, "bench-client"))


def in_process(calls: int) -> tuple[float, float]:
    """(cached, uncached) microseconds per ``Guard.authenticate``."""
    guard = Guard(parse_acl(ACL, "bench"), source=Path("bench"), transaction_topic=lambda t: None)
    meta = official_metadata()
    now_ms = time.time_ns() // 1_000_000
    guard.authenticate(meta, now_ms)
    started = time.perf_counter()
    for _ in range(calls):
        guard.authenticate(meta, now_ms)
    cached = (time.perf_counter() - started) / calls * 1e6
    started = time.perf_counter()
    for _ in range(calls):
        guard.replace(guard.acl)  # forget the cached signature
        guard.authenticate(meta, now_ms)
    uncached = (time.perf_counter() - started) / calls * 1e6
    return cached, uncached


def start_broker(data: Path, extra: list[str]) -> tuple[subprocess.Popen[str], str]:
    """A broker on a free port with ``extra`` options (bench_broker.start: auto-creation on)."""
    cmd = [sys.executable, "-m", "txmq.broker", "--data-dir", str(data), "--port", "0", *extra]
    return start(cmd)


def send_request(i: int) -> Any:
    m = pb.Message(topic=pb.Resource(name=TOPIC), body=b"x" * 1024)
    m.system_properties.message_id = f"0102FC0000000100AA{i:016X}"
    m.system_properties.message_type = pb.NORMAL
    m.system_properties.body_encoding = pb.IDENTITY
    return sv.SendMessageRequest(messages=[m])


def phase(pid: int, stub: Any, method: str, calls: int) -> tuple[float, float]:
    """(broker CPU us per RPC, client wall us per RPC) for ``calls`` calls of ``method``."""
    route = sv.QueryRouteRequest(topic=pb.Resource(name=TOPIC))
    rpc = getattr(stub, method)
    cpu0, wall0 = tree_cpu_seconds(pid), time.perf_counter()
    for i in range(calls):
        request = route if method == "QueryRoute" else send_request(i)
        reply = rpc(request, metadata=official_metadata(), timeout=30)
        if reply.status.code != pb.OK:
            raise SystemExit(f"{method} refused: {reply.status}")
    wall = time.perf_counter() - wall0
    cpu = tree_cpu_seconds(pid) - cpu0
    return cpu / calls * 1e6, wall / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000, help="RPCs per phase")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    calls, rounds = min(args.calls, CALLS_MAX), max(1, args.rounds)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# auth benchmark on {machine()}, load average {load}")
    cached, uncached = in_process(min(calls * 5, CALLS_MAX))
    print(f"Guard.authenticate: cached signature {cached:.1f} us, uncached {uncached:.1f} us")
    with tempfile.TemporaryDirectory(dir=os.environ.get("TXMQ_BENCH_DIR")) as tmp:
        d = Path(tmp)
        pki = make_bundle(d / "pki")
        acl = d / "acl.toml"
        acl.write_text(ACL)
        acl.chmod(0o600)
        tls = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
        modes = {"open": [], "acl": ["--acl-file", str(acl)]}
        modes["acl+tls"] = [*modes["acl"], *tls]
        procs: dict[str, tuple[subprocess.Popen[str], str]] = {}
        try:
            for name, extra in modes.items():
                procs[name] = start_broker(d / name, extra)
            figures = measure(procs, pki.ca.read_bytes(), calls, rounds)
        finally:
            for proc, _ in procs.values():
                proc.terminate()
                proc.wait(timeout=30)
    report(figures, calls, rounds)


def measure(
    procs: dict[str, tuple[subprocess.Popen[str], str]], ca: bytes, calls: int, rounds: int
) -> dict[tuple[str, str], list[tuple[float, float]]]:
    channels = {}
    for name, (_, endpoint) in procs.items():
        if name.endswith("tls"):
            creds = grpc.ssl_channel_credentials(root_certificates=ca)
            channels[name] = grpc.secure_channel(endpoint, creds)
        else:
            channels[name] = grpc.insecure_channel(endpoint)
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        for name, channel in channels.items():  # warm up: connect, create the topic
            phase(procs[name][0].pid, sg.MessagingServiceStub(channel), "QueryRoute", 20)
        names = list(channels)
        for r in range(rounds):
            # Each round starts with another broker, so no mode always runs first or last.
            order = names[r % len(names) :] + names[: r % len(names)]
            for method in ("QueryRoute", "SendMessage"):
                for name in order:
                    stub = sg.MessagingServiceStub(channels[name])
                    got = phase(procs[name][0].pid, stub, method, calls)
                    out.setdefault((method, name), []).append(got)
    finally:
        for channel in channels.values():
            channel.close()
    return out


def report(
    figures: dict[tuple[str, str], list[tuple[float, float]]], calls: int, rounds: int
) -> None:
    print(f"# {calls} calls per phase, {rounds} rounds, medians; one client thread")
    for method in ("QueryRoute", "SendMessage"):
        base_cpu = statistics.median(c for c, _ in figures[(method, "open")])
        base_wall = statistics.median(w for _, w in figures[(method, "open")])
        for name in ("open", "acl", "acl+tls"):
            cpu = statistics.median(c for c, _ in figures[(method, name)])
            wall = statistics.median(w for _, w in figures[(method, name)])
            print(
                f"{method:<12} {name:<8} broker CPU {cpu:7.1f} us/RPC ({cpu - base_cpu:+6.1f}),"
                f" client wall {wall:7.1f} us/RPC ({wall - base_wall:+6.1f})"
            )


if __name__ == "__main__":
    main()
