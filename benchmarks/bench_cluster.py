"""Cluster benchmark: broker CPU per transaction with 1 and with 2 brokers (``txmq cluster up``),
throughput on this machine, and a projection for a 16-core machine.

Goal: a cluster must not make a transaction dearer. Broker CPU per transaction with 2
brokers must stay within 10 % of 1 broker's, so throughput scales with the cores given to
brokers. Load: official Producer threads (begin, send the half message, commit) given every
member's endpoint (``H:P1;H:P2``), in producer processes of T threads each, and one
SimpleConsumer process per cluster receiving and acking everything (bench_broker.consumer_main).
Both clusters (1 broker, 2 brokers) stay up for the whole run with their clients, warmed first;
windows on them alternate. Configurations, each measured every round:

- ``1 broker``: 1 producer process (T threads) against 1 broker;
- ``2 brokers, equal per broker``: 2 producer processes (2T threads) against 2 brokers, so each
  broker is offered what the single broker is (the official client spreads each thread's sends
  over every queue of the route, so each broker has ~T transactions in flight). This is the
  issue's question: with one broker per core and its share of the load, does a broker pay more
  per transaction for being in a cluster?
- ``2 brokers, equal total``: the same 1 producer process (T threads) against 2 brokers: each
  broker gets half the load, so its group commits are smaller (fewer writes waiting per
  fdatasync) and its fixed costs are spread over fewer transactions. Printed for comparison.
- with ``--paced R``: ``1 broker, paced`` (1 process at R txn/s) and ``2 brokers, paced per
  broker`` (2 processes at R txn/s each): the same rate offered to each broker, the sends
  spread evenly in time (``run_spread``) as from many independent clients. Closed-loop threads
  instead fall into step with one broker's group commits (those a group releases send again
  together), which a second broker's own flusher cycle breaks up, so closed loop favours 1
  broker's group sizes as the thread count grows.

Per window: the brokers' CPU (each broker process, from /proc; the ``cluster up`` supervisor
apart), their idle CPU over the same wall time (measured per broker on the same cluster after
the warm-up, with the consumer long-polling: background loops, probes) which is printed and
subtracted for the net figure, the clients' CPU, context switches of every broker thread, and
with ``perf`` (counting, no tracing) fdatasync calls and all syscalls of the brokers, each per
transaction. Rounds alternate the order of the clusters (1 then 2, 2 then 1, ...) and of the
windows on each; each figure is the median over rounds with its min-max, and the ratios are
paired per round (a window on 2 brokers over the 1-broker window of the same round).

Projection (printed, labelled as such, not measured): with B brokers on B free cores, each
broker spends the measured CPU per transaction, so the brokers' ceiling is
B x 1000 / (broker ms per transaction) txn/s; with the clients on the same machine each
transaction also costs the producers' and consumer's measured CPU.

Run: ``.venv/bin/python benchmarks/bench_cluster.py [--seconds S] [--threads T] [--rounds R]
[--paced R]``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import socket
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
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine
from _procstat import PERF_EVENTS, Counters, PerfCount, counters, machine_busy_s, perf_works
from bench_broker import KEY_BYTES, consumer_main, run_threads, sender
from peers._base import _children_map

ROOT = Path(__file__).parents[1]
DRAIN_S_MAX = 15.0
START_TIMEOUT_S = 60.0
PROJECTED_CORES = 16
# Window over which each idle broker's CPU is measured (consumer polling, background loops);
# shorter when the phases are (smoke runs).
IDLE_S = 3.0
# Load before the measured windows (not counted), so every configuration starts warm.
WARMUP_S = 1.5
ONE, PER_BROKER, TOTAL = "1 broker", "2 brokers, equal per broker", "2 brokers, equal total"
ONE_PACED, TWO_PACED = "1 broker, paced", "2 brokers, paced per broker"
# Each 2-broker configuration and the 1-broker one it is compared with.
PAIRS = {PER_BROKER: ONE, TOTAL: ONE, TWO_PACED: ONE_PACED}


@dataclass
class Window:
    label: str
    rate: float  # transactions per second
    sent: int
    received: int
    broker_ms: float  # CPU per transaction, all brokers together
    idle_ms: float  # the brokers' idle CPU over the same wall time, per transaction
    supervisor_ms: float  # the ``cluster up`` process
    producer_ms: float
    consumer_ms: float
    ctxt: float  # broker context switches per transaction
    fdatasync: float | None  # per transaction (perf), None without perf
    syscalls: float | None
    migrations: float | None  # the brokers' threads moved to another core, per transaction
    faults: float | None  # the brokers' page faults per transaction
    # CPU of every other process on the machine during the window (/proc/stat's busy time less
    # the measured processes'), in cores: other sessions' work that shares these cores.
    others_cores: float = 0.0

    @property
    def net_ms(self) -> float:
        return self.broker_ms - self.idle_ms


@dataclass
class Producers:
    """Producer processes, each running T official-client threads on command."""

    procs: list[Any]
    cmds: list[Any]
    results: Any
    runs: int = 0

    def drive(self, k: int, seconds: float, rate: float | None = None) -> int:
        """The first ``k`` processes send for ``seconds`` (each at most ``rate`` txn/s when
        given); how many transactions they sent."""
        self.runs += 1
        for q in self.cmds[:k]:
            q.put((self.runs, seconds, rate))
        return sum(self.results.get(timeout=seconds + 120) for _ in range(k))


def producer_main(endpoints: str, topic: str, name: int, threads: int, cmds: Any, out: Any) -> None:
    """Child process: an official transactional Producer with ``threads`` sending threads, run
    for the number of seconds each command says, until it gets None."""
    producer, send = sender(endpoints, topic, True)
    out.put(0)
    while (cmd := cmds.get()) is not None:
        run, seconds, rate = cmd
        drive = run_threads if rate is None else run_spread
        out.put(drive(threads, seconds, lambda k, i, key=f"{name}-{run}-": send(
            f"{key}{k}-{i}|".encode().ljust(KEY_BYTES, b".")), rate))  # fmt: skip
    producer.shutdown()


class Clients:
    """One SimpleConsumer process (bench_broker.consumer_main) and ``procs`` producer processes
    of ``threads`` official-client threads each (producer_main) against ``endpoints``, stopped
    when ``stack`` closes; ``received`` is what the consumer got in all, known after that."""

    def __init__(
        self, endpoints: str, topic: str, procs: int, threads: int, stack: ExitStack
    ) -> None:
        ctx = mp.get_context("spawn")  # gRPC does not survive fork
        self.ready, self.stop, self.count, self.out = (
            ctx.Event(), ctx.Event(), ctx.Value("l", 0), ctx.Queue(),
        )  # fmt: skip
        args = (endpoints, topic, self.ready, self.stop, self.count, self.out)
        self.reader = ctx.Process(target=consumer_main, args=args)
        self.reader.start()
        results, cmds = ctx.Queue(), [ctx.Queue() for _ in range(procs)]
        ps = [
            ctx.Process(target=producer_main, args=(endpoints, topic, i, threads, cmds[i], results))
            for i in range(procs)
        ]
        for p in ps:
            p.start()
        self.producers = Producers(ps, cmds, results)
        stack.callback(self._stop)
        self.received = 0
        if not self.ready.wait(START_TIMEOUT_S) or sum(
            results.get(timeout=START_TIMEOUT_S) for _ in ps
        ):
            raise SystemExit("the consumer or a producer process did not start")

    def _stop(self) -> None:
        for q in self.producers.cmds:
            q.put(None)
        self.stop.set()
        self.received = len(self.out.get(timeout=START_TIMEOUT_S))
        self.reader.join(30)
        for p in self.producers.procs:
            p.join(30)


def run_spread(threads: int, seconds: float, op: Callable[[int, int], object], rate: float) -> int:
    """``op`` paced to ``rate`` calls/s in all, spread evenly in time (bench_broker.run_threads
    with ``spread``): calls arrive one at a time, as from many independent clients, not in
    bursts of ``threads`` that a single broker's group commit gathers whole and two brokers
    split. Returns the calls made."""
    return run_threads(threads, seconds, op, rate, spread=True)


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


@dataclass
class Setup:
    threads: int
    seconds: float
    perf: bool
    paced: float | None  # txn/s offered to each broker in the paced windows
    base: str | None


class Cluster:
    """An n-broker ``txmq cluster up`` with its consumer process and producer processes (1 for
    1 broker, 2 for 2), kept up for the whole run so that windows on both clusters alternate."""

    def __init__(self, n: int, s: Setup, stack: ExitStack) -> None:
        self.n, self.s = n, s
        d = stack.enter_context(tempfile.TemporaryDirectory(dir=s.base))
        self.up, self.endpoints = cluster_up(n, d)
        stack.callback(self._stop_up)
        self.brokers = sorted(_children_map().get(self.up.pid, []))
        assert len(self.brokers) == n, self.brokers
        topic = f"bench-cluster-{n}"
        create_topic(self.endpoints, topic)
        self.clients = Clients(self.endpoints, topic, n, s.threads, stack)
        self.sent = 0

    def warm(self) -> None:
        """Load before measuring, not counted: every producer thread sends, so every queue of
        every broker has been written, read and acked (routes, channels, sessions, segments)."""
        self.sent += self.clients.producers.drive(self.n, min(WARMUP_S, self.s.seconds))
        _wait_count(self.clients.count, self.sent)

    def measure_idle(self) -> None:
        """Each broker's CPU in ms per second with no transactions (the consumer long-polling,
        background loops, the members' probes)."""
        before, t0 = [counters(b) for b in self.brokers], time.perf_counter()
        time.sleep(min(IDLE_S, self.s.seconds))  # sleep: the idle brokers' CPU over a window
        wall = time.perf_counter() - t0
        self.idle_ms_per_s = [
            (counters(b).cpu_s - a.cpu_s) * 1000 / wall
            for a, b in zip(before, self.brokers, strict=True)
        ]

    def _stop_up(self) -> None:
        self.up.send_signal(signal.SIGTERM)
        self.up.wait(60)

    def window(self, label: str) -> Window:
        """One measured window: producers send for ``seconds``, then until the consumer has all."""
        s = self.s
        k = 1 if label in (ONE, TOTAL, ONE_PACED) else 2
        perf = PerfCount(self.brokers) if s.perf else None
        if perf is not None:
            perf.start()
        c = self.clients
        pids = [*self.brokers, self.up.pid, *(p.pid for p in c.producers.procs), c.reader.pid]
        c0, got0, t0 = [counters(p) for p in pids], c.count.value, time.perf_counter()
        busy0 = machine_busy_s()
        paced = label in (ONE_PACED, TWO_PACED)
        sent = c.producers.drive(k, s.seconds, s.paced if paced else None)
        rate = sent / (time.perf_counter() - t0)
        self.sent += sent
        _wait_count(c.count, self.sent)
        d = [counters(p) - a for p, a in zip(pids, c0, strict=True)]
        wall = time.perf_counter() - t0
        others = (machine_busy_s() - busy0 - sum(x.cpu_s for x in d)) / wall
        events = perf.stop() if perf is not None else {}
        per, nb = max(1, sent), len(self.brokers)
        b = brokers_sum(d[:nb])
        return Window(
            label, rate, sent, c.count.value - got0,
            broker_ms=b.cpu_s * 1000 / per,
            idle_ms=sum(self.idle_ms_per_s) * wall / per,
            supervisor_ms=d[nb].cpu_s * 1000 / per,
            producer_ms=sum(x.cpu_s for x in d[nb + 1 : -1]) * 1000 / per,
            consumer_ms=d[-1].cpu_s * 1000 / per,
            ctxt=b.ctxt / per,
            fdatasync=events[PERF_EVENTS[0]] / per if PERF_EVENTS[0] in events else None,
            syscalls=events[PERF_EVENTS[1]] / per if PERF_EVENTS[1] in events else None,
            migrations=events[PERF_EVENTS[2]] / per if PERF_EVENTS[2] in events else None,
            faults=events[PERF_EVENTS[3]] / per if PERF_EVENTS[3] in events else None,
            others_cores=max(0.0, others),
        )  # fmt: skip


