"""Cluster benchmark by instruction count: the work a broker does per transaction with 1 and with
2 brokers, counted by valgrind's callgrind instead of timed.

Why (issue 18): the goal is that a broker's CPU per transaction in a cluster of 2 stays within
10 % of a lone broker's, "so throughput scales with cores where cores are free". This machine
has no free cores (2 cores shared by brokers, clients and other sessions) and no hardware
counters (``perf stat -e instructions`` is not supported), so ``bench_cluster.py``'s CPU times
move +-30 % between windows with contention alone. Instructions executed do not depend on how
busy the cores are: they count the work itself, which is what a broker on a free core pays.
What they leave out, measured elsewhere: the kernel's side (syscalls, fdatasync: ``perf stat``
counts in ``bench_cluster.py``) and the cost of contention (cache misses, context switches).

How: each broker (``txmq broker --cluster FILE``, members named as ``cluster up`` names them)
runs under ``valgrind --tool=callgrind`` with instrumentation off until the clients are warm,
then on for the whole measurement. Both clusters (1 member, 2 members) stay up; each round, on
each cluster: an idle window (the consumer long-polling, background loops, the members' probes),
then a load window: official-client producer processes (1 for 1 broker, 2 for 2: the same rate
offered to each broker) sending paced transactions (begin, half message, commit), one
SimpleConsumer process receiving and acking everything (bench_broker.consumer_main). Each
window's instructions per broker come from a callgrind dump at its start and end
(``callgrind_control -d``: a dump holds the costs since the previous one). Per transaction:
(load instructions - idle instructions per second x the load window's wall time) / transactions,
summed over the cluster's brokers. The rate is low (a broker under callgrind runs ~30-60x
slower), so every group commit holds one write in both clusters: the comparison is work per
transaction at the same load per broker, not the gathering a busy broker gets.

Printed: per round and per cluster, instructions per transaction (net of idle) and idle
instructions per second per broker; the paired ratio 2 brokers / 1 broker; and the gross ratio
at a stated native rate per broker (``--at-rate``: idle instructions spread over that many
transactions per second), which is where the members' probes show.

Run: ``.venv/bin/python benchmarks/bench_cluster_instructions.py [--seconds S] [--rate R]
[--rounds N] [--at-rate X]``. Needs valgrind (Debian's ``valgrind``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
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
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine
from bench_broker import consumer_main
from bench_cluster import Producers, _wait_count, create_topic, free_port_run, producer_main

ROOT = Path(__file__).parents[1]
# A Python broker under callgrind starts in ~15 s on an idle machine; allow for a busy one.
START_TIMEOUT_S = 240.0
DUMP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
# Producer threads per producer process (paced, so few are needed).
THREADS = 2
WARMUP_S = 5.0
TOTALS = re.compile(rb"^totals:\s+(\d+)", re.MULTILINE)


class Callgrind:
    """One broker process under callgrind, its dumps in ``out_dir``."""

    def __init__(self, cmd: list[str], name: str, out_dir: Path) -> None:
        self.name, self.out_dir = name, out_dir
        out = out_dir / f"cg.{name}"
        vg = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        self.log = (out_dir / f"{name}.log").open("w")
        self.proc = subprocess.Popen(
            [*vg, *cmd], stdout=subprocess.PIPE, stderr=self.log, text=True, env=env
        )
        self.dumps = 0

    def wait_listening(self) -> str:
        """The endpoint from the broker's "listening" line."""
        got: list[str] = []

        def read() -> None:  # a thread: stdout has no timeout of its own
            assert self.proc.stdout is not None
            got.append(self.proc.stdout.readline())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        if not got or "listening on" not in got[0]:
            raise SystemExit(f"broker {self.name} did not start under valgrind (see its log)")
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
        while time.monotonic() < deadline:  # the dump is written by the broker's own thread
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
    idle_per_s: list[float]  # instructions per second per broker, no load
    net_per_txn: float  # instructions per transaction, all brokers, net of idle
    sent: int
    rate: float  # transactions per second offered to each broker


