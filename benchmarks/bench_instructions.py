"""Instruction counts: the work a server does per transaction, counted by valgrind's callgrind
instead of timed. Two comparisons:

- ``cluster``: a broker in a cluster of 2 against a lone broker. The goal is that a
  broker's CPU per transaction in a cluster stays within 10 % of a lone broker's, "so throughput
  scales with cores where cores are free". This machine has no free cores (2 cores shared by
  brokers, clients and other sessions), so ``bench_cluster.py``'s CPU times move +-30 % between
  windows with contention alone.
- ``floor``: the broker against its floor (``floor_servers.py stub``, a do-nothing
  grpc.aio server answering the same calls), and with ``--baseline-src DIR`` a broker from
  another checkout beside it: an A/B of a code change whose effect is below what CPU times on
  this machine resolve.

Why count: instructions executed do not depend on how busy the cores are, and this VM has no
hardware counters (``perf stat -e instructions``: not supported). What they leave out: the
kernel's side (syscalls, fdatasync: ``perf stat`` counts them in ``bench_cluster.py``) and the
costs of sharing cores (cache misses, context switches, waiting for the GIL).

How: every server runs under ``valgrind --tool=callgrind`` with instrumentation off until its
clients are warm, then on for the whole measurement; every target stays up for the run. Each
round, on each target: an idle window (the consumer long-polling, background loops, a cluster
member's probes), then a load window: official-client producer processes (one per broker: the
same rate offered to each) sending paced transactions (begin, half message, commit), one
SimpleConsumer process receiving and acking everything (bench_broker.consumer_main). A
callgrind dump (``callgrind_control -d``: the costs since the previous dump) at each window's
start and end gives each server's instructions in it. Per transaction: (load instructions - idle
instructions per second x the load window's wall time) / transactions, summed over the target's
servers. The rate is low (a Python server under callgrind runs ~30-60x slower), so every group
commit holds one write: this compares the work per transaction at the same load, not the
gathering a busy broker gets.

Run: ``.venv/bin/python benchmarks/bench_instructions.py cluster|floor [--seconds S] [--rate R]
[--rounds N] [--baseline-src DIR] [--keep DIR]``. Needs valgrind (Debian's ``valgrind``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine
from bench_cluster import Clients, _wait_count, create_topic, free_port_run

ROOT = Path(__file__).parents[1]
FLOOR = Path(__file__).with_name("floor_servers.py")
# A Python broker under callgrind starts in ~15 s on an idle machine; allow for a busy one.
START_TIMEOUT_S = 240.0
DUMP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
# Producer threads per producer process (paced, so few are needed).
THREADS = 2
WARMUP_S = 5.0
TOTALS = re.compile(rb"^totals:\s+(\d+)", re.MULTILINE)


class Callgrind:
    """One server process under callgrind (importing txmq from ``src``), its dumps in
    ``out_dir``."""

    def __init__(self, cmd: list[str], name: str, out_dir: Path, src: Path) -> None:
        self.name, self.out_dir = name, out_dir
        out = out_dir / f"cg.{name}"
        vg = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
        # Benchmarks send to topics they never create (the floor and lone brokers).
        env = dict(os.environ, PYTHONPATH=str(src), TXMQ_AUTO_CREATE_TOPICS="true")
        self.log = (out_dir / f"{name}.log").open("w")
        self.proc = subprocess.Popen(
            [*vg, *cmd], stdout=subprocess.PIPE, stderr=self.log, text=True, env=env
        )
        self.dumps = 0

    def wait_listening(self) -> str:
        """The endpoint from the server's "listening" line."""
        got: list[str] = []

        def read() -> None:  # a thread: stdout has no timeout of its own
            assert self.proc.stdout is not None
            got.append(self.proc.stdout.readline())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        if not got or "listening on" not in got[0]:
            raise SystemExit(f"{self.name} did not start under valgrind (see its log)")
        return got[0].strip().rsplit(" ", 1)[1]

    def control(self, *args: str) -> None:
        subprocess.run(
            ["callgrind_control", *args, str(self.proc.pid)],
            check=True, capture_output=True, timeout=DUMP_TIMEOUT_S,
        )  # fmt: skip

    def dump(self) -> int:
        """Instructions since the previous dump (callgrind zeroes its counters at each dump)."""
        self.control("-d")
        self.dumps += 1
        path = self.out_dir / f"cg.{self.name}.{self.dumps}"
        deadline = time.monotonic() + DUMP_TIMEOUT_S
        while time.monotonic() < deadline:  # the dump is written by the server's own thread
            if path.exists() and (m := TOTALS.search(path.read_bytes())):
                return int(m.group(1))
            time.sleep(0.1)  # polling for the dump file, bounded by DUMP_TIMEOUT_S
        raise SystemExit(f"no callgrind dump {path}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@dataclass
class Window:
    idle_per_s: list[float]  # instructions per second per server, no load
    net_per_txn: float  # instructions per transaction, all servers, net of idle
    sent: int
    # The load window's instructions per transaction, idle not subtracted: the idle window
    # holds the consumer's empty long polls (one RPC and ~3 looks per second), which a change
    # to the receive path makes cheaper too, so a net figure alone can hide such a change.
    gross_per_txn: float


@dataclass
class Run:
    seconds: float
    rate: float  # txn/s offered to each server
    stack: ExitStack
    keep: Path | None

    def dir(self, name: str) -> tuple[Path, Path]:
        """(a data directory, where the target's dumps and logs go)."""
        base = os.environ.get("TXMQ_BENCH_DIR")
        d = Path(self.stack.enter_context(tempfile.TemporaryDirectory(dir=base)))
        dumps = d if self.keep is None else self.keep / name
        dumps.mkdir(parents=True, exist_ok=True)
        return d, dumps


class Target:
    """Servers under callgrind behind one endpoint list, with one producer process per server
    and one consumer process."""

    def __init__(self, name: str, servers: list[Callgrind], run: Run, topic_create: bool) -> None:
        self.name, self.servers, self.run = name, servers, run
        for s in servers:
            run.stack.callback(s.stop)
        self.endpoints = ";".join(s.wait_listening() for s in servers)
        topic = f"bench-ir-{name.replace(' ', '-')}"
        if topic_create:
            create_topic(self.endpoints, topic)
        self.clients = Clients(self.endpoints, topic, len(servers), THREADS, run.stack)
        self.sent = 0

    def warm(self) -> None:
        """Every queue written, read and acked before counting; then instrumentation on."""
        n = len(self.servers)
        self.sent += self.clients.producers.drive(n, WARMUP_S, self.run.rate)
        _wait_count(self.clients.count, self.sent)
        for s in self.servers:
            s.control("-i", "on")

    def window(self) -> Window:
        for s in self.servers:
            s.dump()  # start of the idle window
        t0 = time.perf_counter()
        time.sleep(self.run.seconds)  # sleep: the idle servers' background work over a window
        idle = [s.dump() / (time.perf_counter() - t0) for s in self.servers]
        t0 = time.perf_counter()
        sent = self.clients.producers.drive(len(self.servers), self.run.seconds, self.run.rate)
        self.sent += sent
        _wait_count(self.clients.count, self.sent)
        load = [s.dump() for s in self.servers]
        wall = time.perf_counter() - t0
        net = sum(x - i * wall for x, i in zip(load, idle, strict=True))
        return Window(idle, net / max(1, sent), sent, sum(load) / max(1, sent))


def cluster(n: int, run: Run) -> Target:
    """n brokers in one cluster file, members named as ``cluster up`` names them."""
    from txmq.coordination.cluster_file import ClusterFile, Member, write

    name = f"{n} broker{'s' if n > 1 else ''}"
    d, dumps = run.dir(name)
    port = free_port_run(n)
    members = tuple(Member(f"broker-{i}", "127.0.0.1", port + i) for i in range(n))
    write(d / "cluster.toml", ClusterFile(f"ir-{n}", members))
    servers = [
        Callgrind([sys.executable, "-m", "txmq.broker", "--data-dir", str(d / m.name),
                   "--host", m.host, "--port", str(m.port), "--cluster", str(d / "cluster.toml"),
                   "--broker-name", m.name], m.name, dumps, ROOT / "src")
        for m in members
    ]  # fmt: skip
    return Target(name, servers, run, topic_create=True)


def broker(name: str, src: Path, run: Run) -> Target:
    d, dumps = run.dir(name)
    cmd = [sys.executable, "-m", "txmq.broker", "--data-dir", str(d / "data"), "--port", "0"]
    return Target(name, [Callgrind(cmd, "broker", dumps, src)], run, topic_create=False)


def floor(run: Run) -> Target:
    _, dumps = run.dir("floor")
    cmd = [sys.executable, str(FLOOR), "stub"]
    return Target("floor", [Callgrind(cmd, "floor", dumps, ROOT / "src")], run, topic_create=False)


def spread(xs: list[float], fmt: str) -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def measure(targets: list[Target], rounds: int) -> dict[str, list[Window]]:
    """``rounds`` rounds of a window on every target, the order reversed every other round."""
    for t in targets:
        t.warm()
    by: dict[str, list[Window]] = {t.name: [] for t in targets}
    for r in range(rounds):
        for t in targets if r % 2 == 0 else targets[::-1]:
            w = t.window()
            by[t.name].append(w)
            idle = ", ".join(f"{x / 1e6:.2f}" for x in w.idle_per_s)
            per = w.net_per_txn / 1e6
            print(f"round {r + 1}, {t.name}: {per:.3f} M instructions per txn net of idle "
                  f"({w.sent} txn; {w.gross_per_txn / 1e6:.3f} M gross); idle {idle} M/s per "
                  "server", flush=True)  # fmt: skip
    return by


def summary(by: dict[str, list[Window]], pairs: list[tuple[str, str, float | None]]) -> None:
    for name, ws in by.items():
        idle = statistics.median([statistics.mean(w.idle_per_s) for w in ws])
        print(f"{name}: {spread([w.net_per_txn / 1e6 for w in ws], '.3f')} M instructions per "
              f"txn net of idle; idle {idle / 1e6:.2f} M/s per server")  # fmt: skip
    for a, b, goal in pairs:
        ratio = [x.net_per_txn / y.net_per_txn for x, y in zip(by[a], by[b], strict=True)]
        gross = [x.gross_per_txn / y.gross_per_txn for x, y in zip(by[a], by[b], strict=True)]
        verdict = ""
        if goal is not None:
            met = "met" if statistics.median(ratio) <= goal else "missed"
            verdict = f" (goal <= {goal:g}: {met})"
        print(f"instructions per transaction, {a} / {b}, paired per round: "
              f"{spread(ratio, '.3f')}{verdict}; gross {spread(gross, '.3f')}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("compare", choices=("cluster", "floor"))
    ap.add_argument("--seconds", type=float, default=20.0, help="each idle and load window")
    ap.add_argument("--rate", type=float, default=3.0, help="txn/s offered to each server")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline-src", type=Path, help="floor: also a broker from this src/")
    ap.add_argument("--keep", type=Path, help="keep callgrind dumps and logs here")
    args = ap.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("bench_instructions: needs valgrind (apt-get install valgrind)")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# instruction counts ({args.compare}) on {machine()}, load average {load}")
    print(f"# servers under callgrind; {args.rate:g} txn/s per server, {args.seconds:g} s idle "
          f"and load windows, {args.rounds} rounds, {THREADS} paced threads per "
          "producer")  # fmt: skip
    with ExitStack() as stack:
        run = Run(args.seconds, args.rate, stack, args.keep)
        build: list[Callable[[], Target]]
        pairs: list[tuple[str, str, float | None]]
        if args.compare == "cluster":
            build = [lambda: cluster(1, run), lambda: cluster(2, run)]
            pairs = [("2 brokers", "1 broker", 1.10)]  # the cluster's goal
        else:
            build = [lambda: broker("broker", ROOT / "src", run), lambda: floor(run)]
            pairs = [("broker", "floor", None)]  # the goal is CPU time, not this
            if args.baseline_src is not None:
                build.append(lambda: broker("baseline broker", args.baseline_src, run))
                pairs.append(("broker", "baseline broker", None))
        by = measure([b() for b in build], args.rounds)
    summary(by, pairs)


if __name__ == "__main__":
    main()