def brokers_sum(ds: list[Counters]) -> Counters:
    return Counters(sum(x.cpu_s for x in ds), sum(x.ctxt for x in ds))


def _wait_count(count: Any, n: int) -> None:
    """Until the consumer has received ``n`` messages, bounded by DRAIN_S_MAX."""
    drain_end = time.monotonic() + DRAIN_S_MAX
    while count.value < n and time.monotonic() < drain_end:
        time.sleep(0.05)  # polling the consumer's count, bounded by DRAIN_S_MAX


def _opt(x: float | None, fmt: str) -> str:
    return "n/a" if x is None else format(x, fmt)


def line(w: Window) -> str:
    return (
        f"  {w.label:<28} {w.rate:6.0f} txn/s | brokers {w.broker_ms:.3f} ms/txn (net of idle "
        f"{w.net_ms:.3f}, idle {w.idle_ms:.3f}) | supervisor {w.supervisor_ms:.3f} | producers "
        f"{w.producer_ms:.3f} | consumer {w.consumer_ms:.3f} | per txn: fdatasync "
        f"{_opt(w.fdatasync, '.2f')}, syscalls {_opt(w.syscalls, '.0f')}, migrations "
        f"{_opt(w.migrations, '.2f')}, page faults {_opt(w.faults, '.1f')}, ctx switches "
        f"{w.ctxt:.1f} | received {w.received}/{w.sent} | other processes "
        f"{w.others_cores:.2f} cores"
    )