class Cluster:
    """n brokers under callgrind in one cluster file, with their clients."""

    def __init__(self, n: int, rate: float, stack: ExitStack, keep: Path | None) -> None:
        from txmq.broker.cluster_file import ClusterFile, Member, write

        self.n, self.rate = n, rate
        base = os.environ.get("TXMQ_BENCH_DIR")
        d = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=base)))
        dumps = d if keep is None else keep / f"{n}-brokers"
        dumps.mkdir(parents=True, exist_ok=True)
        port = free_port_run(n)
        members = tuple(Member(f"broker-{i}", "127.0.0.1", port + i) for i in range(n))
        cluster_path = d / "cluster.toml"
        write(cluster_path, ClusterFile(f"ir-{n}", members))
        self.brokers = []
        for m in members:
            cmd = [sys.executable, "-m", "txmq.broker", "--data-dir", str(d / m.name),
                   "--host", m.host, "--port", str(m.port), "--cluster", str(cluster_path),
                   "--broker-name", m.name]  # fmt: skip
            self.brokers.append(Callgrind(cmd, m.name, dumps))
            stack.callback(self.brokers[-1].stop)
        self.endpoints = ";".join(b.wait_listening() for b in self.brokers)
        topic = f"bench-ir-{n}"
        create_topic(self.endpoints, topic)
        self._clients(topic, stack)

    def _clients(self, topic: str, stack: ExitStack) -> None:
        ctx = mp.get_context("spawn")  # gRPC does not survive fork
        self.ready, self.stop, self.count, self.out = (
            ctx.Event(), ctx.Event(), ctx.Value("l", 0), ctx.Queue(),
        )  # fmt: skip
        args = (self.endpoints, topic, self.ready, self.stop, self.count, self.out)
        self.reader = ctx.Process(target=consumer_main, args=args)
        self.reader.start()
        results, cmds = ctx.Queue(), [ctx.Queue() for _ in range(self.n)]
        procs = [
            ctx.Process(target=producer_main,
                        args=(self.endpoints, topic, i, THREADS, cmds[i], results))
            for i in range(self.n)
        ]  # fmt: skip
        for p in procs:
            p.start()
        self.producers = Producers(procs, cmds, results)
        stack.callback(self._stop_clients)
        self.sent = 0
        if not self.ready.wait(120) or sum(results.get(timeout=120) for _ in procs) != 0:
            raise SystemExit("the consumer or a producer process did not start")

    def _stop_clients(self) -> None:
        for q in self.producers.cmds:
            q.put(None)
        self.stop.set()
        self.out.get(timeout=120)
        self.reader.join(60)
        for p in self.producers.procs:
            p.join(60)

    def warm(self) -> None:
        """Every queue written, read and acked before counting; then instrumentation on."""
        self.sent += self.producers.drive(self.n, WARMUP_S, self.rate)
        _wait_count(self.count, self.sent)
        for b in self.brokers:
            b.control("-i", "on")

    def window(self, seconds: float) -> Window:
        for b in self.brokers:
            b.dump()  # start of the idle window
        t0 = time.perf_counter()
        time.sleep(seconds)  # sleep: the idle brokers' background work over a window
        idle = [b.dump() / (time.perf_counter() - t0) for b in self.brokers]
        t0 = time.perf_counter()
        sent = self.producers.drive(self.n, seconds, self.rate)
        self.sent += sent
        _wait_count(self.count, self.sent)
        load = [b.dump() for b in self.brokers]
        wall = time.perf_counter() - t0
        net = sum(x - i * wall for x, i in zip(load, idle, strict=True))
        return Window(idle, net / max(1, sent), sent, sent / seconds / self.n)


def spread(xs: list[float], fmt: str) -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0, help="each idle and load window")
    ap.add_argument("--rate", type=float, default=2.0, help="txn/s offered to each broker")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--at-rate", type=float, default=150.0,
        help="native txn/s per broker over which to spread the idle work (gross ratio)",
    )  # fmt: skip
    ap.add_argument(
        "--keep", type=Path, default=None,
        help="keep the callgrind dumps and broker logs here (for callgrind_annotate)",
    )  # fmt: skip
    args = ap.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("bench_cluster_instructions: needs valgrind (apt-get install valgrind)")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# cluster instruction counts on {machine()}, load average {load}")
    print(f"# brokers under callgrind; {args.rate:g} txn/s per broker, {args.seconds:g} s idle "
          f"and load windows, {args.rounds} rounds, {THREADS} paced threads per "
          "producer")  # fmt: skip
    with ExitStack() as stack:
        clusters = {n: Cluster(n, args.rate, stack, args.keep) for n in (1, 2)}
        for c in clusters.values():
            c.warm()
        by: dict[int, list[Window]] = {1: [], 2: []}
        for r in range(args.rounds):
            for n in [1, 2] if r % 2 == 0 else [2, 1]:
                w = clusters[n].window(args.seconds)
                by[n].append(w)
                idle = ", ".join(f"{x / 1e6:.1f}" for x in w.idle_per_s)
                print(f"round {r + 1}, {n} broker(s): {w.net_per_txn / 1e6:.2f} M instructions "
                      f"per txn net of idle ({w.sent} txn, {w.rate:.2f} txn/s per broker); idle "
                      f"{idle} M/s per broker", flush=True)  # fmt: skip
    summary(by, args.at_rate)


def summary(by: dict[int, list[Window]], at_rate: float) -> None:
    net = [t.net_per_txn / o.net_per_txn for t, o in zip(by[2], by[1], strict=True)]
    idle = {
        n: statistics.median([statistics.mean(w.idle_per_s) for w in ws]) for n, ws in by.items()
    }
    for n, ws in by.items():
        print(f"{n} broker(s): {spread([w.net_per_txn / 1e6 for w in ws], '.2f')} M instructions "
              f"per txn net of idle; idle {idle[n] / 1e6:.1f} M/s per broker")  # fmt: skip
    gross = [
        (t.net_per_txn + idle[2] / at_rate) / (o.net_per_txn + idle[1] / at_rate)
        for t, o in zip(by[2], by[1], strict=True)
    ]
    verdict = "met" if statistics.median(gross) <= 1.10 else "missed"
    print(f"instructions per transaction, 2 brokers / 1 broker, paired per round: net of idle "
          f"{spread(net, '.3f')}; with each broker's idle work spread over {at_rate:g} txn/s "
          f"{spread(gross, '.3f')} (goal <= 1.10: {verdict})")  # fmt: skip


if __name__ == "__main__":
    main()