def spread(xs: list[float], fmt: str = ".3f") -> str:
    """median (min-max)."""
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=8, help="threads per producer process (T)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument(
        "--paced", type=float, default=None,
        help="also windows paced to this many txn/s per broker (1 broker: R, 2 brokers: 2R)",
    )  # fmt: skip
    args = ap.parse_args()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    cores = len(os.sched_getaffinity(0))
    base = os.environ.get("TXMQ_BENCH_DIR")
    s = Setup(args.threads, args.seconds, perf_works(), args.paced, base)
    print(f"# cluster benchmark on {machine()}, {cores} cores, load average {load}")
    print(
        f"# T = {args.threads} transactional producer threads per producer process, 1 consumer "
        f"process, {args.seconds} s windows, {args.rounds} rounds; fdatasync and syscall "
        f"counts {'by perf stat' if s.perf else 'unavailable (no perf)'}"
        + (f"; paced windows: {args.paced:g} txn/s per broker" if args.paced else "")
    )
    with ExitStack() as stack:
        clusters = {n: Cluster(n, s, stack) for n in (1, 2)}
        for c in clusters.values():
            c.warm()
        for c in clusters.values():
            c.measure_idle()
        by = rounds(clusters, args.rounds, s)
    for c in clusters.values():
        idle = ", ".join(f"{x:.1f}" for x in c.idle_ms_per_s)
        print(f"{c.n} broker(s): idle CPU per broker {idle} ms/s (subtracted for the net "
              f"figures); the consumer received {c.clients.received}/{c.sent} in all")  # fmt: skip
    summary(by, cores)


def rounds(clusters: dict[int, Cluster], count: int, s: Setup) -> dict[str, list[Window]]:
    """``count`` rounds of every window, alternating which cluster and which window goes first."""
    labels = {1: [ONE], 2: [PER_BROKER, TOTAL]}
    if s.paced:
        labels = {1: [ONE, ONE_PACED], 2: [PER_BROKER, TOTAL, TWO_PACED]}
    by: dict[str, list[Window]] = {lb: [] for n in (1, 2) for lb in labels[n]}
    for r in range(count):
        order = [1, 2] if r % 2 == 0 else [2, 1]
        print(f"round {r + 1} (clusters in order {order}):", flush=True)
        for n in order:
            for label in labels[n] if r % 2 == 0 else labels[n][::-1]:
                w = clusters[n].window(label)
                by[label].append(w)
                print(line(w), flush=True)
    return by


def summary(by: dict[str, list[Window]], cores: int) -> None:
    print("medians over rounds (min-max):")
    for label, ws in by.items():
        fds = [w.fdatasync for w in ws if w.fdatasync is not None]
        sys_ = [w.syscalls for w in ws if w.syscalls is not None]
        mig = [w.migrations for w in ws if w.migrations is not None]
        flt = [w.faults for w in ws if w.faults is not None]
        print(
            f"  {label:<28} {spread([w.rate for w in ws], '.0f')} txn/s | brokers "
            f"{spread([w.broker_ms for w in ws])} ms/txn, net of idle "
            f"{spread([w.net_ms for w in ws])} | fdatasync/txn "
            f"{spread(fds, '.2f') if fds else 'n/a'} | syscalls/txn "
            f"{spread(sys_, '.0f') if sys_ else 'n/a'} | migrations/txn "
            f"{spread(mig, '.2f') if mig else 'n/a'} | page faults/txn "
            f"{spread(flt, '.1f') if flt else 'n/a'} | ctx switches/txn "
            f"{spread([w.ctxt for w in ws], '.1f')} | other processes "
            f"{spread([w.others_cores for w in ws], '.2f')} cores"
        )
    for two, one in PAIRS.items():
        if two not in by:
            continue
        gross = [t.broker_ms / o.broker_ms for t, o in zip(by[two], by[one], strict=True)]
        net = [t.net_ms / o.net_ms for t, o in zip(by[two], by[one], strict=True)]
        verdict = "met" if statistics.median(gross) <= 1.10 else "missed"
        print(
            f"broker CPU per transaction, 2 brokers / 1 broker, {two.split(', ')[1]}: "
            f"{spread(gross, '.2f')} paired per round (goal <= 1.10: {verdict}); net of idle "
            f"{spread(net, '.2f')}"
        )
    rates = {lb: statistics.median([w.rate for w in ws]) for lb, ws in by.items()}
    print(
        f"throughput here ({cores} cores shared by brokers and clients, closed loop): 1 broker "
        f"{rates[ONE]:.0f} txn/s, 2 brokers {rates[PER_BROKER]:.0f} txn/s (equal per broker), "
        f"{rates[TOTAL]:.0f} txn/s (equal total)"
    )
    per = by[PER_BROKER]
    b2 = statistics.median([w.broker_ms for w in per])
    clients = statistics.median([w.producer_ms + w.consumer_ms for w in per])
    print(
        f"PROJECTION (not measured) for {PROJECTED_CORES} cores: {PROJECTED_CORES} brokers at "
        f"{b2:.3f} ms of broker CPU per transaction (2 brokers, equal per broker, median) = "
        f"{PROJECTED_CORES * 1000 / b2:.0f} txn/s with the clients on other machines; with the "
        f"clients on the same cores (another {clients:.3f} ms per transaction) "
        f"{PROJECTED_CORES * 1000 / (b2 + clients):.0f} txn/s"
    )


if __name__ == "__main__":
    main()
